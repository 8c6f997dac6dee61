//! `/metrics` as Prometheus itself reads it: `promtool check metrics` has nothing to say
//! about a scrape, and a Prometheus scraping kep's admin listener answers PromQL over a
//! series of every service, each there (at 0) before anything happened. Both come from
//! Debian's `prometheus` package, which the test command installs.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::common::{eventually_blocking, port0, serve};

/// A command of Debian's `prometheus` package, failing the test clearly when it is missing.
fn tool(name: &str) -> Command {
    let found = Command::new(name).arg("--version").output();
    assert!(
        found.is_ok_and(|out| out.status.success()),
        "`{name}` is not installed: the test command (./test) installs Debian's prometheus package"
    );
    Command::new(name)
}

/// Lints a scrape with `promtool check metrics`: fails the test with what it found.
pub(super) fn promtool_check(scrape: &str) {
    use std::io::Write as _;
    let mut promtool = tool("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(scrape.as_bytes())
        .unwrap();
    let out = promtool.wait_with_output().unwrap();
    let said = [out.stdout, out.stderr].concat();
    assert!(
        out.status.success() && said.is_empty(),
        "promtool check metrics ({}): {}\n--- the scrape:\n{scrape}",
        out.status,
        String::from_utf8_lossy(&said)
    );
}

#[test]
fn promtool_finds_nothing_to_say_about_a_fresh_scrape() {
    let dir = tempfile::tempdir().unwrap();
    let srv = serve(dir.path(), &port0(), &[]);
    let scrape = eventually_blocking(Duration::from_secs(20), "every service's series", || {
        let text = reqwest::blocking::get(format!("{}/metrics", srv.admin))
            .and_then(|r| r.text())
            .map_err(|e| e.to_string())?;
        let services = [
            "kep_live_",
            "kep_adapter_",
            "kep_messaging_",
            "kep_serving_",
        ];
        match services.iter().find(|s| !text.contains(*s)) {
            None => Ok(text),
            Some(missing) => Err(format!("no {missing} series")),
        }
    });
    promtool_check(&scrape);
}

/// A Prometheus server of the test's own, on a free loopback port with its data in a
/// temporary directory; killed (by its pid) when dropped.
struct Prometheus {
    child: Child,
    url: String,
    dir: tempfile::TempDir,
}

impl Prometheus {
    /// Scrapes `target` (`host:port`) every second.
    fn scraping(target: &str) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: kep\n    \
                 static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = tool("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        Prometheus {
            child,
            url: format!("http://127.0.0.1:{port}"),
            dir,
        }
    }

    /// The result of an instant PromQL query (`/api/v1/query`), once it has `want` series.
    fn query(&mut self, promql: &str, want: usize) -> Vec<Value> {
        let url = format!("{}/api/v1/query", self.url);
        eventually_blocking(Duration::from_secs(60), promql, || {
            if let Some(status) = self.child.try_wait().unwrap() {
                let log = std::fs::read_to_string(self.dir.path().join("prometheus.log"));
                panic!(
                    "prometheus exited with {status}: {}",
                    log.unwrap_or_default()
                );
            }
            let answer: Value = reqwest::blocking::Client::new()
                .get(&url)
                .query(&[("query", promql)])
                .send()
                .and_then(|r| r.json())
                .map_err(|e| e.to_string())?;
            match answer["data"]["result"].as_array() {
                Some(result) if result.len() == want => Ok(result.clone()),
                _ => Err(answer.to_string()),
            }
        })
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_prometheus_scraping_kep_answers_promql_over_every_service_from_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let srv = serve(dir.path(), &port0(), &[]);
    let mut prometheus = Prometheus::scraping(srv.admin.trim_start_matches("http://"));
    let up = prometheus.query(r#"up{job="kep"} == 1"#, 1);
    assert_eq!(up[0]["value"][1], "1");

    // The series of each service, counted by the service their name gives.
    let by_service = prometheus.query(
        r#"count by (service) (label_replace({__name__=~"kep_.+"}, "service", "$1", "__name__", "kep_([a-z]+)_.+"))"#,
        4,
    );
    let mut services: Vec<&str> = by_service
        .iter()
        .map(|s| s["metric"]["service"].as_str().unwrap())
        .collect();
    services.sort_unstable();
    assert_eq!(services, ["adapter", "live", "messaging", "serving"]);

    // What a dashboard or an alert reads before anything happened: 0, not "no data".
    for series in [
        "kep_live_rooms",
        r#"kep_live_rpc_calls_total{method="Room.ListRooms",result="ok"}"#,
        r#"kep_adapter_drm_sessions{status="PENDING"}"#,
        "kep_adapter_released_bytes_total",
        "kep_messaging_queue_depth",
        r#"kep_messaging_accepted_total{channel="XMS"}"#,
        "kep_serving_endpoints",
        r#"kep_serving_deployments{state="Available"}"#,
        r#"kep_serving_instances{state="Running"}"#,
    ] {
        let found = prometheus.query(series, 1);
        assert_eq!(found[0]["value"][1], "0", "{series}: {found:?}");
    }
}
