//! An instance's answer head: its framing (RFC 9112 §6.3), and the head the caller gets.

use super::*;

pub(super) fn status_line(out: &mut Vec<u8>, code: u16, reason: Option<&str>) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(code.to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(reason.unwrap_or_default().as_bytes());
    out.extend_from_slice(b"\r\n");
}

pub(super) fn header_line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// `date`, which hyper's server adds to an answer that has none.
pub(super) fn date_line(out: &mut Vec<u8>) {
    let now = httpdate::fmt_http_date(std::time::SystemTime::now());
    header_line(out, b"date", now.as_bytes());
}

/// How an answer's body is delimited (RFC 9112 §6.3).
#[derive(Debug, PartialEq)]
pub(super) enum Framing {
    Empty,
    Length(u64),
    Chunked,
    /// The instance closes the connection at its end.
    UntilClose,
}

/// An instance's answer head, at the front of the instance buffer.
#[derive(Debug)]
pub(super) struct Answer {
    pub(super) head_len: usize,
    pub(super) status: StatusCode,
    pub(super) framing: Framing,
    /// The instance keeps the connection open after it.
    pub(super) reusable: bool,
    /// It named a transfer coding.
    pub(super) coded: bool,
}

impl Answer {
    /// Reads the answer head at the front of `buf`: `None` while it is incomplete; an error
    /// for one that does not parse or frame, or an upgrade nobody asked for. Interim (1xx)
    /// answers are dropped from `buf`.
    pub(super) fn read(buf: &mut BytesMut, head_only: bool) -> Result<Option<Answer>, SendError> {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut res = httparse::Response::new(&mut headers);
            let head_len = match res.parse(buf) {
                Ok(httparse::Status::Complete(len)) => len,
                Ok(httparse::Status::Partial) if buf.len() < MAX_ANSWER_HEAD => return Ok(None),
                Ok(httparse::Status::Partial) => return Err(broken("an answer head over 64 KiB")),
                Err(e) => return Err(broken(&format!("an answer that does not parse: {e}"))),
            };
            let code = res.code.unwrap_or_default();
            if code == 101 {
                return Err(broken("an upgrade nobody asked for"));
            }
            if (100..200).contains(&code) {
                buf.advance(head_len);
                continue;
            }
            let status = StatusCode::from_u16(code).map_err(|_| broken("a status out of range"))?;
            let mut reusable = res.version == Some(1);
            let (mut length, mut chunked, mut coded) = (None, false, false);
            for h in res.headers.iter() {
                let name = h.name.as_bytes();
                if name.eq_ignore_ascii_case(b"content-length") {
                    let len = length_of(h.value)?;
                    if length.is_some_and(|l| l != len) {
                        return Err(broken("two different lengths"));
                    }
                    length = Some(len);
                } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
                    coded = true;
                    chunked = h
                        .value
                        .rsplit(|&b| b == b',')
                        .next()
                        .is_some_and(|last| last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
                } else if name.eq_ignore_ascii_case(b"connection") {
                    let tokens = h.value.split(|&b| b == b',').map(<[u8]>::trim_ascii);
                    if tokens.clone().any(|t| t.eq_ignore_ascii_case(b"close")) {
                        reusable = false;
                    }
                }
            }
            let framing = if head_only || code == 204 || code == 304 {
                Framing::Empty
            } else if coded && chunked {
                Framing::Chunked
            } else if coded {
                Framing::UntilClose
            } else {
                match length {
                    Some(0) => Framing::Empty,
                    Some(len) => Framing::Length(len),
                    None => Framing::UntilClose,
                }
            };
            // Both a transfer coding and a length: the coding frames it (RFC 9112 §6.3), the
            // length is not passed on, and a connection that sent something so ambiguous is
            // not used again.
            if coded && length.is_some() {
                reusable = false;
            }
            return Ok(Some(Answer {
                head_len,
                status,
                framing,
                reusable,
                coded,
            }));
        }
    }

    /// The head as the caller gets it: HTTP/1.1, the instance's headers less the hop-by-hop
    /// ones (`Transfer-Encoding` stays with a body passed on in its chunks), a `date` when
    /// there is none, and `connection: close` when the connection ends after it.
    pub(super) fn write_head(&self, raw: &[u8], close: bool, out: &mut Vec<u8>) {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut res = httparse::Response::new(&mut headers);
        // Parsed before, by `read`: it parses the same again.
        let _ = res.parse(raw);
        status_line(out, self.status.as_u16(), res.reason);
        let mut dated = false;
        for h in res.headers.iter() {
            let name = h.name.as_bytes();
            let chunks =
                name.eq_ignore_ascii_case(b"transfer-encoding") && self.framing == Framing::Chunked;
            let dropped = (!chunks && is_hop_by_hop(name))
                || (self.coded && name.eq_ignore_ascii_case(b"content-length"));
            dated |= name.eq_ignore_ascii_case(b"date");
            if !dropped {
                header_line(out, name, h.value);
            }
        }
        if !dated {
            date_line(out);
        }
        if close || self.closes_caller() {
            header_line(out, b"connection", b"close");
        }
        out.extend_from_slice(b"\r\n");
    }

    /// The caller's connection ends with the body: nothing else delimits it.
    pub(super) fn closes_caller(&self) -> bool {
        self.framing == Framing::UntilClose
    }
}

fn length_of(value: &[u8]) -> Result<u64, SendError> {
    length(value).ok_or_else(|| broken("a length that is not a number"))
}

fn broken(what: &str) -> SendError {
    SendError {
        connect: false,
        cause: format!("the instance sent {what}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(raw: &str, head_only: bool) -> Result<Option<Answer>, SendError> {
        Answer::read(&mut BytesMut::from(raw), head_only)
    }

    #[test]
    fn answers_are_framed_as_rfc_9112_says() {
        let framing = |raw: &str| answer(raw, false).unwrap().unwrap().framing;
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n"),
            Framing::Length(5)
        );
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
            Framing::Empty
        );
        assert_eq!(framing("HTTP/1.1 204 No Content\r\n\r\n"), Framing::Empty);
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n"),
            Framing::Chunked
        );
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n"),
            Framing::UntilClose
        );
        assert_eq!(framing("HTTP/1.0 200 OK\r\n\r\n"), Framing::UntilClose);
        let head = answer("HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n", true)
            .unwrap()
            .unwrap();
        assert_eq!(head.framing, Framing::Empty);
        // An interim answer is skipped.
        let a = answer(
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\ncontent-length: 1\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!(a.status, 201);
        assert!(a.reusable);
        let a = answer(
            "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 1\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert!(!a.reusable);
        assert!(
            answer("HTTP/1.1 200 OK\r\ncontent-le", false)
                .unwrap()
                .is_none()
        );
        for bad in [
            "HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n",
            "HTTP/1.1 101 Switching Protocols\r\n\r\n",
            "NOT HTTP\r\n\r\n",
        ] {
            assert!(answer(bad, false).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_caller_gets_the_head_without_hop_headers_and_with_a_date() {
        let raw = "HTTP/1.0 200 Fine\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\nX-A: 1\r\n\r\n";
        let a = answer(raw, false).unwrap().unwrap();
        let mut out = Vec::new();
        a.write_head(raw.as_bytes(), false, &mut out);
        let head = String::from_utf8(out).unwrap();
        assert!(
            head.starts_with("HTTP/1.1 200 Fine\r\nX-A: 1\r\ndate: "),
            "{head}"
        );
        assert!(
            head.ends_with("\r\nconnection: close\r\n\r\n"),
            "until close: {head}"
        );
        let raw = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nDate: x\r\n\r\n";
        let a = answer(raw, false).unwrap().unwrap();
        let mut out = Vec::new();
        a.write_head(raw.as_bytes(), false, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nDate: x\r\n\r\n"
        );
    }
}
