//! What `kep serve` keeps in its data dir is its user's alone (SECURITY.md, What is stored):
//! the dir and its folders 0700 and every file 0600 whatever the umask, and the values that
//! open a live service by themselves sealed under a key kept apart from the database.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest as _, Sha256};

use crate::common::{
    Joiner, KEP, Server, cli, live_service, msg_client, port0, serve_refused, serve_with,
};

/// `kep serve` started from a shell with umask 022, as most shells have it.
fn serve_under_umask_022(data_dir: &Path, extra: &[&str]) -> Server {
    let mut sh = Command::new("sh");
    sh.args(["-c", "umask 022; exec \"$0\" \"$@\"", KEP]);
    serve_with(sh, data_dir, extra, &[])
}

/// The data dir and everything under it, but `kep.log`, which the tests' harness writes.
fn everything_in(dir: &Path) -> Vec<PathBuf> {
    let mut found = vec![dir.to_owned()];
    let mut i = 0;
    while i < found.len() {
        if found[i].is_dir() {
            let entries = std::fs::read_dir(&found[i]).unwrap();
            found.extend(entries.map(|e| e.unwrap().path()));
        }
        i += 1;
    }
    found.retain(|p| p != &dir.join("kep.log"));
    found
}

fn sha256_hex(text: &str) -> String {
    hex::encode(Sha256::digest(text))
}

#[test]
fn a_data_dir_is_private_whatever_the_umask() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    // The harness makes the folder (0755 under this umask) before kep starts: kep closes it.
    let srv = serve_under_umask_022(&data, &port0());

    // What writes files: every service's database (WAL), the operator token, the address
    // book, the seal key, the CLI's saved tokens, an upload.
    msg_client(&srv, "modes");
    let jpeg = tmp.path().join("a.jpg");
    let mut bytes = vec![0xFF, 0xD8, 0xFF, 0xE0];
    bytes.resize(5000, 7);
    std::fs::write(&jpeg, &bytes).unwrap();
    cli(&srv, &["msg", "upload-mms", jpeg.to_str().unwrap()]);
    live_service(&srv, "modes");

    let found = everything_in(&data);
    let names: Vec<String> = found
        .iter()
        .map(|p| p.strip_prefix(&data).unwrap().display().to_string())
        .collect();
    let open: Vec<(String, String)> = found
        .iter()
        .zip(&names)
        .filter_map(|(path, name)| {
            let mode = std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
            let private = if path.is_dir() { 0o700 } else { 0o600 };
            (mode != private).then(|| (name.clone(), format!("{mode:o}")))
        })
        .collect();
    assert!(open.is_empty(), "not private: {open:?}");
    for expected in [
        "live.db",
        "live.db-wal",
        "messaging.db",
        "admin-token",
        "addresses.json",
        "seal.key",
        "cli/live-token.json",
    ] {
        assert!(names.iter().any(|n| n == expected), "{expected}: {names:?}");
    }
    assert!(
        names.iter().any(|n| n.starts_with("messaging-files/")),
        "{names:?}"
    );
}

#[test]
fn a_copied_database_alone_opens_no_live_service() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let mut srv = serve_under_umask_022(&data, &port0());
    let svc = cli(&srv, &["live", "service", "create", "--id", "sealed"]);
    let (admin_secret, service_secret) = (
        svc["adminSecret"].as_str().unwrap().to_owned(),
        svc["serviceSecret"].as_str().unwrap().to_owned(),
    );
    let hook = cli(
        &srv,
        &[
            "live",
            "webhook",
            "set",
            "sealed",
            "http://127.0.0.1:9/hook",
        ],
    );
    let hook_secret = hook["secret"].as_str().unwrap().to_owned();

    // What Provision's challenge and the join tokens' key are, and the webhook's signing
    // secret, are in no file but sealed: live.db and its WAL alone give none of them.
    let ha = sha256_hex(&format!("sealed:{admin_secret}"));
    let hs = sha256_hex(&format!("sealed:{service_secret}"));
    let stored: Vec<u8> = everything_in(&data)
        .iter()
        .filter(|p| p.is_file())
        .flat_map(|p| std::fs::read(p).unwrap())
        .collect();
    let stored = String::from_utf8_lossy(&stored);
    for (what, value) in [
        ("admin_ha", &ha),
        ("service_hs", &hs),
        ("webhook secret", &hook_secret),
    ] {
        assert!(
            !stored.contains(value.as_str()),
            "{what} stored in the clear"
        );
    }

    // The same data dir, restarted, opens them: Provision and a join still succeed.
    srv.child.kill().unwrap();
    srv.child.wait().unwrap();
    drop(srv);
    let srv = serve_under_umask_022(&data, &port0());
    cli(
        &srv,
        &[
            "live",
            "provision",
            "--service-id",
            "sealed",
            "--admin-secret",
            &admin_secret,
        ],
    );
    let joiner = Joiner::start(
        &srv,
        &[
            "room",
            "--service-id",
            "sealed",
            "--service-secret",
            &service_secret,
        ],
    );
    assert_eq!(joiner.next()["type"], "joined");
    drop(srv);
    joiner.exits();

    // With another key, the database is refused, naming the setting.
    let other = tmp.path().join("other.key");
    let other_key = ["--seal-key-file", other.to_str().unwrap()];
    let err = serve_refused(&data, &[&port0()[..], &other_key].concat(), &[]);
    assert!(
        err.contains(&format!(
            "seal_key_file: {} is not the key live's database was sealed with",
            other.display()
        )),
        "{err}"
    );
}
