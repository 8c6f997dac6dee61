//! Delivery receipts: from a deliver_sm's TLVs or from the receipt text that SMSCs (and
//! HTTP gateways such as Jasmin) put in the message body.

use rusmpp::{
    pdus::DeliverSm,
    tlvs::{TlvTag, TlvValue},
};
use serde::Serialize;

/// A message's state as a receipt reports it (SMPP 3.4 §5.2.28 and appendix B).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum MessageState {
    #[serde(rename = "ENROUTE")]
    Enroute,
    #[serde(rename = "DELIVRD")]
    Delivered,
    #[serde(rename = "EXPIRED")]
    Expired,
    #[serde(rename = "DELETED")]
    Deleted,
    #[serde(rename = "UNDELIV")]
    Undeliverable,
    #[serde(rename = "ACCEPTD")]
    Accepted,
    #[serde(rename = "UNKNOWN")]
    Unknown,
    #[serde(rename = "REJECTD")]
    Rejected,
}

impl MessageState {
    const ALL: [MessageState; 8] = [
        MessageState::Enroute,
        MessageState::Delivered,
        MessageState::Expired,
        MessageState::Deleted,
        MessageState::Undeliverable,
        MessageState::Accepted,
        MessageState::Unknown,
        MessageState::Rejected,
    ];

    /// The `message_state` TLV's value (1 to 8).
    pub fn from_tlv(value: u8) -> Option<Self> {
        Self::ALL.get(usize::from(value).checked_sub(1)?).copied()
    }

    /// The `message_state` TLV's value of this state.
    pub fn tlv(self) -> u8 {
        match self {
            MessageState::Enroute => 1,
            MessageState::Delivered => 2,
            MessageState::Expired => 3,
            MessageState::Deleted => 4,
            MessageState::Undeliverable => 5,
            MessageState::Accepted => 6,
            MessageState::Unknown => 7,
            MessageState::Rejected => 8,
        }
    }

    /// The `stat:` word of a receipt text: the seven-letter forms, and the whole words
    /// some SMSCs write instead (`DELIVERED`, `UNDELIVERABLE`...), in any case.
    pub fn from_stat(stat: &str) -> Option<Self> {
        let stat = stat.to_ascii_uppercase();
        let state = match stat.as_str() {
            "ENROUTE" => MessageState::Enroute,
            "DELIVRD" | "DELIVERED" => MessageState::Delivered,
            "EXPIRED" => MessageState::Expired,
            "DELETED" => MessageState::Deleted,
            "UNDELIV" | "UNDELIVERABLE" => MessageState::Undeliverable,
            "ACCEPTD" | "ACCEPTED" => MessageState::Accepted,
            "UNKNOWN" => MessageState::Unknown,
            "REJECTD" | "REJECTED" => MessageState::Rejected,
            _ => return None,
        };
        Some(state)
    }

    /// The seven-letter `stat:` word.
    pub fn stat(self) -> &'static str {
        match self {
            MessageState::Enroute => "ENROUTE",
            MessageState::Delivered => "DELIVRD",
            MessageState::Expired => "EXPIRED",
            MessageState::Deleted => "DELETED",
            MessageState::Undeliverable => "UNDELIV",
            MessageState::Accepted => "ACCEPTD",
            MessageState::Unknown => "UNKNOWN",
            MessageState::Rejected => "REJECTD",
        }
    }
}

/// What a receipt says of one message (one part, for a concatenated one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeliveryReceipt {
    /// The SMSC's message_id, exactly as written (hex, decimal or a UUID).
    pub message_id: String,
    pub state: MessageState,
    /// The `err:` field, as written (`000` is no error).
    pub error: Option<String>,
}

/// The value of `key` (`id:`, `stat:`...) in a receipt text: the word after it, where the
/// key starts the text or follows a space, before the free `text:` field.
fn field<'a>(text: &'a str, lower: &str, key: &str) -> Option<&'a str> {
    // Everything from `text:` on is the message's own text, which may hold anything.
    let end = find_key(lower, "text:", lower.len()).unwrap_or(lower.len());
    let at = find_key(lower, key, end)? + key.len();
    let value = &text[at..end];
    let value = value.split_whitespace().next().unwrap_or("");
    Some(value)
}

fn find_key(lower: &str, key: &str, end: usize) -> Option<usize> {
    let mut from = 0;
    while let Some(found) = lower[from..end].find(key) {
        let at = from + found;
        if at == 0 || lower.as_bytes()[at - 1].is_ascii_whitespace() {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// A receipt text, `id:IIII sub:SSS dlvrd:DDD submit date:YYMMDDhhmm done date:YYMMDDhhmm
/// stat:DDDDDDD err:E text:...`: `id` (kept exactly), `stat` and `err`; keys in any case.
/// None without an id or a stat; a stat that is not one of the known words reads as
/// [`MessageState::Unknown`], so that the message still gets an outcome.
pub fn parse_receipt_text(text: &str) -> Option<DeliveryReceipt> {
    // ASCII lower-casing keeps every byte offset, so offsets in `lower` index `text`.
    let lower = text.to_ascii_lowercase();
    let message_id = field(text, &lower, "id:").filter(|id| !id.is_empty())?;
    let stat = field(text, &lower, "stat:").filter(|stat| !stat.is_empty())?;
    let error = field(text, &lower, "err:")
        .filter(|err| !err.is_empty())
        .map(str::to_owned);
    Some(DeliveryReceipt {
        message_id: message_id.to_owned(),
        state: MessageState::from_stat(stat).unwrap_or(MessageState::Unknown),
        error,
    })
}

/// Whether a deliver_sm's esm_class marks an SMSC delivery receipt (bits 2 to 5 are 0001).
pub fn is_receipt(esm_class: u8) -> bool {
    esm_class & 0x3C == 0x04
}

/// The receipt a deliver_sm carries, or None when it is no receipt (an MO message) or
/// names no message. The `receipted_message_id` and `message_state` TLVs win over the
/// text in `short_message` (or in `message_payload`), which fills what they leave out.
pub fn parse_receipt(deliver: &DeliverSm) -> Option<DeliveryReceipt> {
    if !is_receipt(u8::from(deliver.esm_class)) {
        return None;
    }
    let mut tlv_id = None;
    let mut tlv_state = None;
    let mut payload = None;
    for tlv in deliver.tlvs() {
        match (tlv.tag(), tlv.value()) {
            (TlvTag::ReceiptedMessageId, Some(TlvValue::ReceiptedMessageId(id))) => {
                tlv_id = Some(id.as_str().to_owned());
            }
            (TlvTag::MessageState, Some(TlvValue::MessageState(state))) => {
                tlv_state = MessageState::from_tlv(u8::from(*state));
            }
            (TlvTag::MessagePayload, Some(TlvValue::MessagePayload(body))) => {
                payload = Some(body.value.as_ref().to_vec());
            }
            _ => {}
        }
    }
    let body: &[u8] = match deliver.short_message().as_ref() {
        [] => payload.as_deref().unwrap_or_default(),
        short => short,
    };
    let from_text = parse_receipt_text(&String::from_utf8_lossy(body));
    let message_id = tlv_id
        .filter(|id| !id.is_empty())
        .or_else(|| from_text.as_ref().map(|r| r.message_id.clone()))?;
    let state = tlv_state.or(from_text.as_ref().map(|r| r.state))?;
    Some(DeliveryReceipt {
        message_id,
        state,
        error: from_text.and_then(|r| r.error),
    })
}

#[cfg(test)]
mod tests {
    use rusmpp::{
        tlvs::MessageDeliveryRequestTlvValue,
        types::{COctetString, OctetString},
        values::{EsmClass, MessageState as WireState},
    };

    use super::*;

    fn deliver(esm_class: u8, text: &str, tlvs: Vec<MessageDeliveryRequestTlvValue>) -> DeliverSm {
        DeliverSm::builder()
            .esm_class(EsmClass::from(esm_class))
            .short_message(OctetString::from_vec(text.as_bytes().to_vec()).unwrap())
            .tlvs(tlvs)
            .build()
    }

    #[test]
    fn states_go_both_ways() {
        for (value, state) in (1..=8).zip(MessageState::ALL) {
            assert_eq!(MessageState::from_tlv(value), Some(state));
            assert_eq!(state.tlv(), value);
            assert_eq!(MessageState::from_stat(state.stat()), Some(state));
        }
        assert_eq!(MessageState::from_tlv(0), None);
        assert_eq!(MessageState::from_tlv(9), None);
        for state in MessageState::ALL {
            assert_eq!(
                serde_json::to_value(state).unwrap(),
                serde_json::json!(state.stat())
            );
        }
    }

    #[test]
    fn the_text_form() {
        let receipt = parse_receipt_text(
            "id:0123abcd sub:001 dlvrd:001 submit date:2611271530 done date:2611271530 \
             stat:DELIVRD err:000 text:hello",
        )
        .unwrap();
        assert_eq!(
            receipt,
            DeliveryReceipt {
                message_id: "0123abcd".into(),
                state: MessageState::Delivered,
                error: Some("000".into()),
            }
        );
    }

    #[test]
    fn jasmins_form_with_a_uuid_id() {
        let receipt = parse_receipt_text(
            "id:9d1e3a2c-5f7b-4c1e-8a0d-2b6f4e8c1a3d sub:001 dlvrd:000 submit date:2611271530 \
             done date:2611271531 stat:UNDELIV err:001 text:",
        )
        .unwrap();
        assert_eq!(receipt.message_id, "9d1e3a2c-5f7b-4c1e-8a0d-2b6f4e8c1a3d");
        assert_eq!(receipt.state, MessageState::Undeliverable);
        assert_eq!(receipt.error.as_deref(), Some("001"));
    }

    #[test]
    fn keys_inside_the_message_text_are_not_fields() {
        let receipt =
            parse_receipt_text("ID:42 Stat:expired text:id:7 stat:DELIVRD err:9").unwrap();
        assert_eq!(receipt.message_id, "42");
        assert_eq!(receipt.state, MessageState::Expired);
        assert_eq!(receipt.error, None);
    }

    #[test]
    fn an_unknown_stat_is_unknown_and_no_id_is_none() {
        let receipt = parse_receipt_text("id:1 stat:WHATEVER err:000").unwrap();
        assert_eq!(receipt.state, MessageState::Unknown);
        assert_eq!(parse_receipt_text("stat:DELIVRD err:000"), None);
        assert_eq!(parse_receipt_text("id:1 err:000"), None);
        assert_eq!(parse_receipt_text("hello"), None);
    }

    #[test]
    fn the_tlv_form_wins_over_the_text() {
        let pdu = deliver(
            0x04,
            "id:999 stat:EXPIRED err:042",
            vec![
                MessageDeliveryRequestTlvValue::ReceiptedMessageId(
                    COctetString::from_string("5a".into()).unwrap(),
                ),
                MessageDeliveryRequestTlvValue::MessageState(WireState::Delivered),
            ],
        );
        let receipt = parse_receipt(&pdu).unwrap();
        assert_eq!(receipt.message_id, "5a");
        assert_eq!(receipt.state, MessageState::Delivered);
        assert_eq!(receipt.error.as_deref(), Some("042"));

        let tlvs_only = deliver(
            0x04,
            "",
            vec![
                MessageDeliveryRequestTlvValue::ReceiptedMessageId(
                    COctetString::from_string("77".into()).unwrap(),
                ),
                MessageDeliveryRequestTlvValue::MessageState(WireState::Rejected),
            ],
        );
        let receipt = parse_receipt(&tlvs_only).unwrap();
        assert_eq!(
            (receipt.message_id.as_str(), receipt.state),
            ("77", MessageState::Rejected)
        );
    }

    #[test]
    fn text_only_receipts_and_messages_that_are_no_receipt() {
        let pdu = deliver(0x04, "id:abc stat:DELIVRD err:000 text:x", vec![]);
        assert_eq!(parse_receipt(&pdu).unwrap().message_id, "abc");
        // An MO message is no receipt, whatever its text.
        let mo = deliver(0x00, "id:abc stat:DELIVRD err:000 text:x", vec![]);
        assert_eq!(parse_receipt(&mo), None);
    }
}
