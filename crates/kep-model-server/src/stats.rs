//! Inference statistics as Triton counts them (its statistics extension): per model, the
//! successful and failed requests with their cumulative durations, and for the successful
//! ones the time in each phase (queue, compute input, compute infer, compute output).
//! Every protocol of the server records into the same counters.

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

/// A count and the nanoseconds it took in all (Triton's `StatisticDuration`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StatisticDuration {
    pub count: u64,
    pub ns: u64,
}

impl StatisticDuration {
    fn add(&mut self, d: Duration) {
        self.count += 1;
        self.ns += u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    }
}

/// Triton's `InferStatistics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct InferStatistics {
    pub success: StatisticDuration,
    pub fail: StatisticDuration,
    pub queue: StatisticDuration,
    pub compute_input: StatisticDuration,
    pub compute_infer: StatisticDuration,
    pub compute_output: StatisticDuration,
    pub cache_hit: StatisticDuration,
    pub cache_miss: StatisticDuration,
}

/// One model version's statistics, the numbers of Triton's `ModelStatistics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ModelStatistics {
    /// Milliseconds since the epoch of the last successful inference; 0 before any.
    pub last_inference: u64,
    /// Inferences made, as Triton counts them: one per request where the model is not
    /// batched (`max_batch_size` 0), else one per batch element.
    pub inference_count: u64,
    /// Times the model ran: a batch of several requests is one.
    pub execution_count: u64,
    pub inference_stats: InferStatistics,
}

/// The served model's counters.
#[derive(Debug, Default)]
pub struct Statistics(Mutex<ModelStatistics>);

impl Statistics {
    pub fn snapshot(&self) -> ModelStatistics {
        *self.0.lock().expect("statistics lock")
    }

    /// Counts a run of the model that batched requests: their inferences count as they
    /// finish, this one execution now.
    pub fn executed(&self) {
        self.0.lock().expect("statistics lock").execution_count += 1;
    }

    /// Counts a finished request by its `clock`: a success with its phases, or a failure
    /// (Triton counts only the whole duration of a failed request).
    pub fn record(&self, clock: &Clock, success: bool) {
        let now = Instant::now();
        let total = now - clock.received;
        let mut s = self.0.lock().expect("statistics lock");
        if !success {
            s.inference_stats.fail.add(total);
            return;
        }
        let stats = &mut s.inference_stats;
        stats.success.add(total);
        stats.queue.add(clock.queue);
        stats.compute_input.add(clock.input);
        stats.compute_infer.add(clock.infer);
        stats
            .compute_output
            .add(clock.output_from.map_or(Duration::ZERO, |t| now - t));
        s.inference_count += clock.inferences;
        s.execution_count += clock.executions;
        s.last_inference = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    }
}

/// One request's time, from its arrival: reading its inputs (compute input), waiting for
/// the engine (queue), running the model (compute infer) and writing its outputs (compute
/// output, from when the model returned until the answer is made).
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    received: Instant,
    input: Duration,
    queue: Duration,
    infer: Duration,
    output_from: Option<Instant>,
    /// The request's inferences: 1, or its batch elements for a batched model.
    inferences: u64,
    /// The model's runs it made alone: 1, or 0 when it ran in a batch.
    executions: u64,
}

impl Clock {
    pub fn start() -> Clock {
        Clock {
            received: Instant::now(),
            input: Duration::ZERO,
            queue: Duration::ZERO,
            infer: Duration::ZERO,
            output_from: None,
            inferences: 1,
            executions: 1,
        }
    }

    /// The inputs are read: what came since the arrival was compute input.
    pub(crate) fn inputs_read(&mut self) {
        self.input = self.received.elapsed();
    }

    /// The model ran for `infer`, after `queue` waiting for the engine.
    pub(crate) fn ran(&mut self, queue: Duration, infer: Duration) {
        self.queue = queue;
        self.infer = infer;
        self.output_from = Some(Instant::now());
    }

    /// The request ran as `elements` of a batch, whose execution is counted once.
    pub(crate) fn batched(&mut self, elements: usize) {
        self.inferences = elements as u64;
        self.executions = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn successes_count_their_phases_and_failures_only_their_time() {
        let stats = Statistics::default();
        let mut clock = Clock::start();
        clock.inputs_read();
        clock.ran(Duration::from_micros(5), Duration::from_millis(2));
        stats.record(&clock, true);
        stats.record(&Clock::start(), false);
        let s = stats.snapshot();
        assert_eq!((s.inference_count, s.execution_count), (1, 1));
        let i = s.inference_stats;
        assert_eq!((i.success.count, i.fail.count, i.queue.count), (1, 1, 1));
        assert_eq!((i.queue.ns, i.compute_infer.ns), (5_000, 2_000_000));
        assert!(i.success.ns >= i.compute_input.ns + i.compute_output.ns);
        assert!(s.last_inference > 0);
        assert_eq!(i.cache_hit, StatisticDuration::default());
    }
}
