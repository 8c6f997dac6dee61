//! The document's alert table (seed 001 "Events"): which conditions exist, their settings'
//! rules, and when each one raises an alert. One alert per transition into a condition;
//! a condition that stays true is quiet, except the CPU upper bound, which the document
//! repeats every 12 hours.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::ServingError;
use crate::ids::{DeploymentName, EndpointName};
use crate::kinds::{Condition, DeploymentState};
use crate::store::{Change, NewAlert, NewEvent};
use kep_api::serving::{AlertCondition, AlertSettings, EndpointMetrics, InstanceMetrics};

/// What a condition's threshold is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Threshold {
    None,
    /// Requests per second, above zero.
    Rate,
    /// Percent of the instance type's limit, 0 to 100.
    Percent,
}

/// Every condition of the table, by its CONTRACT name.
const CONDITIONS: [(Condition, Threshold); 12] = [
    (Condition::Qps, Threshold::Rate),
    (Condition::Status4xx, Threshold::None),
    (Condition::Status5xx, Threshold::None),
    (Condition::StateProgressing, Threshold::None),
    (Condition::StateAvailable, Threshold::None),
    (Condition::CpuUpper, Threshold::Percent),
    (Condition::CpuLower, Threshold::Percent),
    (Condition::MemoryUpper, Threshold::Percent),
    (Condition::MemoryLower, Threshold::Percent),
    (Condition::GpuUpper, Threshold::Percent),
    (Condition::GpuLower, Threshold::Percent),
    // "Being prepared" in the document: accepted and kept, raises nothing yet.
    (Condition::MonitoringLog, Threshold::None),
];

/// Checks settings against the table's rules.
pub fn validate(s: &AlertSettings) -> Result<(), ServingError> {
    match &s.webhook_url {
        Some(url) => {
            let parsed = reqwest::Url::parse(url)
                .map_err(|e| ServingError::field("webhook_url", format!("webhook_url: {e}")))?;
            if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
                return Err(ServingError::field(
                    "webhook_url",
                    "webhook_url is an http or https URL",
                ));
            }
        }
        None if s.enabled => {
            return Err(ServingError::field(
                "webhook_url",
                "an enabled alert channel needs a webhook_url",
            ));
        }
        None => {}
    }
    for (name, c) in &s.conditions {
        let field = format!("conditions.{name}");
        let Some(&(_, kind)) = CONDITIONS.iter().find(|(n, _)| n.as_str() == name) else {
            let known: Vec<&str> = CONDITIONS.iter().map(|(n, _)| n.as_str()).collect();
            return Err(ServingError::field(
                field,
                format!("{name} is not a condition (known: {})", known.join(", ")),
            ));
        };
        match (kind, c.threshold) {
            (Threshold::None, Some(_)) => {
                return Err(ServingError::field(
                    format!("{field}.threshold"),
                    format!("{name} takes no threshold"),
                ));
            }
            (Threshold::Rate | Threshold::Percent, None) if c.enabled => {
                return Err(ServingError::field(
                    format!("{field}.threshold"),
                    format!("{name} needs a threshold"),
                ));
            }
            (Threshold::Rate, Some(t)) if !(t.is_finite() && t > 0.0) => {
                return Err(ServingError::field(
                    format!("{field}.threshold"),
                    format!("{name}: the threshold is requests per second, above 0"),
                ));
            }
            (Threshold::Percent, Some(t)) if !(0.0..=100.0).contains(&t) => {
                return Err(ServingError::field(
                    format!("{field}.threshold"),
                    format!("{name}: the threshold is a percent, 0 to 100"),
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The settings with every condition of the table listed, off where not set.
pub fn complete(mut s: AlertSettings) -> AlertSettings {
    for (condition, _) in CONDITIONS {
        s.conditions
            .entry(condition.as_str().to_owned())
            .or_default();
    }
    s
}

/// How often alerts may repeat.
#[derive(Debug, Clone, Copy)]
pub struct AlertPolicy {
    /// A status alert is raised again only after this long without such an answer.
    pub status_quiet: Duration,
    /// While the CPU upper bound holds, its alert is repeated this often.
    pub cpu_repeat: Duration,
}

/// What one sample brought for an endpoint besides its metrics: the answers of each
/// status class since the previous sample, per deployment (`None`: the gateway's own).
pub struct StatusDelta {
    pub deployment: Option<DeploymentName>,
    pub by_class: [u64; 5],
}

/// Per endpoint, which conditions hold now, to raise an alert only on a transition.
#[derive(Default)]
pub struct Evaluator {
    endpoints: HashMap<EndpointName, Held>,
}

#[derive(Default)]
struct Held {
    qps: bool,
    /// Last answer of a status class, per (deployment, class).
    status: HashMap<(Option<DeploymentName>, usize), Instant>,
    /// Per (deployment, condition): when the alert was last sent.
    bounds: HashMap<(DeploymentName, Condition), Instant>,
}

fn enabled(s: &AlertSettings, condition: Condition) -> Option<&AlertCondition> {
    s.conditions.get(condition.as_str()).filter(|c| c.enabled)
}

fn subject(endpoint: &EndpointName, deployment: Option<&DeploymentName>) -> String {
    match deployment {
        Some(d) => format!("[kep] endpoint {endpoint}, deployment {d}"),
        None => format!("[kep] endpoint {endpoint}"),
    }
}

impl Evaluator {
    /// Forgets what an endpoint held (its settings changed or it was deleted), so a
    /// condition that holds raises its alert anew.
    pub fn reset(&mut self, endpoint: &EndpointName) {
        self.endpoints.remove(endpoint);
    }

    /// Forgets the endpoints `keep` does not name (deleted ones).
    pub fn retain(&mut self, keep: impl Fn(&EndpointName) -> bool) {
        self.endpoints.retain(|e, _| keep(e));
    }

    /// The alerts one sample of an endpoint raises.
    pub fn sample(
        &mut self,
        settings: &AlertSettings,
        m: &EndpointMetrics,
        deltas: &[StatusDelta],
        policy: AlertPolicy,
        now: Instant,
    ) -> Vec<NewAlert> {
        let endpoint = EndpointName::from(m.endpoint.as_str());
        let held = self.endpoints.entry(endpoint.clone()).or_default();
        let mut out = Vec::new();
        let mut raise = |deployment: Option<DeploymentName>, condition: Condition, what: String| {
            out.push(NewAlert {
                text: format!("{}: {what}", subject(&endpoint, deployment.as_ref())),
                endpoint: endpoint.clone(),
                deployment,
                condition,
            });
        };

        match enabled(settings, Condition::Qps).and_then(|c| c.threshold) {
            Some(t) => {
                let over = m.calls.qps >= t;
                if over && !held.qps {
                    raise(
                        None,
                        Condition::Qps,
                        format!("QPS {:.1} is at or above the threshold {t}", m.calls.qps),
                    );
                }
                held.qps = over;
            }
            None => held.qps = false,
        }

        for (condition, class, label) in [
            (Condition::Status4xx, 3, "4XX"),
            (Condition::Status5xx, 4, "5XX"),
        ] {
            if enabled(settings, condition).is_none() {
                held.status.retain(|(_, c), _| *c != class);
                continue;
            }
            for d in deltas.iter().filter(|d| d.by_class[class] > 0) {
                let key = (d.deployment.clone(), class);
                let quiet = held
                    .status
                    .get(&key)
                    .is_none_or(|last| now.duration_since(*last) >= policy.status_quiet);
                if quiet {
                    let n = d.by_class[class];
                    raise(
                        d.deployment.clone(),
                        condition,
                        format!(
                            "{n} {label} answer{} in the last sample",
                            if n == 1 { "" } else { "s" }
                        ),
                    );
                }
                held.status.insert(key, now);
            }
        }

        type Read = fn(&InstanceMetrics) -> Option<f64>;
        let bounds: [(Condition, &str, bool, Read); 6] = [
            (Condition::CpuUpper, "CPU", true, |i| i.cpu_percent),
            (Condition::CpuLower, "CPU", false, |i| i.cpu_percent),
            (Condition::MemoryUpper, "memory", true, |i| i.memory_percent),
            (Condition::MemoryLower, "memory", false, |i| {
                i.memory_percent
            }),
            (Condition::GpuUpper, "GPU", true, |i| i.gpu_percent),
            (Condition::GpuLower, "GPU", false, |i| i.gpu_percent),
        ];
        for (condition, what, upper, read) in bounds {
            let threshold = enabled(settings, condition).and_then(|c| c.threshold);
            for d in &m.deployments {
                let name = DeploymentName::from(d.name.as_str());
                let key = (name.clone(), condition);
                let Some(t) = threshold else {
                    held.bounds.remove(&key);
                    continue;
                };
                // The highest use for an upper bound, the lowest for a lower one.
                let values = d.instances.iter().filter_map(|i| Some((read(i)?, i)));
                let extreme = if upper {
                    values.max_by(|a, b| a.0.total_cmp(&b.0))
                } else {
                    values.min_by(|a, b| a.0.total_cmp(&b.0))
                };
                let Some((value, instance)) = extreme else {
                    continue;
                };
                let holds = if upper { value >= t } else { value <= t };
                if !holds {
                    held.bounds.remove(&key);
                    continue;
                }
                let due = match held.bounds.get(&key) {
                    None => true,
                    Some(sent) => {
                        condition == Condition::CpuUpper
                            && now.duration_since(*sent) >= policy.cpu_repeat
                    }
                };
                if due {
                    let side = if upper { "at or above" } else { "at or below" };
                    let id = &instance.id;
                    let beside = match (what, instance.gpu_memory_bytes) {
                        ("GPU", Some(bytes)) => format!(
                            "; GPU memory {:.2} GiB{}",
                            bytes as f64 / f64::from(1u32 << 30),
                            instance
                                .gpu_memory_percent
                                .map_or_else(String::new, |p| format!(
                                    ", {p:.1}% of its GPUs' memory"
                                ))
                        ),
                        _ => String::new(),
                    };
                    raise(
                        Some(name),
                        condition,
                        format!(
                            "{what} use {value:.1}% of the limit (instance {id}{beside}) is {side} the threshold {t}%"
                        ),
                    );
                    held.bounds.insert(key, now);
                }
            }
        }
        out
    }

    /// The alert a deployment-state transition raises, if its condition is on.
    pub fn event(settings: &AlertSettings, e: &NewEvent) -> Option<NewAlert> {
        use DeploymentState::{Available, Progressing};
        // kep's own start and stop are no change of the deployment's: its history says
        // so (the event's reason), and no alert is sent.
        let Change::Deployment {
            from: Some(from),
            to,
            lifecycle: None,
        } = e.change
        else {
            return None;
        };
        let condition = match (from, to) {
            (Available, Progressing) => Condition::StateProgressing,
            (Progressing, Available) => Condition::StateAvailable,
            _ => return None,
        };
        enabled(settings, condition)?;
        Some(NewAlert {
            endpoint: e.endpoint.clone(),
            deployment: Some(e.deployment.clone()),
            condition,
            text: format!(
                "{}: state changed from {} to {}",
                subject(&e.endpoint, Some(&e.deployment)),
                from.as_str(),
                to.as_str(),
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Lifecycle;
    use kep_api::serving::{CallMetrics, DeploymentMetrics, MirrorMetrics};

    fn settings(conditions: &[(&str, Option<f64>)]) -> AlertSettings {
        AlertSettings {
            enabled: true,
            webhook_url: Some("http://127.0.0.1:9/hook".into()),
            conditions: conditions
                .iter()
                .map(|(n, t)| {
                    (
                        n.to_string(),
                        AlertCondition {
                            enabled: true,
                            threshold: *t,
                        },
                    )
                })
                .collect(),
        }
    }

    fn metrics(qps: f64, cpu: &[Option<f64>]) -> EndpointMetrics {
        EndpointMetrics {
            endpoint: "e".into(),
            at: String::new(),
            calls: CallMetrics {
                qps,
                ..CallMetrics::default()
            },
            deployments: vec![DeploymentMetrics {
                name: "d".into(),
                state: DeploymentState::Available.as_str().into(),
                calls: CallMetrics::default(),
                mirror: MirrorMetrics::default(),
                instances: cpu
                    .iter()
                    .enumerate()
                    .map(|(i, c)| InstanceMetrics {
                        id: format!("d-{i}"),
                        state: "Running".into(),
                        ready: true,
                        restarts: 0,
                        cpu_cores: *c,
                        cpu_percent: c.map(|c| c * 100.0),
                        memory_bytes: None,
                        memory_percent: None,
                        gpu_percent: None,
                        gpu_memory_bytes: None,
                        gpu_memory_percent: None,
                    })
                    .collect(),
            }],
        }
    }

    const POLICY: AlertPolicy = AlertPolicy {
        status_quiet: Duration::from_secs(60),
        cpu_repeat: Duration::from_secs(3600),
    };

    #[test]
    fn settings_follow_the_table() {
        let ok = settings(&[
            ("qps", Some(0.5)),
            ("cpu_upper", Some(100.0)),
            ("cpu_lower", Some(0.0)),
        ]);
        validate(&ok).unwrap();
        let field = |s: &AlertSettings| match validate(s) {
            Err(ServingError::InvalidField { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            field(&settings(&[("qps", Some(0.0))])),
            "conditions.qps.threshold"
        );
        assert_eq!(
            field(&settings(&[("qps", None)])),
            "conditions.qps.threshold"
        );
        assert_eq!(
            field(&settings(&[("memory_upper", Some(100.5))])),
            "conditions.memory_upper.threshold"
        );
        assert_eq!(
            field(&settings(&[("status_5xx", Some(1.0))])),
            "conditions.status_5xx.threshold"
        );
        assert_eq!(field(&settings(&[("disk", None)])), "conditions.disk");
        let mut no_url = settings(&[]);
        no_url.webhook_url = None;
        assert_eq!(field(&no_url), "webhook_url");
        no_url.enabled = false;
        validate(&no_url).unwrap();
        no_url.webhook_url = Some("ftp://example/".into());
        assert_eq!(field(&no_url), "webhook_url");
        // A disabled condition may leave its threshold out.
        let mut off = settings(&[]);
        off.conditions
            .insert("qps".into(), AlertCondition::default());
        validate(&off).unwrap();
        assert_eq!(complete(off).conditions.len(), CONDITIONS.len());
    }

    #[test]
    fn qps_alerts_once_per_crossing() {
        let s = settings(&[("qps", Some(10.0))]);
        let mut ev = Evaluator::default();
        let now = Instant::now();
        let mut run = |qps| ev.sample(&s, &metrics(qps, &[]), &[], POLICY, now).len();
        assert_eq!(run(5.0), 0);
        assert_eq!(run(10.0), 1, "at the threshold");
        assert_eq!(run(50.0), 0, "still above: no storm");
        assert_eq!(run(9.9), 0);
        assert_eq!(run(11.0), 1, "a new crossing");
    }

    /// A GPU alert gives the use in percent of the instance type's GPUs, and the GPU
    /// memory beside it.
    #[test]
    fn a_gpu_alert_names_the_gpu_memory() {
        let s = settings(&[("gpu_upper", Some(90.0))]);
        let mut m = metrics(0.0, &[Some(1.0)]);
        let i = &mut m.deployments[0].instances[0];
        (i.gpu_percent, i.gpu_memory_bytes) = (Some(99.0), Some(20 << 30));
        i.gpu_memory_percent = Some(25.0);
        let a = Evaluator::default().sample(&s, &m, &[], POLICY, Instant::now());
        assert_eq!(
            a[0].text,
            "[kep] endpoint e, deployment d: GPU use 99.0% of the limit (instance d-0; GPU \
             memory 20.00 GiB, 25.0% of its GPUs' memory) is at or above the threshold 90%"
        );
    }

    #[test]
    fn status_alerts_wait_for_a_quiet_spell() {
        let s = settings(&[("status_5xx", None)]);
        let mut ev = Evaluator::default();
        let t0 = Instant::now();
        let five = |n| {
            vec![StatusDelta {
                deployment: Some("d".into()),
                by_class: [0, 0, 0, 0, n],
            }]
        };
        let m = metrics(0.0, &[]);
        let a = ev.sample(&s, &m, &five(3), POLICY, t0);
        assert_eq!(a.len(), 1);
        assert_eq!(
            a[0].text,
            "[kep] endpoint e, deployment d: 3 5XX answers in the last sample"
        );
        assert!(
            ev.sample(&s, &m, &five(1), POLICY, t0 + Duration::from_secs(30))
                .is_empty()
        );
        // 60 s after the last one (at 30 s), not after the alert.
        assert!(
            ev.sample(&s, &m, &five(1), POLICY, t0 + Duration::from_secs(80))
                .is_empty()
        );
        assert_eq!(
            ev.sample(&s, &m, &five(1), POLICY, t0 + Duration::from_secs(141))
                .len(),
            1
        );
        // 4XX answers are not watched here.
        let four = [StatusDelta {
            deployment: None,
            by_class: [0, 0, 0, 9, 0],
        }];
        assert!(
            ev.sample(&s, &m, &four, POLICY, t0 + Duration::from_secs(300))
                .is_empty()
        );
    }

    #[test]
    fn cpu_upper_repeats_while_it_holds_and_lower_bounds_do_not() {
        let s = settings(&[("cpu_upper", Some(80.0)), ("cpu_lower", Some(5.0))]);
        let mut ev = Evaluator::default();
        let t0 = Instant::now();
        let mut at = |secs, cpu: &[Option<f64>]| {
            ev.sample(
                &s,
                &metrics(0.0, cpu),
                &[],
                POLICY,
                t0 + Duration::from_secs(secs),
            )
            .into_iter()
            .map(|a| a.condition.as_str())
            .collect::<Vec<_>>()
        };
        assert_eq!(at(0, &[None]), Vec::<&str>::new(), "no figure yet");
        assert_eq!(at(1, &[Some(0.9), Some(0.01)]), ["cpu_upper", "cpu_lower"]);
        assert_eq!(at(2, &[Some(0.95), Some(0.02)]), Vec::<&str>::new());
        assert_eq!(at(3601, &[Some(0.95), Some(0.02)]), ["cpu_upper"]);
        assert_eq!(at(3602, &[Some(0.5), Some(0.5)]), Vec::<&str>::new());
        assert_eq!(at(3603, &[Some(0.5), Some(0.04)]), ["cpu_lower"]);
    }

    #[test]
    fn state_alerts_follow_the_transition_table() {
        let s = settings(&[("state_progressing", None)]);
        use DeploymentState::{Available, Progressing};
        let event = |from, to| NewEvent {
            at_ms: 0,
            endpoint: "e".into(),
            deployment: "d".into(),
            change: Change::Deployment {
                from,
                to,
                lifecycle: None,
            },
        };
        let a = Evaluator::event(&s, &event(Some(Available), Progressing)).unwrap();
        assert_eq!(
            a.text,
            "[kep] endpoint e, deployment d: state changed from Available to Progressing"
        );
        assert!(
            Evaluator::event(&s, &event(Some(Progressing), Available)).is_none(),
            "off"
        );
        assert!(
            Evaluator::event(&s, &event(None, Progressing)).is_none(),
            "a creation"
        );
        let mut stopping = event(Some(Available), Progressing);
        stopping.change = Change::Deployment {
            from: Some(Available),
            to: Progressing,
            lifecycle: Some(Lifecycle::Stopping),
        };
        assert!(Evaluator::event(&s, &stopping).is_none(), "kep's own stop");
    }
}
