//! Text counted against its limits (CONTRACT §4): `cp949_len` and `check_text` (XMS text,
//! titles) and `rcs_len` (RCS text), as the send checks call them. The text of a JSON body
//! is UTF-8, so other inputs are not text.
#![no_main]

use encoding_rs::EUC_KR;
use kep_messaging::counting::{check_text, cp949_len, rcs_len};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let ascii = text.chars().filter(char::is_ascii).count();
    let others = text.chars().count() - ascii;
    match cp949_len(text) {
        Ok(n) => {
            // One byte for ASCII, two for every other character CP949 has, and the bytes
            // decode back to the text.
            assert_eq!(n, ascii + 2 * others);
            let (bytes, _, _) = EUC_KR.encode(text);
            assert_eq!(bytes.len(), n);
            let (back, had_errors) = EUC_KR.decode_without_bom_handling(&bytes);
            assert!(!had_errors);
            assert_eq!(back, text);
            // RCS counts a text CP949 has as CP949 does.
            assert_eq!(rcs_len(text), n);
        }
        Err(c) => {
            // The first character CP949 lacks, and never ASCII.
            assert!(!c.is_ascii());
            let at = text.find(c).expect("the character is in the text");
            assert!(cp949_len(&text[..at]).is_ok());
            assert_eq!(cp949_len(c.encode_utf8(&mut [0; 4])), Err(c), "{c:?} alone");
            // RCS counts it by its UTF-8 bytes: more than one, so more than ASCII's.
            assert!(rcs_len(text) > ascii);
        }
    }
    // The limit check agrees with the count, at the SMS and LMS limits.
    for max in [90, 2000] {
        let fits = cp949_len(text).is_ok_and(|n| n <= max);
        assert_eq!(check_text("message", text, max).is_ok(), fits, "{max}");
    }
});
