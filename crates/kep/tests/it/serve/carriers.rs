//! A carrier configured in the settings file, through the real binary: `kep serve` binds to
//! an SMSC (kep-smpp's small one) as the TOML says, a message sent with the CLI leaves over
//! that bind and its receipt makes it 200, `kep msg carriers` and `/metrics` show it, and a
//! SIGTERM unbinds. `kep smsc`, the SMSC a user tries carriers with, takes a message the
//! CLI sends through `kep serve` and prints it, and its receipt makes it 200.

use std::io::BufRead as _;
use std::process::{Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::Duration;

use kep_smpp::{MessageState, Smsc, SmscBehaviour};

use crate::common::{
    KEP, StopsGracefully, cli, eventually_blocking, msg_client, msg_send, port0, serve,
};

/// `kep serve` in `dir` with one SMPP carrier `name` for SMS, bound as `kep`/`secret` to an
/// SMSC on `port`, with `more` settings of the carrier.
fn serve_with_smpp(dir: &std::path::Path, name: &str, port: u16, more: &str) -> StopsGracefully {
    let config = dir.join("kep.toml");
    std::fs::write(
        &config,
        format!(
            "[[messaging.carriers]]\nname = \"{name}\"\nkind = \"smpp\"\ntypes = [\"SM\"]\n\
             host = \"127.0.0.1\"\nport = {port}\nsystem_id = \"kep\"\npassword = \"secret\"\n{more}"
        ),
    )
    .unwrap();
    let mut args = port0();
    args.extend(["--config", config.to_str().unwrap()]);
    StopsGracefully(serve(&dir.join("data"), &args, &[]))
}

#[test]
fn a_toml_carrier_takes_the_message_and_kep_unbinds_when_it_stops() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let smsc = runtime
        .block_on(Smsc::start(
            "127.0.0.1:0".parse().unwrap(),
            SmscBehaviour {
                receipt: std::sync::Arc::new(|_: &str| Some(MessageState::Delivered)),
                system_id: "kep".into(),
                password: "secret".into(),
                record: true,
                ..SmscBehaviour::default()
            },
        ))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let running = serve_with_smpp(dir.path(), "smsc", smsc.port(), "window = 8\n");
    let srv = &running.0;

    msg_client(srv, "c");
    let sent = msg_send(srv, "c-1", "안녕");
    let uid = sent["uid"].as_str().unwrap().to_owned();
    eventually_blocking(Duration::from_secs(20), "the receipt makes it 200", || {
        let shown = cli(srv, &["msg", "show", &uid]);
        match shown["result"]["status_code"].as_str() {
            Some("API_200") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    assert_eq!(smsc.received().len(), 1);

    let carriers = cli(srv, &["msg", "carriers", "--json"]);
    assert_eq!(
        (
            &carriers[0]["name"],
            &carriers[0]["state"],
            &carriers[0]["acknowledged"]
        ),
        (&"smsc".into(), &"up".into(), &1.into()),
        "{carriers}"
    );
    assert_eq!(carriers[1]["name"], "simulator");
    let table = std::process::Command::new(crate::common::KEP)
        .args(["msg", "carriers"])
        .env("KEP_DATA_DIR", &srv.data_dir)
        .output()
        .unwrap();
    let table = String::from_utf8(table.stdout).unwrap();
    assert!(table.contains("smsc") && table.contains("up"), "{table}");

    let scrape = reqwest::blocking::get(format!("{}/metrics", srv.admin))
        .unwrap()
        .text()
        .unwrap();
    for series in [
        r#"kep_messaging_carrier_acknowledged_total{carrier="smsc"} 1"#,
        r#"kep_messaging_carrier_receipts_total{carrier="smsc",state="DELIVRD"} 1"#,
        r#"kep_messaging_carrier_bound{carrier="smsc"} 1"#,
    ] {
        assert!(scrape.lines().any(|l| l == series), "{series} in\n{scrape}");
    }

    assert_eq!(smsc.unbinds(), 0);
    drop(running);
    assert_eq!(smsc.unbinds(), 1, "kep unbinds as it stops");
}

/// A process killed when dropped, so that a failed test leaves none behind.
struct KilledOnDrop(std::process::Child);

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The next line `kep smsc` printed, within 30 s.
fn next_line(lines: &Receiver<String>) -> String {
    lines
        .recv_timeout(Duration::from_secs(30))
        .expect("a line from kep smsc within 30 s")
}

#[test]
fn kep_smsc_prints_the_submit_of_a_cli_message_and_its_receipt_makes_it_200() {
    let mut smsc = KilledOnDrop(
        Command::new(KEP)
            .args(["smsc", "--port", "0"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let out = smsc.0.stdout.take().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let ready = next_line(&lines);
    let port: u16 = ready
        .strip_prefix("ready ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{ready:?} is no `ready <port>`"));

    let dir = tempfile::tempdir().unwrap();
    let running = serve_with_smpp(dir.path(), "local", port, "");
    let srv = &running.0;

    msg_client(srv, "c");
    let sent = msg_send(srv, "c-1", "안녕하세요");
    let uid = sent["uid"].as_str().unwrap().to_owned();
    let taken: serde_json::Value = serde_json::from_str(&next_line(&lines)).unwrap();
    assert_eq!(
        (&taken["destination"], &taken["text"]),
        (&"821012345678".into(), &"안녕하세요".into()),
        "{taken}"
    );
    assert!(
        taken["message_id"]
            .as_str()
            .is_some_and(|id| !id.is_empty()),
        "{taken}"
    );
    eventually_blocking(Duration::from_secs(20), "the receipt makes it 200", || {
        let shown = cli(srv, &["msg", "show", &uid]);
        match shown["result"]["status_code"].as_str() {
            Some("API_200") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });

    drop(running);
    let _ = Command::new("kill")
        .args(["-TERM", &smsc.0.id().to_string()])
        .status();
    let summary: serde_json::Value = serde_json::from_str(&next_line(&lines)).unwrap();
    assert_eq!(
        (&summary["submits"], &summary["binds"], &summary["unbinds"]),
        (&1.into(), &1.into(), &1.into()),
        "{summary}"
    );
    assert!(smsc.0.wait().unwrap().success());
}
