//! Docs search: heading vs body ranking, role bonus, determinism,
//! `max_sections` clamping, the empty-query overview and query limits.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

use std::sync::Arc;

use evidence_wire_docs::{
    DEFAULT_MAX_SECTIONS, DocRole, DocSource, DocsLimits, DocsRegistry, MAX_QUERY_CHARS,
    MAX_QUERY_TERMS, MAX_SECTIONS_CAP, SearchCallError, SearchError,
};
use serde_json::{Value, json};

fn source(id: &str, role: DocRole, body: &str) -> DocSource {
    DocSource {
        id: id.to_owned(),
        title: format!("Title of {id}"),
        role,
        description: format!("About {id}."),
        body: Arc::from(body),
    }
}

fn registry(docs: Vec<DocSource>) -> DocsRegistry {
    let mut registry = DocsRegistry::new(DocsLimits::default());
    for doc in docs {
        registry.add(doc).unwrap();
    }
    registry
}

fn default_registry() -> DocsRegistry {
    DocsRegistry::with_default_corpus(DocsLimits::default()).unwrap()
}

fn search_json(registry: &DocsRegistry, query: &str, max: Option<usize>) -> Vec<u8> {
    serde_json::to_vec(&registry.search(query, max).unwrap()).unwrap()
}

#[test]
fn heading_match_outranks_body_match() {
    // `alpha` comes first in catalog order, so a tie would put its body
    // match first; only the heading weight can put `beta` on top.
    let registry = registry(vec![
        source(
            "alpha",
            DocRole::Ontology,
            "# Alpha\n\n## Limits\n\nRetries are bounded by the deadline.\n",
        ),
        source(
            "beta",
            DocRole::Ontology,
            "# Beta\n\n## Retries\n\nEach attempt waits for the previous one.\n",
        ),
    ]);
    let output = registry.search("retries", Some(5)).unwrap();
    let order: Vec<(&str, &str)> = output
        .sections
        .iter()
        .map(|hit| (hit.doc_id, hit.heading))
        .collect();
    assert_eq!(order, [("beta", "Retries"), ("alpha", "Limits")]);
    assert_eq!(output.sections[0].rank, 1);
    assert_eq!(output.sections[1].rank, 2);
    assert_eq!(
        output.sections[0].content,
        "Each attempt waits for the previous one."
    );
}

#[test]
fn heading_and_body_matches_add_up() {
    let registry = registry(vec![
        source(
            "one",
            DocRole::Pattern,
            "# One\n\n## Deadline\n\nNo match here.\n",
        ),
        source(
            "two",
            DocRole::Pattern,
            "# Two\n\n## Deadline\n\nThe deadline is in milliseconds.\n",
        ),
    ]);
    let output = registry.search("deadline", None).unwrap();
    assert_eq!(output.sections[0].doc_id, "two");
    assert_eq!(output.sections[1].doc_id, "one");
}

#[test]
fn role_bonus_follows_query_cues() {
    let body = "# Doc\n\n## Timeouts\n\nTimeouts stop a slow provider.\n";
    let registry = registry(vec![
        source("table", DocRole::Ontology, body),
        source("concepts", DocRole::Reasoning, body),
        source("steps", DocRole::Pattern, body),
    ]);
    let first = |query: &str| {
        registry.search(query, Some(3)).unwrap().sections[0]
            .doc_id
            .to_owned()
    };
    // No cue: equal scores, catalog order decides.
    assert_eq!(first("timeouts"), "table");
    // Pattern cues ("example", "configure") lift the pattern document.
    assert_eq!(first("example configure timeouts"), "steps");
    // Ontology cues keep the ontology document on top.
    assert_eq!(first("timeouts schema field"), "table");
    // Reasoning cues lift the reasoning document.
    assert_eq!(first("threat model timeouts"), "concepts");
    // A filler word still counts as a cue ("why" is reasoning).
    assert_eq!(first("why timeouts"), "concepts");
    // The runner-up role gets the smaller bonus: pattern (2 cues) first,
    // ontology (1 cue) second, reasoning last.
    let output = registry
        .search("example step schema timeouts", Some(3))
        .unwrap();
    let roles: Vec<DocRole> = output.sections.iter().map(|hit| hit.role).collect();
    assert_eq!(
        roles,
        [DocRole::Pattern, DocRole::Ontology, DocRole::Reasoning]
    );
}

#[test]
fn role_bonus_never_brings_in_unmatched_sections() {
    let registry = registry(vec![
        source(
            "a",
            DocRole::Pattern,
            "# A\n\n## Setup\n\nInstall the binary.\n",
        ),
        source(
            "b",
            DocRole::Ontology,
            "# B\n\n## Frames\n\nHeaders and bodies.\n",
        ),
    ]);
    let output = registry.search("example frames", Some(10)).unwrap();
    let ids: Vec<&str> = output.sections.iter().map(|hit| hit.doc_id).collect();
    assert_eq!(ids, ["b"]);
}

#[test]
fn same_query_gives_identical_bytes() {
    let first = default_registry();
    let second = default_registry();
    for query in [
        "content-length framing limits",
        "which dialect should a caller speak",
        "why verify evidence hashes",
        "error codes table",
        "",
        "zzzzqqq-xxyyzz",
    ] {
        let a = search_json(&first, query, Some(5));
        let b = search_json(&first, query, Some(5));
        let c = search_json(&second, query, Some(5));
        assert!(a == b, "query {query:?} twice on one registry");
        assert!(a == c, "query {query:?} on two registries");
        let via_tool = first
            .call_search(&json!({"query": query, "max_sections": 5}))
            .unwrap();
        let direct = serde_json::to_value(first.search(query, Some(5)).unwrap()).unwrap();
        assert!(
            direct == via_tool,
            "tool call and search agree for {query:?}"
        );
    }
}

#[test]
fn max_sections_is_clamped() {
    let limits = DocsLimits::default();
    assert_eq!(limits.effective_sections(None), DEFAULT_MAX_SECTIONS);
    assert_eq!(limits.effective_sections(Some(0)), 1);
    assert_eq!(limits.effective_sections(Some(7)), 7);
    assert_eq!(limits.effective_sections(Some(50)), MAX_SECTIONS_CAP);
    let low = DocsLimits {
        max_sections: 4,
        ..DocsLimits::default()
    };
    assert_eq!(low.effective_sections(Some(10)), 4);
    assert_eq!(low.effective_sections(None), 3);
    let zero = DocsLimits {
        max_sections: 0,
        ..DocsLimits::default()
    };
    assert_eq!(zero.effective_sections(Some(5)), 1);

    // A query matching many sections of the default corpus.
    let registry = default_registry();
    let query = "error frame message provider";
    let count = |max| registry.search(query, max).unwrap().sections.len();
    assert_eq!(count(None), 3);
    assert_eq!(count(Some(1)), 1);
    assert_eq!(count(Some(0)), 1);
    assert_eq!(count(Some(100)), MAX_SECTIONS_CAP);

    let capped = {
        let mut capped = DocsRegistry::new(DocsLimits {
            max_sections: 2,
            ..DocsLimits::default()
        });
        for doc in registry.docs() {
            capped
                .add(DocSource {
                    id: doc.id().to_owned(),
                    title: doc.title().to_owned(),
                    role: doc.role(),
                    description: doc.description().to_owned(),
                    body: doc.body_shared(),
                })
                .unwrap();
        }
        capped
    };
    let output = capped
        .call_search(&json!({"query": query, "max_sections": 10}))
        .unwrap();
    assert_eq!(output["sections"].as_array().unwrap().len(), 2);
    let ranks: Vec<u64> = output["sections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|hit| hit["rank"].as_u64().unwrap())
        .collect();
    assert_eq!(ranks, [1, 2]);
}

#[test]
fn tool_arguments_are_checked() {
    let registry = default_registry();
    for arguments in [
        json!({"query": "framing", "max_sections": 0}),
        json!({"query": "framing", "max_sections": 11}),
        json!({"query": "framing", "max_sections": 2.5}),
        json!({"query": "framing", "max_sections": "3"}),
        json!({"query": 3}),
        json!({}),
        json!({"query": "framing", "limit": 3}),
        json!(["framing"]),
    ] {
        match registry.call_search(&arguments) {
            Err(SearchCallError::InvalidArguments(_)) => {}
            other => panic!("{arguments} should be refused, got {other:?}"),
        }
    }
}

#[test]
fn empty_query_gives_one_section_per_role() {
    let registry = default_registry();
    for query in ["", "   ", "the and of", "how what why"] {
        let output = registry.search(query, Some(10)).unwrap();
        let roles: Vec<DocRole> = output.sections.iter().map(|hit| hit.role).collect();
        assert_eq!(roles, DocRole::ALL, "overview for {query:?}");
        let ranks: Vec<usize> = output.sections.iter().map(|hit| hit.rank).collect();
        assert_eq!(ranks, [1, 2, 3, 4]);
        for hit in &output.sections {
            let first_of_role = registry
                .docs()
                .iter()
                .find(|doc| doc.role() == hit.role)
                .unwrap();
            assert_eq!(hit.doc_id, first_of_role.id());
            assert!(!hit.content.is_empty());
        }
        assert_eq!(output.suggested_followups.len(), 4);
        assert_eq!(output.docs_covered.len(), 4);
    }
    // The overview ignores max_sections (one per role).
    assert_eq!(registry.search("", Some(1)).unwrap().sections.len(), 4);
}

#[test]
fn overview_skips_roles_without_documents() {
    let registry = registry(vec![
        source("b", DocRole::Pattern, "# B\n\nSteps.\n"),
        source("a", DocRole::Reasoning, "# A\n\nConcepts.\n"),
    ]);
    let output = registry.search("", None).unwrap();
    let order: Vec<(&str, DocRole)> = output
        .sections
        .iter()
        .map(|hit| (hit.doc_id, hit.role))
        .collect();
    assert_eq!(order, [("a", DocRole::Reasoning), ("b", DocRole::Pattern)]);
    assert_eq!(output.sections[0].heading, "Title of a");
    assert_eq!(output.sections[0].content, "Concepts.");
}

#[test]
fn followups_name_missing_roles() {
    let registry = default_registry();
    let output = registry.search("framing limits", Some(3)).unwrap();
    assert!(!output.sections.is_empty());
    assert!(output.suggested_followups.len() <= 3);
    for followup in &output.suggested_followups {
        assert!(
            followup.ends_with("framing limit"),
            "followup {followup:?} keeps the query terms"
        );
    }
    let missed = registry.search("zzzzqqq xxyyzz", None).unwrap();
    assert!(missed.sections.is_empty());
    assert!(missed.docs_covered.is_empty());
    assert_eq!(missed.suggested_followups.len(), 4);
}

#[test]
fn sections_split_at_level_two_and_three_outside_fences() {
    let registry = registry(vec![source(
        "doc",
        DocRole::Ontology,
        "# Doc\n\nIntro text.\n\n## First\n\nOne.\n\n```md\n## Not a heading\n```\n\n### Second\n\nTwo.\n\n#### Deeper\n\nStill two.\n",
    )]);
    let output = registry.search("one two intro", Some(10)).unwrap();
    let mut headings: Vec<&str> = output.sections.iter().map(|hit| hit.heading).collect();
    headings.sort_unstable();
    assert_eq!(headings, ["First", "Second", "Title of doc"]);
    let first = output
        .sections
        .iter()
        .find(|hit| hit.heading == "First")
        .unwrap();
    assert_eq!(first.content, "One.\n\n```md\n## Not a heading\n```");
}

#[test]
fn query_limits_are_enforced() {
    let registry = default_registry();
    let long = "a".repeat(MAX_QUERY_CHARS + 1);
    assert!(matches!(
        registry.search(&long, None),
        Err(SearchError::QueryTooLong { .. })
    ));
    // 1024 four-byte characters: exactly the byte cap, still accepted.
    let wide = "\u{1F600}".repeat(MAX_QUERY_CHARS);
    assert!(registry.search(&wide, None).is_ok());
    let many: Vec<String> = (0..=MAX_QUERY_TERMS).map(|n| format!("term{n}")).collect();
    assert_eq!(
        registry.search(&many.join(" "), None).unwrap_err(),
        SearchError::TooManyTerms
    );
    let enough: Vec<String> = (0..MAX_QUERY_TERMS).map(|n| format!("term{n}")).collect();
    assert!(registry.search(&enough.join(" "), None).is_ok());
    // Repeated terms count once.
    let repeated = vec!["framing"; 100].join(" ");
    assert!(registry.search(&repeated, None).is_ok());
    let error = registry
        .call_search(&json!({"query": long}))
        .unwrap_err()
        .to_string();
    assert!(error.contains("shorten"), "{error}");
}

#[test]
fn output_matches_its_schema_shape() {
    let registry = default_registry();
    let output: Value = registry.call_search(&json!({"query": "framing"})).unwrap();
    let keys: Vec<&String> = output.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["docs_covered", "sections", "suggested_followups"]);
    let hit = &output["sections"][0];
    for key in ["rank", "doc_id", "doc_title", "role", "heading", "content"] {
        assert!(hit.get(key).is_some(), "section has {key}");
    }
    let doc = &output["docs_covered"][0];
    assert!(
        doc["uri"]
            .as_str()
            .unwrap()
            .starts_with("decision-gate://docs/")
    );
}

#[test]
fn the_decision_gate_guide_is_found() {
    // The README links spec/guides/decision-gate.md; an agent asking how to
    // set up Decision Gate is sent to it.
    let registry = default_registry();
    let output = registry
        .search(
            "how to configure decision gate to run the provider over stdio",
            Some(3),
        )
        .unwrap();
    assert_eq!(
        output.sections.first().map(|hit| hit.doc_id),
        Some("decision-gate"),
        "{:?}",
        output
            .sections
            .iter()
            .map(|hit| (hit.doc_id, hit.heading))
            .collect::<Vec<_>>()
    );
    let guide = registry.read("decision-gate://docs/decision-gate").unwrap();
    assert!(
        guide
            .text
            .starts_with("# Using evidence-wire with Decision Gate")
    );
}
