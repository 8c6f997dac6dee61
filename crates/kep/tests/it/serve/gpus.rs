//! GPU allocation through `kep serve`, on a fake list of two GPUs (`serving.gpus`): each
//! instance of a GPU instance type gets GPUs no other holds, in its environment.

use std::path::Path;
use std::time::Duration;

use crate::common::{
    StopsGracefully, cli, cli_fails, eventually_blocking, port0, serve, wait_available,
};

/// What an instance's process was given: `CUDA_VISIBLE_DEVICES|NVIDIA_VISIBLE_DEVICES`, as
/// the image's wrapper wrote it at its start.
fn given(out: &Path, deployment: &str) -> String {
    std::fs::read_to_string(out.join(deployment)).unwrap_or_default()
}

#[test]
fn gpu_instances_get_gpus_of_their_own_and_a_deleted_deployment_gives_them_back() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("given");
    std::fs::create_dir_all(&out).unwrap();
    let srv = StopsGracefully(serve(
        &dir.path().join("data"),
        &port0(),
        &[("KEP_SERVING_GPUS", "[0, 1]")],
    ));
    let srv = &srv.0;
    // The quota's GPUs are the GPUs there are, as none is set.
    let quota = cli(srv, &["serving", "quota"]);
    assert_eq!(quota["total"]["gpu"], 2, "{quota}");

    let instance = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../kep-serving/tests/instance.py")
        .canonicalize()
        .unwrap();
    let wrapper = format!(
        "printf '%s|%s' \"$CUDA_VISIBLE_DEVICES\" \"$NVIDIA_VISIBLE_DEVICES\" > \"$OUT/$NAME\" && exec python3 {}",
        instance.display()
    );
    cli(
        srv,
        &[
            "serving", "image", "create", "gpu", "--", "sh", "-c", &wrapper,
        ],
    );
    let out_env = format!("OUT={}", out.display());
    let deploy = |endpoint: &str, name: &str| {
        let create = ["serving", "deployment", "create", endpoint, name];
        let env = format!("NAME={name}");
        // A deployment's own value does not take another instance's GPUs.
        let more = [
            "--image",
            "gpu",
            "--env",
            &out_env,
            "--env",
            &env,
            "--env",
            "CUDA_VISIBLE_DEVICES=0,1",
        ];
        [&create[..], &more]
            .concat()
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
    };
    let run = |args: Vec<String>| cli(srv, &args.iter().map(String::as_str).collect::<Vec<_>>());

    let gpu = [
        "serving",
        "endpoint",
        "create",
        "vision",
        "--instance-type",
        "gpu-small",
    ];
    cli(srv, &gpu);
    run(deploy("vision", "ga"));
    run(deploy("vision", "gb"));
    wait_available(srv, "vision", "ga");
    wait_available(srv, "vision", "gb");
    let (a, b) = (given(&out, "ga"), given(&out, "gb"));
    let mut both = [a.as_str(), b.as_str()];
    both.sort_unstable();
    assert_eq!(both, ["0|0", "1|1"], "one GPU each, a different one");
    let shown = cli(srv, &["serving", "deployment", "show", "vision", "ga"]);
    let held = shown["instances"][0]["gpus"].clone();
    assert_eq!(held.to_string(), format!("[{}]", &a[..1]), "{shown}");

    // No third GPU: refused as the quota refuses, in the API's error shape.
    let err = cli_fails(
        srv,
        &deploy("vision", "gc")
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    assert!(err.contains("409") && err.contains("gpu"), "{err}");

    // A CPU instance on this host sees no GPU.
    cli(srv, &["serving", "endpoint", "create", "text"]);
    run(deploy("text", "tt"));
    wait_available(srv, "text", "tt");
    assert_eq!(given(&out, "tt"), "|");

    // A deleted deployment's GPU goes to the next one.
    cli(srv, &["serving", "deployment", "delete", "vision", "ga"]);
    run(deploy("vision", "gc"));
    wait_available(srv, "vision", "gc");
    let c = eventually_blocking(Duration::from_secs(10), "gc's GPU", || {
        let c = given(&out, "gc");
        if c.is_empty() {
            Err("not written yet")
        } else {
            Ok(c)
        }
    });
    assert_eq!(c, a, "gc got the GPU ga gave back");
}
