//! `POST /v2/send/rcs`: the document's field table and RCS limits (CONTRACT §4).

use serde::Deserialize;
use serde_json::Value;

use crate::MessagingError;
use crate::ids::{ClientId, FileId};
use crate::kinds::{Channel, MessageType};
use crate::send::{Head, Sendable};
use crate::text::{
    check_chars, check_digits, check_head, check_text, empty_as_none, require_text, strip_empty,
};
use crate::uploads::Uploads;

/// An RCS send as it arrives; every field optional here so a missing one is named.
#[derive(Debug, Clone, Deserialize)]
pub struct RcsSend {
    pub cid: Option<String>,
    pub message_type: Option<String>,
    pub phone_number: Option<String>,
    pub template_code: Option<String>,
    pub agency_id: Option<String>,
    #[serde(default, deserialize_with = "empty_as_none")]
    pub client_id: Option<String>,
    pub ad_flag: Option<String>,
    #[serde(default, deserialize_with = "empty_as_none")]
    pub footer: Option<String>,
    pub sender_no: Option<String>,
    #[expect(
        dead_code,
        reason = "parsed to check its type; the carrier connector has no use for it"
    )]
    pub copy_allowed: Option<bool>,
    pub body: Option<Vec<RcsBody>>,
    pub tmpl_decription: Option<String>,
    pub tmpl_variable: Option<std::collections::BTreeMap<String, String>>,
    pub biz_no: Option<String>,
    pub fall_back_yn: Option<bool>,
    #[serde(default, deserialize_with = "empty_as_none")]
    pub fall_back_message_type: Option<String>,
    pub fall_back_title: Option<String>,
    pub fall_back_message: Option<String>,
    pub tax_cd1: Option<String>,
    pub tax_cd2: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RcsBody {
    pub title: Option<String>,
    pub description: Option<String>,
    pub media: Option<String>,
    pub button: Option<Vec<Value>>,
}

pub const RCS_TYPES: [MessageType; 4] = [
    MessageType::RcsSms,
    MessageType::RcsLms,
    MessageType::RcsMms,
    MessageType::RcsTmpl,
];

/// (bodies, buttons per body, description bytes) for a type with bodies.
fn body_limits(message_type: MessageType) -> Option<(usize, usize, usize)> {
    match message_type {
        MessageType::RcsSms => Some((1, 1, 100)),
        MessageType::RcsLms => Some((1, 3, 1300)),
        MessageType::RcsMms => Some((6, 2, 1300)),
        _ => None,
    }
}

/// Why an accepted RCS message cannot be delivered, if it cannot: the seed's "delivery fails
/// if the per-type limit is exceeded" for more bodies than its type carries.
pub fn undeliverable(message_type: MessageType, request: &Value) -> Option<String> {
    let (max, _, _) = body_limits(message_type)?;
    let bodies = request["body"].as_array().map_or(0, Vec::len);
    (bodies > max)
        .then(|| format!("{message_type} carries at most {max} bodies; {bodies} were sent"))
}

/// RCS text is carried as UTF-8: a character CP949 has counts as its CP949 bytes, any
/// other (an emoji) as its UTF-8 length.
pub fn rcs_len(text: &str) -> usize {
    text.chars()
        .map(
            |c| match crate::text::cp949_len(c.encode_utf8(&mut [0u8; 4])) {
                Ok(n) => n,
                Err(_) => c.len_utf8(),
            },
        )
        .sum()
}

fn check_rcs_text(field: &str, text: &str, max: usize) -> Result<(), MessagingError> {
    let n = rcs_len(text);
    if n > max {
        return Err(MessagingError::invalid(
            field,
            format!("{n} bytes, at most {max}"),
        ));
    }
    Ok(())
}

/// Checks `send` for `client_id` (the caller); on success its type.
pub fn validate(send: &RcsSend, caller: &str) -> Result<MessageType, MessagingError> {
    let (message_type, phone) = check_head(
        send.client_id.as_deref(),
        caller,
        send.cid.as_deref(),
        send.message_type.as_deref(),
        &RCS_TYPES,
        send.phone_number.as_deref(),
    )?;
    if !phone.starts_with("82") {
        return Err(MessagingError::invalid(
            "phone_number",
            "must start with the country code 82",
        ));
    }
    require_text("template_code", send.template_code.as_deref(), 30)?;
    require_text("agency_id", send.agency_id.as_deref(), 50)?;
    match send.ad_flag.as_deref() {
        Some("Y" | "N") => {}
        Some(_) => return Err(MessagingError::invalid("ad_flag", "Y or N")),
        None => return Err(MessagingError::invalid("ad_flag", "required")),
    }
    if let Some(footer) = &send.footer {
        if send.ad_flag.as_deref() != Some("Y") {
            return Err(MessagingError::invalid("footer", "only with ad_flag Y"));
        }
        check_digits("footer", footer, 16)?;
    }
    let sender = send
        .sender_no
        .as_deref()
        .ok_or_else(|| MessagingError::invalid("sender_no", "required"))?;
    // The seed: "used for alternative sending; any value when unused". A number only when
    // the fall back sends with it.
    if send.fall_back_yn == Some(true) {
        check_digits("sender_no", sender, 16)?;
    } else {
        check_text("sender_no", sender, 16)?;
    }
    let template = template_of(send);
    match body_limits(message_type) {
        // More bodies than the type carries is no refusal: the seed says delivery fails
        // (`undeliverable`).
        Some((_, max_buttons, max_bytes)) => {
            if let Some(field) = template.field() {
                return Err(MessagingError::invalid(field, "only RCSTMPL carries it"));
            }
            let bodies = send.body.as_deref().unwrap_or_default();
            if bodies.is_empty() {
                return Err(MessagingError::invalid(
                    "body",
                    format!("{message_type} needs a body"),
                ));
            }
            for (i, b) in bodies.iter().enumerate() {
                check_body(i, b, message_type, max_buttons, max_bytes)?;
            }
        }
        None => {
            if send.body.as_ref().is_some_and(|b| !b.is_empty()) {
                return Err(MessagingError::invalid(
                    "body",
                    "RCSTMPL carries tmpl_decription or tmpl_variable, not bodies",
                ));
            }
            // A free-type text or cell-type variables, one of them, at most 90 bytes.
            match template {
                Template::Free(text) => check_rcs_text("tmpl_decription", text, 90)?,
                Template::Cells(vars) => {
                    let total: usize = vars.values().map(|v| rcs_len(v)).sum();
                    if total > 90 {
                        return Err(MessagingError::invalid(
                            "tmpl_variable",
                            format!("{total} bytes of variables, at most 90"),
                        ));
                    }
                }
                Template::Both => {
                    return Err(MessagingError::invalid(
                        "tmpl_variable",
                        "RCSTMPL carries tmpl_decription (free type) or tmpl_variable (cell type), not both",
                    ));
                }
                Template::None => {
                    return Err(MessagingError::invalid(
                        "tmpl_decription",
                        "RCSTMPL needs tmpl_decription or tmpl_variable",
                    ));
                }
            }
        }
    }
    let fall_back = send
        .fall_back_yn
        .ok_or_else(|| MessagingError::invalid("fall_back_yn", "required"))?;
    if fall_back {
        let kind = send.fall_back_message_type.as_deref();
        let max = match kind {
            Some("SM") => 90,
            Some("LM") => 2000,
            Some(_) => {
                return Err(MessagingError::invalid(
                    "fall_back_message_type",
                    "SM or LM",
                ));
            }
            None => {
                return Err(MessagingError::invalid(
                    "fall_back_message_type",
                    "required when fall_back_yn is true",
                ));
            }
        };
        require_text("fall_back_message", send.fall_back_message.as_deref(), max)?;
        if let Some(title) = &send.fall_back_title {
            check_text("fall_back_title", title, 60)?;
        }
    } else if let Some(kind) = &send.fall_back_message_type
        && !matches!(kind.as_str(), "SM" | "LM")
    {
        return Err(MessagingError::invalid(
            "fall_back_message_type",
            "SM or LM",
        ));
    }
    if let Some(biz) = &send.biz_no {
        check_text("biz_no", biz, 50)?;
    }
    for (field, value) in [("tax_cd1", &send.tax_cd1), ("tax_cd2", &send.tax_cd2)] {
        if let Some(v) = value {
            check_chars(field, v, 50)?;
        }
    }
    Ok(message_type)
}

impl Sendable for RcsSend {
    const CHANNEL: Channel = Channel::Rcs;

    fn validate(&self, caller: &ClientId) -> Result<Head, MessagingError> {
        let message_type = validate(self, caller.as_str())?;
        Ok(Head::new(&self.cid, message_type, &self.phone_number))
    }

    fn strip(_: &Head, raw: &mut serde_json::Value) {
        strip_empty(raw, &["client_id", "footer", "fall_back_message_type"]);
    }

    async fn check_files(
        &self,
        uploads: &Uploads,
        caller: &ClientId,
    ) -> Result<(), MessagingError> {
        for (i, body) in self.body.iter().flatten().enumerate() {
            let Some(file_id) = body
                .media
                .as_deref()
                .and_then(|u| u.strip_prefix("maapfile://"))
            else {
                continue;
            };
            if !uploads
                .rcs_file_usable(caller, &FileId::from(file_id))
                .await?
            {
                return Err(MessagingError::file(
                    format!("body[{i}].media"),
                    "no such RCS upload, or it expired",
                ));
            }
        }
        Ok(())
    }
}

/// An RCSTMPL's content, an empty text or set of variables counting as none.
enum Template<'a> {
    None,
    Free(&'a str),
    Cells(&'a std::collections::BTreeMap<String, String>),
    Both,
}

impl Template<'_> {
    /// The field that carries it, when there is one.
    fn field(&self) -> Option<&'static str> {
        match self {
            Template::None => None,
            Template::Free(_) => Some("tmpl_decription"),
            Template::Cells(_) | Template::Both => Some("tmpl_variable"),
        }
    }
}

fn template_of(send: &RcsSend) -> Template<'_> {
    let text = send
        .tmpl_decription
        .as_deref()
        .filter(|t| !t.trim().is_empty());
    let vars = send.tmpl_variable.as_ref().filter(|v| !v.is_empty());
    match (text, vars) {
        (None, None) => Template::None,
        (Some(text), None) => Template::Free(text),
        (None, Some(vars)) => Template::Cells(vars),
        (Some(_), Some(_)) => Template::Both,
    }
}

/// One body of a type that carries bodies.
fn check_body(
    i: usize,
    b: &RcsBody,
    message_type: MessageType,
    max_buttons: usize,
    max_bytes: usize,
) -> Result<(), MessagingError> {
    if b.title.as_deref().is_none_or(|t| t.trim().is_empty()) {
        return Err(MessagingError::invalid(
            format!("body[{i}].title"),
            "required",
        ));
    }
    let description = b.description.as_deref().filter(|d| !d.trim().is_empty());
    let description = description
        .ok_or_else(|| MessagingError::invalid(format!("body[{i}].description"), "required"))?;
    check_rcs_text(&format!("body[{i}].description"), description, max_bytes)?;
    let buttons = b.button.as_deref().unwrap_or_default();
    if buttons.len() > max_buttons {
        return Err(MessagingError::invalid(
            format!("body[{i}].button"),
            format!("{message_type} has at most {max_buttons} buttons per body"),
        ));
    }
    // `{}` is an empty suggestion; anything but an object is no button.
    if let Some(m) = buttons.iter().position(|button| !button.is_object()) {
        return Err(MessagingError::invalid(
            format!("body[{i}].button[{m}]"),
            "a button is an object",
        ));
    }
    if let Some(media) = &b.media {
        if message_type != MessageType::RcsMms {
            return Err(MessagingError::invalid(
                format!("body[{i}].media"),
                "only RCSMMS carries media",
            ));
        }
        if !media.starts_with("maapfile://") || media.len() <= "maapfile://".len() {
            return Err(MessagingError::invalid(
                format!("body[{i}].media"),
                "an uploaded file's maapfile:// url",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_emoji_counts_as_its_utf8_length_in_rcs() {
        assert_eq!(rcs_len("가a"), 3);
        assert_eq!(rcs_len("😀"), 4);
    }
}
