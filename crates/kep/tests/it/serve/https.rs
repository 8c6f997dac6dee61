//! TLS on every listener (CONTRACT §0 "Running kep anywhere"): the data dir's own CA, given
//! files, a certificate replaced under a running server, and the files kep refuses. The
//! peers are a user's: Python's `requests` verifying against the CA, `openssl s_client`
//! for ALPN, the `kep` CLI (REST and `wss`) trusting the data dir's CA by itself.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::{
    Joiner, KEP, Server, cli, eventually_blocking, live_service, port0, serve, serve_refused,
};

const LISTENERS: [&str; 5] = ["admin", "live", "adapter", "messaging", "gateway"];

fn port(url: &str) -> &str {
    url.rsplit(':').next().unwrap()
}

/// `python3 -c script args…`, which must succeed: its stdout.
fn python(script: &str, args: &[&str]) -> String {
    let out = Command::new("python3")
        .args(["-c", script])
        .args(args)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// What `openssl s_client` says of a handshake with `url` offering `alpn`, verified
/// against `ca`.
fn s_client(url: &str, alpn: &str, ca: &Path) -> String {
    let out = Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{}", port(url))])
        .args(["-alpn", alpn, "-verify_return_error", "-CAfile"])
        .arg(ca)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("openssl (./test installs it)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The leaf certificate `url` presents, as PEM without line breaks.
fn presented(url: &str) -> String {
    let pem = python(
        "import ssl, sys; print(ssl.get_server_certificate(('127.0.0.1', int(sys.argv[1]))))",
        &[port(url)],
    );
    pem.split_whitespace().collect()
}

fn pem_text(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap()
        .split_whitespace()
        .collect()
}

#[test]
fn every_listener_speaks_https_that_the_data_dirs_ca_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let args = [port0(), vec!["--tls-self-signed"]].concat();
    let srv = serve(dir.path(), &args, &[]);
    let ca = dir.path().join("tls").join("ca.pem");
    let urls: Vec<String> = LISTENERS.iter().map(|l| srv.url(l)).collect();
    for url in &urls {
        assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    }

    // requests verifies every listener against the CA, and refuses it on the system's roots.
    let script = "import sys, requests\n\
                  for url in sys.argv[2:]:\n\
                  \x20   print(requests.get(url + '/healthz', verify=sys.argv[1]).status_code)\n\
                  \x20   try:\n\
                  \x20       requests.get(url + '/healthz'); print('unverified')\n\
                  \x20   except requests.exceptions.SSLError:\n\
                  \x20       print('refused')\n";
    let py_args: Vec<&str> = [ca.to_str().unwrap()]
        .into_iter()
        .chain(urls.iter().map(String::as_str))
        .collect();
    let seen = python(script, &py_args);
    let seen: Vec<&str> = seen.lines().collect();
    assert_eq!(seen[..2], ["200", "refused"], "admin: {seen:?}");
    for (i, pair) in seen.chunks(2).enumerate() {
        assert!(pair[0].parse::<u16>().is_ok(), "{}: {pair:?}", LISTENERS[i]);
        assert_eq!(pair[1], "refused", "{}", LISTENERS[i]);
    }

    // ALPN: HTTP/2 where the client offers it, HTTP/1.1 else; the chain verifies.
    for (offered, chosen) in [
        ("h2", "h2"),
        ("http/1.1", "http/1.1"),
        ("h2,http/1.1", "h2"),
    ] {
        for url in [&srv.url("admin"), &srv.url("gateway")] {
            let said = s_client(url, offered, &ca);
            assert!(
                said.contains(&format!("ALPN protocol: {chosen}")),
                "{offered}: {said}"
            );
            assert!(said.contains("Verify return code: 0 (ok)"), "{said}");
        }
    }

    // Plain HTTP to a TLS listener: a 400 that says so, in the API's shape.
    let plain = format!("http://127.0.0.1:{}/healthz", port(&srv.url("admin")));
    let res = reqwest::blocking::get(&plain).unwrap();
    assert_eq!(res.status(), 400);
    let body: serde_json::Value = res.json().unwrap();
    assert_eq!(body["error"]["code"], "bad_request");
    assert!(body["error"]["message"].as_str().unwrap().contains("HTTPS"));

    the_cli_trusts_the_data_dirs_ca(&srv);

    // The next start reuses the CA and the certificate.
    let (ca_pem, cert) = (pem_text(&ca), presented(&srv.url("live")));
    drop(srv);
    let srv = serve(dir.path(), &args, &[]);
    assert_eq!(pem_text(&ca), ca_pem);
    assert_eq!(presented(&srv.url("live")), cert);
}

/// The CLI finds the https URLs and trusts the CA with nothing set: REST calls, a
/// provision whose `api` is https, and a participant over `wss`.
fn the_cli_trusts_the_data_dirs_ca(srv: &Server) {
    let ready = Command::new(KEP)
        .args(["probe", "ready"])
        .env("KEP_DATA_DIR", &srv.data_dir)
        .output()
        .unwrap();
    assert!(
        ready.status.success(),
        "{}",
        String::from_utf8_lossy(&ready.stderr)
    );
    let svc = live_service(srv, "secure");
    // The provision's `api`, which the room commands then call, is the https URL.
    let saved = std::fs::read(srv.data_dir.join("cli").join("live-token.json")).unwrap();
    let saved: serde_json::Value = serde_json::from_slice(&saved).unwrap();
    assert_eq!(saved["api"].as_str(), Some(srv.url("live").as_str()));
    let mut joiner = Joiner::start(
        srv,
        &[
            "lobby",
            "--service-id",
            "secure",
            "--service-secret",
            svc["serviceSecret"].as_str().unwrap(),
        ],
    );
    assert_eq!(joiner.next()["type"], "joined");
    assert_eq!(cli(srv, &["live", "rooms"]), serde_json::json!(["lobby"]));
    joiner.child.kill().unwrap();
}

#[test]
fn a_certificate_replaced_on_disk_is_presented_after_sighup() {
    let certs = tempfile::tempdir().unwrap();
    kep_testkit::tls::certificates(certs.path());
    let (cert, key) = (
        certs.path().join("server.pem"),
        certs.path().join("server.key"),
    );
    // Readable by others: kep serves, and says so.
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let args = [
        port0(),
        vec![
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    ]
    .concat();
    let srv = serve(dir.path(), &args, &[]);
    assert!(
        srv.logs().contains("may be read by other users"),
        "{}",
        srv.logs()
    );
    let admin = srv.url("admin");
    assert_eq!(presented(&admin), pem_text(&cert));

    // The same key, a new certificate: written over the file, then SIGHUP.
    kep_testkit::tls::openssl(
        certs.path(),
        "req -x509 -key server.key -subj /CN=replaced -days 2 -addext subjectAltName=IP:127.0.0.1 -out replaced.pem",
    );
    std::fs::copy(certs.path().join("replaced.pem"), &cert).unwrap();
    let hup = || {
        Command::new("kill")
            .args(["-HUP", &srv.child.id().to_string()])
            .status()
            .unwrap()
    };
    hup();
    eventually_blocking(Duration::from_secs(10), "the new certificate", || {
        (presented(&admin) == pem_text(&cert))
            .then_some(())
            .ok_or("the old one still")
    });

    // A file half written when the signal comes: the certificate in use stays.
    std::fs::write(&cert, "-----BEGIN CERTIFICATE-----\nAAAA\n").unwrap();
    hup();
    eventually_blocking(Duration::from_secs(10), "the refusal logged", || {
        srv.logs()
            .contains("the TLS certificate in use stays")
            .then_some(())
            .ok_or("not yet")
    });
    assert_eq!(
        presented(&admin),
        pem_text(&certs.path().join("replaced.pem"))
    );
}

#[test]
fn tls_files_that_do_not_serve_stop_the_start_naming_them() {
    let certs = tempfile::tempdir().unwrap();
    kep_testkit::tls::certificates(certs.path());
    let file = |f: &str| certs.path().join(f).to_str().unwrap().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let refused =
        |extra: &[&str]| serve_refused(dir.path(), &[port0(), extra.to_vec()].concat(), &[]);

    let err = refused(&[
        "--tls-cert",
        &file("server.pem"),
        "--tls-key",
        &file("ca.key"),
    ]);
    assert!(err.contains("does not match the certificate"), "{err}");
    assert!(err.contains(&file("ca.key")), "{err}");

    let err = refused(&[
        "--tls-cert",
        &file("missing.pem"),
        "--tls-key",
        &file("server.key"),
    ]);
    assert!(
        err.contains(&format!("tls.cert_file {}", file("missing.pem"))),
        "{err}"
    );

    let err = refused(&["--tls-cert", &file("server.pem")]);
    assert!(err.contains("without tls.key_file"), "{err}");

    let err = refused(&[
        "--tls-self-signed",
        "--tls-cert",
        &file("server.pem"),
        "--tls-key",
        &file("server.key"),
    ]);
    assert!(err.contains("one or the other"), "{err}");
}
