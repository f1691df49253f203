//! A project's secrets (issue #19 part 3): values the egress relay adds to a sandbox's requests
//! (`network.inject`) and that never enter the sandbox. Write-only through the API: set, list
//! (names and times), delete — no call returns a value.
//!
//! At rest each value is sealed with AES-256-GCM (`ring`) under a key of the data dir's own
//! (`<data-dir>/secrets.key`, 32 random bytes, root's, mode 0600, made at the first use), the
//! project and name as associated data (a sealed value copied to another row does not open). So
//! a copy of the store alone (a backup, a leaked `lizard.db`) holds no value; the key file and
//! the store together do, as does the server's memory while a sandbox uses them.
//!
//! Not here: where values are substituted (`crate::egress`), who may call (the API).

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use std::path::Path;

/// Longest secret value (a header value: tokens, keys, not files).
pub const MAX_VALUE: usize = 8 * 1024;
/// Most secrets per project.
pub const MAX_PER_PROJECT: usize = 256;

/// Why a secret operation failed.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("secret name {0:?}: 1-64 letters, digits, '_' or '-'")]
    BadName(String),
    #[error("a secret value must be 1-{MAX_VALUE} bytes of visible ASCII or spaces (it goes into an HTTP header)")]
    BadValue,
    #[error("the secrets key {path}: {source}")]
    Key {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("sealing or opening a secret failed (wrong key file?)")]
    Crypto,
}

/// Whether `name` is a valid secret name.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Whether `value` can be sent in an HTTP header: visible ASCII and spaces, no CR, LF or NUL
/// (a header injection into the upstream request otherwise).
pub fn valid_value(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= MAX_VALUE
        && value.bytes().all(|b| b == b' ' || b.is_ascii_graphic())
}

/// The data dir's sealing key.
pub struct SecretBox {
    key: LessSafeKey,
}

impl std::fmt::Debug for SecretBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretBox(<key>)")
    }
}

impl SecretBox {
    /// Open (or make, 0600, exclusively) the key file `path`.
    pub fn open(path: &Path) -> Result<SecretBox, SecretError> {
        use std::io::{Read, Write};
        use std::os::unix::fs::OpenOptionsExt;
        let err = |source| SecretError::Key {
            path: path.display().to_string(),
            source,
        };
        let mut bytes = [0u8; 32];
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
        {
            Ok(mut f) => {
                getrandom::fill(&mut bytes)
                    .map_err(|e| err(std::io::Error::other(e.to_string())))?;
                f.write_all(&bytes)
                    .and_then(|()| f.sync_all())
                    .map_err(err)?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                // The data dir is root's alone; a link in the key's place is still refused.
                let meta = std::fs::symlink_metadata(path).map_err(err)?;
                if !meta.file_type().is_file() {
                    return Err(err(std::io::Error::other("not a regular file")));
                }
                let mut f = std::fs::File::open(path).map_err(err)?;
                let mut got = Vec::new();
                Read::by_ref(&mut f)
                    .take(33)
                    .read_to_end(&mut got)
                    .map_err(err)?;
                if got.len() != 32 {
                    return Err(err(std::io::Error::other("not a 32-byte key")));
                }
                bytes.copy_from_slice(&got);
            }
            Err(e) => return Err(err(e)),
        }
        let key = UnboundKey::new(&AES_256_GCM, &bytes).map_err(|_| SecretError::Crypto)?;
        Ok(SecretBox {
            key: LessSafeKey::new(key),
        })
    }

    /// `nonce || ciphertext+tag` of `value`, bound to `project/name`.
    pub fn seal(&self, project: &str, name: &str, value: &str) -> Result<Vec<u8>, SecretError> {
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce).map_err(|_| SecretError::Crypto)?;
        let mut data = value.as_bytes().to_vec();
        let aad = format!("{project}/{name}");
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad.as_bytes()),
                &mut data,
            )
            .map_err(|_| SecretError::Crypto)?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&data);
        Ok(out)
    }

    /// The value sealed by [`SecretBox::seal`] for `project/name`.
    pub fn open_value(
        &self,
        project: &str,
        name: &str,
        sealed: &[u8],
    ) -> Result<String, SecretError> {
        if sealed.len() < NONCE_LEN {
            return Err(SecretError::Crypto);
        }
        let (nonce, rest) = sealed.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SecretError::Crypto)?;
        let mut data = rest.to_vec();
        let aad = format!("{project}/{name}");
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(aad.as_bytes()), &mut data)
            .map_err(|_| SecretError::Crypto)?;
        String::from_utf8(plain.to_vec()).map_err(|_| SecretError::Crypto)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_stay_bound_to_their_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secrets.key");
        let b = SecretBox::open(&path).unwrap();
        let sealed = b.seal("p", "token", "s3cret value").unwrap();
        assert!(!sealed.windows(6).any(|w| w == b"s3cret"));
        assert_eq!(b.open_value("p", "token", &sealed).unwrap(), "s3cret value");
        // Another row's name or project does not open it.
        assert!(b.open_value("p", "other", &sealed).is_err());
        assert!(b.open_value("q", "token", &sealed).is_err());
        // The key file is kept: a second open reads the same key.
        let again = SecretBox::open(&path).unwrap();
        assert_eq!(
            again.open_value("p", "token", &sealed).unwrap(),
            "s3cret value"
        );
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(format!("{b:?}"), "SecretBox(<key>)");
        // A link in its place is refused.
        let link = dir.path().join("link.key");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(SecretBox::open(&link).is_err());
    }

    #[test]
    fn names_and_values_are_checked() {
        assert!(valid_name("openai_key-2"));
        for bad in ["", "a b", "a/b", "ä", &"x".repeat(65)] {
            assert!(!valid_name(bad), "{bad:?}");
        }
        assert!(valid_value("Bearer abc.def"));
        for bad in [
            "",
            "a\r\nX-Evil: 1",
            "a\0",
            "tab\there",
            &"x".repeat(MAX_VALUE + 1),
        ] {
            assert!(!valid_value(bad), "{bad:?}");
        }
    }
}
