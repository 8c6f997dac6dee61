//! The gateway's fast path reading a caller's request (`kep_gateway::parsers::request`):
//! whatever it takes, the instance gets one well-formed HTTP/1.1 request, framed by one
//! length that matches its body, without the caller's key, hop-by-hop, underscored or
//! forwarding headers, with one `X-Forwarded-For`, the caller's address; never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(out) = kep_gateway::parsers::request(data, 64 * 1024) else {
        return;
    };
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut req = httparse::Request::new(&mut headers);
    let Ok(httparse::Status::Complete(len)) = req.parse(&out) else {
        panic!("the instance gets a head that does not parse: {out:?}");
    };
    assert_eq!(req.version, Some(1));
    let mut lengths = Vec::new();
    let mut forwarded_for = Vec::new();
    for h in req.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        assert!(!name.contains('_'), "{name}");
        assert!(
            ![
                "authorization",
                "transfer-encoding",
                "connection",
                "te",
                "upgrade"
            ]
            .contains(&name.as_str())
                || (name == "te" && h.value == b"trailers"),
            "{name} reaches the instance"
        );
        assert!(
            !(name == "forwarded" || name == "x-real-ip" || name.starts_with("x-forwarded-"))
                || name == "x-forwarded-for",
            "{name} reaches the instance"
        );
        if name == "x-forwarded-for" {
            forwarded_for.push(h.value);
        }
        if name == "content-length" {
            lengths.push(
                std::str::from_utf8(h.value)
                    .unwrap()
                    .parse::<usize>()
                    .unwrap(),
            );
        }
    }
    let body = out.len() - len;
    assert_eq!(forwarded_for, [b"192.0.2.1"]);
    assert!(lengths.len() <= 1, "{lengths:?}");
    assert_eq!(lengths.first().copied().unwrap_or(0), body);
});
