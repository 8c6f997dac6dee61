//! A request head as the fast path reads it: which calls it takes, and the head the
//! instance gets.

use super::*;

/// A request head the fast path takes, as read by [`Call::read`].
pub(super) struct Call<'h> {
    pub(super) endpoint: &'h str,
    /// The target on the instance: the path after the endpoint's name, and the query.
    pub(super) target: (&'h str, Option<&'h str>),
    pub(super) key: Option<&'h [u8]>,
    pub(super) body_len: u64,
    /// The caller sent a length (0 included): the instance gets one too.
    pub(super) declared: bool,
    /// The caller asked for the connection to be closed after this call.
    pub(super) close: bool,
    /// A `HEAD` call: the answer has no body, whatever its head says.
    pub(super) head_only: bool,
}

impl<'h> Call<'h> {
    /// The call, when it is one for the fast path: HTTP/1.1, a plain target, a body of at
    /// most `max_body` bytes of declared length, and nothing for hyper to do first.
    pub(super) fn read(req: &httparse::Request<'_, 'h>, max_body: u64) -> Option<Call<'h>> {
        let (method, target) = (req.method?, req.path?);
        if req.version != Some(1) || method == "CONNECT" || !target.bytes().all(plain) {
            return None;
        }
        let (path, query) = match target.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (target, None),
        };
        let (endpoint, rest) = split_path(path)?;
        let mut call = Call {
            endpoint,
            target: (rest, query),
            key: None,
            body_len: 0,
            declared: false,
            close: false,
            head_only: method == "HEAD",
        };
        for h in req.headers.iter() {
            let name = h.name.as_bytes();
            if name.eq_ignore_ascii_case(b"content-length") {
                let len = length(h.value)?;
                if call.declared && len != call.body_len {
                    return None;
                }
                (call.body_len, call.declared) = (len, true);
            } else if name.eq_ignore_ascii_case(b"authorization") {
                call.key = Some(h.value);
            } else if name.eq_ignore_ascii_case(b"connection") {
                for token in h.value.split(|&b| b == b',') {
                    match token.trim_ascii() {
                        t if t.eq_ignore_ascii_case(b"close") => call.close = true,
                        t if t.eq_ignore_ascii_case(b"keep-alive") => {}
                        // It names headers to drop, or an upgrade: hyper's work.
                        _ => return None,
                    }
                }
            } else if [&b"transfer-encoding"[..], b"upgrade", b"expect"]
                .iter()
                .any(|n| name.eq_ignore_ascii_case(n))
            {
                return None;
            }
        }
        (call.body_len <= max_body).then_some(call)
    }

    /// The request as the instance gets it: origin form, its own `Host`, the caller's
    /// headers less the hop-by-hop ones, the forwarding ones, `Host` and the API key, and
    /// `X-Forwarded-For` the caller's address, `peer` (as [`crate::headers::upstream_headers`]
    /// leaves them), and the body.
    pub(super) fn write_upstream(
        &self,
        req: &httparse::Request<'_, '_>,
        (host, peer): (&[u8], &[u8]),
        body: &[u8],
        out: &mut Vec<u8>,
    ) {
        out.extend_from_slice(req.method.unwrap_or_default().as_bytes());
        out.push(b' ');
        out.extend_from_slice(self.target.0.as_bytes());
        if let Some(query) = self.target.1 {
            out.push(b'?');
            out.extend_from_slice(query.as_bytes());
        }
        out.extend_from_slice(b" HTTP/1.1\r\n");
        header_line(out, b"host", host);
        for h in req.headers.iter() {
            let name = h.name.as_bytes();
            // `TE: trailers` is end to end (gRPC needs it).
            let dropped = DROPPED.iter().any(|d| name.eq_ignore_ascii_case(d))
                || underscored(name)
                || is_forwarding(name)
                || (is_hop_by_hop(name)
                    && !(name.eq_ignore_ascii_case(b"te") && h.value == b"trailers"));
            if !dropped {
                header_line(out, name, h.value);
            }
        }
        header_line(out, b"x-forwarded-for", peer);
        if self.declared || !body.is_empty() {
            header_line(out, b"content-length", body.len().to_string().as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(body);
    }
}

/// The caller's headers the instance does not get beside the hop-by-hop ones: `Host`, the
/// API key, and the length (written anew).
const DROPPED: &[&[u8]] = &[b"host", b"authorization", b"content-length"];

/// A byte a request target may hold as it is (RFC 3986's unreserved, sub-delims, `:@/?%`);
/// a target with any other is left to hyper, which refuses what `http` does not parse.
fn plain(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/?%".contains(&b)
}

/// A `Content-Length` value: digits only.
pub(super) fn length(value: &[u8]) -> Option<u64> {
    let digits = value.trim_ascii();
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(head: &str, max_body: u64) -> Option<(String, Option<String>, u64, bool)> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut headers);
        req.parse(head.as_bytes()).unwrap();
        Call::read(&req, max_body).map(|c| {
            (
                c.endpoint.to_owned(),
                c.target.1.map(str::to_owned),
                c.body_len,
                c.close,
            )
        })
    }

    #[test]
    fn plain_calls_take_the_fast_path_and_the_rest_go_to_hyper() {
        let fast = |h: &str| {
            call(
                &format!("POST /endpoints/e/v1/x?a=1 HTTP/1.1\r\n{h}\r\n"),
                100,
            )
        };
        assert_eq!(
            fast("content-length: 100\r\nconnection: keep-alive, Close\r\n"),
            Some(("e".into(), Some("a=1".into()), 100, true))
        );
        assert!(
            fast("content-length: 101\r\n").is_none(),
            "over the body limit"
        );
        assert!(fast("content-length: 1\r\ncontent-length: 2\r\n").is_none());
        assert!(fast("content-length: +1\r\n").is_none());
        for other in [
            "transfer-encoding: chunked",
            "expect: 100-continue",
            "upgrade: websocket",
            "connection: x-private",
        ] {
            assert!(fast(&format!("{other}\r\n")).is_none(), "{other}");
        }
        assert!(call("GET /endpoints/e HTTP/1.0\r\n\r\n", 100).is_none());
        assert!(call("GET /other/e HTTP/1.1\r\n\r\n", 100).is_none());
        assert!(call("GET /endpoints/e/a\"b HTTP/1.1\r\n\r\n", 100).is_none());
        assert!(call("GET http://h/endpoints/e/ HTTP/1.1\r\n\r\n", 100).is_none());
    }

    #[test]
    fn the_instance_gets_its_own_host_and_length_and_no_key_or_hop_headers() {
        let head = "POST /endpoints/e/v1/x?a=1 HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer k\r\n\
                    Content-Length: 2\r\nConnection: keep-alive\r\nTE: trailers\r\nX-Id: 7\r\n\r\n";
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut headers);
        req.parse(head.as_bytes()).unwrap();
        let c = Call::read(&req, 100).unwrap();
        let mut out = Vec::new();
        c.write_upstream(&req, (b"127.0.0.1:9", b"10.0.0.1"), b"hi", &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "POST /v1/x?a=1 HTTP/1.1\r\nhost: 127.0.0.1:9\r\nTE: trailers\r\nX-Id: 7\r\n\
             x-forwarded-for: 10.0.0.1\r\ncontent-length: 2\r\n\r\nhi"
        );
    }
}
