//! The fast path's parsers as plain functions over bytes, public for the fuzz targets
//! (`fuzz/fuzz_targets/gateway_*.rs`): they run exactly the code a call runs.

use super::*;

/// A request head (and the body after it) as the fast path reads it: `None` when the fast
/// path leaves it to hyper, else the request the instance would get (head and body), for a
/// body limit of `max_body` bytes, from a caller at 192.0.2.1.
pub fn request(bytes: &[u8], max_body: u64) -> Option<Vec<u8>> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let Ok(httparse::Status::Complete(len)) = req.parse(bytes) else {
        return None;
    };
    let call = Call::read(&req, max_body)?;
    let body = bytes.get(len..len + usize::try_from(call.body_len).ok()?)?;
    let mut out = Vec::new();
    call.write_upstream(&req, (b"instance:8080", b"192.0.2.1"), body, &mut out);
    Some(out)
}

/// An instance's answer as the fast path reads it: `Ok(None)` while its head is
/// incomplete, else its framing and the head the caller gets (the answer to a `HEAD` call
/// when `head_only`).
pub fn answer(bytes: &[u8], head_only: bool) -> Result<Option<(String, Vec<u8>)>, String> {
    let mut buf = BytesMut::from(bytes);
    let Some(answer) = Answer::read(&mut buf, head_only).map_err(|e| e.cause)? else {
        return Ok(None);
    };
    let mut out = Vec::new();
    answer.write_head(&buf[..answer.head_len], false, &mut out);
    Ok(Some((format!("{:?}", answer.framing), out)))
}

/// A body that is not a chunked one.
#[derive(Debug, PartialEq, Eq)]
pub struct NotChunked;

/// Where a chunked body fed in `pieces` ends: `Ok(Some(n))` after its first `n` bytes,
/// `Ok(None)` when it goes on past them.
pub fn chunked_end<'a>(
    pieces: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Option<usize>, NotChunked> {
    let mut chunks = Chunks::default();
    let mut seen = 0;
    for piece in pieces {
        if let Some(n) = chunks.feed(piece).map_err(|()| NotChunked)? {
            return Ok(Some(seen + n));
        }
        seen += piece.len();
    }
    Ok(None)
}
