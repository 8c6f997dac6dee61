//! One retry policy for every loop that tries again after a failure (a DRM notification,
//! a message hand-over, an alert delivery, an instance restart): exponential back-off with
//! a cap and jitter, from `backon`.

use std::time::Duration;

use backon::{BackoffBuilder as _, ExponentialBackoff, ExponentialBuilder};

/// Waits that start at `first` and double up to `max`. Each wait is stretched by a random
/// share of itself (up to double), so that many callers that failed together do not all
/// come back at the same instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub first: Duration,
    pub max: Duration,
}

impl Backoff {
    /// The cap of loops whose settings name only a first wait.
    pub const DEFAULT_MAX: Duration = Duration::from_secs(60);

    /// A back-off from `first` up to [`Backoff::DEFAULT_MAX`] (or `first`, if larger).
    pub fn from_first(first: Duration) -> Self {
        Backoff {
            first,
            max: first.max(Self::DEFAULT_MAX),
        }
    }

    /// The waits between attempts, in order, without end: the caller counts its attempts.
    pub fn waits(self) -> Waits {
        let max = self.max.max(self.first);
        Waits {
            inner: ExponentialBuilder::default()
                .with_min_delay(self.first)
                .with_max_delay(max)
                .with_factor(2.0)
                .with_jitter()
                .without_max_times()
                .build(),
            max,
        }
    }

    /// The wait after `failures` failed attempts (1 or more), for a loop that keeps its
    /// count of attempts in its store rather than in an iterator.
    pub fn wait_after(self, failures: u32) -> Duration {
        let mut waits = self.waits();
        for _ in 1..failures {
            waits.next_wait();
        }
        waits.next_wait()
    }
}

/// One run of waits of a [`Backoff`].
pub struct Waits {
    inner: ExponentialBackoff,
    max: Duration,
}

impl Waits {
    /// The wait before the next attempt.
    pub fn next_wait(&mut self) -> Duration {
        self.inner.next().unwrap_or(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn waits_double_from_the_first_to_the_cap_with_at_most_their_own_length_of_jitter() {
        let backoff = Backoff {
            first: 100 * MS,
            max: 800 * MS,
        };
        for _ in 0..50 {
            let mut run = backoff.waits();
            let waits: Vec<Duration> = (0..6).map(|_| run.next_wait()).collect();
            for (wait, base) in waits.iter().zip([100, 200, 400, 800, 800, 800]) {
                assert!(
                    (base * MS..=2 * base * MS).contains(wait),
                    "{wait:?} not within [{base}, {}] ms",
                    2 * base
                );
            }
        }
    }

    #[test]
    fn jitter_spreads_callers_that_failed_together() {
        let backoff = Backoff::from_first(Duration::from_secs(1));
        let firsts: std::collections::BTreeSet<Duration> =
            (0..20).map(|_| backoff.wait_after(1)).collect();
        assert!(firsts.len() > 10, "{firsts:?}");
    }

    #[test]
    fn the_wait_after_n_failures_is_the_nth_wait() {
        let backoff = Backoff {
            first: 10 * MS,
            max: Duration::from_secs(1),
        };
        assert!((10 * MS..=20 * MS).contains(&backoff.wait_after(1)));
        assert!((40 * MS..=80 * MS).contains(&backoff.wait_after(3)));
        assert!(
            (Duration::from_secs(1)..=Duration::from_secs(2)).contains(&backoff.wait_after(40))
        );
        // No failure yet reads as the first.
        assert!((10 * MS..=20 * MS).contains(&backoff.wait_after(0)));
    }

    #[test]
    fn a_first_wait_past_the_default_cap_is_its_own_cap() {
        let backoff = Backoff::from_first(Duration::from_secs(90));
        assert_eq!(backoff.max, Duration::from_secs(90));
        assert!(backoff.wait_after(5) <= Duration::from_secs(180));
    }
}
