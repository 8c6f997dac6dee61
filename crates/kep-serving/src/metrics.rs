//! Model serving's series on `/metrics`, each described here. The calls' series are each
//! endpoint's (the gateway's meters); how many endpoints, deployments and instances there
//! are, by state, is there from the start, at 0.

use kep_gateway::meter::{DURATION, IN_FLIGHT, MIRROR, REQUESTS};

pub(crate) const ENDPOINTS: &str = "kep_serving_endpoints";
pub(crate) const DEPLOYMENTS: &str = "kep_serving_deployments";
pub(crate) const INSTANCES: &str = "kep_serving_instances";

/// Describes every series of the service.
pub(crate) fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_gauge!(ENDPOINTS, "Endpoints");
    describe_gauge!(DEPLOYMENTS, "Deployments, by state");
    describe_gauge!(INSTANCES, "Instances, by state");
    describe_counter!(REQUESTS, "Endpoint calls answered, by status class");
    describe_histogram!(DURATION, "Time to an endpoint call's answer headers");
    describe_gauge!(IN_FLIGHT, "Endpoint calls being answered");
    describe_counter!(MIRROR, "Mirrored calls, by outcome");
    describe_gauge!(
        "kep_serving_deployment_available",
        "1 while the deployment is available, 0 while it progresses"
    );
    let instance = [
        ("ready", "1 while the instance is ready"),
        ("restarts", "Times the instance was restarted"),
        ("cpu_cores", "CPU cores the instance's processes use"),
        ("memory_bytes", "Memory the instance's processes use"),
        (
            "gpu_percent",
            "GPU use, percent of the instance type's GPUs",
        ),
        ("gpu_memory_bytes", "GPU memory the instance uses"),
        (
            "gpu_memory_percent",
            "GPU memory use, percent of its GPUs' memory",
        ),
    ];
    for (figure, what) in instance {
        describe_gauge!(format!("kep_serving_instance_{figure}"), what);
    }
}
