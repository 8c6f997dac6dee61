//! A participant's WebSocket text frame, read by the function the socket reads every frame
//! with (`kep_live::api::parse_message`). Text frames are UTF-8, so other inputs are not
//! frames.
#![no_main]

use kep_live::api::parse_message;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse_message(text) {
        // A message read is the message it says: written out and read again, it is the same.
        Ok(message) => {
            let written = serde_json::to_string(&message).expect("messages serialise");
            let again = parse_message(&written).expect("a written message reads back");
            assert_eq!(
                serde_json::to_value(&again).expect("messages serialise"),
                serde_json::to_value(&message).expect("messages serialise"),
            );
        }
        // A frame that is not a message is a parse, request or params error.
        Err(e) => assert!(matches!(e.code(), -32700 | -32600 | -32602), "{e:?}"),
    }
});
