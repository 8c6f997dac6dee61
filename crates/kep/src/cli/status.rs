//! `kep status`: the platform at a glance in the terminal, from what the admin listener
//! serves (`/healthz`, `/metrics`, the operator lists).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::Common;

#[derive(clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub(super) common: Common,
    /// The overview as JSON.
    #[arg(long)]
    json: bool,
}

/// One sample of a scrape: its name, its labels, its value.
type Sample = (String, BTreeMap<String, String>, f64);

/// The samples of Prometheus' text format (comments and malformed lines skipped).
fn samples(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let value: f64 = value.parse().ok()?;
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, rest.strip_suffix('}')?),
                None => (series, ""),
            };
            let labels = labels
                .split(',')
                .filter_map(|kv| {
                    let (k, v) = kv.split_once('=')?;
                    Some((k.to_owned(), v.trim_matches('"').to_owned()))
                })
                .collect();
            Some((name.to_owned(), labels, value))
        })
        .collect()
}

/// The sum of the samples named `name`, if there is one.
fn sum(samples: &[Sample], name: &str) -> Option<f64> {
    let mut found = samples.iter().filter(|s| s.0 == name).peekable();
    found.peek()?;
    Some(found.map(|s| s.2).sum())
}

/// `name`'s samples by the value of their label `label`.
fn by(samples: &[Sample], name: &str, label: &str) -> BTreeMap<String, f64> {
    samples
        .iter()
        .filter(|s| s.0 == name)
        .filter_map(|s| Some((s.1.get(label)?.clone(), s.2)))
        .collect()
}

pub async fn run(args: StatusArgs) -> anyhow::Result<()> {
    let admin = args.common.admin()?;
    let base = admin.base_url().to_owned();
    let http = kep_client::tls::http();
    let up = http
        .get(format!("{base}/healthz"))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success());
    if !up {
        anyhow::bail!("no kep answers at {base}");
    }
    let scrape = http
        .get(format!("{base}/metrics"))
        .send()
        .await?
        .text()
        .await?;
    let s = samples(&scrape);
    let mut overview = json!({ "admin": base });
    if sum(&s, "kep_live_rooms").is_some() {
        let services = admin.list_live_services().await.map(|l| l.len()).ok();
        overview["live"] = json!({
            "services": services,
            "rooms": sum(&s, "kep_live_rooms"),
            "participants": sum(&s, "kep_live_participants"),
            "streams": sum(&s, "kep_live_streams"),
        });
    }
    if sum(&s, "kep_adapter_drm_sessions").is_some() {
        overview["adapter"] =
            json!({ "drm_sessions": by(&s, "kep_adapter_drm_sessions", "status") });
    }
    if let Some(queued) = sum(&s, "kep_messaging_queue_depth") {
        overview["messaging"] = json!({
            "queued": queued,
            "accepted": sum(&s, "kep_messaging_accepted_total").unwrap_or(0.0),
            "finished": by(&s, "kep_messaging_finished_total", "status"),
        });
    }
    if let Ok(endpoints) = admin.endpoints().await {
        let available = |e: &str, d: &str| {
            s.iter().find_map(|x| {
                (x.0 == "kep_serving_deployment_available"
                    && x.1.get("endpoint").map(String::as_str) == Some(e)
                    && x.1.get("deployment").map(String::as_str) == Some(d))
                .then_some(x.2 == 1.0)
            })
        };
        let endpoints: Vec<Value> = endpoints
            .iter()
            .map(|e| {
                let deployments: BTreeMap<&str, &str> = e
                    .deployments
                    .iter()
                    .map(|d| {
                        let state = match available(&e.name, d) {
                            Some(true) => "Available",
                            Some(false) => "Progressing",
                            None => "unknown",
                        };
                        (d.as_str(), state)
                    })
                    .collect();
                json!({ "name": e.name, "deployments": deployments })
            })
            .collect();
        overview["serving"] = json!({ "endpoints": endpoints });
    }
    overview["process"] = json!({
        "cpu_seconds": sum(&s, "process_cpu_seconds_total"),
        "resident_bytes": sum(&s, "process_resident_memory_bytes"),
        "open_fds": sum(&s, "process_open_fds"),
    });
    if args.json {
        return super::print_json(&whole_as_integers(overview));
    }
    super::emit(&render(&overview))?;
    Ok(())
}

/// Every whole number as an integer (a scrape's values are all floats): counts read `3`,
/// not `3.0`.
fn whole_as_integers(v: Value) -> Value {
    match v {
        Value::Number(n) => match n.as_f64() {
            // Exact below 2^53; beyond it a float stays one.
            Some(f) if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 => {
                Value::from(f as i64)
            }
            _ => Value::Number(n),
        },
        Value::Array(a) => Value::Array(a.into_iter().map(whole_as_integers).collect()),
        Value::Object(o) => Value::Object(
            o.into_iter()
                .map(|(k, v)| (k, whole_as_integers(v)))
                .collect(),
        ),
        other => other,
    }
}

/// The overview as lines for a person.
fn render(o: &Value) -> String {
    let n = |v: &Value| v.as_f64().map_or("?".into(), |f| format!("{f:.0}"));
    let counts = |v: &Value| {
        v.as_object()
            .filter(|m| !m.is_empty())
            .map_or("none".into(), |m| {
                m.iter()
                    .map(|(k, c)| format!("{} {k}", n(c)))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
    };
    let mut out = format!("kep at {}: up\n", o["admin"].as_str().unwrap_or("?"));
    if let Some(l) = o.get("live") {
        out += &format!(
            "live       {} services, {} rooms, {} participants, {} streams\n",
            n(&l["services"]),
            n(&l["rooms"]),
            n(&l["participants"]),
            n(&l["streams"])
        );
    }
    if let Some(a) = o.get("adapter") {
        out += &format!("adapter    DRM sessions: {}\n", counts(&a["drm_sessions"]));
    }
    if let Some(m) = o.get("messaging") {
        out += &format!(
            "messaging  {} accepted, {} queued; final: {}\n",
            n(&m["accepted"]),
            n(&m["queued"]),
            counts(&m["finished"])
        );
    }
    if let Some(endpoints) = o["serving"]["endpoints"].as_array() {
        out += &format!("serving    {} endpoints\n", endpoints.len());
        for e in endpoints {
            let deployments = e["deployments"].as_object().map_or(String::new(), |d| {
                d.iter()
                    .map(|(name, state)| format!("{name} {}", state.as_str().unwrap_or("?")))
                    .collect::<Vec<_>>()
                    .join(", ")
            });
            out += &format!("  {}: {deployments}\n", e["name"].as_str().unwrap_or("?"));
        }
    }
    let p = &o["process"];
    let mb = p["resident_bytes"]
        .as_f64()
        .map_or("?".into(), |b| format!("{:.0} MB", b / 1e6));
    out += &format!(
        "process    {} CPU s, {mb} resident, {} open files\n",
        p["cpu_seconds"]
            .as_f64()
            .map_or("?".into(), |c| format!("{c:.1}")),
        n(&p["open_fds"])
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scrape_is_read_as_prometheus_writes_it() {
        let text = "# TYPE x gauge\nkep_live_rooms 2\nkep_adapter_drm_sessions{status=\"PENDING\"} 3\nkep_adapter_drm_sessions{status=\"RELEASED\"} 1\nbad line\n";
        let s = samples(text);
        assert_eq!(sum(&s, "kep_live_rooms"), Some(2.0));
        assert_eq!(sum(&s, "kep_adapter_drm_sessions"), Some(4.0));
        assert_eq!(sum(&s, "nothing"), None);
        let by_status = by(&s, "kep_adapter_drm_sessions", "status");
        assert_eq!(by_status["PENDING"], 3.0);
    }

    #[test]
    fn whole_counts_print_as_integers_and_fractions_stay() {
        let o = whole_as_integers(json!({ "a": 3.0, "b": { "c": [1.0, 0.5] }, "d": null }));
        assert_eq!(
            serde_json::to_string(&o).unwrap(),
            r#"{"a":3,"b":{"c":[1,0.5]},"d":null}"#
        );
    }
}
