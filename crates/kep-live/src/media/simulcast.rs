//! Simulcast: a publisher may send its video in several layers (RTP streams told apart by
//! their `rid`, each a resolution and bitrate of the same picture). A subscriber gets one
//! of them: the best its bandwidth estimate allows, or the best there is while it has no
//! estimate. It moves to another layer only at a keyframe of that layer, and the frames'
//! times run on across the move, so its decoder never sees a break.

use std::time::{Duration, Instant};

use str0m::media::{MediaData, MediaTime, Rid};

/// How long a layer's bitrate is measured over.
const WINDOW: Duration = Duration::from_secs(1);
/// The share of an estimate a layer may take for a subscriber to move up to it; the rest is
/// for audio, RTCP and the estimate's own error. A subscriber leaves its layer only when
/// the layer needs more than the whole estimate, so it does not swing between two.
const HEADROOM: f64 = 0.8;

/// A publisher's video layers, each with the bitrate it was last measured at (one, with no
/// `rid`, when it is not simulcast).
#[derive(Default)]
pub(super) struct Layers(Vec<Layer>);

struct Layer {
    rid: Option<Rid>,
    /// Bits since `since`, the start of the window being measured.
    bits: u64,
    since: Instant,
    /// Bits per second over the last whole window; 0 before the first one ends.
    bps: u64,
}

impl Layer {
    /// Its bitrate: the last window's, or, in its first one, what it sent so far (each
    /// layer starts with a keyframe, so even its first frames rank it among the others).
    fn rate(&self, now: Instant) -> u64 {
        if self.bps > 0 {
            return self.bps;
        }
        let elapsed = now.saturating_duration_since(self.since);
        (self.bits as f64 / elapsed.max(Duration::from_millis(100)).as_secs_f64()) as u64
    }
}

impl Layers {
    /// Counts a frame of layer `rid`.
    pub(super) fn record(&mut self, rid: Option<Rid>, bytes: usize, now: Instant) {
        let i = match self.0.iter().position(|l| l.rid == rid) {
            Some(i) => i,
            None => {
                self.0.push(Layer {
                    rid,
                    bits: 0,
                    since: now,
                    bps: 0,
                });
                self.0.len() - 1
            }
        };
        let layer = &mut self.0[i];
        layer.bits += bytes as u64 * 8;
        let elapsed = now.saturating_duration_since(layer.since);
        if elapsed >= WINDOW {
            layer.bps = (layer.bits as f64 / elapsed.as_secs_f64()) as u64;
            layer.bits = 0;
            layer.since = now;
        }
    }

    /// The bitrate of the best layer: what a subscriber's estimate should be able to reach.
    pub(super) fn top(&self, now: Instant) -> u64 {
        self.0.iter().map(|l| l.rate(now)).max().unwrap_or(0)
    }

    /// The layer for a subscriber on `current` whose bandwidth is estimated at `estimate`
    /// bits per second: the best that fits it, else the smallest; the best with no estimate.
    fn choose(&self, current: Option<Rid>, estimate: Option<u64>, now: Instant) -> Option<Rid> {
        let rated = || {
            self.0
                .iter()
                .filter_map(move |l| Some((l.rid?, l.rate(now))))
        };
        let best = |fits: &dyn Fn(Rid, u64) -> bool| {
            rated()
                .filter(|&(rid, bps)| fits(rid, bps))
                .max_by_key(|&(_, bps)| bps)
        };
        let Some(estimate) = estimate else {
            return best(&|_, _| true).map(|l| l.0);
        };
        let fits = |rid: Rid, bps: u64| {
            let share = if Some(rid) == current { 1.0 } else { HEADROOM };
            bps as f64 <= estimate as f64 * share
        };
        best(&fits)
            .or_else(|| rated().min_by_key(|&(_, bps)| bps))
            .map(|l| l.0)
    }
}

/// Which layer of a simulcast video a subscriber gets.
#[derive(Default)]
pub(super) struct Selection {
    current: Option<Rid>,
    /// Added to a layer's RTP time so that the subscriber's clock runs on across moves.
    offset: u64,
    /// The last frame forwarded, on the subscriber's clock, and when it came.
    last: Option<(MediaTime, Instant)>,
}

/// What becomes of one frame of a simulcast video for one subscriber.
pub(super) struct Admitted {
    /// Its time on the subscriber's clock when it goes to the subscriber.
    pub(super) time: Option<MediaTime>,
    /// The layer the subscriber is to move to, whose keyframe is awaited.
    pub(super) awaiting: Option<Rid>,
}

impl Selection {
    /// The layer it gets now, to ask the publisher for a keyframe of.
    pub(super) fn current(&self) -> Option<Rid> {
        self.current
    }

    /// What becomes of `data` for a subscriber whose bandwidth is estimated at `estimate`.
    pub(super) fn admit(
        &mut self,
        layers: &Layers,
        estimate: Option<u64>,
        data: &MediaData,
    ) -> Admitted {
        let target = layers
            .choose(self.current, estimate, data.network_time)
            .filter(|&t| Some(t) != self.current);
        if target.is_some() && data.rid == target && data.is_keyframe() {
            self.current = target;
            self.offset = match self.last {
                // Where the subscriber's clock would be now, less where this layer's is.
                Some((time, at)) => {
                    let elapsed = data.network_time.saturating_duration_since(at);
                    let ticks = elapsed.as_secs_f64() * f64::from(time.denom());
                    (time.numer() + ticks as u64).wrapping_sub(data.time.numer())
                }
                None => 0,
            };
        }
        let time = (data.rid.is_some() && data.rid == self.current).then(|| {
            let numer = data.time.numer().wrapping_add(self.offset);
            MediaTime::new(numer, data.time.frequency())
        });
        if let Some(time) = time {
            self.last = Some((time, data.network_time));
        }
        Admitted {
            time,
            awaiting: target.filter(|&t| Some(t) != self.current),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layers(now: Instant, rates: &[(&str, u64)]) -> Layers {
        let mut layers = Layers::default();
        for &(rid, bps) in rates {
            // Two whole windows at `bps`.
            layers.record(Some(rid.into()), 0, now - 2 * WINDOW);
            layers.record(Some(rid.into()), (bps / 8) as usize, now - WINDOW);
        }
        layers
    }

    #[test]
    fn a_subscriber_gets_the_best_layer_its_estimate_allows() {
        let now = Instant::now();
        let l = layers(now, &[("h", 1_500_000), ("l", 150_000), ("m", 500_000)]);
        let choose = |current: Option<&str>, estimate| {
            l.choose(current.map(Rid::from), estimate, now)
                .map(|r| r.to_string())
        };
        // No estimate yet: the best; one far above: the best.
        assert_eq!(choose(None, None).as_deref(), Some("h"));
        assert_eq!(choose(None, Some(10_000_000)).as_deref(), Some("h"));
        // Moving up needs headroom: 1.5 Mbit/s does not fit 1.6 Mbit/s' 80 %.
        assert_eq!(choose(Some("m"), Some(1_600_000)).as_deref(), Some("m"));
        assert_eq!(choose(Some("m"), Some(1_875_000)).as_deref(), Some("h"));
        // Staying does not: at, and just below, the layer's own rate.
        assert_eq!(choose(Some("h"), Some(1_500_000)).as_deref(), Some("h"));
        assert_eq!(choose(Some("h"), Some(1_499_999)).as_deref(), Some("m"));
        // Below every layer: the smallest, rather than nothing.
        assert_eq!(choose(Some("m"), Some(50_000)).as_deref(), Some("l"));
    }

    #[test]
    fn a_layer_is_ranked_by_what_it_sent_before_its_first_window_ends() {
        let now = Instant::now();
        let mut l = Layers::default();
        l.record(Some("h".into()), 60_000, now);
        l.record(Some("l".into()), 6_000, now);
        assert_eq!(l.choose(None, None, now), Some("h".into()));
        assert_eq!(l.top(now), 60_000 * 8 * 10);
        assert_eq!(
            l.choose(None, Some(1_000_000), now),
            Some("l".into()),
            "4.8 Mbit/s does not fit 1 Mbit/s"
        );
    }
}
