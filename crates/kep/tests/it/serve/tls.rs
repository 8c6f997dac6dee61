//! `tls.extra_roots`: kep's outbound https calls trust a CA of the operator's beside the
//! system's. The peer is a live service's external verifier (`scheme: external`
//! provisioning), served by Python's `http.server` behind its `ssl` with a certificate of
//! a test CA ([`kep_testkit::tls`]).

use std::process::{Child, Command, Stdio};

use kep_api::live::{CreateServiceRequest, Scheme};
use kep_client::AdminClient;
use kep_client::live::LiveClient;

use crate::common::{port0, serve, serve_refused};

/// An https verifier that says yes to every call, on 127.0.0.1:`port`; killed when dropped.
struct Verifier(Child);

impl Verifier {
    fn start(certs: &std::path::Path, port: u16) -> Verifier {
        let script = format!(
            "import http.server, ssl\n\
             class Yes(http.server.BaseHTTPRequestHandler):\n\
             \x20   def do_POST(self):\n\
             \x20       self.rfile.read(int(self.headers['Content-Length']))\n\
             \x20       self.send_response(200); self.send_header('Content-Length', '0'); self.end_headers()\n\
             s = http.server.HTTPServer(('127.0.0.1', {port}), Yes)\n\
             c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)\n\
             c.load_cert_chain('server.pem', 'server.key')\n\
             s.socket = c.wrap_socket(s.socket, server_side=True)\n\
             s.serve_forever()\n"
        );
        let child = Command::new("python3")
            .args(["-c", &script])
            .current_dir(certs)
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Verifier(child)
    }
}

impl Drop for Verifier {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

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
    let _verifier = Verifier::start(certs.path(), port);
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
