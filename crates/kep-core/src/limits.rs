//! The limits every listener applies: per client, a request rate (a token bucket) and the
//! requests it may have in flight; per listener, its open connections and how long a client
//! may take over a request's head and between the pieces of its body
//! ([`crate::listener::serve`]).
//!
//! A client is whoever the API authenticated (a live service, an org, an OAuth client, an
//! endpoint, the operator), so each service asks the [`Limiter`] only once it knows who
//! called; a call that did not authenticate counts against its peer's address instead, so
//! a wrong secret spends the sender's budget, never the client's it named.

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{Extensions, HeaderMap, HeaderValue, header};
use axum::response::Response;
use dashmap::DashMap;
use governor::clock::Clock as _;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use serde::{Deserialize, Serialize};

/// A listener's limits, flattened into its section of the settings (`[live]
/// rate_limit_per_s`, `KEP_LIVE_RATE_LIMIT_PER_S`). 0 turns a limit off.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Limits {
    /// Requests per second one client may make on average (fractions allowed: 0.1 is one
    /// every 10 s).
    pub rate_limit_per_s: f64,
    /// Requests a client may make at once after a quiet spell; 0: one second's worth.
    pub rate_limit_burst: u32,
    /// Requests of one client in flight at once.
    pub concurrency_limit: u32,
    /// Open connections of the listener (upgraded WebSockets included); one more waits in
    /// the accept queue until one closes.
    pub max_connections: u32,
    /// A request's head must arrive whole within this; a kept-alive connection that starts
    /// no request for this long is closed.
    pub header_read_timeout_s: u64,
    /// A request body that sends nothing for this long is cut off.
    pub body_read_timeout_s: u64,
    /// The longest request head (request line and headers) a client may send; a longer one
    /// is refused (431). It is also the most a connection buffers of what it reads. At
    /// least 8192.
    pub max_header_bytes: u32,
    /// Memory for the request bodies the listener is receiving, all requests together:
    /// past it, bodies wait (and their clients with them) until others are done. The first
    /// 64 KiB of each body are not counted; one request counts at most a quarter of it.
    pub body_memory_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            rate_limit_per_s: 0.0,
            rate_limit_burst: 0,
            concurrency_limit: 0,
            max_connections: 1024,
            header_read_timeout_s: 30,
            body_read_timeout_s: 60,
            max_header_bytes: 64 * 1024,
            body_memory_bytes: 64 * 1024 * 1024,
        }
    }
}

impl Limits {
    /// The rate's quota, when there is one.
    fn quota(&self) -> Option<Quota> {
        let rate = self.rate_limit_per_s;
        if !(rate.is_finite() && rate > 0.0) {
            return None;
        }
        let burst = match self.rate_limit_burst {
            0 => rate.ceil().min(f64::from(u32::MAX)) as u32,
            n => n,
        };
        let period = Duration::try_from_secs_f64(1.0 / rate).ok()?;
        Some(
            Quota::with_period(period)?
                .allow_burst(NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN)),
        )
    }
}

/// Who a request counts against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Key {
    /// The authenticated client, in the API's own terms.
    Client(Arc<str>),
    /// A caller that did not authenticate, by its address.
    Peer(IpAddr),
}

impl Key {
    pub fn client(id: impl Into<Arc<str>>) -> Key {
        Key::Client(id.into())
    }

    /// An IPv6 peer by its /64, which one host usually holds whole (so it cannot take a
    /// fresh budget per address); an IPv4-mapped one as the IPv4 address it is.
    pub fn peer(ip: IpAddr) -> Key {
        Key::Peer(match ip.to_canonical() {
            IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
            v4 => v4,
        })
    }
}

/// The address a request's connection came from, as [`crate::listener::serve`] records it
/// (unspecified where a request did not come through it, as in a handler's unit test).
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub IpAddr);

impl Peer {
    pub fn of(extensions: &Extensions) -> IpAddr {
        extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip())
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Peer {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Peer(Peer::of(&parts.extensions)))
    }
}

/// Why a request was refused: each API answers it as its own 429, with `Retry-After`.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Refusal {
    #[error("over the rate limit of this client; retry after {} s", seconds(*.0))]
    Rate(Duration),
    #[error("this client has reached its limit of {0} requests in flight")]
    InFlight(u32),
}

fn seconds(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

impl Refusal {
    /// Whole seconds until a retry can pass, at least 1 (a request in flight has no known
    /// end: 1 s).
    pub fn retry_after_s(&self) -> u64 {
        match self {
            Refusal::Rate(wait) => seconds(*wait).max(1),
            Refusal::InFlight(_) => 1,
        }
    }

    /// Adds `Retry-After` (RFC 9110 §10.2.3) to an answer's headers.
    pub fn set_retry_after(&self, headers: &mut HeaderMap) {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(self.retry_after_s()));
    }
}

/// Per-client limits of one listener: cheap to clone; with both limits off, asking is free.
#[derive(Clone, Default)]
pub struct Limiter(Option<Arc<Tables>>);

struct Tables {
    rate: Option<DefaultKeyedRateLimiter<Key>>,
    in_flight: Option<InFlight>,
}

struct InFlight {
    limit: u32,
    counts: DashMap<Key, Arc<AtomicU32>>,
}

/// How often keys that hold nothing are dropped: a full bucket, no request in flight.
const SWEEP_EVERY: Duration = Duration::from_secs(10);

impl Limiter {
    /// The limiter of `limits`; with a limit on, a task drops idle keys while it lives.
    pub fn new(limits: &Limits) -> Self {
        let rate = limits.quota().map(RateLimiter::dashmap);
        let in_flight = (limits.concurrency_limit > 0).then(|| InFlight {
            limit: limits.concurrency_limit,
            counts: DashMap::new(),
        });
        if rate.is_none() && in_flight.is_none() {
            return Limiter(None);
        }
        let tables = Arc::new(Tables { rate, in_flight });
        tokio::spawn(sweep(Arc::downgrade(&tables)));
        Limiter(Some(tables))
    }

    /// Counts a request against `key`: an [`Admission`] to hold while the request is in
    /// flight, or why it is refused. A refused request spends nothing.
    pub fn admit(&self, key: Key) -> Result<Admission, Refusal> {
        let Some(tables) = &self.0 else {
            return Ok(Admission(None));
        };
        let admission = Admission(match &tables.in_flight {
            Some(in_flight) => {
                let count = Arc::clone(&in_flight.counts.entry(key.clone()).or_default());
                if count.fetch_add(1, Ordering::AcqRel) >= in_flight.limit {
                    count.fetch_sub(1, Ordering::AcqRel);
                    return Err(Refusal::InFlight(in_flight.limit));
                }
                Some(count)
            }
            None => None,
        });
        // Refused by the rate, the admission is dropped: the request is not in flight.
        if let Some(rate) = &tables.rate
            && let Err(not_until) = rate.check_key(&key)
        {
            return Err(Refusal::Rate(not_until.wait_time_from(rate.clock().now())));
        }
        Ok(admission)
    }
}

/// Drops, every [`SWEEP_EVERY`], the keys a fresh one would be indistinguishable from,
/// so the tables hold only clients active lately, whatever the number of addresses.
async fn sweep(tables: Weak<Tables>) {
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(tables) = tables.upgrade() else {
            return;
        };
        tables.drop_idle();
    }
}

impl Tables {
    fn drop_idle(&self) {
        if let Some(rate) = &self.rate {
            rate.retain_recent();
            rate.shrink_to_fit();
        }
        if let Some(in_flight) = &self.in_flight {
            // An admission holds a clone of its count: only unheld counts go.
            in_flight.counts.retain(|_, c| Arc::strong_count(c) > 1);
            in_flight.counts.shrink_to_fit();
        }
    }
}

/// A request admitted: it stays in flight for its client until this is dropped.
#[must_use = "the request is in flight only while its admission is held"]
pub struct Admission(Option<Arc<AtomicU32>>);

impl Drop for Admission {
    fn drop(&mut self) {
        if let Some(count) = &self.0 {
            count.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Admission {
    /// `res`, holding the admission until its body has gone out: a streamed answer (a
    /// proxied one, a file) is still in flight.
    pub fn until_sent(self, res: Response) -> Response {
        if self.0.is_none() {
            return res;
        }
        res.map(|body| {
            Body::new(Holding {
                body,
                _admission: self,
            })
        })
    }
}

/// A body that holds an admission until it is dropped.
struct Holding {
    body: Body,
    _admission: Admission,
}

impl http_body::Body for Holding {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(rate: f64, burst: u32, concurrency: u32) -> Limits {
        Limits {
            rate_limit_per_s: rate,
            rate_limit_burst: burst,
            concurrency_limit: concurrency,
            ..Limits::default()
        }
    }

    #[tokio::test]
    async fn a_burst_passes_then_the_next_is_refused_with_the_wait_and_others_pass() {
        // One request an hour: nothing refills while the test runs.
        let limiter = Limiter::new(&limits(1.0 / 3600.0, 3, 0));
        let a = || Key::client("a");
        for _ in 0..3 {
            drop(limiter.admit(a()).unwrap());
        }
        let refused = limiter.admit(a()).err().unwrap();
        assert!(matches!(refused, Refusal::Rate(_)));
        assert!(
            (3000..=3600).contains(&refused.retry_after_s()),
            "{refused}"
        );
        drop(limiter.admit(Key::client("b")).unwrap());
        drop(
            limiter
                .admit(Key::peer("127.0.0.1".parse().unwrap()))
                .unwrap(),
        );
    }

    #[tokio::test]
    async fn requests_in_flight_are_counted_until_their_admission_drops() {
        let limiter = Limiter::new(&limits(0.0, 0, 2));
        let a = || Key::client("a");
        let first = limiter.admit(a()).unwrap();
        let _second = limiter.admit(a()).unwrap();
        assert!(matches!(limiter.admit(a()), Err(Refusal::InFlight(2))));
        let _other = limiter.admit(Key::client("b")).unwrap();
        drop(first);
        let _third = limiter.admit(a()).unwrap();
    }

    #[tokio::test]
    async fn a_refused_request_spends_nothing() {
        // Two requests an hour, one at a time.
        let limiter = Limiter::new(&limits(1.0 / 3600.0, 2, 1));
        let a = || Key::client("a");
        let first = limiter.admit(a()).unwrap();
        assert!(matches!(limiter.admit(a()), Err(Refusal::InFlight(1))));
        drop(first);
        drop(limiter.admit(a()).unwrap());
        assert!(matches!(limiter.admit(a()), Err(Refusal::Rate(_))));
        // Nor does a refusal by the rate hold a place in flight.
        let limiter = Limiter::new(&limits(1.0 / 3600.0, 1, 1));
        drop(limiter.admit(a()).unwrap());
        assert!(matches!(limiter.admit(a()), Err(Refusal::Rate(_))));
        let counts = &limiter
            .0
            .as_ref()
            .unwrap()
            .in_flight
            .as_ref()
            .unwrap()
            .counts;
        assert_eq!(counts.get(&a()).unwrap().load(Ordering::Acquire), 0);
    }

    #[tokio::test]
    async fn idle_keys_are_dropped_and_held_ones_kept() {
        let limiter = Limiter::new(&limits(1000.0, 1, 4));
        let held = limiter.admit(Key::client("held")).unwrap();
        for i in 0..100 {
            drop(limiter.admit(Key::client(format!("c{i}"))).unwrap());
        }
        // Every bucket of 1 refills within a millisecond at 1000/s.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let tables = limiter.0.as_ref().unwrap();
        tables.drop_idle();
        let rate_keys = tables.rate.as_ref().unwrap().len();
        let count_keys = tables.in_flight.as_ref().unwrap().counts.len();
        assert_eq!(
            (rate_keys, count_keys),
            (0, 1),
            "only the count of the held request stays"
        );
        drop(held);
    }

    #[test]
    fn off_limits_cost_nothing_and_burst_defaults_to_a_second() {
        assert!(Limiter::new(&Limits::default()).0.is_none());
        let q = limits(2.5, 0, 0).quota().unwrap();
        assert_eq!(q.burst_size().get(), 3);
        assert_eq!(q.replenish_interval(), Duration::from_millis(400));
        assert!(limits(f64::NAN, 0, 0).quota().is_none());
    }

    #[test]
    fn an_ipv6_peer_counts_by_its_64() {
        let a = Key::peer("2001:db8:1:2:3:4:5:6".parse().unwrap());
        let b = Key::peer("2001:db8:1:2:ffff::1".parse().unwrap());
        let c = Key::peer("2001:db8:1:3::1".parse().unwrap());
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(
            Key::peer("::ffff:10.0.0.1".parse().unwrap()),
            Key::peer("10.0.0.1".parse().unwrap())
        );
    }
}
