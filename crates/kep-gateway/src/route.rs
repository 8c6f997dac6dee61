//! The routing table the gateway reads on every call: per endpoint, its key hash, its
//! deployments with their weights and ready instances, and the weighted choice.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::http::HeaderValue;

use super::pool::InstancePool;
use crate::meter::{Meter, Meters};

/// An endpoint's settings as the control plane sends them.
#[derive(Debug, Clone)]
pub struct EndpointRoute {
    pub name: String,
    pub key_hash: [u8; 32],
    /// Instances speak HTTP/2 (gRPC) rather than HTTP/1.1.
    pub http2: bool,
    /// Deployments with their weights, in creation order.
    pub deployments: Vec<(String, u32)>,
    /// With mirroring on: the deployment whose answer the caller gets.
    pub responder: Option<String>,
}

/// A ready instance: its kept-alive connections, and its `Host` value made once rather
/// than per call.
pub struct Instance {
    pub host: HeaderValue,
    pub pool: Arc<InstancePool>,
}

impl Instance {
    pub fn new(addr: SocketAddr, pool: Arc<InstancePool>) -> Instance {
        Instance {
            host: HeaderValue::try_from(addr.to_string())
                .expect("a socket address is a header value"),
            pool,
        }
    }
}

pub struct Backend {
    pub name: Arc<str>,
    pub meter: Arc<Meter>,
    instances: Vec<Instance>,
    next: AtomicUsize,
}

impl Backend {
    /// The next ready instance, round robin.
    pub fn instance(&self) -> Option<&Instance> {
        if self.instances.is_empty() {
            return None;
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        Some(&self.instances[i % self.instances.len()])
    }

    /// Every ready instance, for a call each of them must get.
    pub fn instances(&self) -> &[Instance] {
        &self.instances
    }

    pub fn instance_count(&self) -> usize {
        self.instances.len()
    }
}

pub struct Route {
    /// The endpoint's name: the client its key's calls count against.
    pub name: Arc<str>,
    pub key_hash: [u8; 32],
    /// The calls the gateway answers itself, before a deployment is chosen.
    pub meter: Arc<Meter>,
    pub http2: bool,
    pub backends: Vec<Backend>,
    mode: Mode,
}

enum Mode {
    Weighted(std::sync::Mutex<Swrr>),
    /// Every deployment gets the call; the one at this index answers.
    Mirrored(usize),
}

/// Where one call goes.
pub struct Choice<'a> {
    pub primary: &'a Backend,
    pub mirrors: Vec<&'a Backend>,
}

impl Route {
    pub fn build(
        config: &EndpointRoute,
        meters: &Meters,
        mut ready: impl FnMut(&str) -> Vec<Instance>,
    ) -> Route {
        let backends: Vec<Backend> = config
            .deployments
            .iter()
            .map(|(name, _)| Backend {
                name: name.as_str().into(),
                meter: meters.get(&config.name, Some(name)),
                instances: ready(name),
                next: AtomicUsize::new(0),
            })
            .collect();
        let responder = config
            .responder
            .as_ref()
            .and_then(|r| backends.iter().position(|b| &*b.name == r));
        let mode = match responder {
            Some(i) => Mode::Mirrored(i),
            None => {
                // With no weight anywhere (the weighted deployment was deleted), the rest share.
                let unweighted = config.deployments.iter().all(|(_, w)| *w == 0);
                let weights = config
                    .deployments
                    .iter()
                    .zip(&backends)
                    .enumerate()
                    .filter(|(_, (_, b))| !b.instances.is_empty())
                    .map(|(i, ((_, w), _))| (i, if unweighted { 1 } else { *w }))
                    .filter(|(_, w)| *w > 0);
                Mode::Weighted(std::sync::Mutex::new(Swrr::new(weights)))
            }
        };
        Route {
            name: config.name.as_str().into(),
            key_hash: config.key_hash,
            meter: meters.get(&config.name, None),
            http2: config.http2,
            backends,
            mode,
        }
    }

    /// Every call goes to every deployment (one answers).
    pub fn mirrors(&self) -> bool {
        matches!(self.mode, Mode::Mirrored(_))
    }

    /// The deployment that answers this call, and those that get a mirror of it; `None` when
    /// no deployment that should get calls has a ready instance.
    pub fn choose(&self) -> Option<Choice<'_>> {
        match &self.mode {
            Mode::Weighted(swrr) => {
                let i = swrr
                    .lock()
                    .expect("the picker lock is never poisoned")
                    .next()?;
                Some(Choice {
                    primary: &self.backends[i],
                    mirrors: Vec::new(),
                })
            }
            Mode::Mirrored(r) => {
                let primary = &self.backends[*r];
                if primary.instances.is_empty() {
                    return None;
                }
                let mirrors = self
                    .backends
                    .iter()
                    .enumerate()
                    .filter(|(i, b)| i != r && !b.instances.is_empty())
                    .map(|(_, b)| b)
                    .collect();
                Some(Choice { primary, mirrors })
            }
        }
    }
}

/// Smooth weighted round robin (as nginx's upstream does): over every run of
/// `sum(weights)` calls each entry is chosen exactly its weight's times, interleaved.
pub struct Swrr {
    entries: Vec<(usize, i64, i64)>,
    total: i64,
}

impl Swrr {
    pub fn new(weights: impl Iterator<Item = (usize, u32)>) -> Swrr {
        let weights: Vec<(usize, u32)> = weights.collect();
        // Divided by their common divisor, so 30:70 cycles every 10 calls, not 100.
        let g = weights.iter().fold(0, |g, (_, w)| gcd(g, *w)).max(1);
        let entries: Vec<(usize, i64, i64)> = weights
            .iter()
            .map(|(i, w)| (*i, i64::from(w / g), 0))
            .collect();
        let total = entries.iter().map(|e| e.1).sum();
        Swrr { entries, total }
    }

    pub fn next(&mut self) -> Option<usize> {
        let mut best: Option<(usize, i64)> = None;
        for (k, e) in self.entries.iter_mut().enumerate() {
            e.2 += e.1;
            if best.is_none_or(|(_, current)| e.2 > current) {
                best = Some((k, e.2));
            }
        }
        let (b, _) = best?;
        self.entries[b].2 -= self.total;
        Some(self.entries[b].0)
    }
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// Every endpoint's route; replaced whole on each change.
#[derive(Default)]
pub struct Table {
    pub endpoints: HashMap<String, Arc<Route>>,
    /// gRPC endpoints by their key's digest: a gRPC call names its endpoint by its key.
    grpc_keys: HashMap<[u8; 32], Arc<Route>>,
}

impl Table {
    pub fn new(endpoints: HashMap<String, Arc<Route>>) -> Table {
        let grpc_keys = endpoints
            .values()
            .filter(|r| r.http2)
            .map(|r| (r.key_hash, Arc::clone(r)))
            .collect();
        Table {
            endpoints,
            grpc_keys,
        }
    }

    /// The gRPC endpoint whose key an `Authorization: Bearer` value carries.
    pub fn by_key(&self, authorization: Option<&[u8]>) -> Option<&Arc<Route>> {
        let key = authorization
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(|v| kep_core::http::credentials(v, "Bearer"))?;
        self.grpc_keys.get(&kep_core::secret::sha256(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_window_of_a_cycle_holds_the_weights_exactly() {
        let mut s = Swrr::new([(0, 30), (1, 70)].into_iter());
        for _ in 0..50 {
            let window: Vec<usize> = (0..10).map(|_| s.next().unwrap()).collect();
            assert_eq!(window.iter().filter(|&&i| i == 0).count(), 3, "{window:?}");
        }
        let mut s = Swrr::new([(0, 1), (2, 2)].into_iter());
        let picks: Vec<usize> = (0..6).map(|_| s.next().unwrap()).collect();
        assert_eq!(picks.iter().filter(|&&i| i == 2).count(), 4);
        // Interleaved, not bunched: 2 never comes three times running.
        assert!(!picks.windows(3).any(|w| w.iter().all(|&i| i == 2)));
        assert_eq!(Swrr::new(std::iter::empty()).next(), None);
    }
}
