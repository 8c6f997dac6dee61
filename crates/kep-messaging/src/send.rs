//! Accepting a send, XMS or RCS: its rules, the uploads it names, then the durable store.
//! The dispatcher delivers it from there (`crate::pipeline`).

use kep_core::secret::sha256_hex;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::ids::{ClientId, MessageUid};
use crate::kinds::{Channel, MessageType, RcsStatus, Status};
use crate::store::{Inserted, MessageRow};
use crate::uploads::Uploads;
use crate::{Messaging, MessagingError};

/// What identifies a valid send.
pub struct Head {
    pub cid: String,
    pub message_type: MessageType,
    pub phone_number: String,
}

impl Head {
    /// The head of a send whose rules held: its cid and number are there.
    pub fn new(cid: &Option<String>, message_type: MessageType, phone: &Option<String>) -> Self {
        Head {
            cid: cid.clone().unwrap_or_default(),
            message_type,
            phone_number: phone.clone().unwrap_or_default(),
        }
    }
}

/// A kind of send: its channel, its rules, and the uploads it may name.
pub trait Sendable: DeserializeOwned {
    const CHANNEL: Channel;
    /// Checks the send's rules for `caller`.
    fn validate(&self, caller: &ClientId) -> Result<Head, MessagingError>;
    /// Drops from the request as it will be stored and handed over what is not sent: an
    /// optional field given as `""`, a field its type does not carry.
    fn strip(head: &Head, raw: &mut Value);
    /// The uploads the send names must be the caller's and unexpired (a file error).
    async fn check_files(&self, uploads: &Uploads, caller: &ClientId)
    -> Result<(), MessagingError>;
}

impl Messaging {
    /// Checks `send` (`raw` is its body as it came, an object) for `caller`, stores it durably for
    /// the dispatcher: its uid and cid. The same cid with the same body answers the
    /// first uid and sends nothing; another body is a 410.
    pub async fn send<T: Sendable>(
        &self,
        caller: ClientId,
        send: &T,
        mut raw: Value,
    ) -> Result<(MessageUid, String), MessagingError> {
        let head = send.validate(&caller)?;
        send.check_files(&self.uploads, &caller).await?;
        T::strip(&head, &mut raw);
        let cid = head.cid.clone();
        let request = serde_json::to_string(&raw).expect("JSON serialises");
        let request_hash = sha256_hex(&request);
        let now = self.clock.unix_ms();
        let row = MessageRow {
            request_hash: request_hash.clone(),
            uid: self.uids.next(),
            client_id: caller,
            cid: head.cid,
            channel: T::CHANNEL,
            message_type: head.message_type,
            phone_number: head.phone_number,
            request,
            status: Status::Accepted,
            rcs_status: (T::CHANNEL == Channel::Rcs).then_some(RcsStatus::Processing),
            fallback_status: None,
            sms_status_code: None,
            error_message: None,
            // Its first attempt: it is stored claimed for this node's dispatcher.
            attempts: 1,
            reg_date: now,
            req_date: Some(now),
            sent_date: None,
            res_date: None,
        };
        let uid = row.uid.clone();
        // A new message goes on to the dispatcher from the writer, counted there.
        match self.writer.insert(row).await? {
            Inserted::New => Ok((uid, cid)),
            Inserted::Existing(first)
                if first.request_hash == request_hash && first.channel == T::CHANNEL =>
            {
                Ok((first.uid, cid))
            }
            Inserted::Existing(_) => Err(MessagingError::invalid(
                "cid",
                "already used with a different message",
            )),
        }
    }
}
