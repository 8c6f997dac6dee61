//! SMPP PDUs as a carrier's SMSC (or an ESME, for kep's own SMSC) may send them: any bytes
//! are read without a panic, each PDU that comes out took at least its 16-octet header, and
//! a receipt's text parses or is refused.
#![no_main]

use kep_smpp::fuzzing::read_pdus;
use kep_smpp::parse_receipt_text;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (frames, _lost) = read_pdus(data);
    assert!(frames <= data.len() / 16, "{frames} PDUs from {} bytes", data.len());
    let text = String::from_utf8_lossy(data);
    if let Some(r) = parse_receipt_text(&text) {
        assert!(text.contains(&r.message_id));
    }
});
