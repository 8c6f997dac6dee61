//! Monitoring and alerts (seed 001 "Events", CONTRACT §3). Once a sample interval, the
//! monitor reads the gateway's meters, the runtime's instances and their processes' CPU,
//! memory and GPU use; it keeps the numbers the API shows, sets the Prometheus gauges, and raises
//! the alerts whose conditions have just come to hold. State transitions come as events.

pub mod alerts;
mod delivery;
pub mod gpu;
mod instances;
mod resources;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use kep_core::clock::Clock;
use kep_core::service::Context;
use tokio::sync::{broadcast, mpsc};

use crate::ServingError;
use crate::ids::{DeploymentKey, DeploymentName, EndpointName};
use crate::kinds::DeploymentState;
use crate::runtime::{DeploymentStatus, RuntimeHandle};
use crate::store::{AlertRow, NewEvent, Store};
use alerts::{AlertPolicy, Evaluator, StatusDelta};
pub use delivery::DeliveryPolicy;
use instances::{export_counts, export_gauges, instance_view};
use kep_api::serving::{
    Alert, AlertSettings, CallMetrics, DeploymentMetrics, EndpointMetrics, InstanceMetrics,
    Latency, MirrorMetrics, Resources,
};
use kep_gateway::meter::{self, CLASSES, LATENCY_BUCKETS, MeterKey, Meters, Reading};
use resources::ProcessSampler;

/// Latency percentiles cover this much of the recent past.
const LATENCY_WINDOW: Duration = Duration::from_secs(60);
/// QPS is the rate over this much of the recent past, whatever the sample interval.
const RATE_WINDOW: Duration = Duration::from_secs(1);

pub struct MonitorSettings {
    pub interval: Duration,
    pub alerts: AlertPolicy,
    pub delivery: DeliveryPolicy,
    pub instance_types: BTreeMap<String, Resources>,
}

pub struct Monitor {
    store: Arc<dyn Store>,
    latest: ArcSwap<HashMap<EndpointName, EndpointMetrics>>,
    delivery: delivery::Delivery,
    /// Endpoints whose alert settings changed: what their conditions held is forgotten.
    resets: mpsc::UnboundedSender<EndpointName>,
    /// What samples are dated by.
    clock: Clock,
}

impl Monitor {
    pub async fn start(
        store: Arc<dyn Store>,
        runtime: RuntimeHandle,
        meters: Arc<Meters>,
        settings: MonitorSettings,
        events: broadcast::Receiver<NewEvent>,
        ctx: &Context,
    ) -> anyhow::Result<Arc<Monitor>> {
        let delivery = delivery::Delivery::start(store.clone(), settings.delivery, ctx).await?;
        let (resets, reset_rx) = mpsc::unbounded_channel();
        let monitor = Arc::new(Monitor {
            store,
            latest: ArcSwap::default(),
            delivery,
            resets,
            clock: ctx.clock.clone(),
        });
        let samples_in = |window: Duration| {
            (window
                .as_millis()
                .div_ceil(settings.interval.as_millis().max(1)))
            .max(1) as usize
        };
        let sampling = Sampling {
            runtime,
            meters,
            window: samples_in(LATENCY_WINDOW),
            rate_window: samples_in(RATE_WINDOW),
            settings,
            sampler: Some(ProcessSampler::default()),
            previous: HashMap::new(),
            windows: HashMap::new(),
            last: Instant::now(),
            evaluator: Evaluator::default(),
            alerting: Vec::new(),
        };
        ctx.spawn(Arc::clone(&monitor).run(sampling, events, reset_rx));
        Ok(monitor)
    }

    /// Sets the gauges of how many endpoints, deployments and instances there are, as of the
    /// last sample: called at each scrape of `/metrics`.
    pub fn observe(&self) {
        export_counts(&self.latest.load());
    }

    /// Refuses an endpoint that does not exist.
    async fn known(&self, endpoint: &EndpointName) -> Result<(), ServingError> {
        match self.store.endpoint(endpoint).await? {
            Some(_) => Ok(()),
            None => Err(ServingError::NotFound(format!("no endpoint {endpoint}"))),
        }
    }

    /// The endpoint's numbers as of the last sample; zeros before its first.
    pub async fn metrics(&self, endpoint: &EndpointName) -> Result<EndpointMetrics, ServingError> {
        self.known(endpoint).await?;
        Ok(self
            .latest
            .load()
            .get(endpoint)
            .cloned()
            .unwrap_or_else(|| EndpointMetrics {
                endpoint: endpoint.to_string(),
                at: self.clock.now().to_string(),
                calls: CallMetrics::default(),
                deployments: Vec::new(),
            }))
    }

    pub async fn alert_settings(
        &self,
        endpoint: &EndpointName,
    ) -> Result<AlertSettings, ServingError> {
        self.known(endpoint).await?;
        let stored = self.stored_alert_settings().await?;
        let settings = stored.into_iter().find(|(e, _)| e == endpoint);
        Ok(alerts::complete(
            settings.map(|(_, s)| s).unwrap_or_default(),
        ))
    }

    /// Every endpoint's alert settings, as the API states them: what alerts are judged by.
    async fn stored_alert_settings(&self) -> sqlx::Result<Vec<(EndpointName, AlertSettings)>> {
        let stored = self.store.alert_settings().await?;
        Ok(stored.into_iter().map(|(e, s)| (e, s.into())).collect())
    }

    pub async fn set_alert_settings(
        &self,
        endpoint: &EndpointName,
        settings: AlertSettings,
    ) -> Result<AlertSettings, ServingError> {
        self.known(endpoint).await?;
        alerts::validate(&settings)?;
        self.store
            .set_alert_settings(endpoint, &settings.clone().into())
            .await?;
        let _ = self.resets.send(endpoint.clone());
        Ok(alerts::complete(settings))
    }

    /// The endpoint's last `limit` alerts (1 to 1000), newest first.
    pub async fn alert_history(
        &self,
        endpoint: &EndpointName,
        limit: i64,
    ) -> Result<Vec<Alert>, ServingError> {
        self.known(endpoint).await?;
        Ok(self
            .store
            .alerts(endpoint, limit.clamp(1, 1000))
            .await?
            .into_iter()
            .map(alert_view)
            .collect())
    }

    async fn run(
        self: Arc<Self>,
        mut s: Sampling,
        mut events: broadcast::Receiver<NewEvent>,
        mut resets: mpsc::UnboundedReceiver<EndpointName>,
    ) {
        let mut tick = tokio::time::interval(s.settings.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    if let Err(e) = self.sample(&mut s).await {
                        tracing::warn!(error = %e, "monitoring sample");
                    }
                }
                event = events.recv() => match event {
                    Ok(e) => self.on_event(&e).await,
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!(missed = n, "the monitor fell behind the serving events");
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                Some(endpoint) = resets.recv() => s.evaluator.reset(&endpoint),
            }
        }
    }

    async fn on_event(&self, e: &NewEvent) {
        let Ok(all) = self.stored_alert_settings().await else {
            return;
        };
        let Some(settings) = active(&all, &e.endpoint) else {
            return;
        };
        if let (Some(alert), Some(url)) = (Evaluator::event(settings, e), &settings.webhook_url) {
            self.delivery.send(&alert, url).await;
        }
    }

    async fn sample(&self, s: &mut Sampling) -> anyhow::Result<()> {
        let now = Instant::now();
        let elapsed = now.duration_since(s.last).as_secs_f64().max(1e-3);
        s.last = now;
        let endpoints = self.store.endpoints().await?;
        let deployments = self.store.deployments(None).await?;
        let statuses: HashMap<DeploymentKey, DeploymentStatus> =
            s.runtime.statuses().await.into_iter().collect();

        let pids: Vec<u32> = statuses
            .values()
            .flat_map(|st| st.instances.iter().filter_map(|i| i.pid))
            .collect();
        let mut sampler = s.sampler.take().unwrap_or_default();
        let (sampler, sampled) = tokio::task::spawn_blocking(move || {
            let sampled = sampler.sample(&pids);
            (sampler, sampled)
        })
        .await?;
        s.sampler = Some(sampler);
        // Nothing that can fail comes after the meters are read: their readings become
        // the baseline of the next sample, so a sample that failed past this point would
        // lose its calls, and the alerts they raise, for good.
        let mut calls: HashMap<MeterKey, (CallMetrics, [u64; LATENCY_BUCKETS], Reading)> =
            HashMap::new();
        let mut deltas: HashMap<String, Vec<StatusDelta>> = HashMap::new();
        let known: HashSet<&str> = endpoints.iter().map(|e| e.name.as_str()).collect();
        for (key, reading) in s.meters.read() {
            // The calls of an endpoint created after this sample read the endpoints wait
            // for the next sample, which knows it: counted now, they would be judged by no
            // endpoint and lost.
            if !known.contains(key.endpoint.as_str()) {
                continue;
            }
            let previous = s.previous.insert(key.clone(), reading.clone());
            let previous = previous.unwrap_or_default();
            let by_class: [u64; 5] =
                std::array::from_fn(|i| reading.status[i].saturating_sub(previous.status[i]));
            let window = s.windows.entry(key.clone()).or_default();
            window.push_back(Interval {
                seconds: elapsed,
                requests: by_class.iter().sum(),
                latency: std::array::from_fn(|i| {
                    reading.latency[i].saturating_sub(previous.latency[i])
                }),
            });
            if window.len() > s.window {
                window.pop_front();
            }
            let summed: [u64; LATENCY_BUCKETS] =
                std::array::from_fn(|i| window.iter().map(|w| w.latency[i]).sum());
            let recent = window.iter().rev().take(s.rate_window);
            let (requests, seconds) =
                recent.fold((0, 0.0), |(n, t), w| (n + w.requests, t + w.seconds));
            deltas
                .entry(key.endpoint.clone())
                .or_default()
                .push(StatusDelta {
                    deployment: key.deployment.clone().map(DeploymentName::from),
                    by_class,
                });
            let metrics = CallMetrics {
                requests: reading.requests(),
                qps: requests as f64 / seconds,
                status: class_map(&reading.status),
                in_flight: reading.in_flight,
                latency_ms: latency(&summed),
            };
            calls.insert(key, (metrics, summed, reading));
        }
        s.previous.retain(|k, _| calls.contains_key(k));
        s.windows.retain(|k, _| calls.contains_key(k));

        let at = self.clock.now().to_string();
        let mut latest = HashMap::new();
        for e in &endpoints {
            let limits = s
                .settings
                .instance_types
                .get(&e.instance_type)
                .copied()
                .unwrap_or_default();
            let mut views = Vec::new();
            for d in deployments.iter().filter(|d| d.endpoint == e.name) {
                let key = DeploymentKey::new(&e.name, &d.name);
                let status = statuses.get(&key);
                let meter = calls.get(&MeterKey {
                    endpoint: e.name.to_string(),
                    deployment: Some(d.name.to_string()),
                });
                let instances: Vec<InstanceMetrics> = status
                    .map(|st| st.instances.as_slice())
                    .unwrap_or_default()
                    .iter()
                    .map(|i| {
                        let usage = i.pid.and_then(|p| sampled.usage.get(&p));
                        instance_view(i, usage, limits, &sampled.gpu_memory_total)
                    })
                    .collect();
                let state = status.map_or(DeploymentState::Progressing, |st| st.state);
                export_gauges(&key, state, &instances);
                views.push(DeploymentMetrics {
                    name: d.name.to_string(),
                    state: state.as_str().to_owned(),
                    calls: meter.map(|m| m.0.clone()).unwrap_or_default(),
                    mirror: meter.map_or_else(MirrorMetrics::default, |m| MirrorMetrics {
                        answered: m.2.mirror_answered,
                        failed: m.2.mirror_failed,
                    }),
                    instances,
                });
            }
            let mine: Vec<_> = calls
                .iter()
                .filter(|(k, _)| e.name == *k.endpoint)
                .collect();
            let summed: [u64; LATENCY_BUCKETS] =
                std::array::from_fn(|i| mine.iter().map(|(_, m)| m.1[i]).sum());
            let status: [u64; 5] =
                std::array::from_fn(|i| mine.iter().map(|(_, m)| m.2.status[i]).sum());
            let endpoint_calls = CallMetrics {
                requests: mine.iter().map(|(_, m)| m.0.requests).sum(),
                qps: mine.iter().map(|(_, m)| m.0.qps).sum(),
                status: class_map(&status),
                in_flight: mine.iter().map(|(_, m)| m.0.in_flight).sum(),
                latency_ms: latency(&summed),
            };
            latest.insert(
                e.name.clone(),
                EndpointMetrics {
                    endpoint: e.name.to_string(),
                    at: at.clone(),
                    calls: endpoint_calls,
                    deployments: views,
                },
            );
        }

        // Read after the meters: a call counted here came after any settings change it
        // followed, so the alerts it raises are judged by them. Should the read fail, the
        // last settings read judge this sample's calls, which are not lost.
        match self.stored_alert_settings().await {
            Ok(read) => s.alerting = read,
            Err(e) => tracing::warn!(error = %e, "reading the alert settings; using the last read"),
        }
        for (endpoint, m) in &latest {
            let Some(alert_settings) = active(&s.alerting, endpoint) else {
                s.evaluator.reset(endpoint);
                continue;
            };
            let deltas = deltas.remove(endpoint.as_str()).unwrap_or_default();
            let raised = s
                .evaluator
                .sample(alert_settings, m, &deltas, s.settings.alerts, now);
            if let Some(url) = &alert_settings.webhook_url {
                for alert in raised {
                    self.delivery.send(&alert, url).await;
                }
            }
        }
        s.evaluator.retain(|e| latest.contains_key(e));
        self.latest.store(Arc::new(latest));
        Ok(())
    }
}

/// What the sampling loop keeps between samples.
struct Sampling {
    runtime: RuntimeHandle,
    meters: Arc<Meters>,
    settings: MonitorSettings,
    /// Samples in the latency window, and in the rate window.
    window: usize,
    rate_window: usize,
    sampler: Option<ProcessSampler>,
    previous: HashMap<MeterKey, Reading>,
    windows: HashMap<MeterKey, VecDeque<Interval>>,
    last: Instant,
    evaluator: Evaluator,
    /// The alert settings the last sample read.
    alerting: Vec<(EndpointName, AlertSettings)>,
}

/// What one meter counted between two samples.
struct Interval {
    seconds: f64,
    requests: u64,
    latency: [u64; LATENCY_BUCKETS],
}

/// An endpoint's settings when its alert channel is on.
fn active<'a>(
    all: &'a [(EndpointName, AlertSettings)],
    endpoint: &EndpointName,
) -> Option<&'a AlertSettings> {
    let (_, settings) = all.iter().find(|(e, _)| e == endpoint)?;
    (settings.enabled && settings.webhook_url.is_some()).then_some(settings)
}

fn class_map(status: &[u64; 5]) -> BTreeMap<String, u64> {
    CLASSES
        .iter()
        .zip(status)
        .map(|(c, n)| ((*c).to_owned(), *n))
        .collect()
}

fn latency(buckets: &[u64; LATENCY_BUCKETS]) -> Option<Latency> {
    Some(Latency {
        p50: meter::quantile(buckets, 0.50)?,
        p90: meter::quantile(buckets, 0.90)?,
        p99: meter::quantile(buckets, 0.99)?,
    })
}

fn alert_view(row: AlertRow) -> Alert {
    let time = |ms: i64| {
        jiff::Timestamp::from_millisecond(ms).map_or_else(|_| ms.to_string(), |t| t.to_string())
    };
    Alert {
        id: row.id.0,
        at: time(row.at_ms),
        condition: row.condition.as_str().to_owned(),
        deployment: row.deployment.map(DeploymentName::into_string),
        text: row.text,
        status: row.status.as_str().to_owned(),
        attempts: u32::try_from(row.attempts).unwrap_or(0),
        error: row.error,
        sent_at: row.sent_at_ms.map(time),
    }
}
