//! What a deployment's instances did: their state changes and their captured output.

use super::Control;
use crate::ServingError;
use crate::ids::{DeploymentName, EndpointName, InstanceId};
use kep_api::serving::Event;

impl Control {
    pub async fn events(
        &self,
        endpoint: &EndpointName,
        name: &DeploymentName,
        limit: i64,
    ) -> Result<Vec<Event>, ServingError> {
        self.deployment_row(endpoint, name).await?;
        Ok(self
            .store
            .events(endpoint, name, limit.clamp(1, 1000))
            .await?
            .into_iter()
            .map(|e| Event {
                id: e.id,
                at: jiff::Timestamp::from_millisecond(e.at_ms)
                    .map_or_else(|_| e.at_ms.to_string(), |t| t.to_string()),
                deployment: e.deployment.into_string(),
                instance: e.instance.map(InstanceId::into_string),
                kind: e.kind.as_str().to_owned(),
                from: e.from_state,
                to: e.to_state,
                reason: e.reason,
            })
            .collect())
    }

    /// The last `tail` bytes of an instance's captured output.
    pub async fn logs(
        &self,
        endpoint: &EndpointName,
        name: &DeploymentName,
        instance: &InstanceId,
        tail: u64,
    ) -> Result<Vec<u8>, ServingError> {
        self.deployment_row(endpoint, name).await?;
        let id_ok = instance
            .as_str()
            .strip_prefix(name.as_str())
            .is_some_and(|rest| {
                rest.len() == 6
                    && rest.starts_with('-')
                    && rest[1..]
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            });
        // Where the runtime writes it (`RuntimeContext::logs_dir`).
        let path = self
            .root
            .join("logs")
            .join(endpoint.as_str())
            .join(name.as_str())
            .join(format!("{instance}.log"));
        let not_found = || ServingError::NotFound(format!("no instance {instance} in {name}"));
        if !id_ok {
            return Err(not_found());
        }
        let bytes = match tokio::fs::read(&path).await {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(not_found()),
            Err(e) => return Err(e.into()),
        };
        let start = bytes.len().saturating_sub(tail as usize);
        Ok(bytes[start..].to_vec())
    }
}
