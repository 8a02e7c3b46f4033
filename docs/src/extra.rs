//! Extra documents from `[docs] extra_paths`: files and
//! directories scanned for `.md` files, with every path canonicalized and
//! every limit checked before a byte of a document is read.
//!
//! The job is split in two passes so that the result never depends on the
//! order of `extra_paths` or of directory listings:
//!
//! 1. **Discover.** Each configured path is canonicalized (it becomes a
//!    *root*); directories are walked depth-first (entries sorted, names
//!    starting with `.` skipped, at most [`MAX_SCAN_DEPTH`] levels and
//!    [`MAX_SCAN_ENTRIES`] entries in all). Every entry is canonicalized and
//!    must lie inside a root: a symlink that leads elsewhere is refused.
//!    Each directory is visited once, so link loops end.
//! 2. **Load.** The `.md` files found are sorted by canonical path, then
//!    loaded in that order: the size from metadata is checked against
//!    `max_doc_bytes`, the remaining `max_total_bytes` and the remaining
//!    document count before the file is opened; the read is capped one byte
//!    past the limit, so a file that grew in between is refused, never
//!    truncated.
//!
//! Problems never stop the loading: each one is a [`DocsWarning`].

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::{DocSource, DocsError, DocsLimits, DocsProblem, DocsRegistry, DocsWarning};

/// Deepest directory level scanned below a configured directory.
pub const MAX_SCAN_DEPTH: usize = 16;

/// Most directory entries looked at across all configured paths.
pub const MAX_SCAN_ENTRIES: usize = 10_000;

/// What loading extra paths produced: documents in catalog order, and the
/// problems met on the way.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadedDocs {
    /// Documents that passed every check, sorted by canonical path.
    pub docs: Vec<DocSource>,
    /// Paths that were skipped, and why.
    pub warnings: Vec<DocsWarning>,
}

/// The limits, and how much of them is already used.
#[derive(Clone, Copy, Debug)]
struct Budget {
    limits: DocsLimits,
    used_bytes: usize,
    used_docs: usize,
}

/// Loads the `.md` documents under `paths` within `limits` (as if into an
/// empty registry). Use [`DocsRegistry::load_extra_paths`] to load into a
/// registry that already holds documents.
pub fn load_extra(paths: &[PathBuf], limits: &DocsLimits) -> LoadedDocs {
    load(
        paths,
        Budget {
            limits: *limits,
            used_bytes: 0,
            used_docs: 0,
        },
        &BTreeSet::new(),
    )
}

impl DocsRegistry {
    /// Loads the `.md` documents under `paths` into this registry, after
    /// the documents it already holds, within what its limits leave. Each
    /// file that cannot be used is skipped and reported.
    pub fn load_extra_paths(&mut self, paths: &[PathBuf]) -> Vec<DocsWarning> {
        let taken: BTreeSet<String> = self.docs().iter().map(|doc| doc.id().to_owned()).collect();
        let budget = Budget {
            limits: *self.limits(),
            used_bytes: self.total_bytes(),
            used_docs: self.docs().len(),
        };
        let loaded = load(paths, budget, &taken);
        let mut warnings = loaded.warnings;
        warnings.extend(self.add_extra(loaded.docs));
        warnings
    }
}

/// One configured path, canonicalized.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Root {
    canonical: PathBuf,
    is_dir: bool,
}

struct Scan {
    roots: Vec<Root>,
    files: BTreeSet<PathBuf>,
    visited_dirs: BTreeSet<PathBuf>,
    entries: usize,
    warnings: Vec<DocsWarning>,
    exhausted: bool,
}

fn warning(path: &Path, problem: DocsProblem) -> DocsWarning {
    DocsWarning {
        source: path.display().to_string(),
        problem,
    }
}

fn load(paths: &[PathBuf], budget: Budget, taken_ids: &BTreeSet<String>) -> LoadedDocs {
    let mut scan = Scan {
        roots: Vec::new(),
        files: BTreeSet::new(),
        visited_dirs: BTreeSet::new(),
        entries: 0,
        warnings: Vec::new(),
        exhausted: false,
    };
    for path in paths {
        match path.canonicalize() {
            Ok(canonical) => {
                let is_dir = canonical.is_dir();
                scan.roots.push(Root { canonical, is_dir });
            }
            Err(error) => scan
                .warnings
                .push(warning(path, DocsProblem::NotFound(error.to_string()))),
        }
    }
    scan.roots.sort();
    scan.roots.dedup();
    let roots = scan.roots.clone();
    for root in &roots {
        if root.is_dir {
            scan_dir(&mut scan, &root.canonical, 0);
        } else if is_markdown(&root.canonical) {
            scan.files.insert(root.canonical.clone());
        } else {
            scan.warnings
                .push(warning(&root.canonical, DocsProblem::NotMarkdown));
        }
    }
    let mut warnings = scan.warnings;
    let mut docs = Vec::new();
    let mut ids: BTreeSet<String> = taken_ids.clone();
    let mut budget = budget;
    for file in &scan.files {
        match load_file(file, &budget, &ids) {
            Ok(doc) => {
                budget.used_bytes = budget.used_bytes.saturating_add(doc.body.len());
                budget.used_docs = budget.used_docs.saturating_add(1);
                ids.insert(doc.id.clone());
                docs.push(doc);
            }
            Err(problem) => warnings.push(warning(file, problem)),
        }
    }
    LoadedDocs { docs, warnings }
}

fn is_markdown(path: &Path) -> bool {
    path.extension()
        .and_then(|extension| extension.to_str())
        .is_some_and(|extension| extension.eq_ignore_ascii_case("md"))
}

/// True when `canonical` lies inside (or is) one of the roots.
fn inside_roots(roots: &[Root], canonical: &Path) -> bool {
    roots.iter().any(|root| {
        if root.is_dir {
            canonical.starts_with(&root.canonical)
        } else {
            canonical == root.canonical
        }
    })
}

fn scan_dir(scan: &mut Scan, dir: &Path, depth: usize) {
    if scan.exhausted || !scan.visited_dirs.insert(dir.to_path_buf()) {
        return;
    }
    if depth > MAX_SCAN_DEPTH {
        scan.warnings.push(warning(
            dir,
            DocsProblem::ScanLimit(format!(
                "deeper than {MAX_SCAN_DEPTH} levels below a configured directory"
            )),
        ));
        return;
    }
    let listing = match std::fs::read_dir(dir) {
        Ok(listing) => listing,
        Err(error) => {
            scan.warnings
                .push(warning(dir, DocsProblem::Unreadable(error.to_string())));
            return;
        }
    };
    let mut names: Vec<PathBuf> = Vec::new();
    for entry in listing {
        if scan.entries >= MAX_SCAN_ENTRIES {
            scan.exhausted = true;
            scan.warnings.push(warning(
                dir,
                DocsProblem::ScanLimit(format!(
                    "more than {MAX_SCAN_ENTRIES} directory entries under the configured paths"
                )),
            ));
            break;
        }
        scan.entries = scan.entries.saturating_add(1);
        match entry {
            Ok(entry) => {
                let hidden = entry
                    .file_name()
                    .to_str()
                    .is_none_or(|name| name.starts_with('.'));
                if !hidden {
                    names.push(entry.path());
                }
            }
            Err(error) => scan
                .warnings
                .push(warning(dir, DocsProblem::Unreadable(error.to_string()))),
        }
    }
    names.sort();
    for path in names {
        let canonical = match path.canonicalize() {
            Ok(canonical) => canonical,
            Err(error) => {
                scan.warnings
                    .push(warning(&path, DocsProblem::NotFound(error.to_string())));
                continue;
            }
        };
        let is_dir = canonical.is_dir();
        if !is_dir && !is_markdown(&path) {
            // Not a candidate; say nothing about unrelated files.
            continue;
        }
        if !inside_roots(&scan.roots, &canonical) {
            scan.warnings.push(warning(
                &path,
                DocsProblem::OutsideConfiguredPaths(canonical.display().to_string()),
            ));
            continue;
        }
        if is_dir {
            scan_dir(scan, &canonical, depth.saturating_add(1));
        } else if is_markdown(&canonical) {
            scan.files.insert(canonical);
        } else {
            scan.warnings.push(warning(&path, DocsProblem::NotMarkdown));
        }
    }
}

/// Reads one document, checking the limits before and while reading.
fn load_file(
    path: &Path,
    budget: &Budget,
    taken_ids: &BTreeSet<String>,
) -> Result<DocSource, DocsProblem> {
    let stem = path
        .file_stem()
        .and_then(|stem| stem.to_str())
        .ok_or(DocsProblem::NoId)?;
    let id = super::slugify(stem).ok_or(DocsProblem::NoId)?;
    if taken_ids.contains(&id) {
        return Err(DocsError::DuplicateId { id }.into());
    }
    if budget.used_docs >= budget.limits.max_docs {
        return Err(DocsError::TooManyDocs {
            id,
            limit: budget.limits.max_docs,
        }
        .into());
    }
    let metadata =
        std::fs::metadata(path).map_err(|error| DocsProblem::Unreadable(error.to_string()))?;
    if !metadata.is_file() {
        return Err(DocsProblem::Unreadable("not a regular file".to_owned()));
    }
    let declared = usize::try_from(metadata.len()).unwrap_or(usize::MAX);
    check_size(&id, declared, budget)?;
    let limit = budget.limits.max_doc_bytes.min(
        budget
            .limits
            .max_total_bytes
            .saturating_sub(budget.used_bytes),
    );
    let file =
        std::fs::File::open(path).map_err(|error| DocsProblem::Unreadable(error.to_string()))?;
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    let mut bytes = Vec::with_capacity(declared.min(limit));
    file.take(cap)
        .read_to_end(&mut bytes)
        .map_err(|error| DocsProblem::Unreadable(error.to_string()))?;
    // The file may have grown since its metadata was read.
    check_size(&id, bytes.len(), budget)?;
    let text = String::from_utf8(bytes).map_err(|_| DocsProblem::NotUtf8)?;
    let mut doc = DocSource::from_markdown(stem, text).ok_or(DocsProblem::NoId)?;
    doc.id = id;
    Ok(doc)
}

fn check_size(id: &str, bytes: usize, budget: &Budget) -> Result<(), DocsProblem> {
    if bytes > budget.limits.max_doc_bytes {
        return Err(DocsError::DocTooLarge {
            id: id.to_owned(),
            bytes,
            limit: budget.limits.max_doc_bytes,
        }
        .into());
    }
    let total = budget.used_bytes.saturating_add(bytes);
    if total > budget.limits.max_total_bytes {
        return Err(DocsError::TotalTooLarge {
            id: id.to_owned(),
            total,
            limit: budget.limits.max_total_bytes,
        }
        .into());
    }
    Ok(())
}
