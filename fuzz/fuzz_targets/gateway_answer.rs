//! The gateway's fast path reading an instance's answer head
//! (`kep_gateway::parsers::answer`); the input's first byte says whether the call was a
//! `HEAD`. Whatever it passes on parses as an HTTP/1.1 answer head that is framed once: no
//! length beside a transfer coding, no hop-by-hop header but the coding of a chunked body;
//! never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let Ok(Some((framing, head))) = kep_gateway::parsers::answer(rest, first & 1 == 1) else {
        return;
    };
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut res = httparse::Response::new(&mut headers);
    let Ok(httparse::Status::Complete(len)) = res.parse(&head) else {
        panic!("the caller gets a head that does not parse: {head:?}");
    };
    assert_eq!(len, head.len(), "the head is all there is");
    let names: Vec<String> = res
        .headers
        .iter()
        .map(|h| h.name.to_ascii_lowercase())
        .collect();
    let coded = names.iter().any(|n| n == "transfer-encoding");
    assert!(
        !(coded && names.iter().any(|n| n == "content-length")),
        "{names:?}"
    );
    assert!(!coded || framing == "Chunked", "{framing}: {names:?}");
    for hop in ["keep-alive", "te", "trailer", "upgrade"] {
        assert!(!names.iter().any(|n| n == hop), "{hop} in {names:?}");
    }
    assert!(names.iter().any(|n| n == "date"), "{names:?}");
});
