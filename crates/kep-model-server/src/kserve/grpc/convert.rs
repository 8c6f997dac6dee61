//! The served model's metadata, configuration and statistics as Triton's protobuf messages.

use super::inference::{self, model_input, model_instance_group, model_version_policy};
use crate::kserve::config::ModelConfig;
use crate::model::TensorSpec;
use crate::stats::{self, StatisticDuration};
use crate::{Served, Version};

pub fn metadata(s: &Served, version: &Version) -> inference::ModelMetadataResponse {
    let model = version.model();
    use inference::model_metadata_response::TensorMetadata;
    let tensors = |specs: &[TensorSpec]| {
        specs
            .iter()
            .map(|t| TensorMetadata {
                name: t.name.clone(),
                datatype: t.datatype.name().into(),
                shape: t.shape.clone(),
            })
            .collect()
    };
    inference::ModelMetadataResponse {
        name: s.name.clone(),
        versions: crate::kserve::version_names(s),
        platform: crate::kserve::config::platform(model).0.into(),
        inputs: tensors(&model.inputs),
        outputs: tensors(&model.outputs),
    }
}

/// A `TYPE_…` name of the configuration as the proto's enum value.
fn data_type(name: &str) -> i32 {
    inference::DataType::from_str_name(name).unwrap_or_default() as i32
}

pub fn config(c: &ModelConfig) -> inference::ModelConfig {
    inference::ModelConfig {
        name: c.name.clone(),
        platform: c.platform.into(),
        backend: c.backend.into(),
        version_policy: Some(inference::ModelVersionPolicy {
            policy_choice: Some(model_version_policy::PolicyChoice::Latest(
                model_version_policy::Latest {
                    num_versions: c.version_policy.latest.num_versions,
                },
            )),
        }),
        max_batch_size: c.max_batch_size,
        input: c
            .input
            .iter()
            .map(|i| inference::ModelInput {
                name: i.name.clone(),
                data_type: data_type(i.data_type),
                format: model_input::Format::from_str_name(i.format).unwrap_or_default() as i32,
                dims: i.dims.clone(),
                is_shape_tensor: i.is_shape_tensor,
                allow_ragged_batch: i.allow_ragged_batch,
                optional: i.optional,
                ..Default::default()
            })
            .collect(),
        output: c
            .output
            .iter()
            .map(|o| inference::ModelOutput {
                name: o.name.clone(),
                data_type: data_type(o.data_type),
                dims: o.dims.clone(),
                label_filename: o.label_filename.into(),
                is_shape_tensor: o.is_shape_tensor,
                ..Default::default()
            })
            .collect(),
        instance_group: c
            .instance_group
            .iter()
            .map(|g| inference::ModelInstanceGroup {
                name: g.name.clone(),
                kind: model_instance_group::Kind::from_str_name(g.kind).unwrap_or_default() as i32,
                count: g.count,
                gpus: g.gpus.clone(),
                ..Default::default()
            })
            .collect(),
        default_model_filename: c.default_model_filename.into(),
        scheduling_choice: c.dynamic_batching.as_ref().map(|d| {
            inference::model_config::SchedulingChoice::DynamicBatching(
                inference::ModelDynamicBatching {
                    preferred_batch_size: d.preferred_batch_size.clone(),
                    max_queue_delay_microseconds: d.max_queue_delay_microseconds,
                    preserve_ordering: d.preserve_ordering,
                    ..Default::default()
                },
            )
        }),
        ..Default::default()
    }
}

fn duration(d: StatisticDuration) -> Option<inference::StatisticDuration> {
    Some(inference::StatisticDuration {
        count: d.count,
        ns: d.ns,
    })
}

pub fn statistics(s: &Served) -> inference::ModelStatistics {
    let stats::ModelStatistics {
        last_inference,
        inference_count,
        execution_count,
        inference_stats: i,
    } = s.stats.snapshot();
    inference::ModelStatistics {
        name: s.name.clone(),
        version: s.latest().number.to_string(),
        last_inference,
        inference_count,
        execution_count,
        inference_stats: Some(inference::InferStatistics {
            success: duration(i.success),
            fail: duration(i.fail),
            queue: duration(i.queue),
            compute_input: duration(i.compute_input),
            compute_infer: duration(i.compute_infer),
            compute_output: duration(i.compute_output),
            cache_hit: duration(i.cache_hit),
            cache_miss: duration(i.cache_miss),
        }),
        ..Default::default()
    }
}
