use super::JasminSubmit;

/// A `submit_sm` PDU, decoded from the bytes Jasmin wrote on the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubmitSm {
    pub sequence_number: u32,
    pub service_type: String,
    pub source_addr_ton: u8,
    pub source_addr_npi: u8,
    pub source_addr: String,
    pub dest_addr_ton: u8,
    pub dest_addr_npi: u8,
    pub destination_addr: String,
    pub esm_class: u8,
    pub protocol_id: u8,
    pub priority_flag: u8,
    pub schedule_delivery_time: String,
    pub validity_period: String,
    pub registered_delivery: u8,
    pub replace_if_present_flag: u8,
    pub data_coding: u8,
    pub sm_default_msg_id: u8,
    /// `short_message`, the UDH included when there is one.
    pub short_message: Vec<u8>,
    /// The optional parameters (tag, value), in order.
    pub tlvs: Vec<(u16, Vec<u8>)>,
}

/// Where a part sits in a concatenated message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Concat {
    pub reference: u16,
    pub total: u8,
    pub seq: u8,
}

impl SubmitSm {
    pub fn tlv(&self, tag: u16) -> Option<&[u8]> {
        self.tlvs
            .iter()
            .find(|(t, _)| *t == tag)
            .map(|(_, v)| v.as_slice())
    }

    /// The user data header, when `esm_class` says there is one (UDHI, 0x40).
    pub fn udh(&self) -> Option<&[u8]> {
        if self.esm_class & 0x40 == 0 {
            return None;
        }
        let len = *self.short_message.first()? as usize;
        self.short_message.get(..=len)
    }

    /// The message's bytes in this PDU: `message_payload` if present, else `short_message`
    /// without its UDH.
    pub fn payload(&self) -> &[u8] {
        if let Some(p) = self.tlv(0x0424) {
            return p;
        }
        match self.udh() {
            Some(udh) => &self.short_message[udh.len()..],
            None => &self.short_message,
        }
    }

    /// The part's place: from a concatenation element of the UDH (8- or 16-bit reference),
    /// or the SAR optional parameters.
    pub fn concat(&self) -> Option<Concat> {
        if let Some(udh) = self.udh() {
            let mut ies = &udh[1..];
            while let [iei, len, rest @ ..] = ies {
                let (value, next) = rest.split_at((*len as usize).min(rest.len()));
                match (iei, value) {
                    (0x00, [r, total, seq]) => {
                        return Some(Concat {
                            reference: *r as u16,
                            total: *total,
                            seq: *seq,
                        });
                    }
                    (0x08, [r1, r2, total, seq]) => {
                        let reference = u16::from_be_bytes([*r1, *r2]);
                        return Some(Concat {
                            reference,
                            total: *total,
                            seq: *seq,
                        });
                    }
                    _ => {}
                }
                ies = next;
            }
        }
        let reference = match self.tlv(0x020C)? {
            [a, b] => u16::from_be_bytes([*a, *b]),
            [a] => *a as u16,
            _ => return None,
        };
        Some(Concat {
            reference,
            total: *self.tlv(0x020E)?.first()?,
            seq: *self.tlv(0x020F)?.first()?,
        })
    }

    /// Decodes a whole `submit_sm` PDU (header included); `None` for any other PDU.
    pub fn decode(pdu: &[u8]) -> Option<SubmitSm> {
        let u32_at = |i: usize| Some(u32::from_be_bytes(pdu.get(i..i + 4)?.try_into().ok()?));
        if u32_at(4)? != 0x0000_0004 {
            return None;
        }
        let sequence_number = u32_at(12)?;
        let mut r = Reader {
            bytes: pdu.get(16..u32_at(0)? as usize)?,
        };
        let mut sm = SubmitSm {
            sequence_number,
            service_type: r.cstr()?,
            source_addr_ton: r.u8()?,
            source_addr_npi: r.u8()?,
            source_addr: r.cstr()?,
            dest_addr_ton: r.u8()?,
            dest_addr_npi: r.u8()?,
            destination_addr: r.cstr()?,
            esm_class: r.u8()?,
            protocol_id: r.u8()?,
            priority_flag: r.u8()?,
            schedule_delivery_time: r.cstr()?,
            validity_period: r.cstr()?,
            registered_delivery: r.u8()?,
            replace_if_present_flag: r.u8()?,
            data_coding: r.u8()?,
            sm_default_msg_id: r.u8()?,
            short_message: Vec::new(),
            tlvs: Vec::new(),
        };
        let len = r.u8()? as usize;
        sm.short_message = r.take(len)?.to_vec();
        while !r.bytes.is_empty() {
            let tag = u16::from_be_bytes(r.take(2)?.try_into().ok()?);
            let len = u16::from_be_bytes(r.take(2)?.try_into().ok()?) as usize;
            sm.tlvs.push((tag, r.take(len)?.to_vec()));
        }
        Some(sm)
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.bytes.len() < n {
            return None;
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Some(head)
    }

    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    fn cstr(&mut self) -> Option<String> {
        let end = self.bytes.iter().position(|b| *b == 0)?;
        let s = String::from_utf8_lossy(&self.bytes[..end]).into_owned();
        self.bytes = &self.bytes[end + 1..];
        Some(s)
    }
}

/// Reads what the `loop` connector sent: the SM listener logs `Sending SubmitSmPDU[<id>]
/// through SMPPClientFactory [cid:loop]` and, in the same call, the connector logs each PDU it
/// writes as `Sending data [b'<hex>']` (both to `loop.log`; Jasmin is one thread, so nothing
/// comes between).
pub(super) fn parse_loop_log(log: &str) -> Vec<JasminSubmit> {
    let mut out: Vec<JasminSubmit> = Vec::new();
    let mut current: Option<usize> = None;
    for line in log.lines() {
        if let Some(rest) = line.split_once("Sending SubmitSmPDU[").map(|(_, r)| r) {
            let id = rest.split(']').next().unwrap_or_default();
            let cid = rest
                .split_once("[cid:")
                .and_then(|(_, r)| r.split(']').next());
            current = (cid == Some("loop")).then(|| {
                out.push(JasminSubmit {
                    message_id: id.to_owned(),
                    pdus: Vec::new(),
                });
                out.len() - 1
            });
        } else if let Some(rest) = line.split_once("Sending data [b'").map(|(_, r)| r) {
            let hex = rest.split('\'').next().unwrap_or_default();
            if let (Some(i), Ok(bytes)) = (current, hex::decode(hex))
                && let Some(pdu) = SubmitSm::decode(&bytes)
            {
                out[i].pdus.push(pdu);
            }
        }
    }
    out.retain(|s| !s.pdus.is_empty());
    out
}

/// Text of `bytes` in SMPP `data_coding` `coding` (GSM 03.38 unpacked, one septet a byte,
/// for 0; ASCII 1; Latin-1 3; UCS-2, big-endian, 8); anything else as lossy UTF-8.
pub fn decode(coding: u8, bytes: &[u8]) -> String {
    const GSM: &str = "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞ\u{1b}ÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?\
                       ¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà";
    match coding {
        0 => {
            let table: Vec<char> = GSM.chars().collect();
            let mut out = String::new();
            let mut escape = false;
            for &b in bytes {
                let b = (b & 0x7f) as usize;
                if escape {
                    escape = false;
                    out.push(match b {
                        0x0a => '\u{c}',
                        0x14 => '^',
                        0x28 => '{',
                        0x29 => '}',
                        0x2f => '\\',
                        0x3c => '[',
                        0x3d => '~',
                        0x3e => ']',
                        0x40 => '|',
                        0x65 => '€',
                        _ => table[b],
                    });
                } else if b == 0x1b {
                    escape = true;
                } else {
                    out.push(table[b]);
                }
            }
            out
        }
        3 => bytes.iter().map(|&b| b as char).collect(),
        8 => {
            let units: Vec<u16> = bytes
                .chunks(2)
                .map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]))
                .collect();
            String::from_utf16_lossy(&units)
        }
        _ => String::from_utf8_lossy(bytes).into_owned(),
    }
}
