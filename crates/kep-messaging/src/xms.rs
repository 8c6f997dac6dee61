//! `POST /v2/send/xms`: every rule of the document's field table (CONTRACT §4).

use serde::Deserialize;

use crate::MessagingError;
use crate::ids::{ClientId, ContentGroupId};
use crate::kinds::{Channel, MessageType};
use crate::send::{Head, Sendable};
use crate::text::{
    check_chars, check_digits, check_head, check_text, empty_as_none, require_text, strip_empty,
};
use crate::uploads::Uploads;

/// An XMS send as it arrives; every field optional here so a missing one is named.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
pub struct XmsSend {
    #[serde(default, deserialize_with = "empty_as_none")]
    pub client_id: Option<String>,
    pub cid: Option<String>,
    pub message_type: Option<String>,
    pub phone_number: Option<String>,
    #[serde(default, deserialize_with = "empty_as_none")]
    pub nat_cd: Option<String>,
    pub message: Option<String>,
    pub sender_no: Option<String>,
    #[serde(default, deserialize_with = "empty_as_none")]
    pub title: Option<String>,
    #[serde(default, deserialize_with = "empty_as_none")]
    pub content_group_id: Option<String>,
    pub biz_no: Option<String>,
    pub tax_cd1: Option<String>,
    pub tax_cd2: Option<String>,
    pub etc1: Option<String>,
    pub etc2: Option<String>,
    pub etc3: Option<String>,
    pub etc4: Option<String>,
    pub etc5: Option<String>,
    pub etc6: Option<String>,
    pub etc7: Option<String>,
    pub etc8: Option<String>,
    pub etc9: Option<String>,
    pub etc10: Option<String>,
}

/// The XMS message types.
pub const XMS_TYPES: [MessageType; 5] = [
    MessageType::Sm,
    MessageType::Lm,
    MessageType::Mm,
    MessageType::Ism,
    MessageType::Ilm,
];

/// The longest `message` of a type, in CP949 bytes.
pub fn message_limit(message_type: MessageType) -> usize {
    match message_type {
        MessageType::Sm | MessageType::Ism => 90,
        _ => 2000,
    }
}

/// Whether a message of the type carries a title (LM, MM, ILM).
fn has_title(message_type: MessageType) -> bool {
    !matches!(message_type, MessageType::Sm | MessageType::Ism)
}

/// Checks `send` for `client_id` (the caller); on success its type.
pub fn validate(send: &XmsSend, caller: &str) -> Result<MessageType, MessagingError> {
    let (message_type, phone) = check_head(
        send.client_id.as_deref(),
        caller,
        send.cid.as_deref(),
        send.message_type.as_deref(),
        &XMS_TYPES,
        send.phone_number.as_deref(),
    )?;
    let international = matches!(message_type, MessageType::Ism | MessageType::Ilm);
    if international {
        let nat = send
            .nat_cd
            .as_deref()
            .ok_or_else(|| MessagingError::invalid("nat_cd", "required for ISM and ILM"))?;
        check_digits("nat_cd", nat, 10)?;
        if !phone.starts_with(nat) {
            return Err(MessagingError::invalid(
                "phone_number",
                format!("must start with the country code {nat}"),
            ));
        }
    } else {
        if !phone.starts_with("82") {
            return Err(MessagingError::invalid(
                "phone_number",
                "must start with the country code 82",
            ));
        }
        if let Some(nat) = &send.nat_cd {
            check_digits("nat_cd", nat, 10)?;
        }
    }
    require_text(
        "message",
        send.message.as_deref(),
        message_limit(message_type),
    )?;
    let sender = send
        .sender_no
        .as_deref()
        .ok_or_else(|| MessagingError::invalid("sender_no", "required"))?;
    check_digits("sender_no", sender, 16)?;
    // An SM or ISM has no title: one sent with it is accepted, and not delivered (strip).
    if let Some(title) = &send.title
        && has_title(message_type)
    {
        check_text("title", title, 60)?;
    }
    if send.content_group_id.is_some() && message_type != MessageType::Mm {
        return Err(MessagingError::invalid(
            "content_group_id",
            "only MM messages carry files",
        ));
    }
    if let Some(biz) = &send.biz_no {
        check_text("biz_no", biz, 50)?;
    }
    let optional = [
        ("tax_cd1", &send.tax_cd1),
        ("tax_cd2", &send.tax_cd2),
        ("etc1", &send.etc1),
        ("etc2", &send.etc2),
        ("etc3", &send.etc3),
        ("etc4", &send.etc4),
        ("etc5", &send.etc5),
        ("etc6", &send.etc6),
        ("etc7", &send.etc7),
        ("etc8", &send.etc8),
        ("etc9", &send.etc9),
        ("etc10", &send.etc10),
    ];
    for (field, value) in optional {
        if let Some(v) = value {
            check_chars(field, v, 50)?;
        }
    }
    Ok(message_type)
}

impl Sendable for XmsSend {
    const CHANNEL: Channel = Channel::Xms;

    fn validate(&self, caller: &ClientId) -> Result<Head, MessagingError> {
        let message_type = validate(self, caller.as_str())?;
        Ok(Head::new(&self.cid, message_type, &self.phone_number))
    }

    fn strip(head: &Head, raw: &mut serde_json::Value) {
        strip_empty(raw, &["client_id", "nat_cd", "title", "content_group_id"]);
        if let Some(raw) = raw.as_object_mut()
            && !has_title(head.message_type)
        {
            raw.remove("title");
        }
    }

    async fn check_files(
        &self,
        uploads: &Uploads,
        caller: &ClientId,
    ) -> Result<(), MessagingError> {
        if let Some(group) = &self.content_group_id
            && !uploads
                .mms_group_usable(caller, &ContentGroupId::from(group.as_str()))
                .await?
        {
            return Err(MessagingError::file(
                "content_group_id",
                "no such MMS upload, or it expired",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(message_type: &str, phone: &str, message: &str) -> XmsSend {
        serde_json::from_value(serde_json::json!({
            "cid": "c1", "message_type": message_type, "phone_number": phone, "message": message, "sender_no": "0212345678"
        }))
        .unwrap()
    }

    fn field(r: Result<MessageType, MessagingError>) -> String {
        match r {
            Err(MessagingError::Invalid { field, .. }) => field,
            other => panic!("expected a 410, got {other:?}"),
        }
    }

    #[test]
    fn sms_is_90_bytes_lms_2000() {
        assert!(validate(&send("SM", "821012345678", &"가".repeat(45)), "me").is_ok());
        assert_eq!(
            field(validate(
                &send("SM", "821012345678", &"가".repeat(46)),
                "me"
            )),
            "message"
        );
        assert!(validate(&send("LM", "821012345678", &"a".repeat(2000)), "me").is_ok());
        assert_eq!(
            field(validate(
                &send("LM", "821012345678", &"a".repeat(2001)),
                "me"
            )),
            "message"
        );
        assert_eq!(
            field(validate(&send("SM", "821012345678", "hi 😀"), "me")),
            "message"
        );
    }

    #[test]
    fn numbers_and_types() {
        assert_eq!(
            field(validate(&send("SM", "011012345678", "hi"), "me")),
            "phone_number"
        );
        assert_eq!(
            field(validate(&send("SM", "82-1012345678", "hi"), "me")),
            "phone_number"
        );
        let at_limit = format!("82{}", "1".repeat(14));
        assert!(validate(&send("SM", &at_limit, "hi"), "me").is_ok());
        assert_eq!(
            field(validate(&send("SM", &format!("{at_limit}1"), "hi"), "me")),
            "phone_number"
        );
        assert_eq!(
            field(validate(&send("XM", "821012345678", "hi"), "me")),
            "message_type"
        );
        assert_eq!(
            field(validate(&send("ISM", "11234567890", "hi"), "me")),
            "nat_cd"
        );
        let mut s = send("ISM", "11234567890", "hi");
        s.nat_cd = Some("1".into());
        assert!(validate(&s, "me").is_ok());
        s.nat_cd = Some("44".into());
        assert_eq!(field(validate(&s, "me")), "phone_number");
        let mut s = send("SM", "821012345678", "hi");
        s.client_id = Some("other".into());
        assert_eq!(field(validate(&s, "me")), "client_id");
    }
}
