//! A failed step of a sandbox's set-up ([`SetupError`]: which step, on what, the errno), as the
//! mount table and the launcher's child return it, and as the child reports it to the launcher on
//! the report pipe ([`SetupError::encode`], [`SetupError::decode`]). Below both `child` and
//! `rootfs`, which use it.

use std::fmt::Display;
use std::io;

/// The first byte of an error report.
pub(crate) const ERROR_TAG: u8 = b'E';

/// A failed setup step: which one, on what, and the errno.
#[derive(Debug, thiserror::Error)]
#[error("{step} ({detail})")]
pub(crate) struct SetupError {
    pub step: String,
    pub detail: String,
    #[source]
    pub source: io::Error,
}

impl SetupError {
    pub(crate) fn new(step: &str, detail: &dyn Display, source: io::Error) -> SetupError {
        SetupError {
            step: step.to_string(),
            detail: detail.to_string(),
            source,
        }
    }

    /// `E`, errno (4 bytes LE), step, NUL, detail: one write, so one atomic pipe message (details
    /// are cut to stay under PIPE_BUF).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let errno = self.source.raw_os_error().unwrap_or(libc::EIO);
        let mut out = vec![ERROR_TAG];
        out.extend_from_slice(&errno.to_le_bytes());
        out.extend_from_slice(self.step.as_bytes());
        out.push(0);
        let detail = self.detail.as_bytes();
        out.extend_from_slice(&detail[..detail.len().min(3000)]);
        out
    }

    /// Parse a report (without its tag byte).
    pub(crate) fn decode(bytes: &[u8]) -> SetupError {
        let errno = bytes
            .get(..4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .unwrap_or(libc::EIO);
        let rest = bytes.get(4..).unwrap_or_default();
        let (step, detail) = match rest.iter().position(|b| *b == 0) {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, &[][..]),
        };
        SetupError {
            step: String::from_utf8_lossy(step).into_owned(),
            detail: String::from_utf8_lossy(detail).into_owned(),
            source: io::Error::from_raw_os_error(errno),
        }
    }
}

/// `.step("what", detail)`: turn an errno-carrying error into a [`SetupError`].
pub(crate) trait Step<T> {
    fn step(self, step: &str, detail: impl Display) -> Result<T, SetupError>;
}

impl<T> Step<T> for Result<T, nix::Error> {
    fn step(self, step: &str, detail: impl Display) -> Result<T, SetupError> {
        self.map_err(|e| SetupError::new(step, &detail, e.into()))
    }
}

impl<T> Step<T> for Result<T, io::Error> {
    fn step(self, step: &str, detail: impl Display) -> Result<T, SetupError> {
        self.map_err(|e| SetupError::new(step, &detail, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_round_trip() {
        let e = SetupError::new(
            "mount overlay",
            &"lowerdir=/a",
            io::Error::from_raw_os_error(libc::ENOENT),
        );
        let bytes = e.encode();
        assert_eq!(bytes[0], ERROR_TAG);
        let back = SetupError::decode(&bytes[1..]);
        assert_eq!(back.step, "mount overlay");
        assert_eq!(back.detail, "lowerdir=/a");
        assert_eq!(back.source.raw_os_error(), Some(libc::ENOENT));
    }
}
