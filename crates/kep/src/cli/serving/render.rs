//! The terminal views of answers: `deployment wait`'s progress line and `monitor`'s view.

use kep_api::serving::Deployment;
use kep_client::serving::{CallMetrics, EndpointMetrics, InstanceMetrics};

use super::super::table;

/// `blue: Progressing, 0/2 ready; blue-x52cy: Running, not ready, 1 restarts (…); …`
pub(super) fn progress(d: &Deployment, wanted: u32) -> String {
    let ready = d.instances.iter().filter(|i| i.ready).count();
    let mut line = format!("{}: {}, {ready}/{wanted} ready", d.name, d.state);
    for i in &d.instances {
        line.push_str(&format!(
            "; {}: {}, {}",
            i.id,
            i.state,
            if i.ready { "ready" } else { "not ready" }
        ));
        if i.restarts > 0 {
            line.push_str(&format!(", {} restarts", i.restarts));
        }
        if let Some(reason) = &i.reason {
            line.push_str(&format!(" ({reason})"));
        }
    }
    line
}

/// The monitor's view of one metrics answer: the endpoint's calls, then each deployment's
/// calls and mirror counts over a table of its instances.
pub(super) fn render_monitor(m: &EndpointMetrics) -> String {
    let mut out = format!("endpoint {}  at {}\n", m.endpoint, m.at);
    out.push_str(&format!("  {}\n", calls_line(&m.calls, true)));
    if m.deployments.is_empty() {
        out.push_str("\n  no deployments\n");
    }
    for d in &m.deployments {
        out.push_str(&format!("\ndeployment {}  {}\n", d.name, d.state));
        out.push_str(&format!("  {}\n", calls_line(&d.calls, false)));
        out.push_str(&format!(
            "  mirror answered {}  failed {}\n",
            d.mirror.answered, d.mirror.failed
        ));
        if d.instances.is_empty() {
            out.push_str("  no instances\n");
            continue;
        }
        let header = [
            "INSTANCE", "STATE", "READY", "RESTARTS", "CPU", "CPU%", "MEM MiB", "MEM%", "GPU%",
            "GPU MEM%",
        ];
        out.push_str(&table(header, 3, d.instances.iter().map(instance_row)));
    }
    out
}

/// `qps 1.5  requests 20  2xx 18  4xx 1  5xx 1  in flight 0  p50/p90/p99 1.0/2.0/3.0 ms`
fn calls_line(c: &CallMetrics, in_flight: bool) -> String {
    let mut line = format!("qps {:.1}  requests {}", c.qps, c.requests);
    // 2xx, 4xx and 5xx always, as zeros too; the other classes only once seen.
    for class in ["1xx", "2xx", "3xx", "4xx", "5xx"] {
        let n = c.status.get(class).copied().unwrap_or(0);
        if n > 0 || matches!(class, "2xx" | "4xx" | "5xx") {
            line.push_str(&format!("  {class} {n}"));
        }
    }
    if in_flight {
        line.push_str(&format!("  in flight {}", c.in_flight));
    }
    match &c.latency_ms {
        Some(l) => line.push_str(&format!(
            "  p50/p90/p99 {:.1}/{:.1}/{:.1} ms",
            l.p50, l.p90, l.p99
        )),
        None => line.push_str("  p50/p90/p99 -"),
    }
    line
}

fn instance_row(i: &InstanceMetrics) -> [String; 10] {
    fn or_dash(v: Option<f64>, decimals: usize) -> String {
        v.map_or_else(|| "-".into(), |v| format!("{v:.decimals$}"))
    }
    [
        i.id.clone(),
        i.state.clone(),
        if i.ready { "yes" } else { "no" }.into(),
        i.restarts.to_string(),
        or_dash(i.cpu_cores, 2),
        or_dash(i.cpu_percent, 1),
        or_dash(i.memory_bytes.map(|b| b as f64 / (1024.0 * 1024.0)), 1),
        or_dash(i.memory_percent, 1),
        or_dash(i.gpu_percent, 1),
        or_dash(i.gpu_memory_percent, 1),
    ]
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use kep_client::serving::{DeploymentMetrics, Latency, MirrorMetrics};

    use super::*;

    fn calls(requests: u64, qps: f64, status: &[(&str, u64)], p99: f64) -> CallMetrics {
        CallMetrics {
            requests,
            qps,
            status: status.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            in_flight: 3,
            latency_ms: Some(Latency {
                p50: 4.3,
                p90: 9.5,
                p99,
            }),
        }
    }

    #[test]
    fn the_monitor_view_shows_the_numbers() {
        let m = EndpointMetrics {
            endpoint: "sentiment".into(),
            at: "2025-06-01T12:00:00Z".into(),
            calls: calls(1234, 42.5, &[("2xx", 1200), ("4xx", 30), ("5xx", 4)], 77.7),
            deployments: vec![
                DeploymentMetrics {
                    name: "blue".into(),
                    state: "Available".into(),
                    calls: calls(1000, 30.0, &[("2xx", 990), ("5xx", 10)], 55.5),
                    mirror: MirrorMetrics {
                        answered: 17,
                        failed: 2,
                    },
                    instances: vec![InstanceMetrics {
                        id: "blue-x52cy".into(),
                        state: "Running".into(),
                        ready: true,
                        restarts: 6,
                        cpu_cores: Some(0.25),
                        cpu_percent: Some(12.5),
                        memory_bytes: Some(256 * 1024 * 1024),
                        memory_percent: Some(25.0),
                        gpu_percent: None,
                        gpu_memory_bytes: None,
                        gpu_memory_percent: None,
                    }],
                },
                DeploymentMetrics {
                    name: "green".into(),
                    state: "Progressing".into(),
                    calls: CallMetrics {
                        status: BTreeMap::new(),
                        ..CallMetrics::default()
                    },
                    mirror: MirrorMetrics::default(),
                    instances: vec![],
                },
            ],
        };
        let view = render_monitor(&m);
        for want in [
            "sentiment",
            "qps 42.5",
            "requests 1234",
            "2xx 1200",
            "4xx 30",
            "5xx 4",
            "in flight 3",
            "4.3/9.5/77.7 ms",
            "deployment blue  Available",
            "requests 1000",
            "5xx 10",
            "55.5 ms",
            "mirror answered 17  failed 2",
            "blue-x52cy",
            "Running",
            "0.25",
            "12.5",
            "256.0",
            "25.0",
            "deployment green  Progressing",
            "p50/p90/p99 -",
            "no instances",
        ] {
            assert!(view.contains(want), "{want:?} missing from\n{view}");
        }
        let row = view.lines().find(|l| l.contains("blue-x52cy")).unwrap();
        assert!(row.ends_with(" -"), "no GPU dash in {row:?}");
        assert!(row.contains(" yes "), "{row:?}");
        assert!(!view.contains('\x1b'));
    }
}
