//! Turning a byte stream into text chunks without splitting multi-byte characters.
//!
//! Bytes that can never be UTF-8 become U+FFFD; an incomplete sequence at the end of a chunk waits for
//! the next chunk (or for [`Utf8Stream::finish`]).

/// Incremental, lossy UTF-8 decoder for one output stream.
#[derive(Debug, Default)]
pub struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    /// Decode `bytes` (after whatever was pending). Returns the text that is complete so far.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        let owned;
        let data: &[u8] = if self.pending.is_empty() {
            bytes
        } else {
            self.pending.extend_from_slice(bytes);
            owned = std::mem::take(&mut self.pending);
            &owned
        };
        let mut out = String::with_capacity(data.len());
        let mut rest = data;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    break;
                }
                Err(e) => {
                    let (valid, tail) = rest.split_at(e.valid_up_to());
                    // `valid` is exactly the prefix that from_utf8 validated.
                    out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match e.error_len() {
                        Some(n) => {
                            out.push('\u{FFFD}');
                            rest = &tail[n..];
                        }
                        None => {
                            // An incomplete character at the end: keep it for the next push.
                            self.pending = tail.to_vec();
                            break;
                        }
                    }
                }
            }
        }
        out
    }

    /// Flush whatever is pending (an incomplete character becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        let s = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_multibyte_is_joined() {
        let mut d = Utf8Stream::default();
        let bytes = "héllo €".as_bytes();
        let mut out = String::new();
        for b in bytes {
            out.push_str(&d.push(&[*b]));
        }
        out.push_str(&d.finish());
        assert_eq!(out, "héllo €");
    }

    #[test]
    fn invalid_bytes_become_replacement() {
        let mut d = Utf8Stream::default();
        assert_eq!(d.push(b"a\xffb\xfe"), "a\u{FFFD}b\u{FFFD}");
        assert_eq!(d.push(b"\xe2\x82"), "");
        assert_eq!(d.finish(), "\u{FFFD}");
    }
}
