//! What every instance of an endpoint must get through the gateway: Triton's system shared
//! memory regions (with `serving.allow_client_shm`), which `tritonclient` registers once
//! and every call then finds, and its logging and trace settings, which read back as
//! changed whichever instance the gateway picks; over REST and gRPC.

use std::process::Command;

use super::models::{made_models, model_server_tests, run, upload_model};
use crate::common::{StopsGracefully, cli, port0, serve, wait_available};

/// Two instances per deployment: a registration reaches both, or a call on the other one
/// fails to find its region (`check_shm.py` makes several calls in turn); a settings
/// change reaches both, or a read on the other one answers the old value
/// (`check_settings.py` reads each one several times, by both protocols).
#[test]
fn shared_memory_and_settings_reach_every_instance_through_the_gateway() {
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
        if protocol == "grpc" {
            // A gRPC endpoint takes REST calls too: both protocols on the same instances.
            run(Command::new("python3")
                .arg(model_server_tests().join("check_settings.py"))
                .args([url, target, "mlp", e["api_key"].as_str().unwrap()]));
        }
    }
}
