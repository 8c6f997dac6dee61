//! One instance's figures as the API and Prometheus show them: each use also as a percent
//! of what its instance type gives it; and how many instances there are, by state.

use std::collections::HashMap;

use super::resources::Usage;
use crate::ids::{DeploymentKey, EndpointName};
use crate::kinds::{DeploymentState, InstanceState};
use crate::runtime::InstanceStatus;
use kep_api::serving::{EndpointMetrics, InstanceMetrics, Resources};

/// `part` of `whole` in percent; none of nothing.
fn percent(part: f64, whole: f64) -> Option<f64> {
    (whole > 0.0).then(|| part / whole * 100.0)
}

/// An instance's figures, each use also as a percent of what its instance type gives it:
/// GPU compute of its type's GPUs (each 100%), GPU memory of the memory of the GPUs it
/// holds (`gpu_memory_total`, by host index).
pub fn instance_view(
    i: &InstanceStatus,
    usage: Option<&Usage>,
    limits: Resources,
    gpu_memory_total: &HashMap<u32, u64>,
) -> InstanceMetrics {
    let cpu_cores = usage.and_then(|u| u.cpu_cores);
    let memory_bytes = usage.map(|u| u.memory_bytes);
    let gpu = usage.and_then(|u| u.gpu);
    let gpu_memory: Option<u64> = i
        .gpus
        .iter()
        .map(|d| gpu_memory_total.get(d).copied())
        .sum();
    InstanceMetrics {
        id: i.id.to_string(),
        state: i.state.as_str().to_owned(),
        ready: i.ready,
        restarts: i.restarts,
        cpu_cores,
        cpu_percent: cpu_cores.and_then(|c| percent(c, limits.cpu)),
        memory_bytes,
        memory_percent: memory_bytes
            .and_then(|b| percent(b as f64, limits.memory_mb as f64 * 1024.0 * 1024.0)),
        gpu_percent: gpu.and_then(|g| percent(g.sm_percent, 100.0 * f64::from(limits.gpu))),
        gpu_memory_bytes: gpu.map(|g| g.memory_bytes),
        gpu_memory_percent: gpu
            .zip(gpu_memory.filter(|_| !i.gpus.is_empty()))
            .and_then(|(g, total)| percent(g.memory_bytes as f64, total as f64)),
    }
}

/// Per-instance gauges for Prometheus; an instance gone stops being updated and the
/// exporter drops its series after its idle timeout.
pub fn export_gauges(key: &DeploymentKey, state: DeploymentState, instances: &[InstanceMetrics]) {
    let deployment = [
        ("endpoint", key.endpoint.to_string()),
        ("deployment", key.deployment.to_string()),
    ];
    metrics::gauge!("kep_serving_deployment_available", &deployment).set(
        if state == DeploymentState::Progressing {
            0.0
        } else {
            1.0
        },
    );
    for i in instances {
        let labels = [
            ("endpoint", key.endpoint.to_string()),
            ("deployment", key.deployment.to_string()),
            ("instance", i.id.clone()),
        ];
        metrics::gauge!("kep_serving_instance_ready", &labels).set(if i.ready { 1.0 } else { 0.0 });
        metrics::gauge!("kep_serving_instance_restarts", &labels).set(f64::from(i.restarts));
        if let Some(c) = i.cpu_cores {
            metrics::gauge!("kep_serving_instance_cpu_cores", &labels).set(c);
        }
        if let Some(b) = i.memory_bytes {
            metrics::gauge!("kep_serving_instance_memory_bytes", &labels).set(b as f64);
        }
        if let Some(g) = i.gpu_percent {
            metrics::gauge!("kep_serving_instance_gpu_percent", &labels).set(g);
        }
        if let Some(b) = i.gpu_memory_bytes {
            metrics::gauge!("kep_serving_instance_gpu_memory_bytes", &labels).set(b as f64);
        }
        if let Some(p) = i.gpu_memory_percent {
            metrics::gauge!("kep_serving_instance_gpu_memory_percent", &labels).set(p);
        }
    }
}

/// Sets how many endpoints, deployments and instances there are, each state's count (0
/// where none is), as of a sample (`latest`; none before the first).
pub fn export_counts(latest: &HashMap<EndpointName, EndpointMetrics>) {
    use crate::metrics::{DEPLOYMENTS, ENDPOINTS, INSTANCES};
    metrics::gauge!(ENDPOINTS).set(latest.len() as f64);
    let deployments = || latest.values().flat_map(|e| &e.deployments);
    for state in DeploymentState::ALL.map(DeploymentState::as_str) {
        let n = deployments().filter(|d| d.state == state).count();
        metrics::gauge!(DEPLOYMENTS, "state" => state).set(n as f64);
    }
    for state in InstanceState::ALL.map(InstanceState::as_str) {
        let n = deployments()
            .flat_map(|d| &d.instances)
            .filter(|i| i.state == state)
            .count();
        metrics::gauge!(INSTANCES, "state" => state).set(n as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::InstanceId;
    use crate::monitor::gpu::GpuUse;

    fn running(gpus: Vec<u32>) -> InstanceStatus {
        InstanceStatus {
            gpus,
            ..InstanceStatus::new(InstanceId::from("d-abcde".to_owned()))
        }
    }

    fn usage(sm_percent: f64, memory_bytes: u64) -> Usage {
        Usage {
            cpu_cores: Some(2.0),
            memory_bytes: 1 << 30,
            gpu: Some(GpuUse {
                sm_percent,
                memory_bytes,
            }),
        }
    }

    const GIB: u64 = 1 << 30;

    /// A GPU busy is 100% of a one-GPU type and 50% of a two-GPU type (as seen on an H100:
    /// 99% of one GPU once showed as 9900%); GPU memory is a percent of the memory of the
    /// GPUs the instance holds.
    #[test]
    fn gpu_use_is_a_percent_of_the_instance_type_gpus() {
        let totals = HashMap::from([(0, 80 * GIB), (1, 80 * GIB), (2, 40 * GIB)]);
        let one = Resources {
            cpu: 4.0,
            memory_mb: 16384,
            gpu: 1,
        };
        let m = instance_view(
            &running(vec![1]),
            Some(&usage(99.0, 20 * GIB)),
            one,
            &totals,
        );
        assert_eq!(m.gpu_percent, Some(99.0));
        assert_eq!(m.gpu_memory_bytes, Some(20 * GIB));
        assert_eq!(m.gpu_memory_percent, Some(25.0));
        assert_eq!(m.cpu_percent, Some(50.0));
        assert_eq!(m.memory_percent, Some(6.25));

        let two = Resources { gpu: 2, ..one };
        let m = instance_view(
            &running(vec![0, 2]),
            Some(&usage(150.0, 60 * GIB)),
            two,
            &totals,
        );
        assert_eq!(m.gpu_percent, Some(75.0), "one GPU busy, the other half");
        assert_eq!(m.gpu_memory_percent, Some(50.0), "60 GiB of 80 + 40");

        // A CPU type on a GPU host: its memory figure, no percent of no GPU.
        let cpu = Resources { gpu: 0, ..one };
        let m = instance_view(&running(vec![]), Some(&usage(0.0, 0)), cpu, &totals);
        assert_eq!((m.gpu_percent, m.gpu_memory_percent), (None, None));
        assert_eq!(m.gpu_memory_bytes, Some(0));
        // A GPU whose memory NVML did not tell: no percent rather than a wrong one.
        let m = instance_view(&running(vec![3]), Some(&usage(10.0, GIB)), one, &totals);
        assert_eq!((m.gpu_percent, m.gpu_memory_percent), (Some(10.0), None));
        // No GPUs read (no NVML): no GPU figures at all.
        let none = Usage {
            gpu: None,
            ..usage(0.0, 0)
        };
        let m = instance_view(&running(vec![0]), Some(&none), one, &totals);
        assert_eq!(
            (m.gpu_percent, m.gpu_memory_bytes, m.gpu_memory_percent),
            (None, None, None)
        );
    }
}
