//! A `triton` deployment's `model_config` (CONTRACT §3 "Batching and model instances").

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A `triton` deployment's `model_config`, with Triton's meaning (CONTRACT §3 "Batching
/// and model instances").
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// The most batch elements one run of the model takes; 0 (the default): the model's
    /// first dimension is not a batch dimension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 4096)]
    pub max_batch_size: Option<u32>,
    /// Join calls that arrive together into one run of the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dynamic_batching: Option<DynamicBatching>,
    /// Copies of the model per instance that run at once (1 when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 16)]
    pub instance_group_count: Option<u32>,
}

/// Triton's `dynamic_batching`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DynamicBatching {
    /// How long a call may wait for others to join it, in microseconds (0 when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 10_000_000)]
    pub max_queue_delay_us: Option<u64>,
    /// Batch sizes that run at once, without waiting longer: each 1 to `max_batch_size`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_items = 16)]
    pub preferred_batch_sizes: Option<Vec<u32>>,
}

impl ModelConfig {
    /// The largest `max_batch_size`.
    pub const MAX_BATCH_SIZE: u32 = 4096;
    /// The longest `max_queue_delay_us`: ten seconds.
    pub const MAX_QUEUE_DELAY_US: u64 = 10_000_000;
    /// The most `preferred_batch_sizes`.
    pub const MAX_PREFERRED_BATCH_SIZES: usize = 16;
    /// The most `instance_group_count` (`kep model-server`'s model instances).
    pub const MAX_INSTANCE_GROUP_COUNT: u32 = 16;

    /// Whether the configuration holds together; `Err` says which field is wrong, as
    /// `field: why`.
    pub fn check(&self) -> Result<(), String> {
        let max = self.max_batch_size.unwrap_or(0);
        if max > Self::MAX_BATCH_SIZE {
            return Err(format!("max_batch_size: at most {}", Self::MAX_BATCH_SIZE));
        }
        if let Some(count) = self.instance_group_count
            && !(1..=Self::MAX_INSTANCE_GROUP_COUNT).contains(&count)
        {
            return Err(format!(
                "instance_group_count: from 1 to {}",
                Self::MAX_INSTANCE_GROUP_COUNT
            ));
        }
        let Some(dynamic) = &self.dynamic_batching else {
            return Ok(());
        };
        if max == 0 {
            return Err("dynamic_batching: needs a max_batch_size of at least 1".into());
        }
        if dynamic.max_queue_delay_us.unwrap_or(0) > Self::MAX_QUEUE_DELAY_US {
            return Err(format!(
                "dynamic_batching.max_queue_delay_us: at most {} (ten seconds)",
                Self::MAX_QUEUE_DELAY_US
            ));
        }
        let preferred = dynamic.preferred_batch_sizes.as_deref().unwrap_or_default();
        if preferred.len() > Self::MAX_PREFERRED_BATCH_SIZES {
            return Err(format!(
                "dynamic_batching.preferred_batch_sizes: at most {} sizes",
                Self::MAX_PREFERRED_BATCH_SIZES
            ));
        }
        if let Some(size) = preferred.iter().find(|&&s| s == 0 || s > max) {
            return Err(format!(
                "dynamic_batching.preferred_batch_sizes: {size} is not from 1 to max_batch_size ({max})"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(json: &str) -> ModelConfig {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn a_model_config_holds_at_its_limits_and_not_past_them() {
        let fine = [
            r#"{}"#,
            r#"{"max_batch_size": 0}"#,
            r#"{"max_batch_size": 4096}"#,
            r#"{"instance_group_count": 1}"#,
            r#"{"instance_group_count": 16}"#,
            r#"{"max_batch_size": 1, "dynamic_batching": {}}"#,
            r#"{"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_us": 10000000}}"#,
            r#"{"max_batch_size": 8, "dynamic_batching": {"preferred_batch_sizes": [1, 8]}}"#,
            r#"{"max_batch_size": 16, "dynamic_batching": {"preferred_batch_sizes": [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]}}"#,
        ];
        for json in fine {
            assert_eq!(config(json).check(), Ok(()), "{json}");
        }
        let refused = [
            (
                r#"{"max_batch_size": 4097}"#,
                "max_batch_size: at most 4096",
            ),
            (
                r#"{"instance_group_count": 0}"#,
                "instance_group_count: from 1 to 16",
            ),
            (
                r#"{"instance_group_count": 17}"#,
                "instance_group_count: from 1 to 16",
            ),
            (
                r#"{"max_batch_size": 0, "dynamic_batching": {}}"#,
                "needs a max_batch_size",
            ),
            (
                r#"{"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_us": 10000001}}"#,
                "at most 10000000",
            ),
            (
                r#"{"max_batch_size": 8, "dynamic_batching": {"preferred_batch_sizes": [0]}}"#,
                "0 is not from 1",
            ),
            (
                r#"{"max_batch_size": 8, "dynamic_batching": {"preferred_batch_sizes": [9]}}"#,
                "9 is not from 1 to max_batch_size (8)",
            ),
            (
                r#"{"max_batch_size": 17, "dynamic_batching": {"preferred_batch_sizes": [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]}}"#,
                "at most 16 sizes",
            ),
        ];
        for (json, said) in refused {
            let err = config(json).check().unwrap_err();
            assert!(err.contains(said), "{json}: {err}");
        }
        assert!(serde_json::from_str::<ModelConfig>(r#"{"max_batch": 8}"#).is_err());
    }
}
