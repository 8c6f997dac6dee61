//! Text rules as Korean carriers count them: CP949 bytes (CONTRACT §4).

use encoding_rs::EUC_KR;

use crate::MessagingError;
use crate::kinds::MessageType;

/// CP949 length of `text`: one byte for ASCII, two for Hangul and other double-byte
/// characters; `Err(c)` names the first character CP949 cannot carry (an emoji).
///
/// encoding_rs's `EUC_KR` is the WHATWG encoding, which is windows-949 (CP949): it covers
/// all 11,172 Hangul syllables.
pub fn cp949_len(text: &str) -> Result<usize, char> {
    let (bytes, _, unmappable) = EUC_KR.encode(text);
    if !unmappable {
        return Ok(bytes.len());
    }
    let mut buf = [0u8; 4];
    let bad = text
        .chars()
        .find(|c| EUC_KR.encode(c.encode_utf8(&mut buf)).2)
        .expect("an unmappable character exists");
    Err(bad)
}

/// A text field of at most `max` CP949 bytes.
pub fn check_text(field: &str, text: &str, max: usize) -> Result<(), MessagingError> {
    match cp949_len(text) {
        Ok(n) if n <= max => Ok(()),
        Ok(n) => Err(MessagingError::invalid(
            field,
            format!("{n} bytes (CP949), at most {max}"),
        )),
        Err(c) => Err(MessagingError::invalid(
            field,
            format!("{c:?} (U+{:04X}) has no CP949 form", u32::from(c)),
        )),
    }
}

/// A customer-defined value (`tax_cd1`, `etc1` …), which the seed limits in characters, not
/// bytes: at most `max` of them.
pub fn check_chars(field: &str, text: &str, max: usize) -> Result<(), MessagingError> {
    let n = text.chars().count();
    if n > max {
        return Err(MessagingError::invalid(
            field,
            format!("{n} characters, at most {max}"),
        ));
    }
    Ok(())
}

/// A required text field: present, non-empty, at most `max` bytes.
pub fn require_text(field: &str, text: Option<&str>, max: usize) -> Result<(), MessagingError> {
    match text {
        None => Err(MessagingError::invalid(field, "required")),
        Some(t) if t.trim().is_empty() => Err(MessagingError::invalid(field, "required")),
        Some(t) => check_text(field, t, max),
    }
}

/// An optional text field where `""` means absent, as clients that send every field of a
/// form send the ones left blank. The field is then also dropped from the stored request
/// ([`crate::send::Sendable::strip`]).
pub fn empty_as_none<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(<Option<String> as serde::Deserialize>::deserialize(d)?.filter(|s| !s.is_empty()))
}

/// Removes the fields of `raw` named in `fields` whose value is `""`.
pub fn strip_empty(raw: &mut serde_json::Value, fields: &[&str]) {
    let Some(raw) = raw.as_object_mut() else {
        return;
    };
    for field in fields {
        if raw.get(*field).and_then(serde_json::Value::as_str) == Some("") {
            raw.remove(*field);
        }
    }
}

/// Digits only, 1 to `max` of them.
pub fn check_digits(field: &str, value: &str, max: usize) -> Result<(), MessagingError> {
    if value.is_empty() || value.len() > max || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(MessagingError::invalid(
            field,
            format!("digits only, 1 to {max}"),
        ));
    }
    Ok(())
}

/// What every send starts with, XMS or RCS: its `client_id` (if given) is the caller's,
/// a `cid`, a `message_type` of `types`, and a `phone_number` of digits. Returns the type
/// and the number.
pub fn check_head<'a>(
    client_id: Option<&str>,
    caller: &str,
    cid: Option<&str>,
    message_type: Option<&str>,
    types: &[MessageType],
    phone_number: Option<&'a str>,
) -> Result<(MessageType, &'a str), MessagingError> {
    if client_id.is_some_and(|id| id != caller) {
        return Err(MessagingError::invalid(
            "client_id",
            "is not the client of the access token",
        ));
    }
    require_text("cid", cid, 100)?;
    let message_type =
        message_type.ok_or_else(|| MessagingError::invalid("message_type", "required"))?;
    let message_type = MessageType::parse(message_type)
        .filter(|t| types.contains(t))
        .ok_or_else(|| MessagingError::invalid("message_type", one_of(types)))?;
    let phone = phone_number.ok_or_else(|| MessagingError::invalid("phone_number", "required"))?;
    check_digits("phone_number", phone, 16)?;
    Ok((message_type, phone))
}

/// `one of A, B, C`: the types a field takes.
pub fn one_of(types: &[MessageType]) -> String {
    let words: Vec<&str> = types.iter().map(|t| t.as_str()).collect();
    format!("one of {}", words.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hangul_is_two_bytes_ascii_one() {
        assert_eq!(cp949_len("abc"), Ok(3));
        assert_eq!(cp949_len("안녕"), Ok(4));
        // The last Hangul syllable (U+D7A3) and one outside KS X 1001's 2,350 (U+AC02):
        // CP949 has both.
        assert_eq!(cp949_len("힣갂"), Ok(4));
        assert_eq!(cp949_len("a😀"), Err('😀'));
    }

    #[test]
    fn limits_are_checked_at_below_and_above() {
        let at = "가".repeat(45);
        assert!(check_text("message", &at, 90).is_ok());
        assert!(check_text("message", &format!("{at}a"), 90).is_err());
        assert!(check_text("message", &"a".repeat(89), 90).is_ok());
    }
}
