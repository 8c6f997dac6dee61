//! Triton's dynamic batcher (CONTRACT §3 "Batching and model instances"): calls that arrive
//! together run as one batch of the model, their inputs joined along the first (batch)
//! dimension, the outputs split back so that each call gets what it would have alone. A
//! batch forms once an instance is free (at most `instances` batches run at once: Triton's
//! model instances), and runs once it reaches `max_batch_size` or a preferred size, or once
//! its first call has waited `max_queue_delay`. A call whose caller is gone (its connection or deadline ended) before its
//! batch forms is left out of it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, mpsc, oneshot};
use tract_onnx::prelude::Tensor;

use crate::model::{Input, InputError, Model, ModelError};
use crate::stats::Statistics;

/// How a model takes batches (Triton's `max_batch_size` > 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batching {
    /// The most batch elements one run takes, one call's or several's.
    pub max_batch_size: usize,
    /// Triton's dynamic batcher; without it each call runs alone.
    pub dynamic: Option<DynamicBatching>,
}

/// Triton's `dynamic_batching`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DynamicBatching {
    /// How long a call may wait for others to join it.
    pub max_queue_delay: Duration,
    /// Sizes at which a batch runs without waiting longer.
    pub preferred_batch_sizes: Vec<usize>,
}

/// Whether `model` can take batches of up to `max_batch_size`: every input and output
/// starts with a batch dimension (-1).
pub fn check(model: &Model, max_batch_size: usize) -> Result<(), ModelError> {
    let fixed = (model.inputs.iter().chain(&model.outputs)).find(|s| s.shape.first() != Some(&-1));
    match fixed {
        Some(spec) => Err(ModelError::Unsupported(format!(
            "max_batch_size {max_batch_size} needs a batch dimension: {} has shape {:?}, whose first dimension is not -1",
            spec.name, spec.shape
        ))),
        None => Ok(()),
    }
}

/// What a call gets back: its outputs, how long it waited and how long its batch ran.
pub struct Ran {
    pub outputs: Result<Vec<Tensor>, ModelError>,
    pub queue: Duration,
    pub infer: Duration,
    /// The call's batch elements.
    pub elements: usize,
}

/// A call waiting for its batch.
struct Pending {
    inputs: Vec<(String, Tensor)>,
    /// Its batch elements: the first dimension of its inputs.
    size: usize,
    /// What calls must share to join one batch: input names, types and the dimensions
    /// after the first.
    shape: Vec<(String, tract_onnx::prelude::DatumType, Vec<usize>)>,
    arrived: Instant,
    answer: oneshot::Sender<Ran>,
}

/// A model's queue of calls and the task that batches them.
pub struct Batcher {
    queue: mpsc::UnboundedSender<Pending>,
    max_batch_size: usize,
}

impl Batcher {
    /// Starts batching `model`'s calls, `instances` batches at once; each run is counted
    /// in `stats` as it starts.
    pub fn start(
        model: Arc<Model>,
        batching: Batching,
        instances: usize,
        stats: Arc<Statistics>,
    ) -> Batcher {
        let (queue, calls) = mpsc::unbounded_channel();
        let max_batch_size = batching.max_batch_size;
        let schedule = Schedule {
            model,
            batching,
            instances: Arc::new(Semaphore::new(instances.max(1))),
            stats,
            held: None,
        };
        tokio::spawn(schedule.run(calls));
        Batcher {
            queue,
            max_batch_size,
        }
    }

    /// Runs a call of `inputs` in the next batch it can join; a call of more elements than
    /// `max_batch_size`, or whose inputs do not share their first dimension, is refused.
    pub async fn run(&self, inputs: Vec<(String, Input)>) -> Result<Ran, ModelError> {
        let arrived = Instant::now();
        let inputs: Vec<(String, Tensor)> = (inputs.into_iter())
            .map(|(name, input)| input.into_tensor().map(|t| (name, t)))
            .collect::<Result<_, _>>()
            .map_err(ModelError::Failed)?;
        let sizes: Vec<(String, usize)> = (inputs.iter())
            .map(|(n, t)| (n.clone(), t.shape().first().copied().unwrap_or(0)))
            .collect();
        let size = sizes.first().map_or(0, |(_, s)| *s);
        if sizes.iter().any(|(_, s)| *s != size) {
            return Err(ModelError::BadInput(InputError::BatchDimensions { sizes }));
        }
        if size > self.max_batch_size {
            let max = self.max_batch_size;
            return Err(ModelError::BadInput(InputError::BatchSize {
                given: size,
                max,
            }));
        }
        let mut shape: Vec<_> = (inputs.iter())
            .map(|(name, t)| (name.clone(), t.datum_type(), t.shape()[1..].to_vec()))
            .collect();
        shape.sort_by(|a, b| a.0.cmp(&b.0));
        let (answer, answered) = oneshot::channel();
        let pending = Pending {
            inputs,
            size,
            shape,
            arrived,
            answer,
        };
        let gone = || ModelError::Failed("the model's batcher stopped".into());
        self.queue.send(pending).map_err(|_| gone())?;
        answered.await.map_err(|_| gone())
    }
}

struct Schedule {
    model: Arc<Model>,
    batching: Batching,
    instances: Arc<Semaphore>,
    stats: Arc<Statistics>,
    /// A call that could not join the last batch: the next one's first.
    held: Option<Pending>,
}

impl Schedule {
    async fn run(mut self, mut calls: mpsc::UnboundedReceiver<Pending>) {
        loop {
            let first = match self.held.take() {
                Some(first) => first,
                None => match calls.recv().await {
                    Some(first) => first,
                    None => return,
                },
            };
            // As Triton's batcher, a batch forms once an instance is free: the calls that
            // queued while all were busy join it, rather than wait for the batch after.
            let Ok(instance) = Arc::clone(&self.instances).acquire_owned().await else {
                return;
            };
            let batch = self.gather(first, &mut calls).await;
            if batch.is_empty() {
                continue;
            }
            let (model, stats) = (Arc::clone(&self.model), Arc::clone(&self.stats));
            tokio::task::spawn_blocking(move || {
                run_batch(&model, batch, &stats);
                drop(instance);
            });
        }
    }

    /// The batch `first` starts: every call queued or arriving that can join it, until it
    /// is full or of a preferred size, or its first live call has waited
    /// `max_queue_delay`. A call whose caller is gone leaves it meanwhile; empty, when all
    /// have.
    async fn gather(
        &mut self,
        first: Pending,
        calls: &mut mpsc::UnboundedReceiver<Pending>,
    ) -> Vec<Pending> {
        let Some(dynamic) = &self.batching.dynamic else {
            return vec![first];
        };
        let max = self.batching.max_batch_size;
        let mut batch = vec![first];
        loop {
            batch.retain(|p| !p.answer.is_closed());
            let Some(lead) = batch.first() else {
                return batch;
            };
            let total: usize = batch.iter().map(|p| p.size).sum();
            if total >= max || dynamic.preferred_batch_sizes.contains(&total) {
                return batch;
            }
            let deadline = tokio::time::Instant::from_std(lead.arrived + dynamic.max_queue_delay);
            let next = match calls.try_recv() {
                Ok(next) => next,
                Err(_) => tokio::select! {
                    next = tokio::time::timeout_at(deadline, calls.recv()) => match next {
                        Ok(Some(next)) => next,
                        Ok(None) | Err(_) => return batch,
                    },
                    // The first call's caller left: the next one's wait decides.
                    () = batch[0].answer.closed() => continue,
                },
            };
            if next.answer.is_closed() {
                continue;
            }
            if next.shape != batch[0].shape || total + next.size > max {
                self.held = Some(next);
                return batch;
            }
            batch.push(next);
        }
    }
}

/// Runs the calls of `batch` as one run of `model` and answers each with its part.
fn run_batch(model: &Model, mut batch: Vec<Pending>, stats: &Statistics) {
    // Callers that left while an instance was busy are not run for.
    batch.retain(|p| !p.answer.is_closed());
    if batch.is_empty() {
        return;
    }
    stats.executed();
    let started = Instant::now();
    let total: usize = batch.iter().map(|p| p.size).sum();
    let outputs = if batch.len() == 1 {
        let inputs = batch[0]
            .inputs
            .iter()
            .map(|(n, t)| (n.clone(), Input::from(t.clone())));
        model.run(inputs.collect())
    } else {
        joined(&batch).and_then(|inputs| model.run(inputs))
    };
    let infer = started.elapsed();
    let mut at = 0;
    for pending in batch {
        let part = match &outputs {
            Ok(outputs) => part_of(outputs, total, at, pending.size),
            Err(e) => Err(e.clone()),
        };
        at += pending.size;
        let _ = pending.answer.send(Ran {
            outputs: part,
            queue: started - pending.arrived,
            infer,
            elements: pending.size,
        });
    }
}

/// The calls' inputs, each joined along its first dimension in the calls' order.
fn joined(batch: &[Pending]) -> Result<Vec<(String, Input)>, ModelError> {
    let failed = |e: anyhow::Error| ModelError::Failed(format!("{e:#}"));
    (batch[0].inputs.iter())
        .map(|(name, _)| {
            let parts: Vec<&Tensor> = (batch.iter())
                .map(|p| {
                    &p.inputs
                        .iter()
                        .find(|(n, _)| n == name)
                        .expect("same names")
                        .1
                })
                .collect();
            let joined = Tensor::stack_tensors(0, &parts).map_err(failed)?;
            Ok((name.clone(), Input::from(joined)))
        })
        .collect()
}

/// One call's part of a batch's outputs: `size` elements from `at` of each.
fn part_of(
    outputs: &[Tensor],
    total: usize,
    at: usize,
    size: usize,
) -> Result<Vec<Tensor>, ModelError> {
    outputs
        .iter()
        .map(|t| {
            if t.shape().first() != Some(&total) {
                return Err(ModelError::Failed(format!(
                    "an output of shape {:?} for a batch of {total}: its first dimension is not the batch's",
                    t.shape()
                )));
            }
            if at == 0 && size == total {
                return Ok(t.clone());
            }
            t.slice(0, at, at + size)
                .map_err(|e| ModelError::Failed(format!("{e:#}")))
        })
        .collect()
}
