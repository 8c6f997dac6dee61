//! The commands: each calls the typed client and prints its answer, as JSON but for
//! `deployment logs` (the bytes), `deployment wait` (progress on stderr) and `monitor`.

use std::collections::BTreeMap;
use std::io::{IsTerminal as _, Write as _};
use std::time::{Duration, Instant};

use anyhow::bail;
use kep_api::serving::{Mirroring, ModelTensor};
use kep_client::AdminClient;
use kep_client::serving::{
    self, DeploymentPatch, DeploymentRequest, EndpointRequest, ImageRequest, TrafficRequest,
};

use super::super::print_json;
use super::args::alert_settings;
use super::render::{progress, render_monitor};
use super::{
    AlertsCommand, DeploymentCommand, EndpointCommand, ImageCommand, KeyCommand, ModelCommand,
    ServingArgs, ServingCommand, TrafficArgs,
};

pub async fn run(args: ServingArgs) -> anyhow::Result<()> {
    let admin = args.common.admin()?;
    match args.command {
        ServingCommand::Image(cmd) => image(&admin, cmd).await,
        ServingCommand::Model(cmd) => model(&admin, cmd).await,
        ServingCommand::Endpoint(cmd) => endpoint(&admin, cmd).await,
        ServingCommand::Deployment(cmd) => deployment(&admin, cmd).await,
        ServingCommand::Traffic(t) => traffic(&admin, t).await,
        ServingCommand::Mirror(m) => {
            if m.off {
                let off = Mirroring {
                    enabled: false,
                    responder: None,
                };
                print_json(&admin.set_mirroring(&m.endpoint, &off).await?)
            } else if let Some(responder) = m.responder {
                let on = Mirroring {
                    enabled: true,
                    responder: Some(responder),
                };
                print_json(&admin.set_mirroring(&m.endpoint, &on).await?)
            } else {
                print_json(&admin.mirroring(&m.endpoint).await?)
            }
        }
        ServingCommand::Key(KeyCommand::Reissue { endpoint }) => {
            print_json(&admin.reissue_api_key(&endpoint).await?)
        }
        ServingCommand::Quota => print_json(&admin.serving_quota().await?),
        ServingCommand::Alerts(cmd) => alerts(&admin, cmd).await,
        ServingCommand::Metrics { endpoint } => {
            print_json(&admin.endpoint_metrics(&endpoint).await?)
        }
        ServingCommand::Monitor(m) => monitor(&admin, &m.endpoint, m.interval, m.once).await,
    }
}

async fn alerts(admin: &AdminClient, cmd: AlertsCommand) -> anyhow::Result<()> {
    match cmd {
        AlertsCommand::Show { endpoint } => print_json(&admin.alerts(&endpoint).await?),
        AlertsCommand::Set {
            endpoint,
            webhook,
            disabled,
            on,
        } => {
            let settings = alert_settings(webhook, disabled, on)?;
            print_json(&admin.set_alerts(&endpoint, &settings).await?)
        }
        AlertsCommand::History { endpoint, limit } => {
            print_json(&admin.alert_history(&endpoint, limit).await?)
        }
    }
}

async fn image(admin: &AdminClient, cmd: ImageCommand) -> anyhow::Result<()> {
    match cmd {
        ImageCommand::Create {
            name,
            command,
            reference,
            archive,
            words,
        } => {
            if let Some(file) = archive {
                return print_json(&admin.load_image_archive(&name, &file).await?);
            }
            let command = match (command, reference.is_some()) {
                (Some(line), _) => Some(serving::Command::Line(line)),
                (None, false) => Some(serving::Command::Words(words)),
                (None, true) => None,
            };
            let req = ImageRequest {
                name,
                command,
                reference,
            };
            print_json(&admin.create_image(&req).await?)
        }
        ImageCommand::List => print_json(&admin.images().await?),
        ImageCommand::Show { name } => print_json(&admin.image(&name).await?),
        ImageCommand::Delete { name } => {
            admin.delete_image(&name).await?;
            print_json(&serde_json::json!({}))
        }
    }
}

async fn model(admin: &AdminClient, cmd: ModelCommand) -> anyhow::Result<()> {
    match cmd {
        ModelCommand::Upload {
            name,
            file,
            framework,
            inputs,
        } => {
            let inputs: Option<Vec<ModelTensor>> = inputs
                .map(|text| super::args::json_value(&text))
                .transpose()
                .map_err(|e| anyhow::anyhow!("--inputs: {e}"))?;
            print_json(
                &admin
                    .upload_model_declared(&name, &framework, &file, inputs.as_deref())
                    .await?,
            )
        }
        ModelCommand::List => print_json(&admin.models().await?),
        ModelCommand::Show { name } => print_json(&admin.model(&name).await?),
        ModelCommand::Delete { name } => {
            admin.delete_model(&name).await?;
            print_json(&serde_json::json!({}))
        }
    }
}

async fn endpoint(admin: &AdminClient, cmd: EndpointCommand) -> anyhow::Result<()> {
    match cmd {
        EndpointCommand::Create {
            name,
            description,
            instance_type,
            instance_count,
            protocol,
            api_key,
        } => {
            let req = EndpointRequest {
                name,
                description,
                instance_type,
                instance_count,
                protocol,
                api_key,
            };
            print_json(&admin.create_endpoint(&req).await?)
        }
        EndpointCommand::List => print_json(&admin.endpoints().await?),
        EndpointCommand::Show { endpoint } => print_json(&admin.endpoint(&endpoint).await?),
        EndpointCommand::Delete { endpoint } => {
            admin.delete_endpoint(&endpoint).await?;
            print_json(&serde_json::json!({}))
        }
    }
}

async fn deployment(admin: &AdminClient, cmd: DeploymentCommand) -> anyhow::Result<()> {
    match cmd {
        DeploymentCommand::Create {
            endpoint,
            deployment,
            kind,
            spec,
        } => {
            let req = DeploymentRequest {
                name: deployment,
                kind: kind.into(),
                script: spec.script()?,
                env: spec.env(),
                readiness: spec.readiness.probe()?,
                liveness: spec.liveness.probe()?,
                description: spec.description,
                image: spec.image,
                model: spec.model,
                version_policy: spec.version_policy,
                model_config: spec.model_config,
                port: spec.port,
            };
            print_json(&admin.create_deployment(&endpoint, &req).await?)
        }
        DeploymentCommand::List { endpoint } => print_json(&admin.deployments(&endpoint).await?),
        DeploymentCommand::Show {
            endpoint,
            deployment,
        } => print_json(&admin.deployment(&endpoint, &deployment).await?),
        DeploymentCommand::Patch {
            endpoint,
            deployment,
            spec,
            clear_description,
            clear_script,
            clear_env,
            clear_readiness,
            clear_liveness,
            clear_model_config,
        } => {
            let env = if clear_env {
                Some(BTreeMap::new())
            } else {
                Some(spec.env()).filter(|e| !e.is_empty())
            };
            let patch = DeploymentPatch {
                script: nullable(clear_script, spec.script()?),
                readiness: nullable(clear_readiness, spec.readiness.probe()?),
                liveness: nullable(clear_liveness, spec.liveness.probe()?),
                description: nullable(clear_description, spec.description),
                env,
                image: spec.image,
                model: spec.model,
                version_policy: spec.version_policy,
                model_config: nullable(clear_model_config, spec.model_config),
                port: spec.port,
            };
            print_json(
                &admin
                    .patch_deployment(&endpoint, &deployment, &patch)
                    .await?,
            )
        }
        DeploymentCommand::Delete {
            endpoint,
            deployment,
        } => {
            admin.delete_deployment(&endpoint, &deployment).await?;
            print_json(&serde_json::json!({}))
        }
        DeploymentCommand::Events {
            endpoint,
            deployment,
            limit,
        } => print_json(
            &admin
                .deployment_events(&endpoint, &deployment, limit)
                .await?,
        ),
        DeploymentCommand::Logs {
            endpoint,
            deployment,
            instance,
            tail_bytes,
        } => {
            let logs = admin
                .instance_logs(&endpoint, &deployment, &instance, tail_bytes)
                .await?;
            let mut out = std::io::stdout().lock();
            out.write_all(&logs)?;
            out.flush()?;
            Ok(())
        }
        DeploymentCommand::Wait {
            endpoint,
            deployment,
            timeout_s,
        } => {
            wait(
                admin,
                &endpoint,
                &deployment,
                Duration::from_secs(timeout_s),
            )
            .await
        }
    }
}

async fn traffic(admin: &AdminClient, t: TrafficArgs) -> anyhow::Result<()> {
    let req = if let Some(ratio) = t.ratio {
        TrafficRequest {
            ratio: Some(ratio),
            deployments: Some(t.deployments).filter(|d| !d.is_empty()),
            ..TrafficRequest::default()
        }
    } else if !t.weights.is_empty() {
        let mut weights = BTreeMap::new();
        for (name, percent) in t.weights {
            if weights.insert(name.clone(), percent).is_some() {
                bail!("--weights names {name} twice");
            }
        }
        TrafficRequest {
            weights: Some(weights),
            ..TrafficRequest::default()
        }
    } else {
        return print_json(&admin.traffic(&t.endpoint).await?);
    };
    print_json(&admin.set_traffic(&t.endpoint, &req).await?)
}

/// Polls every 500 ms. On a terminal the progress line is rewritten in place; elsewhere a
/// line is written each time it changes, so that logs stay short.
async fn wait(
    admin: &AdminClient,
    endpoint: &str,
    name: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    const AVAILABLE: &str = "Available";
    let wanted = admin.endpoint(endpoint).await?.instance_count;
    let deadline = Instant::now() + timeout;
    let tty = std::io::stderr().is_terminal();
    let mut last = String::new();
    loop {
        let d = admin.deployment(endpoint, name).await?;
        let line = progress(&d, wanted);
        if tty {
            eprint!("\r\x1b[2K{line}");
        } else if line != last {
            eprintln!("{line}");
        }
        let done = d.state == AVAILABLE;
        let now = Instant::now();
        if tty && (done || now >= deadline) {
            eprintln!();
        }
        if done {
            return print_json(&d);
        }
        if now >= deadline {
            bail!(
                "deployment {name} of endpoint {endpoint} is not {AVAILABLE} after {} s: {line}",
                timeout.as_secs()
            );
        }
        last = line;
        tokio::time::sleep(Duration::from_millis(500).min(deadline - now)).await;
    }
}

/// Fetches and prints the view every `interval` until Ctrl-C; an API error ends it. The
/// screen is cleared only on a terminal, so that a pipe gets every view, one after another.
async fn monitor(
    admin: &AdminClient,
    endpoint: &str,
    interval: Duration,
    once: bool,
) -> anyhow::Result<()> {
    let clear = !once && std::io::stdout().is_terminal();
    // One listener for the whole loop: a Ctrl-C during a fetch is not lost between listeners.
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let mut first = true;
    loop {
        let m = tokio::select! {
            m = admin.endpoint_metrics(endpoint) => m?,
            _ = &mut ctrl_c => return Ok(()),
        };
        let view = render_monitor(&m);
        {
            let mut out = std::io::stdout().lock();
            if clear {
                out.write_all(b"\x1b[2J\x1b[H")?;
            } else if !first {
                out.write_all(b"\n")?;
            }
            out.write_all(view.as_bytes())?;
            out.flush()?;
        }
        if once {
            return Ok(());
        }
        first = false;
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = &mut ctrl_c => return Ok(()),
        }
    }
}

/// A clear flag sends `null`; a value sends the value; neither leaves the field as it is.
fn nullable<T>(clear: bool, value: Option<T>) -> Option<Option<T>> {
    if clear { Some(None) } else { value.map(Some) }
}
