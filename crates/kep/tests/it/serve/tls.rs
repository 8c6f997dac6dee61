//! `tls.extra_roots`: kep's outbound https calls trust a CA of the operator's beside the
//! system's. The peer is a live service's external verifier (`scheme: external`
//! provisioning): [`kep_testkit::tls::HttpsPeer`], whose POST says yes, with a certificate
//! of a test CA.

use kep_api::live::{CreateServiceRequest, Scheme};
use kep_client::AdminClient;
use kep_client::live::LiveClient;

use crate::common::{port0, serve, serve_refused};

/// Provisions service `ext` (verified by `url`) through `srv`: whether the verifier's yes
/// was heard, within a few tries while the verifier starts.
async fn provisioned(admin: &str, live: &str, url: &str) -> bool {
    let admin = AdminClient::new(admin, "op");
    admin
        .create_live_service(&CreateServiceRequest {
            service_id: Some("ext".into()),
            external_verifier_url: Some(url.into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let client = LiveClient::new(live);
    for _ in 0..20 {
        let nonce = client
            .provision_nonce("ext", Scheme::External)
            .await
            .unwrap();
        if client
            .provision_with("ext", Scheme::External, &nonce, "any value")
            .await
            .is_ok()
        {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    false
}

#[tokio::test]
async fn outbound_https_trusts_the_extra_roots_beside_the_systems() {
    let certs = tempfile::tempdir().unwrap();
    kep_testkit::tls::certificates(certs.path());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _verifier = kep_testkit::tls::HttpsPeer::start(certs.path(), port);
    let url = format!("https://127.0.0.1:{port}/verify");
    let ca = certs.path().join("ca.pem");

    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("KEP_ADMIN_TOKEN", "op"),
        ("KEP_TLS_EXTRA_ROOTS", ca.to_str().unwrap()),
    ];
    let trusting = serve(dir.path(), &port0(), &env);
    assert!(provisioned(&trusting.admin, &trusting.live, &url).await);

    // Without the test CA the same verifier's certificate does not check: no yes heard.
    let dir = tempfile::tempdir().unwrap();
    let plain = serve(dir.path(), &port0(), &[("KEP_ADMIN_TOKEN", "op")]);
    assert!(!provisioned(&plain.admin, &plain.live, &url).await);
    assert!(
        plain.logs().contains("external verifier unreachable"),
        "{}",
        plain.logs()
    );
}

#[test]
fn extra_roots_that_cannot_be_read_stop_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.pem");
    let err = serve_refused(
        dir.path(),
        &port0(),
        &[("KEP_TLS_EXTRA_ROOTS", missing.to_str().unwrap())],
    );
    assert!(
        err.contains(&format!("tls.extra_roots: {}", missing.display())),
        "{err}"
    );
}
