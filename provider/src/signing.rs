//! Signing a provider's evidence with the key `evidence-wire keygen` writes.
//!
//! `evidence-wire keygen --out PREFIX` writes `PREFIX`, the 32-byte ed25519
//! secret seed (mode 0600), and `PREFIX.pub`, the 32-byte public key that
//! Decision Gate's `trust = { require_signature = { keys = [...] } }` lists.
//! [`signer_from_file`] reads the seed file (32 raw bytes, or 64 hex digits
//! for a key typed by hand) into an [`EvidenceSigner`];
//! [`Provider::signing_key_file`](crate::Provider::signing_key_file) and
//! [`Service::signing_key_file`](crate::Service::signing_key_file) do the same in one
//! builder call. The server then signs every result that carries a value.
//! On the caller's side, [`read_public_key_file`] reads `PREFIX.pub` and
//! [`key_set_from_files`] makes the key set a test client's
//! `require_signature` takes.
//!
//! The `key_id` written into each signature is what the caller looks the
//! public key up by: for Decision Gate, the public key file's path
//! *exactly as written* in its `keys` list (e.g. `"signing-key.pub"`);
//! evidence-wire's own client also accepts the file stem.
//!
//! Error results are not signed: a signature covers the hash of a value
//! and an error result has none. Under `require_signature` Decision Gate
//! therefore refuses every error result (see the guide
//! `spec/guides/provider-quickstart.md`, "Error results under
//! `require_signature`": why, and what to do instead).
//!
//! Limits: a key file larger than [`MAX_SIGNING_KEY_FILE_BYTES`] is
//! refused before it is read; only regular files are opened (a FIFO would
//! block the reader), and on Unix a seed readable by group or others is
//! refused (a leaked seed lets anyone sign evidence).

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

pub use evidence_wire::evidence::EvidenceSigner;

/// The largest signing key file read (a seed is 32 bytes, or 64 hex
/// digits and a newline).
pub const MAX_SIGNING_KEY_FILE_BYTES: u64 = 4096;

/// Why a signing key could not be read: the file (when there is one) and
/// what is wrong with it, with what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SigningKeyError {
    path: Option<PathBuf>,
    detail: String,
}

impl SigningKeyError {
    fn file(path: &Path, detail: impl Into<String>) -> Self {
        SigningKeyError {
            path: Some(path.to_path_buf()),
            detail: detail.into(),
        }
    }

    /// The key file, when the key was read from one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// What is wrong, and what to do.
    pub fn detail(&self) -> &str {
        &self.detail
    }
}

impl fmt::Display for SigningKeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.path {
            Some(path) => write!(f, "signing key file {}: {}", path.display(), self.detail),
            None => write!(f, "signing key: {}", self.detail),
        }
    }
}

impl std::error::Error for SigningKeyError {}

/// What a signing key is, for the messages.
const SEED_FORMAT: &str = "an ed25519 secret seed is 32 raw bytes or 64 hex digits, as `evidence-wire keygen --out PREFIX` writes it to PREFIX";

/// The 32-byte seed held by the contents of a key file: exactly 32 raw
/// bytes, or 64 hex digits (surrounding whitespace ignored).
pub fn seed_from_bytes(bytes: &[u8]) -> Result<[u8; 32], SigningKeyError> {
    if let Ok(raw) = <[u8; 32]>::try_from(bytes) {
        return Ok(raw);
    }
    let text = std::str::from_utf8(bytes).ok().map(str::trim);
    if let Some(seed) = text.and_then(decode_hex_32) {
        return Ok(seed);
    }
    Err(SigningKeyError {
        path: None,
        detail: format!(
            "{} bytes that are neither 32 raw bytes nor 64 hex digits; {SEED_FORMAT}",
            bytes.len()
        ),
    })
}

/// A signer for the seed in `bytes` (as [`seed_from_bytes`] reads it),
/// signing as `key_id`.
pub fn signer_from_bytes(
    bytes: &[u8],
    key_id: impl Into<String>,
) -> Result<EvidenceSigner, SigningKeyError> {
    let seed = seed_from_bytes(bytes)?;
    Ok(EvidenceSigner::from_seed(key_id, &seed))
}

/// Reads the secret seed in `path` (as `evidence-wire keygen` writes it):
/// a regular file, private on Unix (no group or other permission bits), at
/// most [`MAX_SIGNING_KEY_FILE_BYTES`], holding 32 raw bytes or 64 hex
/// digits.
pub fn read_seed_file(path: &Path) -> Result<[u8; 32], SigningKeyError> {
    let metadata = std::fs::metadata(path).map_err(|error| {
        let hint = if error.kind() == std::io::ErrorKind::NotFound {
            "; check the path (relative paths are resolved against the working directory) or make a key with `evidence-wire keygen --out PREFIX`"
        } else {
            ""
        };
        SigningKeyError::file(path, format!("cannot read it: {error}{hint}"))
    })?;
    if !metadata.is_file() {
        return Err(SigningKeyError::file(
            path,
            format!(
                "is {}, not a regular file; give the seed file `evidence-wire keygen` wrote",
                kind_of(&metadata.file_type())
            ),
        ));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = metadata.permissions().mode();
        if mode & 0o077 != 0 {
            return Err(SigningKeyError::file(
                path,
                format!(
                    "is readable by group or others (mode {:o}); a signing key must be private: run `chmod 600 {}`",
                    mode & 0o777,
                    path.display()
                ),
            ));
        }
    }
    if metadata.len() > MAX_SIGNING_KEY_FILE_BYTES {
        return Err(SigningKeyError::file(
            path,
            format!(
                "holds {} bytes, more than any key file ({MAX_SIGNING_KEY_FILE_BYTES} at most); {SEED_FORMAT}",
                metadata.len()
            ),
        ));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|file| {
            // The file may have been swapped since: check what was opened.
            if !file.metadata()?.is_file() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "not a regular file",
                ));
            }
            file.take(MAX_SIGNING_KEY_FILE_BYTES + 1)
                .read_to_end(&mut bytes)
        })
        .map_err(|error| SigningKeyError::file(path, format!("cannot read it: {error}")))?;
    seed_from_bytes(&bytes).map_err(|error| {
        let public = path.extension().is_some_and(|extension| extension == "pub");
        let detail = if public {
            format!(
                "{}; this looks like the public key (PREFIX.pub): give PREFIX, the secret seed, to the provider and PREFIX.pub to the caller",
                error.detail
            )
        } else {
            error.detail
        };
        SigningKeyError::file(path, detail)
    })
}

/// A signer for the seed in `path` ([`read_seed_file`]), signing as
/// `key_id` (for Decision Gate: the public key's path exactly as its
/// `require_signature` `keys` list writes it).
pub fn signer_from_file(
    path: impl AsRef<Path>,
    key_id: impl Into<String>,
) -> Result<EvidenceSigner, SigningKeyError> {
    let seed = read_seed_file(path.as_ref())?;
    Ok(EvidenceSigner::from_seed(key_id, &seed))
}

/// What a public key file is, for the messages.
const PUBLIC_FORMAT: &str = "an ed25519 public key is 32 raw bytes or 64 hex digits, as `evidence-wire keygen --out PREFIX` writes it to PREFIX.pub";

/// Reads the ed25519 public key in `path`, the `PREFIX.pub` file
/// `evidence-wire keygen --out PREFIX` writes (32 raw bytes, or 64 hex
/// digits): a regular file of at most [`MAX_SIGNING_KEY_FILE_BYTES`].
/// The bytes are what both test harnesses take:
/// `KeySet::insert_bytes(key_id, &key)` for the test client's
/// `require_signature` ([`key_set_from_files`] does that for you) and
/// `CheckProvider::require_signature(key_id, &key)` for the battery. The
/// key id Decision Gate looks the key up by is the path exactly as its
/// `require_signature` `keys` list writes it.
pub fn read_public_key_file(path: impl AsRef<Path>) -> Result<[u8; 32], SigningKeyError> {
    let path = path.as_ref();
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|file| {
            let metadata = file.metadata()?;
            if !metadata.is_file() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("it is {}, not a regular file", kind_of(&metadata.file_type())),
                ));
            }
            file.take(MAX_SIGNING_KEY_FILE_BYTES + 1)
                .read_to_end(&mut bytes)
        })
        .map_err(|error| {
            let hint = if error.kind() == std::io::ErrorKind::NotFound {
                "; check the path or make a key with `evidence-wire keygen --out PREFIX` (the public key is PREFIX.pub)"
            } else {
                ""
            };
            SigningKeyError::file(path, format!("cannot read it: {error}{hint}"))
        })?;
    if let Ok(raw) = <[u8; 32]>::try_from(bytes.as_slice()) {
        return Ok(raw);
    }
    if let Some(key) = std::str::from_utf8(&bytes)
        .ok()
        .map(str::trim)
        .and_then(decode_hex_32)
    {
        return Ok(key);
    }
    Err(SigningKeyError::file(
        path,
        format!(
            "{}{} bytes that are neither 32 raw bytes nor 64 hex digits; {PUBLIC_FORMAT}",
            if bytes.len() as u64 > MAX_SIGNING_KEY_FILE_BYTES {
                "more than "
            } else {
                ""
            },
            bytes.len().min(MAX_SIGNING_KEY_FILE_BYTES as usize)
        ),
    ))
}

/// The key set trusting the public key in each of `paths`
/// ([`read_public_key_file`]) under the path as given, which is the key id
/// a provider signing for Decision Gate writes (`--key-id` = the `.pub`
/// path as Decision Gate's `require_signature` `keys` list writes it):
/// what the test client's `require_signature` takes.
pub fn key_set_from_files<P: AsRef<Path>>(
    paths: impl IntoIterator<Item = P>,
) -> Result<evidence_wire::evidence::KeySet, SigningKeyError> {
    let mut keys = evidence_wire::evidence::KeySet::new();
    for path in paths {
        let path = path.as_ref();
        let key = read_public_key_file(path)?;
        keys.insert_bytes(path.display().to_string(), &key)
            .map_err(|error| {
                SigningKeyError::file(
                    path,
                    format!("not a valid ed25519 public key: {error}; {PUBLIC_FORMAT}"),
                )
            })?;
    }
    Ok(keys)
}

fn kind_of(file_type: &std::fs::FileType) -> &'static str {
    if file_type.is_dir() {
        return "a directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if file_type.is_fifo() {
            return "a FIFO";
        }
        if file_type.is_socket() {
            return "a socket";
        }
        if file_type.is_block_device() || file_type.is_char_device() {
            return "a device";
        }
    }
    "not a regular file"
}

fn decode_hex_32(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (slot, pair) in out.iter_mut().zip(text.as_bytes().chunks_exact(2)) {
        let pair = std::str::from_utf8(pair).ok()?;
        *slot = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    /// wire-facts §1: seed 32 × 0x07.
    const PUBLIC_07: &str = "ea4a6c63e29c520abef5507b132ec5f9954776aebebe7b92421eea691446d22c";

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|byte| format!("{byte:02x}")).collect()
    }

    struct Dir(PathBuf);

    impl Dir {
        fn new(name: &str) -> Dir {
            let dir = std::env::temp_dir().join(format!(
                "ew-signing-{name}-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Dir(dir)
        }

        fn key(&self, name: &str, bytes: &[u8], mode: u32) -> PathBuf {
            let path = self.0.join(name);
            std::fs::write(&path, bytes).unwrap();
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            }
            #[cfg(not(unix))]
            let _ = mode;
            path
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn reads_raw_and_hex_seeds() {
        let dir = Dir::new("formats");
        let raw = dir.key("raw", &[7; 32], 0o600);
        let signer = signer_from_file(&raw, "k").unwrap();
        assert_eq!(hex(&signer.public_key()), PUBLIC_07);
        assert_eq!(signer.key_id(), "k");
        let text = format!("{}\n", hex(&[7; 32]));
        let typed = dir.key("typed", text.as_bytes(), 0o600);
        assert_eq!(
            hex(&signer_from_file(&typed, "k").unwrap().public_key()),
            PUBLIC_07
        );
        assert_eq!(
            hex(&signer_from_bytes(&[7; 32], "k").unwrap().public_key()),
            PUBLIC_07
        );
    }

    #[test]
    fn names_the_file_and_what_is_wrong() {
        let dir = Dir::new("errors");
        let missing = dir.0.join("absent");
        let error = signer_from_file(&missing, "k").unwrap_err();
        assert_eq!(error.path(), Some(missing.as_path()));
        let text = error.to_string();
        assert!(text.contains("absent") && text.contains("keygen"), "{text}");

        let short = dir.key("short", b"not a key", 0o600);
        let text = signer_from_file(&short, "k").unwrap_err().to_string();
        assert!(
            text.contains("short") && text.contains("9 bytes") && text.contains("64 hex digits"),
            "{text}"
        );

        let public = dir.key("signing-key.pub", &[1; 33], 0o600);
        let text = signer_from_file(&public, "k").unwrap_err().to_string();
        assert!(text.contains("public key (PREFIX.pub)"), "{text}");

        let text = signer_from_file(&dir.0, "k").unwrap_err().to_string();
        assert!(text.contains("a directory"), "{text}");

        let big = dir.key("big", &vec![b'0'; 5000], 0o600);
        let text = signer_from_file(&big, "k").unwrap_err().to_string();
        assert!(text.contains("5000 bytes"), "{text}");

        let text = signer_from_bytes(&[1; 31], "k").unwrap_err().to_string();
        assert!(text.starts_with("signing key: 31 bytes"), "{text}");
    }

    #[cfg(unix)]
    #[test]
    fn refuses_a_seed_others_can_read() {
        let dir = Dir::new("mode");
        let open = dir.key("open", &[7; 32], 0o644);
        let text = signer_from_file(&open, "k").unwrap_err().to_string();
        assert!(
            text.contains("mode 644") && text.contains("chmod 600"),
            "{text}"
        );
    }

    /// `PREFIX.pub` as keygen writes it (32 raw bytes) and typed as hex:
    /// the public key of the seed; the key set trusts it under the path as
    /// given; a seed-sized file of junk, a directory and a missing file
    /// are refused naming the file.
    #[test]
    fn reads_the_public_key_file_keygen_writes() {
        let dir = Dir::new("public");
        let public = EvidenceSigner::from_seed("k", &[7; 32]).public_key();
        let raw = dir.key("signing-key.pub", &public, 0o644);
        assert_eq!(hex(&read_public_key_file(&raw).unwrap()), PUBLIC_07);
        let typed = dir.key("typed.pub", format!("{PUBLIC_07}\n").as_bytes(), 0o644);
        assert_eq!(read_public_key_file(&typed).unwrap(), public);
        let keys = key_set_from_files([&raw, &typed]).unwrap();
        assert_eq!(keys.len(), 2);
        assert!(keys.get(&raw.display().to_string()).is_some());
        let junk = dir.key("junk.pub", b"not a key", 0o644);
        let error = read_public_key_file(&junk).unwrap_err();
        assert_eq!(error.path(), Some(junk.as_path()));
        assert!(error.detail().contains("PREFIX.pub"), "{error}");
        assert!(
            read_public_key_file(&dir.0)
                .unwrap_err()
                .detail()
                .contains("not a regular file")
        );
        let missing = read_public_key_file(dir.0.join("none.pub")).unwrap_err();
        assert!(missing.detail().contains("keygen"), "{missing}");
        assert!(key_set_from_files([dir.0.join("none.pub")]).is_err());
    }
}
