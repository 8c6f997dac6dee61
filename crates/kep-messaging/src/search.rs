//! Searching a client's messages, oldest first, a page at a time: a page's days become uid
//! bounds (uids sort in issue order), its filters a [`SearchFilter`] list.

use crate::ids::{ClientId, MessageUid};
use crate::kinds::{Channel, MessageType, RcsStatus, Status};
use crate::store::{MessageRow, SearchFilter, SearchQuery};
use crate::text::one_of;
use crate::uids::{UIDS_PER_MS, uid_at};
use crate::{Messaging, MessagingError, rcs};

/// The paging fields both searches share, as the request has them.
pub struct Page<'a> {
    pub start_date: Option<&'a str>,
    pub end_date: Option<&'a str>,
    pub client_id: Option<&'a str>,
    pub size: Option<i64>,
    pub last_uid: Option<&'a str>,
}

/// A search by `field`, a status named as the answers write it (`API_200`) or by its code
/// (`200`), or on the RCS search the words of `rcs_status` (`success`); any other value is
/// refused, naming the field.
pub fn status_filter(
    field: &str,
    value: &str,
    channel: Channel,
) -> Result<SearchFilter, MessagingError> {
    let code = value.strip_prefix("API_").unwrap_or(value);
    let rcs_word = || {
        RcsStatus::parse(value)
            .filter(|_| channel == Channel::Rcs)
            .map(SearchFilter::RcsStatus)
    };
    Status::parse(code)
        .map(SearchFilter::Status)
        .or_else(rcs_word)
        .ok_or_else(|| {
            let words = if channel == Channel::Rcs {
                ", or processing, success or fail"
            } else {
                ""
            };
            MessagingError::invalid(
                field,
                format!("a status: 100, 200, 510 or 520 (or API_200){words}"),
            )
        })
}

/// An RCS search by `service_type`, which must be an RCS message type.
pub fn service_type_filter(service_type: &str) -> Result<SearchFilter, MessagingError> {
    MessageType::parse(service_type)
        .filter(|t| rcs::RCS_TYPES.contains(t))
        .map(SearchFilter::MessageType)
        .ok_or_else(|| MessagingError::invalid("service_type", one_of(&rcs::RCS_TYPES)))
}

impl Messaging {
    /// One page of the caller's messages of `channel`, and whether more follow.
    pub async fn search(
        &self,
        caller: &ClientId,
        channel: Channel,
        p: Page<'_>,
        filters: Vec<SearchFilter>,
    ) -> Result<(Vec<MessageRow>, bool), MessagingError> {
        let Some((query, _)) = self.query(caller, channel, p, filters)? else {
            return Ok((Vec::new(), false));
        };
        let mut rows = self.store.search(&query).await?;
        let size = usize::try_from(query.limit - 1).unwrap_or(0);
        let next = rows.len() > size;
        rows.truncate(size);
        Ok((rows, next))
    }

    /// One page of the caller's XMS messages as the JSON array of its rows: (the array, rows
    /// found — the page's size + 1 means more follow —, the last uid on the page).
    pub async fn xms_page(
        &self,
        caller: &ClientId,
        p: Page<'_>,
        filters: Vec<SearchFilter>,
    ) -> Result<(String, i64, Option<MessageUid>), MessagingError> {
        let Some((query, from)) = self.query(caller, Channel::Xms, p, filters)? else {
            return Ok(("[]".to_owned(), 0, None));
        };
        let size = query.limit - 1;
        let (json, found, last) = self
            .store
            .xms_page(&query, self.zone.offset_seconds(from))
            .await?;
        Ok((json, found.min(size + 1), last.filter(|_| found > 0)))
    }

    /// The query for one page of the caller's messages of `channel`, oldest first, asking
    /// for one row more than the page so the answer knows whether more follow; `None` when
    /// the request names another client (a client sees only its own messages). The second
    /// value is the start of the date
    /// range, in unix milliseconds.
    fn query<'a>(
        &self,
        caller: &'a ClientId,
        channel: Channel,
        p: Page<'_>,
        filters: Vec<SearchFilter>,
    ) -> Result<Option<(SearchQuery<'a>, i64)>, MessagingError> {
        let zone = &self.zone;
        let (start, end) = match (p.start_date, p.end_date) {
            (None, None) => {
                let today = zone.day_of(self.clock.now());
                (today, today)
            }
            (Some(s), Some(e)) => (date("start_date", s)?, date("end_date", e)?),
            (Some(_), None) => {
                return Err(MessagingError::invalid(
                    "end_date",
                    "start_date and end_date go together",
                ));
            }
            (None, Some(_)) => {
                return Err(MessagingError::invalid(
                    "start_date",
                    "start_date and end_date go together",
                ));
            }
        };
        if start > end {
            return Err(MessagingError::invalid("start_date", "after end_date"));
        }
        let size = p.size.unwrap_or(100);
        if !(1..=1000).contains(&size) {
            return Err(MessagingError::invalid("size", "1 to 1000"));
        }
        let (from, to) = zone
            .day_range(start, end)
            .map_err(|e| MessagingError::invalid("start_date", e.to_string()))?;
        let mut after = format!(
            "{:020}",
            from.saturating_mul(UIDS_PER_MS).saturating_sub(1).max(0)
        );
        if let Some(last) = p.last_uid {
            if last.len() != 20 || !last.bytes().all(|b| b.is_ascii_digit()) {
                return Err(MessagingError::invalid(
                    "last_uid",
                    "a uid from a previous page",
                ));
            }
            after = after.max(last.to_owned());
        }
        if p.client_id.is_some_and(|c| c != caller.as_str()) {
            return Ok(None);
        }
        let query = SearchQuery {
            client_id: caller,
            channel,
            after: MessageUid::from(after),
            before: uid_at(to),
            limit: size + 1,
            filters,
        };
        Ok(Some((query, from)))
    }
}

/// Parses `yyyy-mm-dd`.
fn date(field: &str, s: &str) -> Result<jiff::civil::Date, MessagingError> {
    let valid_form = s.len() == 10 && s.as_bytes()[4] == b'-' && s.as_bytes()[7] == b'-';
    s.parse::<jiff::civil::Date>()
        .ok()
        .filter(|_| valid_form)
        .ok_or_else(|| MessagingError::invalid(field, "a date as yyyy-mm-dd"))
}
