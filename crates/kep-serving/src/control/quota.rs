//! The workspace compute quota: every deployment holds its endpoint's instance type times
//! its instance count from creation on. GPUs are also bounded by the GPUs there are
//! (`serving.gpus`): each instance gets its own, so a deployment that could not have them
//! is refused, not left waiting.

use super::Control;
use crate::ServingError;
use crate::store::EndpointRow;
use kep_api::serving::{Quota, Resources};

impl Control {
    pub async fn quota(&self) -> Result<Quota, ServingError> {
        Ok(Quota {
            total: self.total(),
            used: self.used().await?,
            instance_types: self.settings.instance_types.clone(),
        })
    }

    /// Whether one more deployment on endpoint `e` fits in what the quota has left.
    pub(super) async fn check_quota(&self, e: &EndpointRow) -> Result<(), ServingError> {
        let used = self.used().await?;
        let (count, instance_type) = (e.instance_count, &e.instance_type);
        self.fits(&used, instance_type, count)
            .map_err(|(what, left, need)| {
                ServingError::QuotaExceeded(format!(
                    "the workspace quota has {left} {what} left; {count} × {instance_type} needs {need}"
                ))
            })?;
        let need = self.resources(instance_type, count).gpu;
        let gpus = self.gpu_devices();
        if need > 0 && used.gpu + need > gpus {
            return Err(ServingError::QuotaExceeded(format!(
                "{} of the {gpus} GPUs are not held by a deployment; {count} × {instance_type} needs {need}",
                gpus.saturating_sub(used.gpu)
            )));
        }
        Ok(())
    }

    /// Whether an endpoint's deployments could ever run: one of them, alone in the
    /// workspace, within the whole quota. Its instance type and count cannot change later.
    pub(super) fn check_endpoint_fits(
        &self,
        instance_type: &str,
        count: i64,
    ) -> Result<(), ServingError> {
        self.fits(&Resources::default(), instance_type, count)
            .map_err(|(what, total, need)| {
                ServingError::QuotaExceeded(format!(
                    "{count} × {instance_type} needs {need} {what}, and the whole workspace quota is {total}: no deployment of it could ever run"
                ))
            })?;
        let need = self.resources(instance_type, count).gpu;
        let gpus = self.gpu_devices();
        if need > gpus {
            return Err(ServingError::QuotaExceeded(format!(
                "{count} × {instance_type} needs {need} GPUs, and there are {gpus}: no deployment of it could ever run"
            )));
        }
        Ok(())
    }

    /// `serving.quota`, its GPUs resolved at start (unset, the GPUs there are).
    fn total(&self) -> Resources {
        let q = self.settings.quota;
        Resources {
            cpu: q.cpu,
            memory_mb: q.memory_mb,
            gpu: q.gpu.unwrap_or(0),
        }
    }

    /// The GPUs that instances can be given (`serving.gpus`, resolved at start).
    fn gpu_devices(&self) -> u32 {
        self.settings.gpus.as_ref().map_or(0, |g| g.len() as u32)
    }

    /// `Err((what, left, need))` when `count` instances of `instance_type` do not fit beside
    /// `used`.
    fn fits(
        &self,
        used: &Resources,
        instance_type: &str,
        count: i64,
    ) -> Result<(), (&'static str, f64, f64)> {
        let need = self.resources(instance_type, count);
        let total = self.total();
        for (what, used, need, total) in [
            ("cpu", used.cpu, need.cpu, total.cpu),
            (
                "memory_mb",
                used.memory_mb as f64,
                need.memory_mb as f64,
                total.memory_mb as f64,
            ),
            (
                "gpu",
                f64::from(used.gpu),
                f64::from(need.gpu),
                f64::from(total.gpu),
            ),
        ] {
            if need > 0.0 && used + need > total {
                return Err((what, total - used, need));
            }
        }
        Ok(())
    }

    fn resources(&self, instance_type: &str, count: i64) -> Resources {
        let t = self
            .settings
            .instance_types
            .get(instance_type)
            .copied()
            .unwrap_or_default();
        Resources {
            cpu: t.cpu * count as f64,
            memory_mb: t.memory_mb * count as u64,
            gpu: t.gpu * count as u32,
        }
    }

    async fn used(&self) -> Result<Resources, ServingError> {
        let endpoints = self.store.endpoints().await?;
        let mut used = Resources::default();
        for d in self.store.deployments(None).await? {
            if let Some(e) = endpoints.iter().find(|e| e.name == d.endpoint) {
                let r = self.resources(&e.instance_type, e.instance_count);
                used.cpu += r.cpu;
                used.memory_mb += r.memory_mb;
                used.gpu += r.gpu;
            }
        }
        Ok(used)
    }
}
