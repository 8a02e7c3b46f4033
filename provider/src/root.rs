//! An evidence root: the one directory a provider's file checks read under.
//!
//! A check that reads files takes a path from its params; the path must
//! not leave the directory the operator gave (`..`, an absolute path, a
//! symlink pointing out), must name a regular file (not a fifo, a device
//! or a socket, which could block a reader forever or never end), and is
//! read only up to a size limit, checked before anything is allocated.
//! The answer then names the file the way Decision Gate's own file
//! providers do: `evidence_ref` `dg+file://<root_id>/<path>` and a
//! `file_path_rooted` anchor (canonical JSON `{"path","root_id","size"?}`).
//!
//! ```no_run
//! use evidence_wire_provider::prelude::*;
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! #[serde(deny_unknown_fields)]
//! struct File {
//!     /// A path under the evidence root.
//!     path: String,
//! }
//!
//! fn bytes(file: File, context: &CheckContext) -> Result<u64, CheckError> {
//!     // Resolved under the root, checked, read within the limit; the
//!     // answer carries the file's evidence_ref and anchor.
//!     Ok(context.root()?.read(&file.path, context)?.len() as u64)
//! }
//!
//! let root = EvidenceRoot::open("evidence")?; // canonicalized once, here
//! let provider = Provider::new("files", "Facts about files.")
//!     .root(root)
//!     .check(Check::new("bytes", "The size of a file.", bytes).anchor_types(["file_path_rooted"]));
//! # Ok::<(), evidence_wire_provider::RootError>(())
//! ```
//!
//! The error codes are the bundled provider's (and `spec/bundled-provider.md`'s):
//! [`PATH_OUTSIDE_ROOT`], [`ROOT_UNAVAILABLE`], [`FILE_NOT_FOUND`],
//! [`FILE_UNREADABLE`], [`NOT_A_FILE`], [`FILE_TOO_LARGE`]; the bundled
//! provider's `file_size` and `json_path` are built on this module.
//!
//! Limits: a file is read only when its metadata says it is at most the
//! root's [`EvidenceRoot::max_file_bytes`] (default
//! [`DEFAULT_MAX_FILE_BYTES`]), and then at most one byte past it (a file
//! that grew meanwhile is refused, not truncated). Files are opened
//! non-blocking and checked again on the open handle, so a path swapped for
//! a fifo between the check and the open is refused, not waited on. The
//! containment check resolves symlinks when the path is resolved; a
//! directory replaced by a symlink between that check and the open is not
//! detected (the operator owns the root; do not give a root that others
//! can write to).

use std::fs::{self, File, Metadata};
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, OnceLock};

use evidence_wire::evidence::EvidenceAnchor;

use crate::check::{CheckContext, CheckError};

/// The path leaves the root: empty, absolute, with `..`, or through a
/// symlink pointing outside.
pub const PATH_OUTSIDE_ROOT: &str = "path_outside_root";
/// The root directory itself cannot be opened.
pub const ROOT_UNAVAILABLE: &str = "root_unavailable";
/// No file at the path under the root.
pub const FILE_NOT_FOUND: &str = "file_not_found";
/// An I/O error opening, stat-ing or reading the file.
pub const FILE_UNREADABLE: &str = "file_unreadable";
/// The path names a directory, a fifo, a device or a socket.
pub const NOT_A_FILE: &str = "not_a_file";
/// The file is larger than the root's size limit.
pub const FILE_TOO_LARGE: &str = "file_too_large";

/// The anchor type of a file under a root (`EvidenceAnchor::file_path_rooted`).
pub const FILE_ANCHOR_TYPE: &str = "file_path_rooted";
/// The root id of a root given none: Decision Gate's and the bundled
/// provider's default.
pub const DEFAULT_ROOT_ID: &str = "evidence-root";
/// The default size limit of a file read under a root: 1 MiB, the
/// bundled provider's `[bundled.json] max_file_bytes` default.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 1024 * 1024;

/// A directory whose files a provider's checks may read, opened once.
///
/// Cheap to clone (clones share it). Give it to the provider
/// ([`crate::Provider::root`]) and every check finds it in its context
/// ([`CheckContext::root`]).
#[derive(Clone, Debug)]
pub struct EvidenceRoot {
    inner: Arc<Inner>,
}

#[derive(Clone, Debug)]
struct Inner {
    /// The path as configured (named in `root_unavailable`).
    configured: PathBuf,
    /// The root id in `dg+file://<root_id>/…` and the anchor.
    id: String,
    /// Most bytes a file may hold to be read.
    max_file_bytes: u64,
    /// The canonical path, once the root could be opened.
    canonical: OnceLock<PathBuf>,
}

/// Why a root cannot be used.
#[derive(Debug)]
#[non_exhaustive]
pub enum RootError {
    /// The directory cannot be opened (it does not exist, no permission).
    Unavailable {
        /// The path as given.
        path: PathBuf,
        /// What the system said.
        error: io::Error,
    },
    /// The path names something that is not a directory.
    NotADirectory {
        /// The path as given.
        path: PathBuf,
    },
    /// A root id that cannot be the host part of `dg+file://<root_id>/<path>`.
    InvalidId(String),
}

impl std::fmt::Display for RootError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RootError::Unavailable { path, error } => write!(
                f,
                "the evidence root {} cannot be opened: {error}",
                path.display()
            ),
            RootError::NotADirectory { path } => write!(
                f,
                "the evidence root {} is not a directory; give the directory the checks read under",
                path.display()
            ),
            RootError::InvalidId(id) => write!(
                f,
                "root id {id:?} must be non-empty and use only letters, digits, '-', '_' and '.' (it is the host part of dg+file://<root_id>/<path>)"
            ),
        }
    }
}

impl std::error::Error for RootError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RootError::Unavailable { error, .. } => Some(error),
            _ => None,
        }
    }
}

impl From<RootError> for CheckError {
    /// `root_unavailable`, saying why.
    fn from(error: RootError) -> Self {
        CheckError::new(ROOT_UNAVAILABLE, error.to_string())
    }
}

impl EvidenceRoot {
    /// Opens the directory `path` now (resolving symlinks to its canonical
    /// path, once): the usual way, so that a missing root is reported when
    /// the provider starts rather than on every query. Root id
    /// [`DEFAULT_ROOT_ID`], size limit [`DEFAULT_MAX_FILE_BYTES`].
    pub fn open(path: impl AsRef<Path>) -> Result<Self, RootError> {
        let root = EvidenceRoot::deferred(path);
        let canonical = root.canonical().map_err(|error| RootError::Unavailable {
            path: root.inner.configured.clone(),
            error,
        })?;
        if !canonical.is_dir() {
            return Err(RootError::NotADirectory {
                path: root.inner.configured.clone(),
            });
        }
        Ok(root)
    }

    /// The root at `path`, opened by the first query that needs it (and
    /// tried again by each query until it can be: a root created after the
    /// provider started is picked up); until then those queries are
    /// answered [`ROOT_UNAVAILABLE`]. What a server configured with a root
    /// that may not exist yet uses (the bundled provider does).
    pub fn deferred(path: impl AsRef<Path>) -> Self {
        EvidenceRoot {
            inner: Arc::new(Inner {
                configured: path.as_ref().to_path_buf(),
                id: DEFAULT_ROOT_ID.to_owned(),
                max_file_bytes: DEFAULT_MAX_FILE_BYTES,
                canonical: OnceLock::new(),
            }),
        }
    }

    /// The same root named `id` in references and anchors
    /// (`dg+file://<id>/<path>`); letters, digits, `-`, `_` and `.`.
    pub fn with_id(mut self, id: impl Into<String>) -> Result<Self, RootError> {
        let id = id.into();
        let valid = !id.is_empty()
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !valid {
            return Err(RootError::InvalidId(id));
        }
        Arc::make_mut(&mut self.inner).id = id;
        Ok(self)
    }

    /// The same root reading files of at most `limit` bytes.
    pub fn with_max_file_bytes(mut self, limit: u64) -> Self {
        Arc::make_mut(&mut self.inner).max_file_bytes = limit;
        self
    }

    /// The root id.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The most bytes a file may hold to be read.
    pub fn max_file_bytes(&self) -> u64 {
        self.inner.max_file_bytes
    }

    /// The directory as it was given.
    pub fn configured_path(&self) -> &Path {
        &self.inner.configured
    }

    /// The canonical directory, once it could be opened.
    pub fn path(&self) -> Option<&Path> {
        self.inner.canonical.get().map(PathBuf::as_path)
    }

    fn canonical(&self) -> io::Result<&Path> {
        if let Some(path) = self.inner.canonical.get() {
            return Ok(path);
        }
        let path = fs::canonicalize(&self.inner.configured)?;
        // Another query may have opened it meanwhile: the same path.
        Ok(self.inner.canonical.get_or_init(|| path))
    }

    /// `relative` (a check's params path) resolved under the root:
    /// refused with [`PATH_OUTSIDE_ROOT`] when it is empty, absolute or
    /// has `..`, or resolves (symlinks followed) outside the root;
    /// [`FILE_NOT_FOUND`] when nothing is there; [`ROOT_UNAVAILABLE`]
    /// when the root cannot be opened. Nothing is opened or read yet.
    pub fn resolve(&self, relative: &str) -> Result<RootedPath, CheckError> {
        let outside = || {
            CheckError::new(
                PATH_OUTSIDE_ROOT,
                format!(
                    "{relative:?} is not inside the evidence root {:?}; give a relative path without `..`",
                    self.inner.id
                ),
            )
        };
        let path = Path::new(relative);
        if relative.is_empty()
            || path
                .components()
                .any(|component| !matches!(component, Component::Normal(_) | Component::CurDir))
        {
            return Err(outside());
        }
        let root = self.canonical().map_err(|error| {
            CheckError::from(RootError::Unavailable {
                path: self.inner.configured.clone(),
                error,
            })
        })?;
        let resolved = match fs::canonicalize(root.join(path)) {
            Ok(resolved) => resolved,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                return Err(CheckError::new(
                    FILE_NOT_FOUND,
                    format!("no file {relative:?} under the evidence root"),
                ));
            }
            Err(error) => {
                return Err(CheckError::new(
                    FILE_UNREADABLE,
                    format!("cannot open {relative:?}: {error}"),
                ));
            }
        };
        if !resolved.starts_with(root) {
            return Err(outside());
        }
        let display = path
            .components()
            .filter_map(|component| match component {
                Component::Normal(part) => Some(part.to_string_lossy().into_owned()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("/");
        Ok(RootedPath {
            root: self.clone(),
            path: resolved,
            requested: relative.to_owned(),
            display,
        })
    }

    /// Reads the regular file at `relative` under the root, at most
    /// [`EvidenceRoot::max_file_bytes`], and records it in `context` as
    /// the answer's `evidence_ref` and `file_path_rooted` anchor (with its
    /// size once known; kept on a later error, as Decision Gate's
    /// `json.path` keeps them).
    pub fn read(&self, relative: &str, context: &CheckContext) -> Result<Vec<u8>, CheckError> {
        let file = self.resolve(relative)?;
        file.record(context, None);
        let size = file.metadata()?.len();
        file.record(context, Some(size));
        file.read()
    }

    /// Opens the regular file at `relative` under the root for reading
    /// (say, to hash a file larger than the read limit as it streams),
    /// recording it in `context` as [`EvidenceRoot::read`] does; the size
    /// limit is not applied.
    pub fn open_file(&self, relative: &str, context: &CheckContext) -> Result<File, CheckError> {
        let file = self.resolve(relative)?;
        file.record(context, None);
        let (handle, metadata) = file.open()?;
        file.record(context, Some(metadata.len()));
        Ok(handle)
    }
}

/// A path resolved under an [`EvidenceRoot`] ([`EvidenceRoot::resolve`]).
#[derive(Clone, Debug)]
pub struct RootedPath {
    root: EvidenceRoot,
    path: PathBuf,
    requested: String,
    display: String,
}

impl RootedPath {
    /// The canonical path on disk.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path under the root with `/` separators (`./a/b.json` is
    /// `a/b.json`): what references and anchors name.
    pub fn relative(&self) -> &str {
        &self.display
    }

    /// The path as the check's params gave it (named in error messages).
    pub fn requested(&self) -> &str {
        &self.requested
    }

    /// `dg+file://<root_id>/<path>`.
    pub fn evidence_ref(&self) -> String {
        format!("dg+file://{}/{}", self.root.id(), self.display)
    }

    /// The `file_path_rooted` anchor: canonical JSON
    /// `{"path","root_id","size"?}`.
    pub fn anchor(&self, size: Option<u64>) -> EvidenceAnchor {
        EvidenceAnchor::file_path_rooted(self.root.id(), &self.display, size)
    }

    /// Records the file in `context`: its [`RootedPath::evidence_ref`] and
    /// [`RootedPath::anchor`] go into the answer.
    pub fn record(&self, context: &CheckContext, size: Option<u64>) {
        context.set_ref(self.evidence_ref());
        context.set_anchor(self.anchor(size));
    }

    /// The metadata of the file (symlinks followed), refused with
    /// [`NOT_A_FILE`] unless it is a regular file, [`FILE_UNREADABLE`]
    /// when it cannot be read. Nothing is opened.
    pub fn metadata(&self) -> Result<Metadata, CheckError> {
        let metadata = fs::metadata(&self.path).map_err(|error| {
            CheckError::new(
                FILE_UNREADABLE,
                format!("cannot stat {:?}: {error}", self.requested),
            )
        })?;
        regular(&metadata, &self.requested)?;
        Ok(metadata)
    }

    /// Opens the file for reading: checked as [`RootedPath::metadata`]
    /// first, opened without blocking (a fifo put in its place meanwhile
    /// does not wait for a writer), and checked again on the handle.
    pub fn open(&self) -> Result<(File, Metadata), CheckError> {
        self.metadata()?;
        self.open_checked()
    }

    fn open_checked(&self) -> Result<(File, Metadata), CheckError> {
        let file = open_nonblocking(&self.path).map_err(|error| {
            CheckError::new(
                FILE_UNREADABLE,
                format!("cannot open {:?}: {error}", self.requested),
            )
        })?;
        let metadata = file.metadata().map_err(|error| {
            CheckError::new(
                FILE_UNREADABLE,
                format!("cannot stat {:?}: {error}", self.requested),
            )
        })?;
        regular(&metadata, &self.requested)?;
        Ok((file, metadata))
    }

    /// Reads the whole file, at most the root's size limit: refused with
    /// [`FILE_TOO_LARGE`] from its metadata before anything is allocated,
    /// and again while reading when it grew.
    pub fn read(&self) -> Result<Vec<u8>, CheckError> {
        let limit = self.root.max_file_bytes();
        let size = self.metadata()?.len();
        if size > limit {
            return Err(self.too_large(limit));
        }
        let (file, _) = self.open_checked()?;
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        // At most one byte past the limit, in case the file grew.
        file.take(limit.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|error| {
                CheckError::new(
                    FILE_UNREADABLE,
                    format!("cannot read {:?}: {error}", self.requested),
                )
            })?;
        if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > limit {
            return Err(self.too_large(limit));
        }
        Ok(bytes)
    }

    fn too_large(&self, limit: u64) -> CheckError {
        CheckError::new(
            FILE_TOO_LARGE,
            format!("{:?} is larger than the {limit}-byte limit", self.requested),
        )
    }
}

/// `not_a_file` unless `metadata` is a regular file's.
fn regular(metadata: &Metadata, requested: &str) -> Result<(), CheckError> {
    if metadata.is_file() {
        return Ok(());
    }
    Err(CheckError::new(
        NOT_A_FILE,
        format!("{requested:?} is not a regular file"),
    ))
}

/// Opens `path` for reading without waiting: a fifo opened for reading
/// would otherwise wait for a writer (the caller checks what it opened).
fn open_nonblocking(path: &Path) -> io::Result<File> {
    let mut options = fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        let nonblock = i32::try_from(rustix::fs::OFlags::NONBLOCK.bits()).unwrap_or(0);
        options.custom_flags(nonblock);
    }
    options.open(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use evidence_wire::evidence::{EvidenceContext, EvidenceQuery, TriggerTime};
    use std::sync::atomic::{AtomicUsize, Ordering};

    use crate::handler::CallContext;

    /// A fresh directory under the system's temporary directory, removed
    /// when dropped.
    struct Dir(PathBuf);

    impl Dir {
        fn new() -> Dir {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let path = std::env::temp_dir().join(format!(
                "ew-root-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::SeqCst)
            ));
            fs::create_dir_all(&path).unwrap();
            Dir(path)
        }

        fn write(&self, name: &str, text: &str) {
            let path = self.0.join(name);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn context() -> CheckContext {
        CheckContext::new(
            EvidenceQuery::new("files", "read"),
            EvidenceContext::adhoc(TriggerTime::UnixMillis(0)),
            CallContext::new(),
        )
    }

    fn code(outcome: Result<impl std::fmt::Debug, CheckError>) -> String {
        outcome.unwrap_err().code().to_owned()
    }

    #[test]
    fn paths_that_leave_the_root_are_refused_with_the_bundled_words() {
        let root_dir = Dir::new();
        let outside = Dir::new();
        outside.write("secret.txt", "s");
        fs::create_dir(root_dir.0.join("evidence")).unwrap();
        let root = EvidenceRoot::open(root_dir.0.join("evidence")).unwrap();
        for path in ["", "../secret.txt", "/etc/passwd", "a/../../b"] {
            let error = root.resolve(path).unwrap_err();
            assert_eq!(error.code(), PATH_OUTSIDE_ROOT, "{path:?}");
            assert_eq!(
                error.to_string(),
                format!(
                    "path_outside_root: {path:?} is not inside the evidence root \"evidence-root\"; give a relative path without `..`"
                )
            );
        }
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(
                outside.0.join("secret.txt"),
                root_dir.0.join("evidence/link"),
            )
            .unwrap();
            assert_eq!(code(root.resolve("link")), PATH_OUTSIDE_ROOT);
        }
        let missing = root.resolve("nothing.json").unwrap_err();
        assert_eq!(
            missing.to_string(),
            "file_not_found: no file \"nothing.json\" under the evidence root"
        );
    }

    #[test]
    fn refs_and_anchors_name_the_file_under_the_root_id() {
        let dir = Dir::new();
        dir.write("sub/report.json", "{}\n");
        let root = EvidenceRoot::open(&dir.0)
            .unwrap()
            .with_id("reports")
            .unwrap();
        let file = root.resolve("./sub/report.json").unwrap();
        assert_eq!(file.relative(), "sub/report.json");
        assert_eq!(file.requested(), "./sub/report.json");
        assert_eq!(file.evidence_ref(), "dg+file://reports/sub/report.json");
        let context = context();
        assert_eq!(root.read("./sub/report.json", &context).unwrap(), b"{}\n");
        let result = context.finish(Ok(1));
        assert_eq!(
            result.evidence_ref.unwrap().uri,
            "dg+file://reports/sub/report.json"
        );
        let anchor = result.evidence_anchor.unwrap();
        assert_eq!(anchor.anchor_type, FILE_ANCHOR_TYPE);
        assert_eq!(
            anchor.anchor_value,
            r#"{"path":"sub/report.json","root_id":"reports","size":3}"#
        );
        assert!(matches!(
            EvidenceRoot::open(&dir.0).unwrap().with_id("no/slash"),
            Err(RootError::InvalidId(_))
        ));
    }

    #[test]
    fn a_file_over_the_limit_is_refused_before_it_is_read() {
        let dir = Dir::new();
        dir.write("big.txt", "0123456789");
        let root = EvidenceRoot::open(&dir.0).unwrap().with_max_file_bytes(9);
        let context = context();
        let error = root.read("big.txt", &context).unwrap_err();
        assert_eq!(
            error.to_string(),
            "file_too_large: \"big.txt\" is larger than the 9-byte limit"
        );
        // The answer still names the file.
        assert!(context.finish::<()>(Err(error)).evidence_ref.is_some());
        let root = root.with_max_file_bytes(10);
        assert_eq!(root.read("big.txt", &context).unwrap().len(), 10);
    }

    #[test]
    fn a_root_opened_later_is_picked_up_and_open_refuses_what_is_not_one() {
        let dir = Dir::new();
        let path = dir.0.join("later");
        let error = EvidenceRoot::open(&path).unwrap_err();
        assert!(matches!(error, RootError::Unavailable { .. }), "{error}");
        let deferred = EvidenceRoot::deferred(&path);
        let refused = deferred.resolve("a.txt").unwrap_err();
        assert_eq!(refused.code(), ROOT_UNAVAILABLE);
        assert!(
            refused.to_string().starts_with(&format!(
                "root_unavailable: the evidence root {} cannot be opened: ",
                path.display()
            )),
            "{refused}"
        );
        fs::create_dir(&path).unwrap();
        fs::write(path.join("a.txt"), "a").unwrap();
        assert_eq!(deferred.resolve("a.txt").unwrap().relative(), "a.txt");
        assert!(deferred.path().is_some());
        dir.write("file", "x");
        assert!(matches!(
            EvidenceRoot::open(dir.0.join("file")),
            Err(RootError::NotADirectory { .. })
        ));
    }

    #[test]
    fn directories_and_sockets_are_not_files() {
        let dir = Dir::new();
        fs::create_dir(dir.0.join("sub")).unwrap();
        let root = EvidenceRoot::open(&dir.0).unwrap();
        let context = context();
        let error = root.read("sub", &context).unwrap_err();
        assert_eq!(
            error.to_string(),
            "not_a_file: \"sub\" is not a regular file"
        );
        #[cfg(unix)]
        {
            let _socket = std::os::unix::net::UnixListener::bind(dir.0.join("sock")).unwrap();
            assert_eq!(code(root.read("sock", &context)), NOT_A_FILE);
        }
    }

    /// A fifo is refused, and opening one (a file swapped for a fifo after
    /// its check) does not wait for a writer.
    #[cfg(unix)]
    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = Dir::new();
        let made = std::process::Command::new("mkfifo")
            .arg(dir.0.join("pipe"))
            .status();
        if !made.is_ok_and(|status| status.success()) {
            eprintln!("skipped: no mkfifo");
            return;
        }
        let root = EvidenceRoot::open(&dir.0).unwrap();
        let file = root.resolve("pipe").unwrap();
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let checked = code(file.read());
            // Past the metadata check, straight to the open.
            let opened = code(file.open_checked());
            let _ = done.send((checked, opened));
        });
        let (checked, opened) = finished
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("opening a fifo must not wait for a writer");
        assert_eq!(
            (checked.as_str(), opened.as_str()),
            (NOT_A_FILE, NOT_A_FILE)
        );
    }
}
