//! What both ends share over rusmpp: the codec, status codes and their names, addresses.

use rusmpp::{
    Command, CommandId, CommandStatus, Pdu,
    tokio_codec::{CommandCodec, EncodeError},
    types::{AnyOctetString, COctetString},
    values::{Npi, Ton},
};
use tokio_util::{
    bytes::BytesMut,
    codec::{Decoder, Encoder},
};

/// The longest PDU either end reads: a message_payload may carry far more than the 8 KiB
/// rusmpp reads by default.
const MAX_PDU: usize = 70_000;

pub(crate) const ESME_ROK: u32 = 0x00;
pub(crate) const ESME_RINVCMDID: u32 = 0x03;
pub(crate) const ESME_RINVBNDSTS: u32 = 0x04;
pub(crate) const ESME_RSYSERR: u32 = 0x08;
pub(crate) const ESME_RINVPASWD: u32 = 0x0E;
pub(crate) const ESME_RMSGQFUL: u32 = 0x14;
pub(crate) const ESME_RTHROTTLED: u32 = 0x58;
/// A deliver_sm the ESME will never be able to take: the SMSC should not resend it.
pub(crate) const ESME_RX_P_APPN: u32 = 0x65;

/// The SMPP 3.4 interface version a bind names.
pub(crate) const INTERFACE_VERSION: u8 = 0x34;

/// One PDU read off the wire.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "nearly every frame is a Pdu: boxing it would allocate for each"
)]
pub(crate) enum Frame {
    Pdu(Command),
    /// A PDU whose header reads but whose body rusmpp refuses (a non-ASCII address, a
    /// field past its length...): its header, to answer it, and why.
    Undecodable {
        id: CommandId,
        status: u32,
        sequence: u32,
        error: String,
    },
}

/// rusmpp's codec, one whole PDU at a time. rusmpp decodes straight from the read buffer,
/// so a body it refuses leaves the stream out of step and ends it; cut out first, such a
/// PDU is only itself lost, and can be answered.
#[derive(Debug)]
pub(crate) struct Codec {
    inner: CommandCodec,
}

impl Default for Codec {
    fn default() -> Self {
        Codec {
            inner: CommandCodec::new().with_max_length(MAX_PDU),
        }
    }
}

impl Decoder for Codec {
    type Item = Frame;
    type Error = std::io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, std::io::Error> {
        const HEADER: usize = 16;
        let Some(header) = src.get(..HEADER) else {
            return Ok(None);
        };
        let word = |at: usize| {
            u32::from_be_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
        };
        let (length, id, status, sequence) = (word(0), word(4), word(8), word(12));
        let length = usize::try_from(length).unwrap_or(usize::MAX);
        if !(HEADER..=MAX_PDU).contains(&length) {
            // No telling where the next PDU starts: the connection is lost.
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("a command_length of {length}"),
            ));
        }
        if src.len() < length {
            src.reserve(length - src.len());
            return Ok(None);
        }
        let mut pdu = src.split_to(length);
        let undecodable = |error: String| Frame::Undecodable {
            id: CommandId::from(id),
            status,
            sequence,
            error,
        };
        match self.inner.decode(&mut pdu) {
            Ok(Some(command)) => Ok(Some(Frame::Pdu(command))),
            Ok(None) => Ok(Some(undecodable("a truncated body".into()))),
            Err(e) => {
                *self = Codec::default();
                Ok(Some(undecodable(e.to_string())))
            }
        }
    }
}

impl Encoder<Command> for Codec {
    type Error = std::io::Error;

    fn encode(&mut self, command: Command, dst: &mut BytesMut) -> Result<(), std::io::Error> {
        self.inner.encode(&command, dst).map_err(|e| match e {
            EncodeError::Io(e) => e,
            other => std::io::Error::other(other.to_string()),
        })
    }
}

/// The SMPP name of a command_status (`ESME_RTHROTTLED`), or `ESME_0x…` for one rusmpp
/// does not know.
pub fn status_name(status: u32) -> String {
    match CommandStatus::from(status) {
        CommandStatus::Other(_) => format!("ESME_0x{status:08x}"),
        known => {
            // rusmpp's variants are the SMPP names in camel case: EsmeRthrottled.
            let name = format!("{known:?}");
            match name.strip_prefix("Esme") {
                Some(rest) => format!("ESME_{}", rest.to_ascii_uppercase()),
                None => name.to_ascii_uppercase(),
            }
        }
    }
}

/// A C-octet string field from text, or why it cannot be one (too long, not ASCII).
pub(crate) fn c_string<const MIN: usize, const MAX: usize>(
    value: &str,
    what: &str,
) -> Result<COctetString<MIN, MAX>, String> {
    COctetString::from_string(value.to_owned()).map_err(|_| {
        format!(
            "the {what} {value:?} is not an SMPP field of up to {} ASCII characters",
            MAX - 1
        )
    })
}

/// The TON and NPI of an address, and the address as sent:
/// - `+` then digits: international E.164 (TON 1, NPI 1), the `+` dropped;
/// - digits with a leading `0`: a number in national format as dialled (TON 0, NPI 1);
/// - other digits: international E.164 (TON 1, NPI 1);
/// - anything else: alphanumeric (TON 5, NPI 0);
/// - empty: unknown (TON 0, NPI 0).
pub(crate) fn address(addr: &str) -> (Ton, Npi, &str) {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if addr.is_empty() {
        (Ton::Unknown, Npi::Unknown, addr)
    } else if let Some(rest) = addr.strip_prefix('+').filter(|rest| digits(rest)) {
        (Ton::International, Npi::Isdn, rest)
    } else if digits(addr) && addr.starts_with('0') {
        (Ton::Unknown, Npi::Isdn, addr)
    } else if digits(addr) {
        (Ton::International, Npi::Isdn, addr)
    } else {
        (Ton::Alphanumeric, Npi::Unknown, addr)
    }
}

/// A response without a body: the only form SMPP allows for an error response, and the
/// form of the empty ones (generic_nack, unbind_resp...).
pub(crate) fn bodiless(id: CommandId, status: u32, sequence_number: u32) -> Command {
    Command::new(
        CommandStatus::from(status),
        sequence_number,
        Pdu::Other {
            command_id: id,
            body: AnyOctetString::empty(),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_names_are_the_smpp_ones() {
        assert_eq!(status_name(0x58), "ESME_RTHROTTLED");
        assert_eq!(status_name(0x14), "ESME_RMSGQFUL");
        assert_eq!(status_name(0x0E), "ESME_RINVPASWD");
        assert_eq!(status_name(0), "ESME_ROK");
        assert_eq!(status_name(0x0400_0001), "ESME_0x04000001");
    }

    #[test]
    fn addresses() {
        assert_eq!(
            address("+821012345678"),
            (Ton::International, Npi::Isdn, "821012345678")
        );
        assert_eq!(
            address("821012345678"),
            (Ton::International, Npi::Isdn, "821012345678")
        );
        assert_eq!(
            address("01012345678"),
            (Ton::Unknown, Npi::Isdn, "01012345678")
        );
        assert_eq!(address("KEP"), (Ton::Alphanumeric, Npi::Unknown, "KEP"));
        assert_eq!(address("+"), (Ton::Alphanumeric, Npi::Unknown, "+"));
    }

    fn decode_all(bytes: &[u8]) -> Vec<Frame> {
        let mut src = BytesMut::from(bytes);
        let mut codec = Codec::default();
        let mut frames = Vec::new();
        while let Some(frame) = codec.decode(&mut src).unwrap() {
            frames.push(frame);
        }
        assert!(src.is_empty());
        frames
    }

    #[test]
    fn a_pdu_rusmpp_refuses_is_only_itself_lost() {
        let mut bytes = Vec::new();
        // A deliver_sm with a non-ASCII source_addr, then an enquire_link.
        let body = [&b"\0\x01\x01\xC0\xC1\0\x01\x01123\0\x04\0\0\0\0\0\0\0\0\0"[..]].concat();
        bytes.extend_from_slice(&u32::try_from(16 + body.len()).unwrap().to_be_bytes());
        bytes.extend_from_slice(&[0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 9]);
        bytes.extend_from_slice(&body);
        bytes.extend_from_slice(&[0, 0, 0, 16, 0, 0, 0, 0x15, 0, 0, 0, 0, 0, 0, 0, 10]);
        let frames = decode_all(&bytes);
        assert_eq!(frames.len(), 2, "{frames:?}");
        assert!(matches!(
            &frames[0],
            Frame::Undecodable {
                id: CommandId::DeliverSm,
                sequence: 9,
                ..
            }
        ));
        assert!(
            matches!(&frames[1], Frame::Pdu(c) if c.id() == CommandId::EnquireLink && c.sequence_number() == 10)
        );
    }

    #[test]
    fn a_length_past_the_limit_loses_the_connection() {
        let mut src = BytesMut::from(&[0, 0x10, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 1][..]);
        assert!(Codec::default().decode(&mut src).is_err());
        let mut src = BytesMut::from(&[0, 0, 0, 15, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 1][..]);
        assert!(Codec::default().decode(&mut src).is_err());
    }

    #[test]
    fn a_bodiless_response_has_its_id_and_no_body() {
        let command = bodiless(CommandId::SubmitSmResp, ESME_RTHROTTLED, 7);
        assert_eq!(command.id(), CommandId::SubmitSmResp);
        assert_eq!(u32::from(command.status()), ESME_RTHROTTLED);
    }
}
