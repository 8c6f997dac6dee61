//! What a stored deployment's instances run: the command, the variables and the probes the
//! runtime is handed.

use std::collections::BTreeMap;
use std::path::PathBuf;

use kep_model_server::Engine;

use super::Control;
use crate::ServingError;
use crate::deployment::{DeploymentSpec, DeploymentType, ModelRef};
use crate::runtime::container::ContainerLaunch;
use crate::runtime::probe::ProbeSpec;
use crate::runtime::{Launch, Workload};
use crate::settings::ServingSettings;
use crate::store::EndpointRow;
use kep_api::serving::Resources;

impl DeploymentSpec {
    /// What its instances run; the description does not matter to them. Model types run
    /// a model server (kep's own `model-server` subcommand) on the registered model, in
    /// the deployment's engine, probed on the protocol's own health call.
    fn launch(&self, server: &ModelServer, resources: Resources) -> Launch {
        let cpus = resources.cpu;
        let served = |protocol: &str, model: &ModelRef| {
            if let Some(native) = &self.native {
                return Ok(native.argv.clone());
            }
            let mut argv = server.argv.clone();
            argv.extend(
                [
                    "--protocol",
                    protocol,
                    "--name",
                    model.name.as_str(),
                    "--model",
                    &model.path,
                    "--engine",
                    server.engine_of(&self.env).name(),
                ]
                .map(str::to_owned),
            );
            if let Some(policy) = &self.version_policy {
                argv.push("--version-policy".to_owned());
                argv.push(serde_json::to_string(policy).expect("a policy is JSON"));
            }
            if let Some(inputs) = &model.inputs {
                argv.push("--inputs".to_owned());
                argv.push(serde_json::to_string(inputs).expect("specs are JSON"));
            }
            if let Some(config) = &self.model_config {
                argv.extend(model_config_args(config));
            }
            // One inference uses the CPUs its instance type gives it, as in a container, and
            // no more threads than the machine has cores: 4 threads on 2 cores took turns and
            // ran ResNet-50 at a third of ONNX Runtime's own speed.
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            argv.extend([
                "--threads".to_owned(),
                (cpus.ceil().max(1.0) as usize).min(cores).to_string(),
            ]);
            Ok(argv)
        };
        let mut env = self.env.clone();
        if self.model.is_some()
            && let Some(lib) = &server.onnxruntime
        {
            env.entry(ORT_DYLIB_PATH.to_owned())
                .or_insert_with(|| lib.to_string_lossy().into_owned());
        }
        if self.model.is_some()
            && let Some(python) = &server.framework_python
        {
            env.entry(kep_model_server::framework::PYTHON_ENV.to_owned())
                .or_insert_with(|| python.to_string_lossy().into_owned());
        }
        if self.model.is_some() {
            // TensorFlow's C++ INFO lines, on every load, are noise in an instance's log;
            // a deployment's `env` may still ask for them.
            env.entry("TF_CPP_MIN_LOG_LEVEL".to_owned())
                .or_insert_with(|| "2".to_owned());
        }
        let (command, readiness) = match (&self.kind, &self.image, &self.model) {
            (DeploymentType::CustomImage, Some(image), _) => (
                Ok(match &image.engine {
                    Some(engine) => Workload::Container(ContainerLaunch {
                        image: engine.id.clone(),
                        reference: engine.reference.clone(),
                        port: self.port,
                        nano_cpus: (resources.cpu * 1e9) as i64,
                        memory: (resources.memory_mb as i64).saturating_mul(1 << 20),
                    }),
                    None => Workload::Process(image.command.clone()),
                }),
                self.readiness
                    .as_ref()
                    .map_or_else(ProbeSpec::tcp, ProbeSpec::from),
            ),
            (DeploymentType::TensorflowServing, _, Some(model)) => (
                served("tfserving", model).map(Workload::Process),
                ProbeSpec::http(format!("/v1/models/{}", model.name)),
            ),
            (DeploymentType::Triton, _, Some(model)) => (
                served("kserve", model).map(|mut argv| {
                    if server.allow_client_shm && self.native.is_none() {
                        argv.push("--allow-client-shm".to_owned());
                    }
                    Workload::Process(argv)
                }),
                ProbeSpec::http("/v2/health/ready".into()),
            ),
            (DeploymentType::Cosmos, _, Some(model)) if self.script_path.is_some() => (
                served("cosmos", model).map(|mut argv| {
                    argv.extend([
                        "--script".to_owned(),
                        self.script_path.clone().unwrap_or_default(),
                    ]);
                    Workload::Process(argv)
                }),
                ProbeSpec::http("/health".into()),
            ),
            (kind, ..) => (
                Err(format!(
                    "ModelServerUnavailable: this build has no model server for `{}` deployments",
                    kind.as_str()
                )),
                ProbeSpec::tcp(),
            ),
        };
        Launch {
            command,
            env,
            gpus: resources.gpu,
            readiness,
            liveness: self.liveness.as_ref().map(ProbeSpec::from),
        }
    }

    pub(super) fn same_launch(&self, other: &DeploymentSpec) -> bool {
        DeploymentSpec {
            description: None,
            ..self.clone()
        } == DeploymentSpec {
            description: None,
            ..other.clone()
        }
    }
}

/// A deployment variable that chooses what runs its model (`tract`, `onnxruntime` or
/// `native`).
pub(super) const KEP_ENGINE: &str = "KEP_ENGINE";
/// A deployment variable: the copies of its model each instance runs calls on at once
/// (Triton's model instances), 1 to `kep_model_server::MAX_MODEL_INSTANCES`; the model
/// server reads it.
const KEP_MODEL_INSTANCES: &str = "KEP_MODEL_INSTANCES";

/// Refuses a `KEP_MODEL_INSTANCES` the model server would refuse to start with.
pub(super) fn check_model_instances(env: &BTreeMap<String, String>) -> Result<(), ServingError> {
    let Some(v) = env.get(KEP_MODEL_INSTANCES) else {
        return Ok(());
    };
    let max = u64::from(kep_model_server::MAX_MODEL_INSTANCES);
    match v.parse::<u64>() {
        Ok(n) if (1..=max).contains(&n) => Ok(()),
        _ => Err(ServingError::field(
            "env",
            format!("{KEP_MODEL_INSTANCES}: {v:?} is not a count from 1 to {max}"),
        )),
    }
}

/// `kep model-server`'s flags for a `model_config`.
fn model_config_args(config: &kep_api::serving::ModelConfig) -> Vec<String> {
    let mut argv = Vec::new();
    if let Some(count) = config.instance_group_count {
        argv.extend(["--model-instances".to_owned(), count.to_string()]);
    }
    let max = config.max_batch_size.unwrap_or(0);
    if max == 0 {
        return argv;
    }
    argv.extend(["--max-batch-size".to_owned(), max.to_string()]);
    if let Some(dynamic) = &config.dynamic_batching {
        argv.push("--dynamic-batching".to_owned());
        let delay = dynamic.max_queue_delay_us.unwrap_or(0);
        argv.extend(["--max-queue-delay-us".to_owned(), delay.to_string()]);
        let preferred = dynamic.preferred_batch_sizes.as_deref().unwrap_or_default();
        if !preferred.is_empty() {
            let sizes: Vec<String> = preferred.iter().map(u32::to_string).collect();
            argv.extend(["--preferred-batch-sizes".to_owned(), sizes.join(",")]);
        }
    }
    argv
}

/// The `KEP_ENGINE` value that runs the real `tritonserver` or `tensorflow_model_server`.
pub(super) const NATIVE: &str = "native";
/// Where a model server finds `libonnxruntime` (the variable `ort` reads).
const ORT_DYLIB_PATH: &str = "ORT_DYLIB_PATH";

/// How model deployments' instances are started.
pub(super) struct ModelServer {
    /// `serving.model_server`, else this executable's `model-server` subcommand.
    argv: Vec<String>,
    /// `serving.engine`.
    engine: Engine,
    /// `serving.onnxruntime`.
    onnxruntime: Option<PathBuf>,
    /// `serving.framework_python`.
    framework_python: Option<PathBuf>,
    /// `serving.allow_client_shm`.
    allow_client_shm: bool,
}

impl ModelServer {
    pub(super) fn new(settings: &ServingSettings) -> anyhow::Result<Self> {
        // Deployments are checked in this process with the library their instances load.
        #[cfg(feature = "onnxruntime")]
        if let Some(lib) = &settings.onnxruntime {
            kep_model_server::onnxruntime::use_library(lib.clone());
        }
        // So are SavedModels and TorchScript, in the Python their instances run.
        if let Some(python) = &settings.framework_python {
            kep_model_server::framework::use_python(python.clone());
        }
        Ok(ModelServer {
            argv: match &settings.model_server {
                Some(argv) if !argv.is_empty() => argv.clone(),
                _ => vec![
                    std::env::current_exe()?.to_string_lossy().into_owned(),
                    "model-server".to_owned(),
                ],
            },
            engine: settings.engine,
            onnxruntime: settings.onnxruntime.clone(),
            framework_python: settings.framework_python.clone(),
            allow_client_shm: settings.allow_client_shm,
        })
    }

    /// A deployment's engine: its `KEP_ENGINE` variable (checked when it was made), else
    /// the setting.
    fn engine_of(&self, env: &BTreeMap<String, String>) -> Engine {
        self.choice(env).ok().flatten().unwrap_or(self.engine)
    }

    /// What runs a model deployment's instances: `KEP_ENGINE=native` for the type's real
    /// server from the PATH, else an engine of `kep model-server`.
    pub(super) fn choice(
        &self,
        env: &BTreeMap<String, String>,
    ) -> Result<Option<Engine>, ServingError> {
        match env.get(KEP_ENGINE).map(String::as_str) {
            Some(NATIVE) => Ok(None),
            Some(v) => v.parse().map(Some).map_err(|_| {
                ServingError::field(
                    "env",
                    format!("{KEP_ENGINE}: {v:?} is not tract, onnxruntime or {NATIVE}"),
                )
            }),
            None => Ok(Some(self.engine)),
        }
    }
}

impl Control {
    /// What a deployment's instances run, on its endpoint's instance type.
    pub(super) fn launch(&self, spec: &DeploymentSpec, e: &EndpointRow) -> Launch {
        let resources = self
            .settings
            .instance_types
            .get(&e.instance_type)
            .copied()
            .unwrap_or(Resources {
                cpu: 1.0,
                memory_mb: 0,
                gpu: 0,
            });
        spec.launch(&self.model_server, resources)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_instances_are_counted_from_1_to_the_model_server_s_most() {
        let env = |v: &str| BTreeMap::from([(KEP_MODEL_INSTANCES.to_owned(), v.to_owned())]);
        assert!(check_model_instances(&BTreeMap::new()).is_ok());
        let max = u64::from(kep_model_server::MAX_MODEL_INSTANCES);
        for fits in ["1".to_owned(), max.to_string()] {
            assert!(check_model_instances(&env(&fits)).is_ok(), "{fits}");
        }
        for refused in [
            "0".to_owned(),
            (max + 1).to_string(),
            "two".into(),
            "-1".into(),
        ] {
            assert!(check_model_instances(&env(&refused)).is_err(), "{refused}");
        }
    }
}
