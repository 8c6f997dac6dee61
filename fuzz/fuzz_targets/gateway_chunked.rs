//! The gateway's fast path following a chunked answer body as it passes
//! (`kep_gateway::parsers::chunked_end`): the input's first byte sets where the body is
//! split into pieces; read whole or in pieces, the body ends at the same byte (or is
//! refused alike), within what was given; never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&step, body)) = data.split_first() else {
        return;
    };
    let whole = kep_gateway::parsers::chunked_end([body]);
    let pieces = kep_gateway::parsers::chunked_end(body.chunks(usize::from(step).max(1)));
    assert_eq!(whole, pieces);
    if let Ok(Some(end)) = whole {
        assert!(end <= body.len());
    }
});
