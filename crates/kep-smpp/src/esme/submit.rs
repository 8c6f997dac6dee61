//! `Esme::submit`: a text as submit_sm PDUs, each sent through a window slot and the rate
//! limit, and resent after a throttle.

use std::sync::atomic::{AtomicU8, Ordering};

use rusmpp::{
    pdus::SubmitSm,
    tlvs::MessageSubmissionRequestTlvValue,
    types::{AnyOctetString, OctetString},
    values::{DataCoding as WireCoding, EsmClass, MessagePayload, RegisteredDelivery},
};
use tokio::{sync::oneshot, time::Instant};

use super::{Esme, EsmeConfig, LongText, Outcome, Request, SessionState, SubmitError};
use crate::{
    text::{self, SHORT_MESSAGE_MAX},
    wire::{self, ESME_RMSGQFUL, ESME_RTHROTTLED},
};

/// esm_class of a part that starts with a UDH (UDHI set, default mode and type).
const ESM_CLASS_UDHI: u8 = 0x40;

/// registered_delivery: an SMSC delivery receipt on final outcome, success or failure.
const FINAL_RECEIPT: u8 = 0x01;

impl Esme {
    /// Sends `text` to `destination` from `source`; the SMSC's message_id of each part, in
    /// order. The addresses' TON/NPI: `+` then digits (the `+` dropped) or other digits are
    /// international E.164 (1/1), digits with a leading 0 are a national number as dialled
    /// (0/1), anything else is alphanumeric (5/0).
    ///
    /// A text that does not fit one short_message (140 octets) goes as UDH parts (67
    /// UCS-2 characters each, never splitting a character) or in one message_payload, per
    /// `long_text`. Each part asks for a final delivery receipt and waits for a window slot
    /// and the rate limit, then for its submit_sm_resp. ESME_RTHROTTLED and ESME_RMSGQFUL
    /// pause this session's submits (250 ms doubling to 2 s) and resend the same part,
    /// for up to three `response_timeout`s from its first send; then Unavailable.
    ///
    /// Fails Unavailable at once when the session is not bound.
    pub async fn submit(
        &self,
        source: &str,
        destination: &str,
        text: &str,
    ) -> Result<Vec<String>, SubmitError> {
        let shared = &self.inner.shared;
        let pdus = build(
            &shared.config,
            &shared.udh_reference,
            source,
            destination,
            text,
        )?;
        let mut ids = Vec::with_capacity(pdus.len());
        for pdu in pdus {
            ids.push(self.submit_part(pdu).await?);
        }
        Ok(ids)
    }

    /// One submit_sm through to its resp, resent while the SMSC throttles.
    async fn submit_part(&self, pdu: SubmitSm) -> Result<String, SubmitError> {
        let shared = &self.inner.shared;
        let give_up = Instant::now() + shared.config.response_timeout.saturating_mul(3);
        loop {
            let unavailable = |why: &str| SubmitError::Unavailable(why.to_owned());
            let permit = shared
                .window
                .clone()
                .acquire_owned()
                .await
                .map_err(|_| unavailable("the session is stopped"))?;
            if let Some(limiter) = &shared.limiter {
                limiter.until_ready().await;
            }
            if let Some(until) = shared.paused_until() {
                if until > give_up {
                    return Err(unavailable("the SMSC keeps throttling"));
                }
                tokio::time::sleep_until(until).await;
            }
            match *shared.state.borrow() {
                SessionState::Bound => {}
                SessionState::Connecting => return Err(unavailable("not bound")),
                SessionState::Stopped => return Err(unavailable("the session is stopped")),
            }
            let (reply, outcome) = oneshot::channel();
            let request = Request {
                submit: pdu.clone(),
                permit,
                reply,
            };
            self.inner
                .requests
                .send(request)
                .map_err(|_| unavailable("the session is stopped"))?;
            match outcome.await {
                Ok(Outcome::Accepted(id)) => return Ok(id),
                Ok(Outcome::Refused(ESME_RTHROTTLED | ESME_RMSGQFUL)) => {
                    if Instant::now() >= give_up {
                        return Err(unavailable("the SMSC keeps throttling"));
                    }
                }
                Ok(Outcome::Refused(status) | Outcome::Nacked(status)) => {
                    return Err(SubmitError::Rejected {
                        status,
                        name: wire::status_name(status),
                    });
                }
                Ok(Outcome::Unavailable(why)) => return Err(SubmitError::Unavailable(why)),
                Err(_) => return Err(unavailable("the session ended before the resp")),
            }
        }
    }
}

/// The submit_sm PDUs of a text, before anything is sent; `reference` numbers concatenated
/// messages.
fn build(
    config: &EsmeConfig,
    reference: &AtomicU8,
    source: &str,
    destination: &str,
    text: &str,
) -> Result<Vec<SubmitSm>, SubmitError> {
    let (source_ton, source_npi, source) = wire::address(source);
    let (dest_ton, dest_npi, destination) = wire::address(destination);
    let template = SubmitSm::builder()
        .service_type(Default::default())
        .source_addr_ton(source_ton)
        .source_addr_npi(source_npi)
        .source_addr(wire::c_string(source, "source address").map_err(SubmitError::Encoding)?)
        .dest_addr_ton(dest_ton)
        .dest_addr_npi(dest_npi)
        .destination_addr(
            wire::c_string(destination, "destination address").map_err(SubmitError::Encoding)?,
        )
        // Explicitly: rusmpp's default EsmClass encodes as 0x08, not 0x00.
        .esm_class(EsmClass::from(0))
        .registered_delivery(RegisteredDelivery::from(FINAL_RECEIPT))
        .data_coding(WireCoding::from(config.data_coding.octet()))
        .build();
    let short = |bytes: Vec<u8>| {
        OctetString::from_vec(bytes).map_err(|e| SubmitError::Encoding(format!("{e:?}")))
    };

    if config.long_text == LongText::Payload {
        let encoded = text::encode(text, config.data_coding).map_err(SubmitError::Encoding)?;
        if encoded.len() > SHORT_MESSAGE_MAX {
            let mut pdu = template;
            pdu.push_tlv(MessageSubmissionRequestTlvValue::MessagePayload(
                MessagePayload::new(AnyOctetString::from_vec(encoded)),
            ));
            return Ok(vec![pdu]);
        }
        return Ok(vec![template.with_short_message(short(encoded)?)]);
    }

    let parts = text::parts(text, config.data_coding).map_err(SubmitError::Encoding)?;
    if parts.len() == 1 {
        let part = parts.into_iter().next().unwrap_or_default();
        return Ok(vec![template.with_short_message(short(part)?)]);
    }
    let total =
        u8::try_from(parts.len()).map_err(|_| SubmitError::Encoding("too many parts".into()))?;
    let reference = reference.fetch_add(1, Ordering::Relaxed);
    let mut pdus = Vec::with_capacity(parts.len());
    for (seq, part) in (1..=total).zip(parts) {
        let mut body = Vec::with_capacity(text::UDH_LEN + part.len());
        body.extend_from_slice(&text::udh(reference, total, seq));
        body.extend_from_slice(&part);
        let mut pdu = template.clone().with_short_message(short(body)?);
        pdu.esm_class = EsmClass::from(ESM_CLASS_UDHI);
        pdus.push(pdu);
    }
    Ok(pdus)
}

#[cfg(test)]
mod tests {
    use rusmpp::{Command, CommandStatus, tokio_codec::CommandCodec};
    use tokio_util::{bytes::BytesMut, codec::Encoder as _};

    use super::*;
    use crate::text::DataCoding;

    fn encoded(pdu: SubmitSm) -> Vec<u8> {
        let mut out = BytesMut::new();
        CommandCodec::new()
            .encode(Command::new(CommandStatus::EsmeRok, 2, pdu), &mut out)
            .unwrap();
        out.to_vec()
    }

    #[test]
    fn a_short_text_is_one_submit_sm_with_every_field_as_smpp_3_4_has_it() {
        let config = EsmeConfig::default();
        let pdus = build(&config, &AtomicU8::new(0), "KEP", "+8210", "A").unwrap();
        assert_eq!(pdus.len(), 1);
        let bytes = encoded(pdus.into_iter().next().unwrap());
        let mut body = vec![
            0x00, // service_type ""
            0x05, 0x00, b'K', b'E', b'P', 0x00, // alphanumeric source
            0x01, 0x01, b'8', b'2', b'1', b'0', 0x00, // international destination
            0x00, // esm_class: default mode and type, no UDH
            0x00, // protocol_id
            0x00, // priority_flag
            0x00, 0x00, // no schedule, no validity
            0x01, // registered_delivery: final receipt
            0x00, // replace_if_present_flag
            0x08, // data_coding: UCS-2
            0x00, // sm_default_msg_id
            0x02, 0x00, b'A',
        ];
        let mut header = vec![];
        header.extend_from_slice(&u32::try_from(16 + body.len()).unwrap().to_be_bytes());
        header.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 2]);
        header.append(&mut body);
        assert_eq!(bytes, header);
    }

    #[test]
    fn udh_parts_share_a_reference_and_the_next_text_takes_the_next() {
        let config = EsmeConfig {
            data_coding: DataCoding::Ksc5601,
            ..EsmeConfig::default()
        };
        let reference = AtomicU8::new(255);
        let text = "x".repeat(300);
        let pdus = build(&config, &reference, "KEP", "8210", &text).unwrap();
        assert_eq!(pdus.len(), 3);
        for (seq, pdu) in (1..).zip(&pdus) {
            assert_eq!(u8::from(pdu.esm_class), 0x40);
            assert_eq!(pdu.short_message().as_ref()[..6], [5, 0, 3, 255, 3, seq]);
        }
        let next = build(&config, &reference, "KEP", "8210", &text).unwrap();
        assert_eq!(next[0].short_message().as_ref()[3], 0);
    }
}
