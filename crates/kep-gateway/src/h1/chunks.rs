//! Where a chunked body ends (RFC 9112 §7.1), found as it passes.

/// Follows a chunked body (RFC 9112 §7.1) as it passes, to tell where it ends.
#[derive(Default)]
pub(super) struct Chunks {
    state: ChunkState,
    /// The line being read (a chunk size, the end of a chunk's data, a trailer).
    line: Vec<u8>,
}

#[derive(Default, Clone, Copy)]
enum ChunkState {
    #[default]
    Size,
    Data(u64),
    DataEnd,
    Trailers,
}

/// A chunk-size line or a trailer may not be longer than this.
const MAX_CHUNK_LINE: usize = 8 * 1024;

impl Chunks {
    /// Takes the next bytes of the body: `Some(n)` when it ends after the first `n`, `None`
    /// when it goes on past them.
    pub(super) fn feed(&mut self, bytes: &[u8]) -> Result<Option<usize>, ()> {
        let mut at = 0;
        while at < bytes.len() {
            if let ChunkState::Data(left) = self.state {
                let n = left.min((bytes.len() - at) as u64);
                at += n as usize;
                self.state = match left - n {
                    0 => ChunkState::DataEnd,
                    left => ChunkState::Data(left),
                };
                continue;
            }
            let Some(nl) = bytes[at..].iter().position(|&b| b == b'\n') else {
                self.line.extend_from_slice(&bytes[at..]);
                if self.line.len() > MAX_CHUNK_LINE {
                    return Err(());
                }
                return Ok(None);
            };
            self.line.extend_from_slice(&bytes[at..at + nl]);
            at += nl + 1;
            let line = self.line.strip_suffix(b"\r").unwrap_or(&self.line);
            self.state = match self.state {
                ChunkState::Size => {
                    let digits = line.split(|&b| b == b';').next().unwrap_or_default();
                    let digits = std::str::from_utf8(digits.trim_ascii()).map_err(|_| ())?;
                    match u64::from_str_radix(digits, 16).map_err(|_| ())? {
                        0 => ChunkState::Trailers,
                        size => ChunkState::Data(size),
                    }
                }
                ChunkState::DataEnd if line.is_empty() => ChunkState::Size,
                ChunkState::DataEnd => return Err(()),
                ChunkState::Trailers if line.is_empty() => return Ok(Some(at)),
                ChunkState::Trailers => ChunkState::Trailers,
                ChunkState::Data(_) => unreachable!("data is skipped above"),
            };
            self.line.clear();
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunked_body_ends_after_its_last_chunk_and_trailers_in_any_split() {
        let body =
            b"5;ext=1\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nx-t: 1\r\n\r\nEXTRA";
        let end = body.len() - "EXTRA".len();
        for split in 0..body.len() {
            let mut chunks = Chunks::default();
            let first = chunks.feed(&body[..split]).unwrap();
            let ended = match first {
                Some(n) => n,
                None => split + chunks.feed(&body[split..]).unwrap().unwrap(),
            };
            assert_eq!(ended, end, "split at {split}");
        }
        for bad in [&b"zz\r\n"[..], b"1\r\nab\r\n", b"1\r\naXX\r\n"] {
            assert!(Chunks::default().feed(bad).is_err(), "{bad:?}");
        }
        assert!(Chunks::default().feed(&[b'1'; MAX_CHUNK_LINE + 1]).is_err());
    }
}
