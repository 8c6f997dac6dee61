//! SMPP 3.4 for kep: the ESME session that hands messages to a carrier's SMSC
//! ([`esme`]), delivery receipts ([`receipt`]), text encoding and splitting ([`text`]), and
//! a small SMSC for tests and benchmarks ([`smsc`]). PDUs are encoded and decoded by
//! `rusmpp`.

pub mod esme;
pub mod receipt;
pub mod smsc;
pub mod text;
mod wire;

pub use esme::{BindMode, Esme, EsmeConfig, EsmeStats, LongText, SessionState, SubmitError};
pub use receipt::{DeliveryReceipt, MessageState, parse_receipt, parse_receipt_text};
pub use smsc::{ReceivedSubmit, Smsc, SmscBehaviour, TakenSubmit};

pub use text::DataCoding;
pub use wire::status_name;

/// What the parser fuzz target drives (`fuzz/fuzz_targets/smpp_pdu.rs`): reading PDUs off
/// the wire, as both ends do.
pub mod fuzzing {
    use tokio_util::bytes::BytesMut;
    use tokio_util::codec::Decoder as _;

    /// Reads `bytes` as a stream of PDUs: how many came out (decoded, or cut out whole and
    /// undecodable), and whether the stream was lost (a command_length no PDU can have).
    pub fn read_pdus(bytes: &[u8]) -> (usize, bool) {
        let mut codec = crate::wire::Codec::default();
        let mut src = BytesMut::from(bytes);
        let mut frames = 0;
        loop {
            match codec.decode(&mut src) {
                Ok(Some(_)) => frames += 1,
                Ok(None) => return (frames, false),
                Err(_) => return (frames, true),
            }
        }
    }
}
