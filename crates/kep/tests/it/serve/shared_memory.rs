//! Triton's system shared memory extension through the gateway, with
//! `serving.allow_client_shm`: `tritonclient` registers its regions once and every call
//! finds them, whichever instance the gateway picks, over REST and gRPC.

use std::process::Command;

use super::models::{made_models, model_server_tests, upload_model};
use crate::common::{StopsGracefully, cli, port0, serve, wait_available};

/// Two instances per deployment: a registration reaches both, or a call on the other one
/// fails to find its region (`check_shm.py` makes several calls in turn).
#[test]
fn shared_memory_regions_reach_every_instance_through_the_gateway() {
    let dir = tempfile::tempdir().unwrap();
    let models = made_models();
    let srv = StopsGracefully(serve(
        dir.path(),
        &port0(),
        &[("KEP_SERVING_ALLOW_CLIENT_SHM", "true")],
    ));
    let srv = &srv.0;
    let mlp = models.path().join("mlp.onnx");
    upload_model(srv, "mlp", &mlp, "pytorch");
    for protocol in ["http", "grpc"] {
        let endpoint = format!("shm-{protocol}");
        let e = cli(
            srv,
            &[
                "serving",
                "endpoint",
                "create",
                &endpoint,
                "--protocol",
                protocol,
                "--instance-count",
                "2",
            ],
        );
        cli(
            srv,
            &[
                "serving",
                "deployment",
                "create",
                &endpoint,
                "d1",
                "--type",
                "triton",
                "--model",
                "mlp",
            ],
        );
        wait_available(srv, &endpoint, "d1");
        let deployment = cli(srv, &["serving", "deployment", "show", &endpoint, "d1"]);
        assert_eq!(deployment["instances"].as_array().unwrap().len(), 2);
        let url = e["url"].as_str().unwrap().trim_start_matches("http://");
        // A gRPC client names the gateway's address alone; the key names the endpoint.
        let target = match protocol {
            "grpc" => url.split('/').next().unwrap(),
            _ => url,
        };
        let out = Command::new("python3")
            .arg(model_server_tests().join("check_shm.py"))
            .args([protocol, target, "mlp"])
            .arg(&mlp)
            .arg(e["api_key"].as_str().unwrap())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{protocol}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
