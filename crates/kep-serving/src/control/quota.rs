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
        let need = self.resources(&e.instance_type, e.instance_count);
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
                return Err(ServingError::QuotaExceeded(format!(
                    "the workspace quota has {} {what} left; {} × {} needs {need}",
                    total - used,
                    e.instance_count,
                    e.instance_type
                )));
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
