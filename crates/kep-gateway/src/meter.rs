//! What the gateway counts on each call, in two sinks: plain atomics that the monitor reads
//! once a second (rates, recent percentiles, alerts), and `metrics` handles that the
//! Prometheus exporter renders (totals and histograms a scraper aggregates itself).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::http::StatusCode;
use metrics::{Counter, Gauge, Histogram};

/// Upper bounds of the latency buckets, in milliseconds; a last bucket holds the rest.
pub const LATENCY_BOUNDS_MS: [f64; 16] = [
    0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0,
    10000.0, 30000.0,
];
pub const LATENCY_BUCKETS: usize = LATENCY_BOUNDS_MS.len() + 1;

/// The Prometheus buckets of the request-duration histogram, in seconds.
pub fn prometheus_buckets() -> Vec<f64> {
    LATENCY_BOUNDS_MS.iter().map(|ms| ms / 1000.0).collect()
}

pub const REQUESTS: &str = "kep_serving_requests_total";
pub const DURATION: &str = "kep_serving_request_duration_seconds";
pub const IN_FLIGHT: &str = "kep_serving_requests_in_flight";
pub const MIRROR: &str = "kep_serving_mirror_requests_total";

/// Status classes 1xx to 5xx.
pub const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// The calls of one endpoint's deployment, or with no deployment, those the gateway
/// answered itself before choosing one (a wrong key, no ready instance).
pub struct Meter {
    status: [AtomicU64; 5],
    latency: [AtomicU64; LATENCY_BUCKETS],
    in_flight: AtomicU64,
    mirror_answered: AtomicU64,
    mirror_failed: AtomicU64,
    prom: Prom,
}

struct Prom {
    status: [Counter; 5],
    duration: Histogram,
    in_flight: Gauge,
    mirror_answered: Counter,
    mirror_failed: Counter,
}

/// A meter's totals at one moment.
#[derive(Debug, Clone, Default)]
pub struct Reading {
    pub status: [u64; 5],
    pub latency: [u64; LATENCY_BUCKETS],
    pub in_flight: u64,
    pub mirror_answered: u64,
    pub mirror_failed: u64,
}

impl Reading {
    pub fn requests(&self) -> u64 {
        self.status.iter().sum()
    }
}

impl Meter {
    fn new(endpoint: &str, deployment: Option<&str>) -> Meter {
        let labels = |extra: Option<(&'static str, &'static str)>| {
            let mut l = vec![
                ("endpoint", endpoint.to_owned()),
                ("deployment", deployment.unwrap_or_default().to_owned()),
            ];
            if let Some((k, v)) = extra {
                l.push((k, v.to_owned()));
            }
            l
        };
        Meter {
            status: Default::default(),
            latency: Default::default(),
            in_flight: AtomicU64::new(0),
            mirror_answered: AtomicU64::new(0),
            mirror_failed: AtomicU64::new(0),
            prom: Prom {
                status: CLASSES.map(|c| metrics::counter!(REQUESTS, &labels(Some(("status", c))))),
                duration: metrics::histogram!(DURATION, &labels(None)),
                in_flight: metrics::gauge!(IN_FLIGHT, &labels(None)),
                mirror_answered: metrics::counter!(MIRROR, &labels(Some(("outcome", "answered")))),
                mirror_failed: metrics::counter!(MIRROR, &labels(Some(("outcome", "failed")))),
            },
        }
    }

    /// One answered call: its status and the time to its headers.
    pub fn record(&self, status: StatusCode, elapsed: Duration) {
        let class = (usize::from(status.as_u16() / 100)).clamp(1, 5) - 1;
        self.status[class].fetch_add(1, Ordering::Relaxed);
        let ms = elapsed.as_secs_f64() * 1000.0;
        let bucket = LATENCY_BOUNDS_MS
            .iter()
            .position(|&b| ms <= b)
            .unwrap_or(LATENCY_BOUNDS_MS.len());
        self.latency[bucket].fetch_add(1, Ordering::Relaxed);
        self.prom.status[class].increment(1);
        self.prom.duration.record(elapsed.as_secs_f64());
    }

    /// Counts a call in flight until the guard is dropped.
    pub fn enter(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.prom.in_flight.increment(1.0);
        InFlight(Arc::clone(self))
    }

    pub fn mirrored(&self, answered: bool) {
        if answered {
            self.mirror_answered.fetch_add(1, Ordering::Relaxed);
            self.prom.mirror_answered.increment(1);
        } else {
            self.mirror_failed.fetch_add(1, Ordering::Relaxed);
            self.prom.mirror_failed.increment(1);
        }
    }

    pub fn read(&self) -> Reading {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Reading {
            status: std::array::from_fn(|i| load(&self.status[i])),
            latency: std::array::from_fn(|i| load(&self.latency[i])),
            in_flight: load(&self.in_flight),
            mirror_answered: load(&self.mirror_answered),
            mirror_failed: load(&self.mirror_failed),
        }
    }
}

pub struct InFlight(Arc<Meter>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.0.prom.in_flight.decrement(1.0);
    }
}

/// Which calls a meter counts: an endpoint's, and with a deployment, that deployment's.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MeterKey {
    pub endpoint: String,
    pub deployment: Option<String>,
}

/// Every meter, kept across routing-table rebuilds so totals only grow.
#[derive(Default)]
pub struct Meters {
    all: std::sync::Mutex<HashMap<MeterKey, Arc<Meter>>>,
}

impl Meters {
    pub fn get(&self, endpoint: &str, deployment: Option<&str>) -> Arc<Meter> {
        let key = MeterKey {
            endpoint: endpoint.to_owned(),
            deployment: deployment.map(str::to_owned),
        };
        let mut all = self.all.lock().expect("the meters lock is never poisoned");
        Arc::clone(
            all.entry(key)
                .or_insert_with(|| Arc::new(Meter::new(endpoint, deployment))),
        )
    }

    /// Forgets the meters of an endpoint, or of its deployments not in `keep`.
    pub fn retain(&self, endpoint: &str, keep: Option<&[String]>) {
        let mut all = self.all.lock().expect("the meters lock is never poisoned");
        all.retain(|k, _| {
            k.endpoint != endpoint
                || match (keep, &k.deployment) {
                    (None, _) => false,
                    (Some(_), None) => true,
                    (Some(keep), Some(d)) => keep.contains(d),
                }
        });
    }

    /// Every meter's totals now.
    pub fn read(&self) -> Vec<(MeterKey, Reading)> {
        let all = self.all.lock().expect("the meters lock is never poisoned");
        all.iter().map(|(k, m)| (k.clone(), m.read())).collect()
    }
}

/// The latency at quantile `q` (0–1) of the calls counted in `buckets`: the upper bound of
/// the bucket it falls in, interpolated linearly inside it.
pub fn quantile(buckets: &[u64; LATENCY_BUCKETS], q: f64) -> Option<f64> {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = q * total as f64;
    let mut seen = 0u64;
    for (i, &n) in buckets.iter().enumerate() {
        if n > 0 && (seen + n) as f64 >= rank {
            let lower = if i == 0 {
                0.0
            } else {
                LATENCY_BOUNDS_MS[i - 1]
            };
            // The last bucket has no upper bound: its lower one is all that is known.
            let Some(&upper) = LATENCY_BOUNDS_MS.get(i) else {
                return Some(lower);
            };
            let within = (rank - seen as f64) / n as f64;
            return Some(lower + (upper - lower) * within.clamp(0.0, 1.0));
        }
        seen += n;
    }
    LATENCY_BOUNDS_MS.last().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_counted_by_status_class_and_latency_bucket() {
        let meters = Meters::default();
        let m = meters.get("e", Some("d"));
        m.record(StatusCode::OK, Duration::from_micros(300));
        m.record(StatusCode::NOT_FOUND, Duration::from_millis(3));
        m.record(StatusCode::BAD_GATEWAY, Duration::from_secs(40));
        let guard = m.enter();
        let r = m.read();
        assert_eq!(r.status, [0, 1, 0, 1, 1]);
        assert_eq!(r.requests(), 3);
        assert_eq!(r.latency[1], 1, "0.3 ms falls in (0.25, 0.5]");
        assert_eq!(r.latency[4], 1, "3 ms falls in (2.5, 5]");
        assert_eq!(r.latency[LATENCY_BUCKETS - 1], 1);
        assert_eq!(r.in_flight, 1);
        drop(guard);
        assert_eq!(m.read().in_flight, 0);
        // The same key gives the same meter; a dropped deployment's meter goes.
        assert!(Arc::ptr_eq(&m, &meters.get("e", Some("d"))));
        meters.get("e", None);
        meters.retain("e", Some(&[]));
        assert_eq!(meters.read().len(), 1);
        meters.retain("e", None);
        assert!(meters.read().is_empty());
    }

    #[test]
    fn quantiles_interpolate_within_a_bucket() {
        let mut b = [0u64; LATENCY_BUCKETS];
        assert_eq!(quantile(&b, 0.5), None);
        b[2] = 100; // (0.5, 1] ms
        assert!((quantile(&b, 0.5).unwrap() - 0.75).abs() < 1e-9);
        assert!((quantile(&b, 0.99).unwrap() - 0.995).abs() < 1e-9);
        b[9] = 1; // one slow call in (100, 250] ms
        assert!(quantile(&b, 0.5).unwrap() <= 1.0);
        assert!(quantile(&b, 1.0).unwrap() > 100.0);
        let mut over = [0u64; LATENCY_BUCKETS];
        over[LATENCY_BUCKETS - 1] = 5;
        assert_eq!(quantile(&over, 0.5), Some(30000.0));
    }
}
