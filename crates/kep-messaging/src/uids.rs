//! Message uids and the service time zone.

use std::sync::atomic::{AtomicI64, Ordering};

use jiff::tz::TimeZone;
use kep_core::clock::Clock;

use crate::ids::MessageUid;

/// uids per millisecond: a uid is `ms * UIDS_PER_MS + node * UIDS_PER_NODE + n`, twenty
/// digits.
pub const UIDS_PER_MS: i64 = 1_000_000;
/// Each node's share of a millisecond: its cluster slot (0 to 99) keeps its uids apart from
/// the other nodes' issued in the same millisecond.
const UIDS_PER_NODE: i64 = UIDS_PER_MS / kep_core::cluster::SLOTS as i64;

/// Issues message keys: twenty digits that sort in issue order (the millisecond of the
/// service's clock, then the node's slot, then a counter), so searches page by uid.
pub struct Uids {
    clock: Clock,
    /// Where this node's run starts within a millisecond.
    offset: i64,
    last: AtomicI64,
}

impl Uids {
    /// The uids of the node in cluster slot `slot`.
    pub fn new(clock: Clock, slot: u16) -> Self {
        Uids {
            clock,
            offset: i64::from(slot) * UIDS_PER_NODE,
            last: AtomicI64::new(0),
        }
    }

    pub fn next(&self) -> MessageUid {
        let start = |ms: i64| ms * UIDS_PER_MS + self.offset;
        let floor = start(self.clock.unix_ms());
        let step = |last: i64| {
            let next = (last + 1).max(floor);
            // Past its share of a millisecond, a node goes on in its share of the next one.
            let ms = (next - self.offset).div_euclid(UIDS_PER_MS);
            if next - start(ms) >= UIDS_PER_NODE {
                start(ms + 1)
            } else {
                next
            }
        };
        let prev = self
            .last
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| Some(step(last)))
            .expect("the closure always returns Some");
        MessageUid::from(format!("{:020}", step(prev)))
    }
}

/// The bound of uids issued before `ms`.
pub fn uid_at(ms: i64) -> MessageUid {
    // Past the year 2262 no uid fits in twenty digits: the bound stays at the largest.
    MessageUid::from(format!("{:020}", ms.max(0).saturating_mul(UIDS_PER_MS)))
}

/// The service time zone (IANA name), for dates in bodies and times in answers.
#[derive(Clone)]
pub struct ServiceZone(pub TimeZone);

impl ServiceZone {
    pub fn new(name: &str) -> anyhow::Result<Self> {
        Ok(ServiceZone(TimeZone::get(name)?))
    }

    /// `yyyy-mm-dd HH:MM:SS`
    pub fn format(&self, ms: i64) -> String {
        // An offset and a civil time, not a `Zoned`: a search page formats thousands of these.
        let Ok(t) = jiff::Timestamp::from_millisecond(ms) else {
            return String::new();
        };
        let d = self.0.to_offset(t).to_datetime(t);
        format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
            d.year(),
            d.month(),
            d.day(),
            d.hour(),
            d.minute(),
            d.second()
        )
    }

    /// `[start, end)` in unix milliseconds for the days `start_date` to `end_date`
    /// (`yyyy-mm-dd`, inclusive).
    pub fn day_range(
        &self,
        start: jiff::civil::Date,
        end: jiff::civil::Date,
    ) -> anyhow::Result<(i64, i64)> {
        let from = start.to_zoned(self.0.clone())?.timestamp().as_millisecond();
        let to = match end.tomorrow() {
            Ok(next) => next.to_zoned(self.0.clone())?.timestamp().as_millisecond(),
            // The last day there is (9999-12-31) runs to the end of time.
            Err(_) => jiff::Timestamp::MAX.as_millisecond(),
        };
        Ok((from, to))
    }

    /// The zone's UTC offset at `ms`, in seconds east of UTC.
    pub fn offset_seconds(&self, ms: i64) -> i64 {
        let t = jiff::Timestamp::from_millisecond(ms).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
        i64::from(self.0.to_offset(t).seconds())
    }

    /// The day `now` falls on.
    pub fn day_of(&self, now: jiff::Timestamp) -> jiff::civil::Date {
        now.to_zoned(self.0.clone()).date()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uids_sort_in_issue_order() {
        let clock = Clock::manual(jiff::Timestamp::from_second(1_700_000_000).unwrap());
        let uids = Uids::new(clock.clone(), 0);
        let a = uids.next();
        let b = uids.next();
        assert!(a < b);
        assert_eq!(a.as_str().len(), 20);
        assert!(uid_at(clock.unix_ms() + 1000) > b);
        // A new millisecond of the clock starts its own run.
        clock.advance(std::time::Duration::from_millis(1));
        assert_eq!(uids.next(), uid_at(clock.unix_ms()));
    }

    #[test]
    fn nodes_issue_apart_and_a_full_share_goes_on_in_the_next_millisecond() {
        let clock = Clock::manual(jiff::Timestamp::from_second(1_700_000_000).unwrap());
        let ms = clock.unix_ms();
        let (a, b) = (Uids::new(clock.clone(), 0), Uids::new(clock.clone(), 1));
        assert_eq!(a.next().as_str(), format!("{:020}", ms * UIDS_PER_MS));
        assert_eq!(
            b.next().as_str(),
            format!("{:020}", ms * UIDS_PER_MS + UIDS_PER_NODE)
        );
        // Node 1's 10,000 uids of this millisecond, then its share of the next.
        let mut last = None;
        for _ in 1..UIDS_PER_NODE {
            last = Some(b.next());
        }
        assert_eq!(
            last.unwrap().as_str(),
            format!("{:020}", ms * UIDS_PER_MS + 2 * UIDS_PER_NODE - 1)
        );
        assert_eq!(
            b.next().as_str(),
            format!("{:020}", (ms + 1) * UIDS_PER_MS + UIDS_PER_NODE)
        );
        // The last slot's share ends where the next millisecond starts.
        let z = Uids::new(clock.clone(), kep_core::cluster::SLOTS - 1);
        for _ in 0..UIDS_PER_NODE {
            z.next();
        }
        assert_eq!(
            z.next().as_str(),
            format!(
                "{:020}",
                (ms + 1) * UIDS_PER_MS + UIDS_PER_MS - UIDS_PER_NODE
            )
        );
    }

    #[test]
    fn a_seoul_day_starts_at_15_utc_the_day_before() {
        let z = ServiceZone::new("Asia/Seoul").unwrap();
        let d = jiff::civil::date(2026, 11, 22);
        let (from, to) = z.day_range(d, d).unwrap();
        assert_eq!(
            jiff::Timestamp::from_millisecond(from).unwrap().to_string(),
            "2026-11-21T15:00:00Z"
        );
        assert_eq!(to - from, 86_400_000);
        assert_eq!(z.format(from), "2026-11-22 00:00:00");
    }
}
