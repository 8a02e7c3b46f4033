//! # evidence-wire-docs
//!
//! Docs for agents: an embedded documentation registry, deterministic
//! section search and MCP resources, all backed by one set of bytes, served
//! by any evidence-wire server through the same tool and resource registry
//! a provider uses ([`DocsSurface::install`]).
//!
//! A [`DocsRegistry`] holds documents ([`Doc`]): an id, a title, a
//! [`DocRole`], a description, a `decision-gate://docs/<id>` URI and a
//! Markdown body kept once as an `Arc<str>`. The default corpus is the
//! project's own `spec/` documents, embedded at compile time from the copies
//! in this crate's `corpus/` ([`DocsRegistry::with_default_corpus`]); extra
//! documents load from configured files and directories ([`load_extra`],
//! [`DocsRegistry::load_extra_paths`]).
//!
//! [`DocsRegistry::search`] cuts every document into sections at `## ` and
//! `### ` headings and ranks them: +3 per query term found in the heading,
//! +1 per term found in the content, +2 / +1 for sections of the primary /
//! secondary role suggested by cue words in the query; ties by catalog
//! order, heading, then position. Same registry and query, same bytes out.
//! [`DocsRegistry::list`] and [`DocsRegistry::read`] serve the documents as
//! MCP resources, byte for byte what the search index holds.
//! [`DocsSurface`] puts both on a [`ServerConfig`] as `[docs]`
//! ([`DocsConfig`]) configures them.
//!
//! Limits ([`DocsLimits`]) are fail-closed and checked before a document is
//! stored: size per document, total size, number of documents, and sections
//! per answer; a query is bounded in bytes and terms ([`MAX_QUERY_BYTES`],
//! [`MAX_QUERY_TERMS`]). Nothing here prints: problems with extra documents
//! come back as [`DocsWarning`] data. The rules are in `spec/docs-search.md`.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::collections::BTreeSet;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use evidence_wire::server::{InlineTool, Resource, ServerConfig, ToolDefinition, ToolFailure};
use evidence_wire_config::DocsConfig;
use serde::Serialize;
use serde_json::{Value, json};

mod corpus;
mod extra;

pub use extra::{LoadedDocs, MAX_SCAN_DEPTH, MAX_SCAN_ENTRIES, load_extra};

/// Name of the docs search tool in `tools/list` and `tools/call`.
pub const SEARCH_TOOL_NAME: &str = "decision_gate_docs_search";

/// Scheme and prefix of every document URI.
pub const URI_PREFIX: &str = "decision-gate://docs/";

/// Media type of every document.
pub const MIME_TYPE: &str = "text/markdown";

/// Sections returned when a call does not say how many.
pub const DEFAULT_MAX_SECTIONS: usize = 3;

/// Most sections a call may ask for, whatever the configuration says.
pub const MAX_SECTIONS_CAP: usize = 10;

/// Most bytes a search query may take (the tool schema allows 1024
/// characters, which is at most 4096 bytes of UTF-8).
pub const MAX_QUERY_BYTES: usize = 4096;

/// Most characters a search query may take, as the tool schema says.
pub const MAX_QUERY_CHARS: usize = 1024;

/// Most distinct terms a search query may hold.
pub const MAX_QUERY_TERMS: usize = 32;

/// Most bytes a document id may take.
pub const MAX_ID_BYTES: usize = 64;

/// What kind of help a document gives; biases search toward the kind asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DocRole {
    /// Concepts, the mental model, invariants, trust.
    Reasoning,
    /// Which tool or method to use, and in which order.
    Decision,
    /// Formats, fields, codes, limits.
    Ontology,
    /// Recipes and operational steps.
    Pattern,
}

impl DocRole {
    /// Every role, in tie-break order.
    pub const ALL: [DocRole; 4] = [
        DocRole::Reasoning,
        DocRole::Decision,
        DocRole::Ontology,
        DocRole::Pattern,
    ];

    /// The lowercase name used on the wire.
    pub const fn as_str(self) -> &'static str {
        match self {
            DocRole::Reasoning => "reasoning",
            DocRole::Decision => "decision",
            DocRole::Ontology => "ontology",
            DocRole::Pattern => "pattern",
        }
    }

    /// Query words that suggest this role (already normalized as terms are).
    pub const fn cues(self) -> &'static [&'static str] {
        match self {
            DocRole::Reasoning => &[
                "why",
                "concept",
                "model",
                "overview",
                "trust",
                "security",
                "threat",
                "invariant",
                "guarantee",
                "design",
                "explain",
                "meaning",
                "risk",
            ],
            DocRole::Decision => &[
                "which", "choose", "choice", "should", "when", "tool", "call", "flow", "sequence",
                "order", "dialect", "select", "decide", "method",
            ],
            DocRole::Ontology => &[
                "schema",
                "field",
                "type",
                "format",
                "error",
                "code",
                "table",
                "comparator",
                "canonical",
                "hash",
                "limit",
                "definition",
                "shape",
                "spec",
            ],
            DocRole::Pattern => &[
                "how",
                "example",
                "recipe",
                "setup",
                "configure",
                "config",
                "quickstart",
                "step",
                "guide",
                "run",
                "install",
                "write",
                "implement",
                "build",
            ],
        }
    }

    /// The cue word a follow-up query adds to lean toward this role.
    pub const fn lead_cue(self) -> &'static str {
        match self {
            DocRole::Reasoning => "why",
            DocRole::Decision => "which",
            DocRole::Ontology => "schema",
            DocRole::Pattern => "example",
        }
    }

    /// An example query for this role, offered when a search finds nothing.
    pub const fn example_query(self) -> &'static str {
        match self {
            DocRole::Reasoning => "why verify evidence hashes",
            DocRole::Decision => "which dialect should a caller speak",
            DocRole::Ontology => "error codes table",
            DocRole::Pattern => "example provider quickstart",
        }
    }

    const fn index(self) -> usize {
        match self {
            DocRole::Reasoning => 0,
            DocRole::Decision => 1,
            DocRole::Ontology => 2,
            DocRole::Pattern => 3,
        }
    }
}

impl fmt::Display for DocRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Size and count limits of a registry and of one search answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DocsLimits {
    /// Most bytes one document may take.
    pub max_doc_bytes: usize,
    /// Most bytes all documents together may take.
    pub max_total_bytes: usize,
    /// Most documents.
    pub max_docs: usize,
    /// Most sections one search may return (itself clamped to 1..=10).
    pub max_sections: usize,
}

impl Default for DocsLimits {
    /// 256 KiB per document, 1 MiB in all, 32 documents, 10 sections.
    fn default() -> Self {
        DocsLimits {
            max_doc_bytes: 262_144,
            max_total_bytes: 1_048_576,
            max_docs: 32,
            max_sections: MAX_SECTIONS_CAP,
        }
    }
}

impl DocsLimits {
    /// How many sections a call gets: `requested` (default 3) clamped to
    /// 1..=10 and to [`DocsLimits::max_sections`].
    pub fn effective_sections(&self, requested: Option<usize>) -> usize {
        let cap = self.max_sections.clamp(1, MAX_SECTIONS_CAP);
        requested.unwrap_or(DEFAULT_MAX_SECTIONS).clamp(1, cap)
    }
}

/// A document to add to a registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DocSource {
    /// Its id: 1 to 64 characters of `a-z`, `0-9` and `-` (not first or last).
    pub id: String,
    /// Its title.
    pub title: String,
    /// Its role.
    pub role: DocRole,
    /// One sentence on what it is for.
    pub description: String,
    /// The Markdown text.
    pub body: Arc<str>,
}

impl DocSource {
    /// A document described from its own text, as extra documents are: the
    /// title is the first `# ` heading (else `name`), the description the
    /// first paragraph (at most 160 characters), the role guessed from cue
    /// words in the name and title ([`DocRole::Pattern`] when none match).
    /// The id is `name` turned into a slug; `None` when nothing is left of it.
    pub fn from_markdown(name: &str, body: impl Into<Arc<str>>) -> Option<DocSource> {
        let id = slugify(name)?;
        let body: Arc<str> = body.into();
        let title = markdown_title(&body).unwrap_or(name).to_owned();
        let description = markdown_description(&body);
        let mut cue_text = String::from(name);
        cue_text.push(' ');
        cue_text.push_str(&title);
        let role = primary_roles(&raw_terms(&cue_text))
            .0
            .unwrap_or(DocRole::Pattern);
        Some(DocSource {
            id,
            title,
            role,
            description,
            body,
        })
    }
}

/// Why a document was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DocsError {
    /// The document is larger than `max_doc_bytes`.
    #[error(
        "document `{id}` is {bytes} bytes, over max_doc_bytes = {limit}; shorten it or raise the limit"
    )]
    DocTooLarge {
        /// The document.
        id: String,
        /// Its size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// Adding the document would take the registry over `max_total_bytes`.
    #[error(
        "document `{id}` would bring the docs to {total} bytes, over max_total_bytes = {limit}; drop documents or raise the limit"
    )]
    TotalTooLarge {
        /// The document.
        id: String,
        /// The total with it.
        total: usize,
        /// The limit.
        limit: usize,
    },
    /// The registry already holds `max_docs` documents.
    #[error(
        "document `{id}` would be one too many: max_docs = {limit}; drop documents or raise the limit"
    )]
    TooManyDocs {
        /// The document.
        id: String,
        /// The limit.
        limit: usize,
    },
    /// Another document has the same id.
    #[error("a document with id `{id}` is already loaded; ids must be unique (rename the file)")]
    DuplicateId {
        /// The id.
        id: String,
    },
    /// The id is empty, too long, or holds characters other than `a-z`, `0-9`, `-`.
    #[error(
        "document id `{id}` is not a slug: use 1 to 64 characters of a-z, 0-9 and `-`, not starting or ending with `-`"
    )]
    InvalidId {
        /// The id.
        id: String,
    },
}

/// Why an extra document was skipped.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DocsProblem {
    /// It breaks a registry rule or limit.
    #[error(transparent)]
    Refused(#[from] DocsError),
    /// The configured path does not exist or cannot be resolved.
    #[error("the path cannot be resolved ({0}); check extra_paths")]
    NotFound(String),
    /// The file resolves (through a symlink) outside every configured path.
    #[error("it resolves to {0}, outside the configured paths; refused")]
    OutsideConfiguredPaths(String),
    /// The file is not a `.md` file.
    #[error("not a Markdown file (only `.md` files are loaded)")]
    NotMarkdown,
    /// The file is not UTF-8 text.
    #[error("not UTF-8 text")]
    NotUtf8,
    /// Reading failed.
    #[error("cannot be read: {0}")]
    Unreadable(String),
    /// Its name gives no usable id.
    #[error("its file name gives no id (use letters or digits)")]
    NoId,
    /// The directory scan hit its entry or depth limit; the rest was not read.
    #[error("the scan stopped here: {0}")]
    ScanLimit(String),
}

/// An extra document that was skipped, and why. Returned as data for the
/// caller to log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DocsWarning {
    /// The path (or the document id when there is no path).
    pub source: String,
    /// What was wrong.
    pub problem: DocsProblem,
}

impl fmt::Display for DocsWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "docs: skipped {}: {}", self.source, self.problem)
    }
}

/// Why a search query was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SearchError {
    /// The query is longer than [`MAX_QUERY_BYTES`] bytes or [`MAX_QUERY_CHARS`] characters.
    #[error(
        "query is {bytes} bytes / {chars} characters, over the limit of {MAX_QUERY_BYTES} bytes / {MAX_QUERY_CHARS} characters; shorten it"
    )]
    QueryTooLong {
        /// Its size in bytes.
        bytes: usize,
        /// Its length in characters.
        chars: usize,
    },
    /// The query holds more than [`MAX_QUERY_TERMS`] distinct terms.
    #[error("query has more than {MAX_QUERY_TERMS} distinct terms; keep the few words that matter")]
    TooManyTerms,
}

/// Why a `decision_gate_docs_search` call was refused: answer `INVALID_TOOL_INPUT`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SearchCallError {
    /// The arguments do not match the tool's input schema.
    #[error("invalid docs search arguments: {0}")]
    InvalidArguments(String),
    /// The query was refused.
    #[error(transparent)]
    Query(#[from] SearchError),
}

/// One document of a registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Doc {
    id: String,
    title: String,
    role: DocRole,
    description: String,
    uri: String,
    body: Arc<str>,
}

impl Doc {
    /// Its id (the last part of its URI).
    pub fn id(&self) -> &str {
        &self.id
    }
    /// Its title.
    pub fn title(&self) -> &str {
        &self.title
    }
    /// Its role.
    pub fn role(&self) -> DocRole {
        self.role
    }
    /// What it is for.
    pub fn description(&self) -> &str {
        &self.description
    }
    /// `decision-gate://docs/<id>`.
    pub fn uri(&self) -> &str {
        &self.uri
    }
    /// Its Markdown text.
    pub fn body(&self) -> &str {
        &self.body
    }
    /// Its Markdown text, shared (for a server's resource table: same bytes,
    /// no copy).
    pub fn body_shared(&self) -> Arc<str> {
        Arc::clone(&self.body)
    }
}

/// One section of the index: byte ranges into its document's body.
#[derive(Clone, Debug)]
struct Section {
    doc: usize,
    /// `None`: the part before the first heading, headed by the doc title.
    heading: Option<Range<usize>>,
    content: Range<usize>,
    heading_terms: BTreeSet<String>,
    content_terms: BTreeSet<String>,
}

/// One ranked section of a search answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SectionHit<'a> {
    /// 1 for the best.
    pub rank: usize,
    /// Its document's id.
    pub doc_id: &'a str,
    /// Its document's title.
    pub doc_title: &'a str,
    /// Its document's role.
    pub role: DocRole,
    /// The heading (the document title for the part before the first heading).
    pub heading: &'a str,
    /// The text under the heading, trimmed of surrounding blank lines.
    pub content: &'a str,
}

/// A document that gave sections to a search answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DocRef<'a> {
    /// Its id.
    pub id: &'a str,
    /// Its title.
    pub title: &'a str,
    /// Its role.
    pub role: DocRole,
    /// Its URI, for `resources/read`.
    pub uri: &'a str,
}

/// The answer of a docs search.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SearchOutput<'a> {
    /// Ranked sections, best first.
    pub sections: Vec<SectionHit<'a>>,
    /// The documents the sections came from, in order of first appearance.
    pub docs_covered: Vec<DocRef<'a>>,
    /// Queries worth trying next.
    pub suggested_followups: Vec<String>,
}

/// One entry of `resources/list`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ResourceEntry<'a> {
    /// `decision-gate://docs/<id>`.
    pub uri: &'a str,
    /// The document id.
    pub name: &'a str,
    /// The document title.
    pub title: &'a str,
    /// What it is for.
    pub description: &'a str,
    /// Always `text/markdown`.
    #[serde(rename = "mimeType")]
    pub mime_type: &'static str,
}

/// The contents `resources/read` answers for one URI.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ResourceContents<'a> {
    /// The URI asked for.
    pub uri: &'a str,
    /// Always `text/markdown`.
    #[serde(rename = "mimeType")]
    pub mime_type: &'static str,
    /// The document's exact bytes.
    pub text: &'a str,
}

/// The documents, their section index, and the limits they were loaded under.
#[derive(Clone, Debug)]
pub struct DocsRegistry {
    limits: DocsLimits,
    docs: Vec<Doc>,
    sections: Vec<Section>,
    total_bytes: usize,
}

impl DocsRegistry {
    /// An empty registry (a fully user-defined corpus starts here).
    pub fn new(limits: DocsLimits) -> Self {
        DocsRegistry {
            limits,
            docs: Vec::new(),
            sections: Vec::new(),
            total_bytes: 0,
        }
    }

    /// The default corpus: the project's `spec/` documents, embedded at
    /// compile time. A document that breaks a limit is a start-up error.
    pub fn with_default_corpus(limits: DocsLimits) -> Result<Self, DocsError> {
        let mut registry = DocsRegistry::new(limits);
        for doc in corpus::DEFAULT_CORPUS {
            registry.add(DocSource {
                id: doc.id.to_owned(),
                title: doc.title.to_owned(),
                role: doc.role,
                description: doc.description.to_owned(),
                body: Arc::from(doc.body),
            })?;
        }
        Ok(registry)
    }

    /// Adds one document after checking every rule and limit; on error the
    /// registry is unchanged.
    pub fn add(&mut self, doc: DocSource) -> Result<(), DocsError> {
        if !is_slug(&doc.id) {
            return Err(DocsError::InvalidId { id: doc.id });
        }
        if self.docs.iter().any(|existing| existing.id == doc.id) {
            return Err(DocsError::DuplicateId { id: doc.id });
        }
        if self.docs.len() >= self.limits.max_docs {
            return Err(DocsError::TooManyDocs {
                id: doc.id,
                limit: self.limits.max_docs,
            });
        }
        let bytes = doc.body.len();
        if bytes > self.limits.max_doc_bytes {
            return Err(DocsError::DocTooLarge {
                id: doc.id,
                bytes,
                limit: self.limits.max_doc_bytes,
            });
        }
        let total = self.total_bytes.saturating_add(bytes);
        if total > self.limits.max_total_bytes {
            return Err(DocsError::TotalTooLarge {
                id: doc.id,
                total,
                limit: self.limits.max_total_bytes,
            });
        }
        let index = self.docs.len();
        self.sections.extend(split_sections(index, &doc.body));
        self.total_bytes = total;
        let uri = format!("{URI_PREFIX}{}", doc.id);
        self.docs.push(Doc {
            id: doc.id,
            title: doc.title,
            role: doc.role,
            description: doc.description,
            uri,
            body: doc.body,
        });
        Ok(())
    }

    /// Adds extra documents in order; each one that breaks a rule or limit
    /// is skipped and reported.
    pub fn add_extra(&mut self, docs: impl IntoIterator<Item = DocSource>) -> Vec<DocsWarning> {
        let mut warnings = Vec::new();
        for doc in docs {
            let source = doc.id.clone();
            if let Err(error) = self.add(doc) {
                warnings.push(DocsWarning {
                    source,
                    problem: DocsProblem::Refused(error),
                });
            }
        }
        warnings
    }

    /// The limits the registry was built with.
    pub fn limits(&self) -> &DocsLimits {
        &self.limits
    }

    /// The documents, in catalog order.
    pub fn docs(&self) -> &[Doc] {
        &self.docs
    }

    /// The document with this id.
    pub fn doc(&self, id: &str) -> Option<&Doc> {
        self.docs.iter().find(|doc| doc.id == id)
    }

    /// Bytes held by all documents together.
    pub fn total_bytes(&self) -> usize {
        self.total_bytes
    }

    /// `resources/list`: every document, catalog order.
    pub fn list(&self) -> Vec<ResourceEntry<'_>> {
        self.docs
            .iter()
            .map(|doc| ResourceEntry {
                uri: &doc.uri,
                name: &doc.id,
                title: &doc.title,
                description: &doc.description,
                mime_type: MIME_TYPE,
            })
            .collect()
    }

    /// The documents as server resources, sharing the registry's bytes (no
    /// copy of any body).
    pub fn resources(&self) -> Vec<Resource> {
        self.docs
            .iter()
            .map(|doc| Resource {
                uri: doc.uri.clone(),
                name: doc.id.clone(),
                title: Some(doc.title.clone()),
                description: Some(doc.description.clone()),
                mime_type: MIME_TYPE.to_owned(),
                text: doc.body_shared(),
            })
            .collect()
    }

    /// `resources/read`: the exact bytes of the document with this URI, or
    /// `None` (answer `RESOURCE_NOT_FOUND`). The URI is compared as a whole
    /// string; no path is ever derived from it.
    pub fn read(&self, uri: &str) -> Option<ResourceContents<'_>> {
        self.docs
            .iter()
            .find(|doc| doc.uri == uri)
            .map(|doc| ResourceContents {
                uri: &doc.uri,
                mime_type: MIME_TYPE,
                text: &doc.body,
            })
    }

    /// Ranks sections for `query` and returns the best `max_sections`
    /// (default 3, clamped to 1..=10 and to the configured cap). A query
    /// with no terms gives the overview: one section per role.
    pub fn search(
        &self,
        query: &str,
        max_sections: Option<usize>,
    ) -> Result<SearchOutput<'_>, SearchError> {
        let chars = query.chars().count();
        if query.len() > MAX_QUERY_BYTES || chars > MAX_QUERY_CHARS {
            return Err(SearchError::QueryTooLong {
                bytes: query.len(),
                chars,
            });
        }
        let raw = raw_terms(query);
        let terms: Vec<&str> = {
            let mut seen = BTreeSet::new();
            let mut terms = Vec::new();
            for term in raw.iter().filter(|term| !is_filler(term)) {
                if seen.insert(term.as_str()) {
                    terms.push(term.as_str());
                }
            }
            terms
        };
        if terms.len() > MAX_QUERY_TERMS {
            return Err(SearchError::TooManyTerms);
        }
        if terms.is_empty() {
            return Ok(self.overview());
        }
        let (primary, secondary) = primary_roles(&raw);
        let mut scored: Vec<(u32, usize)> = Vec::new();
        for (position, section) in self.sections.iter().enumerate() {
            let mut score: u32 = 0;
            for term in &terms {
                if section.heading_terms.contains(*term) {
                    score = score.saturating_add(3);
                }
                if section.content_terms.contains(*term) {
                    score = score.saturating_add(1);
                }
            }
            if score == 0 {
                continue;
            }
            let role = self.docs.get(section.doc).map(|doc| doc.role);
            if role.is_some() && role == primary {
                score = score.saturating_add(2);
            } else if role.is_some() && role == secondary {
                score = score.saturating_add(1);
            }
            scored.push((score, position));
        }
        scored.sort_by(|(score_a, pos_a), (score_b, pos_b)| {
            score_b
                .cmp(score_a)
                .then_with(|| self.tie_order(*pos_a, *pos_b))
        });
        let wanted = self.limits.effective_sections(max_sections);
        let hits: Vec<SectionHit<'_>> = scored
            .iter()
            .take(wanted)
            .filter_map(|(_, position)| self.sections.get(*position))
            .enumerate()
            .filter_map(|(index, section)| self.hit(index.saturating_add(1), section))
            .collect();
        let suggested_followups = if hits.is_empty() {
            example_followups()
        } else {
            let base = terms.join(" ");
            DocRole::ALL
                .iter()
                .filter(|role| Some(**role) != primary)
                .filter(|role| !hits.iter().any(|hit| hit.role == **role))
                .take(3)
                .map(|role| format!("{} {base}", role.lead_cue()))
                .collect()
        };
        Ok(SearchOutput {
            docs_covered: self.covered(&hits),
            sections: hits,
            suggested_followups,
        })
    }

    /// Runs a `decision_gate_docs_search` tool call: `arguments` must match
    /// [`search_tool_input_schema`] (`query` string; optional integer
    /// `max_sections` in 1..=10; nothing else). Returns the JSON result.
    pub fn call_search(&self, arguments: &Value) -> Result<Value, SearchCallError> {
        let invalid = |detail: &str| SearchCallError::InvalidArguments(detail.to_owned());
        let Some(object) = arguments.as_object() else {
            return Err(invalid(
                "arguments must be an object {query, max_sections?}",
            ));
        };
        if let Some(unknown) = object
            .keys()
            .find(|key| *key != "query" && *key != "max_sections")
        {
            return Err(SearchCallError::InvalidArguments(format!(
                "unknown argument `{unknown}`; only `query` and `max_sections` are accepted"
            )));
        }
        let query = match object.get("query") {
            Some(Value::String(query)) => query.as_str(),
            Some(_) => return Err(invalid("`query` must be a string")),
            None => return Err(invalid("`query` is required")),
        };
        let max_sections = match object.get("max_sections") {
            None => None,
            Some(value) => match value.as_u64() {
                Some(n) if (1..=MAX_SECTIONS_CAP as u64).contains(&n) => usize::try_from(n).ok(),
                _ => {
                    return Err(invalid("`max_sections` must be an integer from 1 to 10"));
                }
            },
        };
        let output = self.search(query, max_sections)?;
        Ok(serde_json::to_value(&output).unwrap_or(Value::Null))
    }

    fn tie_order(&self, a: usize, b: usize) -> core::cmp::Ordering {
        match (self.sections.get(a), self.sections.get(b)) {
            (Some(left), Some(right)) => left
                .doc
                .cmp(&right.doc)
                .then_with(|| self.heading_of(left).cmp(self.heading_of(right)))
                .then_with(|| a.cmp(&b)),
            _ => a.cmp(&b),
        }
    }

    fn heading_of(&self, section: &Section) -> &str {
        let Some(doc) = self.docs.get(section.doc) else {
            return "";
        };
        match &section.heading {
            Some(range) => doc.body.get(range.clone()).unwrap_or(""),
            None => &doc.title,
        }
    }

    fn hit(&self, rank: usize, section: &Section) -> Option<SectionHit<'_>> {
        let doc = self.docs.get(section.doc)?;
        Some(SectionHit {
            rank,
            doc_id: &doc.id,
            doc_title: &doc.title,
            role: doc.role,
            heading: self.heading_of(section),
            content: doc.body.get(section.content.clone()).unwrap_or(""),
        })
    }

    fn covered<'a>(&'a self, hits: &[SectionHit<'a>]) -> Vec<DocRef<'a>> {
        let mut covered: Vec<DocRef<'a>> = Vec::new();
        for hit in hits {
            if covered.iter().any(|doc| doc.id == hit.doc_id) {
                continue;
            }
            if let Some(doc) = self.doc(hit.doc_id) {
                covered.push(DocRef {
                    id: &doc.id,
                    title: &doc.title,
                    role: doc.role,
                    uri: &doc.uri,
                });
            }
        }
        covered
    }

    fn overview(&self) -> SearchOutput<'_> {
        let mut hits = Vec::new();
        for role in DocRole::ALL {
            let first = self.sections.iter().find(|section| {
                self.docs.get(section.doc).map(|doc| doc.role) == Some(role)
                    && !section.content.is_empty()
            });
            if let Some(section) = first {
                if let Some(hit) = self.hit(hits.len().saturating_add(1), section) {
                    hits.push(hit);
                }
            }
        }
        SearchOutput {
            docs_covered: self.covered(&hits),
            sections: hits,
            suggested_followups: example_followups(),
        }
    }
}

/// What a server offers of a registry, as `[docs]` configures it: the
/// search tool, the resources, both or neither. Cheap to clone (the
/// registry is shared), so one surface can serve many connections.
#[derive(Clone, Debug)]
pub struct DocsSurface {
    registry: Arc<DocsRegistry>,
    search: bool,
    resources: bool,
}

impl DocsSurface {
    /// Serves `registry` through the search tool (when `search`) and
    /// `resources/list` / `resources/read` (when `resources`).
    pub fn new(registry: Arc<DocsRegistry>, search: bool, resources: bool) -> Self {
        DocsSurface {
            registry,
            search,
            resources,
        }
    }

    /// No search tool and no resources.
    pub fn disabled() -> Self {
        DocsSurface::new(
            Arc::new(DocsRegistry::new(DocsLimits::default())),
            false,
            false,
        )
    }

    /// The surface `[docs]` describes: with `enabled = false` nothing is
    /// loaded and nothing is served; otherwise the default corpus (when
    /// `include_default_docs`) and then `extra_paths`. A default document
    /// that breaks a limit is an error (start-up must fail); extra
    /// documents that cannot be used come back as warnings to log.
    pub fn from_config(config: &DocsConfig) -> Result<(DocsSurface, Vec<DocsWarning>), DocsError> {
        if !config.enabled {
            return Ok((DocsSurface::disabled(), Vec::new()));
        }
        let limits = DocsLimits {
            max_doc_bytes: usize::try_from(config.max_doc_bytes).unwrap_or(usize::MAX),
            max_total_bytes: usize::try_from(config.max_total_bytes).unwrap_or(usize::MAX),
            max_docs: config.max_docs,
            max_sections: config.max_sections,
        };
        let mut registry = if config.include_default_docs {
            DocsRegistry::with_default_corpus(limits)?
        } else {
            DocsRegistry::new(limits)
        };
        let warnings = registry.load_extra_paths(&config.extra_paths);
        let surface = DocsSurface::new(
            Arc::new(registry),
            config.enable_search,
            config.enable_resources,
        );
        Ok((surface, warnings))
    }

    /// The registry served.
    pub fn registry(&self) -> &Arc<DocsRegistry> {
        &self.registry
    }

    /// Whether the search tool is registered.
    pub fn search_enabled(&self) -> bool {
        self.search
    }

    /// Whether `resources/list` and `resources/read` are served.
    pub fn resources_enabled(&self) -> bool {
        self.resources
    }

    /// Sets whether resources are served (when they are not, both methods
    /// answer `METHOD_NOT_FOUND` and `initialize` does not advertise them),
    /// and registers the search tool (answered inside the core) and the
    /// documents as resources, each as enabled. A disabled search tool is
    /// not registered at all, so it is an unknown tool.
    pub fn install(&self, config: &mut ServerConfig) {
        config.resources_enabled = self.resources;
        if self.search {
            let registry = Arc::clone(&self.registry);
            let handler: InlineTool = Arc::new(move |arguments: &Value| {
                registry
                    .call_search(arguments)
                    .map_err(|error| ToolFailure::InvalidInput(error.to_string()))
            });
            config.add_inline_tool(search_tool_definition(), handler);
        }
        if self.resources {
            for resource in self.registry.resources() {
                config.add_resource(resource);
            }
        }
    }
}

/// The `decision_gate_docs_search` tool as `tools/list` shows it.
pub fn search_tool_definition() -> ToolDefinition {
    ToolDefinition {
        name: SEARCH_TOOL_NAME.to_owned(),
        description: SEARCH_TOOL_DESCRIPTION.to_owned(),
        input_schema: search_tool_input_schema(),
        output_schema: Some(search_tool_output_schema()),
    }
}

/// The docs search tool's description for `tools/list`.
pub const SEARCH_TOOL_DESCRIPTION: &str = "Search this provider's documentation (protocol, framing, errors, evidence, security, guides) for runtime guidance. Deterministic and offline: returns ranked, role-tagged sections (reasoning, decision, ontology, pattern), the documents they came from (readable in full with resources/read) and follow-up queries. An empty query returns an overview with one section per role.";

/// JSON Schema of the docs search tool's arguments.
pub fn search_tool_input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "maxLength": MAX_QUERY_CHARS,
                "description": "Words to look for; empty for an overview. Cue words such as why, which, schema or example favour one kind of document."
            },
            "max_sections": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_SECTIONS_CAP,
                "default": DEFAULT_MAX_SECTIONS,
                "description": "How many sections to return (default 3, at most 10, and at most the server's configured cap)."
            }
        },
        "required": ["query"],
        "additionalProperties": false
    })
}

/// JSON Schema of the docs search tool's result.
pub fn search_tool_output_schema() -> Value {
    let role = json!({"type": "string", "enum": ["reasoning", "decision", "ontology", "pattern"]});
    json!({
        "type": "object",
        "properties": {
            "sections": {
                "type": "array",
                "maxItems": MAX_SECTIONS_CAP,
                "items": {
                    "type": "object",
                    "properties": {
                        "rank": {"type": "integer", "minimum": 1},
                        "doc_id": {"type": "string"},
                        "doc_title": {"type": "string"},
                        "role": role,
                        "heading": {"type": "string"},
                        "content": {"type": "string"}
                    },
                    "required": ["rank", "doc_id", "doc_title", "role", "heading", "content"]
                }
            },
            "docs_covered": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"},
                        "title": {"type": "string"},
                        "role": role,
                        "uri": {"type": "string"}
                    },
                    "required": ["id", "title", "role", "uri"]
                }
            },
            "suggested_followups": {"type": "array", "items": {"type": "string"}}
        },
        "required": ["sections", "docs_covered", "suggested_followups"]
    })
}

fn example_followups() -> Vec<String> {
    DocRole::ALL
        .iter()
        .map(|role| role.example_query().to_string())
        .collect()
}

/// Query or text words: runs of letters and digits, lowercased, with a
/// plural `s` dropped (`errors` → `error`, but `process` stays).
fn raw_terms(text: &str) -> Vec<String> {
    let mut terms = Vec::new();
    for word in text.split(|c: char| !c.is_alphanumeric()) {
        if word.is_empty() {
            continue;
        }
        let mut term = String::with_capacity(word.len());
        for c in word.chars() {
            term.extend(c.to_lowercase());
        }
        if term.chars().count() > 3 && term.ends_with('s') && !term.ends_with("ss") {
            term.pop();
        }
        terms.push(term);
    }
    terms
}

fn term_set(text: &str) -> BTreeSet<String> {
    raw_terms(text).into_iter().collect()
}

/// Words that say nothing about content; they still count as role cues.
fn is_filler(term: &str) -> bool {
    const FILLER: &[&str] = &[
        "a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "doe", "for", "from", "how",
        "i", "if", "in", "into", "is", "it", "its", "me", "my", "of", "on", "or", "so", "that",
        "the", "thi", "this", "to", "was", "what", "when", "where", "which", "who", "why", "will",
        "with", "you", "your",
    ];
    FILLER.contains(&term)
}

/// The roles most and second-most suggested by cue words (ties: role order).
fn primary_roles(terms: &[String]) -> (Option<DocRole>, Option<DocRole>) {
    let mut counts = [0usize; 4];
    for term in terms {
        for role in DocRole::ALL {
            if role.cues().contains(&term.as_str()) {
                if let Some(count) = counts.get_mut(role.index()) {
                    *count = count.saturating_add(1);
                }
            }
        }
    }
    let mut ranked: Vec<(usize, DocRole)> = DocRole::ALL
        .iter()
        .filter_map(|role| {
            let count = counts.get(role.index()).copied().unwrap_or(0);
            (count > 0).then_some((count, *role))
        })
        .collect();
    ranked.sort_by(|(count_a, role_a), (count_b, role_b)| {
        count_b.cmp(count_a).then_with(|| role_a.cmp(role_b))
    });
    let mut roles = ranked.into_iter().map(|(_, role)| role);
    (roles.next(), roles.next())
}

/// Cuts a body into sections at `## ` / `### ` lines outside code fences.
fn split_sections(doc: usize, body: &str) -> Vec<Section> {
    struct Heading {
        line: Range<usize>,
        text: Range<usize>,
    }
    let mut headings: Vec<Heading> = Vec::new();
    let mut title_line: Option<Range<usize>> = None;
    let mut fence: Option<char> = None;
    let mut offset = 0usize;
    for line in body.split_inclusive('\n') {
        let start = offset;
        offset = offset.saturating_add(line.len());
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            let marker = if trimmed.starts_with('`') { '`' } else { '~' };
            fence = match fence {
                None => Some(marker),
                Some(open) if open == marker => None,
                other => other,
            };
            continue;
        }
        if fence.is_some() {
            continue;
        }
        let prefix = if line.starts_with("## ") {
            3
        } else if line.starts_with("### ") {
            4
        } else {
            if title_line.is_none() && headings.is_empty() && line.starts_with("# ") {
                title_line = Some(start..offset);
            }
            continue;
        };
        let text = trim_range(body, start.saturating_add(prefix)..offset);
        headings.push(Heading {
            line: start..offset,
            text,
        });
    }
    let mut sections = Vec::new();
    let first_heading = headings.first().map_or(body.len(), |h| h.line.start);
    let intro_start = match &title_line {
        Some(line) if body.get(..line.start).is_some_and(|s| s.trim().is_empty()) => line.end,
        _ => 0,
    };
    let intro = trim_range(body, intro_start..first_heading.max(intro_start));
    if !intro.is_empty() {
        sections.push(make_section(doc, body, None, intro));
    }
    for (index, heading) in headings.iter().enumerate() {
        let end = headings
            .get(index.saturating_add(1))
            .map_or(body.len(), |next| next.line.start);
        let content = trim_range(body, heading.line.end..end);
        sections.push(make_section(doc, body, Some(heading.text.clone()), content));
    }
    sections
}

fn make_section(
    doc: usize,
    body: &str,
    heading: Option<Range<usize>>,
    content: Range<usize>,
) -> Section {
    let heading_terms = heading
        .clone()
        .and_then(|range| body.get(range))
        .map(term_set)
        .unwrap_or_default();
    let content_terms = body.get(content.clone()).map(term_set).unwrap_or_default();
    Section {
        doc,
        heading,
        content,
        heading_terms,
        content_terms,
    }
}

/// `range` without leading and trailing whitespace (an empty range at its
/// start when nothing is left).
fn trim_range(body: &str, range: Range<usize>) -> Range<usize> {
    let Some(text) = body.get(range.clone()) else {
        return range.start..range.start;
    };
    let leading = text.len().saturating_sub(text.trim_start().len());
    let trimmed = text.trim();
    let start = range.start.saturating_add(leading);
    start..start.saturating_add(trimmed.len())
}

fn is_slug(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID_BYTES
        && !id.starts_with('-')
        && !id.ends_with('-')
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// `My Notes.md`-style names to `my-notes`; `None` when nothing is left.
fn slugify(name: &str) -> Option<String> {
    let mut slug = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            slug.push(c.to_ascii_lowercase());
        } else if !slug.is_empty() && !slug.ends_with('-') {
            slug.push('-');
        }
    }
    while slug.ends_with('-') {
        slug.pop();
    }
    if slug.len() > MAX_ID_BYTES {
        slug.truncate(MAX_ID_BYTES);
        while slug.ends_with('-') {
            slug.pop();
        }
    }
    is_slug(&slug).then_some(slug)
}

fn markdown_title(body: &str) -> Option<&str> {
    body.lines()
        .find_map(|line| line.strip_prefix("# "))
        .map(str::trim)
        .filter(|title| !title.is_empty())
}

/// The first paragraph of plain text, whitespace collapsed, at most 160 characters.
fn markdown_description(body: &str) -> String {
    const MAX_CHARS: usize = 160;
    let mut words: Vec<&str> = Vec::new();
    let mut in_comment = false;
    let mut in_fence = false;
    for line in body.lines() {
        let trimmed = line.trim();
        if in_comment {
            in_comment = !trimmed.contains("-->");
            continue;
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        if trimmed.starts_with("<!--") {
            in_comment = !trimmed.contains("-->");
            continue;
        }
        if trimmed.is_empty() || trimmed.starts_with('#') {
            if words.is_empty() {
                continue;
            }
            break;
        }
        words.extend(trimmed.split_whitespace());
    }
    let joined = words.join(" ");
    if joined.chars().count() <= MAX_CHARS {
        return joined;
    }
    let mut cut: String = joined.chars().take(MAX_CHARS.saturating_sub(1)).collect();
    cut.push('…');
    cut
}
