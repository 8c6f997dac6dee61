//! The wall clock every service reads for the dates it stores and answers (token and
//! session expiry, message dates, event times). It is handed to a service in its
//! [`crate::service::Context`], so a test can start the platform on a [`Clock::manual`] and
//! move time on instead of sleeping. Timers and intervals stay on tokio's clock, which
//! tests pause and advance with `tokio::time`.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// The system clock, or one a test sets and advances.
#[derive(Clone, Debug, Default)]
pub struct Clock {
    /// Microseconds since the epoch when manual; none follows the system clock.
    manual: Option<Arc<AtomicI64>>,
}

impl Clock {
    /// Follows the system clock.
    pub fn system() -> Self {
        Clock { manual: None }
    }

    /// Stands at `start` until [`Clock::advance`] moves it.
    pub fn manual(start: jiff::Timestamp) -> Self {
        Clock {
            manual: Some(Arc::new(AtomicI64::new(start.as_microsecond()))),
        }
    }

    pub fn now(&self) -> jiff::Timestamp {
        match &self.manual {
            None => jiff::Timestamp::now(),
            Some(us) => jiff::Timestamp::from_microsecond(us.load(Ordering::Relaxed))
                .expect("a manual clock stays within jiff's range"),
        }
    }

    /// Seconds since the epoch.
    pub fn unix_s(&self) -> i64 {
        self.now().as_second()
    }

    /// Milliseconds since the epoch.
    pub fn unix_ms(&self) -> i64 {
        self.now().as_millisecond()
    }

    /// Moves a manual clock on; the system clock cannot be moved.
    pub fn advance(&self, by: Duration) {
        let us = self
            .manual
            .as_ref()
            .expect("only a manual clock can be advanced");
        let by = i64::try_from(by.as_micros()).expect("an advance fits in i64 microseconds");
        us.fetch_add(by, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_stands_still_until_advanced() {
        let start = jiff::Timestamp::from_second(1_700_000_000).unwrap();
        let clock = Clock::manual(start);
        assert_eq!(clock.now(), start);
        let copy = clock.clone();
        copy.advance(Duration::from_millis(1500));
        assert_eq!(clock.unix_ms(), 1_700_000_001_500);
        assert_eq!(clock.unix_s(), 1_700_000_001);
    }

    #[test]
    fn the_system_clock_follows_the_system() {
        let before = jiff::Timestamp::now();
        let read = Clock::system().now();
        assert!(read >= before);
    }
}
