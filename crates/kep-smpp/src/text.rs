//! A message's text as SMPP octets: encoded in the carrier's data coding and cut into the
//! parts that each fit one `short_message`.

use encoding_rs::{EUC_KR, EncoderResult};
use serde::{Deserialize, Serialize};

/// The octets one `short_message` holds.
pub const SHORT_MESSAGE_MAX: usize = 140;

/// The user data header of a concatenated part (IEI 0x00, 8-bit reference) takes 6 octets.
pub const UDH_LEN: usize = 6;

/// The most parts an 8-bit concatenation header can number.
pub const MAX_PARTS: usize = 255;

/// How the text is encoded on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DataCoding {
    /// UCS-2 (UTF-16BE, characters beyond the BMP as surrogate pairs), data_coding 0x08.
    #[default]
    Ucs2,
    /// KS C 5601 as Korean carriers take it (EUC-KR, its CP949 extension), data_coding 0x0E.
    Ksc5601,
}

impl DataCoding {
    /// The `data_coding` octet of a submit_sm.
    pub fn octet(self) -> u8 {
        match self {
            DataCoding::Ucs2 => 0x08,
            DataCoding::Ksc5601 => 0x0E,
        }
    }
}

/// `text` in `coding`. KS C 5601 names the first character it lacks.
pub fn encode(text: &str, coding: DataCoding) -> Result<Vec<u8>, String> {
    match coding {
        DataCoding::Ucs2 => Ok(text.encode_utf16().flat_map(u16::to_be_bytes).collect()),
        DataCoding::Ksc5601 => {
            let mut encoder = EUC_KR.new_encoder();
            // Two octets a character at most, and never more than UTF-8 takes.
            let mut out = vec![0; text.len() * 2 + 8];
            let (result, _read, written) =
                encoder.encode_from_utf8_without_replacement(text, &mut out, true);
            match result {
                EncoderResult::InputEmpty => {
                    out.truncate(written);
                    Ok(out)
                }
                EncoderResult::Unmappable(c) => {
                    Err(format!("KS C 5601 has no {c:?} (U+{:04X})", u32::from(c)))
                }
                EncoderResult::OutputFull => Err("the encoded text outgrew its buffer".into()),
            }
        }
    }
}

/// The octets of the character that starts at `at` in `encoded`.
fn char_len(encoded: &[u8], at: usize, coding: DataCoding) -> usize {
    match coding {
        DataCoding::Ucs2 => {
            // A high surrogate starts a pair of two 16-bit units.
            if (0xD8..=0xDB).contains(&encoded[at]) {
                4
            } else {
                2
            }
        }
        // In EUC-KR and CP949 an octet past ASCII leads a two-octet character.
        DataCoding::Ksc5601 => {
            if encoded[at] >= 0x80 {
                2
            } else {
                1
            }
        }
    }
}

/// The text of octets whose `data_coding` octet is `coding`'s, lossily where they are not
/// valid in it; None for another data coding.
pub fn decode(octets: &[u8], data_coding: u8) -> Option<String> {
    if data_coding == DataCoding::Ucs2.octet() {
        let units: Vec<u16> = octets
            .chunks(2)
            .map(|c| u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)]))
            .collect();
        Some(String::from_utf16_lossy(&units))
    } else if data_coding == DataCoding::Ksc5601.octet() {
        Some(EUC_KR.decode_without_bom_handling(octets).0.into_owned())
    } else {
        None
    }
}

/// Cuts already encoded octets into chunks of at most `max` octets, never inside a
/// character.
pub fn split_encoded(encoded: &[u8], coding: DataCoding, max: usize) -> Vec<Vec<u8>> {
    let mut chunks = Vec::new();
    let mut start = 0;
    let mut at = 0;
    while at < encoded.len() {
        let len = char_len(encoded, at, coding).min(encoded.len() - at);
        if at + len - start > max {
            chunks.push(encoded[start..at].to_vec());
            start = at;
        }
        at += len;
    }
    if start < encoded.len() || chunks.is_empty() {
        chunks.push(encoded[start..].to_vec());
    }
    chunks
}

/// The encoded parts of `text` as concatenated SMS send them, without their UDH: one part
/// when it fits one `short_message`, else parts of at most 134 octets (67 UCS-2 units).
pub fn parts(text: &str, coding: DataCoding) -> Result<Vec<Vec<u8>>, String> {
    let encoded = encode(text, coding)?;
    if encoded.len() <= SHORT_MESSAGE_MAX {
        return Ok(vec![encoded]);
    }
    let parts = split_encoded(&encoded, coding, SHORT_MESSAGE_MAX - UDH_LEN);
    if parts.len() > MAX_PARTS {
        return Err(format!(
            "the text needs {} parts, more than the {MAX_PARTS} a concatenated message may have",
            parts.len()
        ));
    }
    Ok(parts)
}

/// The 6-octet UDH of part `seq` (from 1) of `total`, concatenation reference `reference`.
pub fn udh(reference: u8, total: u8, seq: u8) -> [u8; UDH_LEN] {
    [0x05, 0x00, 0x03, reference, total, seq]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_reads_what_encode_wrote() {
        for coding in [DataCoding::Ucs2, DataCoding::Ksc5601] {
            let octets = encode("안녕 kep", coding).unwrap();
            assert_eq!(decode(&octets, coding.octet()).as_deref(), Some("안녕 kep"));
        }
        assert_eq!(decode(b"hi", 0x00), None);
    }

    #[test]
    fn ucs2_is_utf16_big_endian() {
        assert_eq!(
            encode("안녕하세요", DataCoding::Ucs2).unwrap(),
            [0xC5, 0x48, 0xB1, 0x55, 0xD5, 0x58, 0xC1, 0x38, 0xC6, 0x94]
        );
        // Beyond the BMP: a surrogate pair.
        assert_eq!(
            encode("😀", DataCoding::Ucs2).unwrap(),
            [0xD8, 0x3D, 0xDE, 0x00]
        );
    }

    #[test]
    fn ksc5601_is_euc_kr() {
        assert_eq!(
            encode("안녕하세요", DataCoding::Ksc5601).unwrap(),
            [0xBE, 0xC8, 0xB3, 0xE7, 0xC7, 0xCF, 0xBC, 0xBC, 0xBF, 0xE4]
        );
        assert_eq!(
            encode("hi 안", DataCoding::Ksc5601).unwrap(),
            b"hi \xBE\xC8"
        );
    }

    #[test]
    fn ksc5601_names_the_character_it_lacks() {
        let error = encode("안녕 😀 ☃", DataCoding::Ksc5601).unwrap_err();
        assert!(error.contains("U+1F600"), "{error}");
    }

    #[test]
    fn a_text_that_fits_is_one_part() {
        let text = "가".repeat(70);
        let parts = parts(&text, DataCoding::Ucs2).unwrap();
        assert_eq!(parts.len(), 1);
        assert_eq!(parts[0].len(), 140);
        assert_eq!(
            super::parts("", DataCoding::Ucs2).unwrap(),
            vec![Vec::<u8>::new()]
        );
    }

    #[test]
    fn two_hundred_hangul_in_ucs2_are_parts_of_67_characters() {
        let text = "한".repeat(200);
        let parts = parts(&text, DataCoding::Ucs2).unwrap();
        assert_eq!(
            parts.iter().map(Vec::len).collect::<Vec<_>>(),
            [134, 134, 132]
        );
        assert_eq!(parts.concat(), encode(&text, DataCoding::Ucs2).unwrap());
    }

    #[test]
    fn ucs2_parts_never_split_a_surrogate_pair() {
        // 66 Hangul then emoji: the 67th unit would be a high surrogate, so the pair moves on.
        let text = format!("{}{}", "한".repeat(66), "😀".repeat(40));
        let parts = parts(&text, DataCoding::Ucs2).unwrap();
        assert_eq!(parts[0].len(), 132);
        for part in &parts {
            assert!(part.len() <= 134);
            let units: Vec<u16> = part
                .chunks(2)
                .map(|pair| u16::from_be_bytes([pair[0], pair[1]]))
                .collect();
            String::from_utf16(&units).expect("each part is whole UTF-16");
        }
        assert_eq!(parts.concat(), encode(&text, DataCoding::Ucs2).unwrap());
    }

    #[test]
    fn ksc5601_parts_never_split_a_double_byte_character() {
        // One ASCII octet first, so that 134 would fall inside a Hangul character.
        let text = format!("a{}", "한".repeat(150));
        let parts = parts(&text, DataCoding::Ksc5601).unwrap();
        assert_eq!(parts[0].len(), 133);
        for part in &parts {
            assert!(part.len() <= 134);
            let (decoded, had_errors) = EUC_KR.decode_without_bom_handling(part);
            assert!(!had_errors, "{decoded}");
        }
        assert_eq!(parts.concat(), encode(&text, DataCoding::Ksc5601).unwrap());
    }

    #[test]
    fn more_than_255_parts_is_refused() {
        let text = "x".repeat(134 * 255 + 1);
        assert!(parts(&text, DataCoding::Ksc5601).is_err());
        assert_eq!(
            parts(&"x".repeat(134 * 255), DataCoding::Ksc5601)
                .unwrap()
                .len(),
            255
        );
    }
}
