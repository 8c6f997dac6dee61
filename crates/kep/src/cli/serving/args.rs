//! The flags' parsing: the deployment spec both `create` and `patch` take, the values of
//! single flags, and the alert settings `alerts set` builds from its flags.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Args;
use kep_api::serving::{HttpProbe, ModelConfig, Probe, TcpProbe, VersionPolicy};
use kep_client::serving::{AlertCondition, AlertSettings};

// The fields `deployment create` and `deployment patch` share. (A doc comment here would
// become `create`'s help text.)
#[derive(Args)]
pub(super) struct SpecArgs {
    /// Image name (custom-image).
    #[arg(long)]
    pub(super) image: Option<String>,
    /// Model name (tensorflow-serving, triton, cosmos).
    #[arg(long)]
    pub(super) model: Option<String>,
    /// Serving script (cosmos): its text, or a git repository URL.
    #[arg(long, allow_hyphen_values = true, conflicts_with = "script_file")]
    script: Option<String>,
    /// Serving script (cosmos) read from a file.
    #[arg(long, value_name = "PATH")]
    script_file: Option<PathBuf>,
    /// An environment variable of the instances (repeatable).
    #[arg(long, value_name = "K=V", value_parser = parse_pair, allow_hyphen_values = true)]
    env: Vec<(String, String)>,
    /// Which of the model's versions to load, as TF Serving's version_policy:
    /// '{"latest": 2}', '{"all": true}' or '{"specific": [1, 3]}' [server default:
    /// '{"latest": 1}'].
    #[arg(long, value_name = "JSON", value_parser = json_value::<VersionPolicy>)]
    pub(super) version_policy: Option<VersionPolicy>,
    /// Batching and model instances (triton), as Triton's: '{"max_batch_size": 8,
    /// "dynamic_batching": {"max_queue_delay_us": 500, "preferred_batch_sizes": [4, 8]},
    /// "instance_group_count": 2}'.
    #[arg(long, value_name = "JSON", value_parser = json_value::<ModelConfig>)]
    pub(super) model_config: Option<ModelConfig>,
    /// The container port (custom-image) [server default: 8080].
    #[arg(long)]
    pub(super) port: Option<u16>,
    #[arg(long, allow_hyphen_values = true)]
    pub(super) description: Option<String>,
    #[command(flatten)]
    pub(super) readiness: ReadinessArgs,
    #[command(flatten)]
    pub(super) liveness: LivenessArgs,
}

impl SpecArgs {
    pub(super) fn script(&self) -> anyhow::Result<Option<String>> {
        match &self.script_file {
            Some(path) => Ok(Some(
                std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?,
            )),
            None => Ok(self.script.clone()),
        }
    }

    pub(super) fn env(&self) -> BTreeMap<String, String> {
        self.env.iter().cloned().collect()
    }
}

#[derive(Args)]
pub(super) struct ReadinessArgs {
    /// Readiness probe: HTTP GET of this path (a 2xx or 3xx answer passes).
    #[arg(long, value_name = "PATH", conflicts_with = "readiness_tcp")]
    readiness_http: Option<String>,
    /// Readiness probe: a TCP connection to the instance's port.
    #[arg(long)]
    readiness_tcp: bool,
    /// Readiness probe: seconds between checks.
    #[arg(long, value_name = "S")]
    readiness_interval_s: Option<f64>,
    /// Readiness probe: seconds a check may take.
    #[arg(long, value_name = "S")]
    readiness_timeout_s: Option<f64>,
    /// Readiness probe: failed checks in a row that count as a failure.
    #[arg(long, value_name = "N")]
    readiness_failure_threshold: Option<u32>,
    /// Readiness probe: seconds after the start before the first check.
    #[arg(long, value_name = "S")]
    readiness_initial_delay_s: Option<f64>,
}

#[derive(Args)]
pub(super) struct LivenessArgs {
    /// Liveness probe: HTTP GET of this path (a 2xx or 3xx answer passes).
    #[arg(long, value_name = "PATH", conflicts_with = "liveness_tcp")]
    liveness_http: Option<String>,
    /// Liveness probe: a TCP connection to the instance's port.
    #[arg(long)]
    liveness_tcp: bool,
    /// Liveness probe: seconds between checks.
    #[arg(long, value_name = "S")]
    liveness_interval_s: Option<f64>,
    /// Liveness probe: seconds a check may take.
    #[arg(long, value_name = "S")]
    liveness_timeout_s: Option<f64>,
    /// Liveness probe: failed checks in a row that count as a failure.
    #[arg(long, value_name = "N")]
    liveness_failure_threshold: Option<u32>,
    /// Liveness probe: seconds after the start before the first check.
    #[arg(long, value_name = "S")]
    liveness_initial_delay_s: Option<f64>,
}

impl ReadinessArgs {
    pub(super) fn probe(&self) -> anyhow::Result<Option<Probe>> {
        probe(
            "readiness",
            self.readiness_http.clone(),
            self.readiness_tcp,
            Probe {
                http: None,
                tcp: None,
                interval_s: self.readiness_interval_s,
                timeout_s: self.readiness_timeout_s,
                failure_threshold: self.readiness_failure_threshold,
                initial_delay_s: self.readiness_initial_delay_s,
            },
        )
    }
}

impl LivenessArgs {
    pub(super) fn probe(&self) -> anyhow::Result<Option<Probe>> {
        probe(
            "liveness",
            self.liveness_http.clone(),
            self.liveness_tcp,
            Probe {
                http: None,
                tcp: None,
                interval_s: self.liveness_interval_s,
                timeout_s: self.liveness_timeout_s,
                failure_threshold: self.liveness_failure_threshold,
                initial_delay_s: self.liveness_initial_delay_s,
            },
        )
    }
}

/// The probe the flags describe: `timings` with the kind filled in, or none without flags.
fn probe(
    which: &str,
    http: Option<String>,
    tcp: bool,
    timings: Probe,
) -> anyhow::Result<Option<Probe>> {
    let timed = timings.interval_s.is_some()
        || timings.timeout_s.is_some()
        || timings.failure_threshold.is_some()
        || timings.initial_delay_s.is_some();
    match (http, tcp) {
        (Some(path), _) => Ok(Some(Probe {
            http: Some(HttpProbe { path }),
            ..timings
        })),
        (None, true) => Ok(Some(Probe {
            tcp: Some(TcpProbe {}),
            ..timings
        })),
        (None, false) if timed => {
            bail!("the {which} timings need --{which}-http PATH or --{which}-tcp")
        }
        (None, false) => Ok(None),
    }
}

/// `D=PERCENT` of `--weights`.
pub(super) fn parse_weight(s: &str) -> Result<(String, u32), String> {
    let (name, percent) = parse_pair(s)?;
    let percent = percent
        .parse()
        .map_err(|_| format!("{percent:?} is not a whole number"))?;
    Ok((name, percent))
}

/// `NAME[=THRESHOLD]` of `--on`.
pub(super) fn parse_condition(s: &str) -> Result<(String, Option<f64>), String> {
    let (name, threshold) = match s.split_once('=') {
        Some((name, t)) => {
            let t: f64 = t
                .parse()
                .ok()
                .filter(|t: &f64| t.is_finite())
                .ok_or_else(|| format!("{t:?} is not a number"))?;
            (name, Some(t))
        }
        None => (s, None),
    };
    if name.is_empty() {
        return Err("the condition name is empty".into());
    }
    Ok((name.to_owned(), threshold))
}

/// `--interval`: positive seconds, fractions allowed.
pub(super) fn parse_interval(s: &str) -> Result<Duration, String> {
    s.parse::<f64>()
        .ok()
        .filter(|s| *s > 0.0)
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| format!("{s:?} is not a positive number of seconds"))
}

/// The whole settings `alerts set` sends: the server replaces what it has with them.
pub(super) fn alert_settings(
    webhook: Option<String>,
    disabled: bool,
    on: Vec<(String, Option<f64>)>,
) -> anyhow::Result<AlertSettings> {
    let mut conditions = BTreeMap::new();
    for (name, threshold) in on {
        let cond = AlertCondition {
            enabled: true,
            threshold,
        };
        if conditions.insert(name.clone(), cond).is_some() {
            bail!("--on names {name} twice");
        }
    }
    Ok(AlertSettings {
        enabled: !disabled,
        webhook_url: webhook,
        conditions,
    })
}

/// `K=V`, split at the first `=`.
fn parse_pair(s: &str) -> Result<(String, String), String> {
    let (k, v) = s.split_once('=').ok_or("expected K=V")?;
    if k.is_empty() {
        return Err("the name before `=` is empty".into());
    }
    Ok((k.to_owned(), v.to_owned()))
}

/// A flag's JSON value.
pub(super) fn json_value<T: serde::de::DeserializeOwned>(s: &str) -> Result<T, String> {
    serde_json::from_str(s).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::super::{AlertsCommand, ServingCommand};
    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(subcommand)]
        serving: ServingCommand,
    }

    #[test]
    fn alerts_set_builds_the_whole_settings() {
        let cli = Cli::try_parse_from([
            "kep",
            "alerts",
            "set",
            "e",
            "--webhook",
            "http://hook",
            "--on",
            "qps=12.5",
            "--on",
            "status_5xx",
        ])
        .unwrap();
        let ServingCommand::Alerts(AlertsCommand::Set {
            webhook,
            disabled,
            on,
            ..
        }) = cli.serving
        else {
            panic!("not alerts set");
        };
        let s = alert_settings(webhook, disabled, on).unwrap();
        assert!(s.enabled);
        assert_eq!(s.webhook_url.as_deref(), Some("http://hook"));
        assert_eq!(s.conditions.len(), 2);
        assert_eq!(s.conditions["qps"].threshold, Some(12.5));
        assert!(s.conditions["status_5xx"].enabled);
        assert_eq!(s.conditions["status_5xx"].threshold, None);
    }

    #[test]
    fn a_bad_threshold_is_a_usage_error() {
        for bad in ["cpu_upper=high", "cpu_upper=", "cpu_upper=NaN", "=5"] {
            assert!(
                Cli::try_parse_from(["kep", "alerts", "set", "e", "--on", bad]).is_err(),
                "{bad}"
            );
        }
        assert!(alert_settings(None, true, vec![("qps".into(), None); 2]).is_err());
    }

    #[test]
    fn the_interval_is_positive_seconds() {
        assert_eq!(parse_interval("0.5"), Ok(Duration::from_millis(500)));
        assert!(parse_interval("0").is_err());
        assert!(parse_interval("-1").is_err());
    }
}
