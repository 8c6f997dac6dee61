//! The workspace compute quota: every deployment holds its endpoint's instance type times
//! its instance count from creation on.

use super::Control;
use crate::ServingError;
use crate::store::EndpointRow;
use kep_api::serving::{Quota, Resources};

impl Control {
    pub async fn quota(&self) -> Result<Quota, ServingError> {
        Ok(Quota {
            total: self.settings.quota,
            used: self.used().await?,
            instance_types: self.settings.instance_types.clone(),
        })
    }

    /// Whether one more deployment on endpoint `e` fits in what the quota has left.
    pub(super) async fn check_quota(&self, e: &EndpointRow) -> Result<(), ServingError> {
        let used = self.used().await?;
        self.fits(&used, &e.instance_type, e.instance_count)
            .map_err(|(what, left, need)| {
                ServingError::QuotaExceeded(format!(
                    "the workspace quota has {left} {what} left; {} × {} needs {need}",
                    e.instance_count, e.instance_type
                ))
            })
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
            })
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
        let total = self.settings.quota;
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
