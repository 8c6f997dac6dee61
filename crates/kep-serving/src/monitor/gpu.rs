//! GPU use per process, through NVML (the NVIDIA driver's library, opened at run time) when
//! kep is built with the `nvml` feature and a driver is present; otherwise no figures, and
//! the GPU conditions never hold.

use std::collections::HashMap;

/// One process's use of the GPUs, summed over them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GpuUse {
    /// Compute (SM) use in percent of one GPU: 200 is two GPUs busy.
    pub sm_percent: f64,
    /// GPU memory it holds.
    pub memory_bytes: u64,
}

/// What one read of the GPUs gives.
#[derive(Debug, Default)]
pub struct GpuSample {
    pub by_pid: HashMap<u32, GpuUse>,
    /// Each GPU's memory, by its host index.
    pub memory_total: HashMap<u32, u64>,
}

pub trait GpuReader: Send {
    fn sample(&mut self) -> GpuSample;
}

/// The reader this build and machine have: NVML's, or none.
pub fn reader() -> Option<Box<dyn GpuReader>> {
    #[cfg(feature = "nvml")]
    if let Some(r) = nvml::NvmlReader::open() {
        return Some(Box::new(r));
    }
    None
}

#[cfg_attr(
    not(any(feature = "nvml", test)),
    allow(
        dead_code,
        reason = "only the NVML reader (the `nvml` feature) folds samples"
    )
)]
/// One of NVML's utilization samples (`nvmlProcessUtilizationSample_t`): a process's use of
/// one GPU over NVML's last sampling period, dated by a CPU timestamp in microseconds.
#[derive(Debug, Clone, Copy)]
pub struct UtilizationSample {
    pub pid: u32,
    pub timestamp: u64,
    pub sm_util: u32,
}

/// Turns NVML's sample buffers into use per process. NVML keeps a buffer of samples per
/// GPU, several per process; only samples newer than the last read count, and of those
/// the newest of each process, so a process's figure is its use now, not a sum over time.
#[derive(Debug, Default)]
#[cfg_attr(
    not(any(feature = "nvml", test)),
    allow(
        dead_code,
        reason = "only the NVML reader (the `nvml` feature) folds samples"
    )
)]
pub struct Folder {
    /// The newest timestamp read, per GPU: where the next read starts.
    last_seen: HashMap<u32, u64>,
}

#[cfg_attr(
    not(any(feature = "nvml", test)),
    allow(
        dead_code,
        reason = "only the NVML reader (the `nvml` feature) folds samples"
    )
)]
impl Folder {
    /// Where NVML should start the next read of GPU `device` (0: everything it has).
    pub fn since(&self, device: u32) -> u64 {
        self.last_seen.get(&device).copied().unwrap_or(0)
    }

    /// Adds one GPU's utilization samples into `by_pid`.
    pub fn utilization(
        &mut self,
        device: u32,
        samples: impl IntoIterator<Item = UtilizationSample>,
        by_pid: &mut HashMap<u32, GpuUse>,
    ) {
        let since = self.since(device);
        let mut newest: HashMap<u32, UtilizationSample> = HashMap::new();
        for s in samples.into_iter().filter(|s| s.timestamp > since) {
            let e = newest.entry(s.pid).or_insert(s);
            if s.timestamp >= e.timestamp {
                *e = s;
            }
        }
        if let Some(latest) = newest.values().map(|s| s.timestamp).max() {
            self.last_seen.insert(device, latest);
        }
        for s in newest.into_values() {
            by_pid.entry(s.pid).or_default().sm_percent += f64::from(s.sm_util);
        }
    }
}

/// Adds one GPU's compute processes' memory (`pid`, bytes; NVML may not know a process's
/// figure) into `by_pid`.
#[cfg_attr(
    not(any(feature = "nvml", test)),
    allow(
        dead_code,
        reason = "only the NVML reader (the `nvml` feature) folds samples"
    )
)]
pub fn memory(
    processes: impl IntoIterator<Item = (u32, Option<u64>)>,
    by_pid: &mut HashMap<u32, GpuUse>,
) {
    for (pid, bytes) in processes {
        by_pid.entry(pid).or_default().memory_bytes += bytes.unwrap_or(0);
    }
}

#[cfg(feature = "nvml")]
mod nvml {
    use nvml_wrapper::Nvml;
    use nvml_wrapper::enums::device::UsedGpuMemory;

    use super::{Folder, GpuSample, UtilizationSample};

    pub struct NvmlReader {
        nvml: Nvml,
        folder: Folder,
    }

    impl NvmlReader {
        pub fn open() -> Option<NvmlReader> {
            match Nvml::init() {
                Ok(nvml) => {
                    tracing::info!(
                        gpus = nvml.device_count().unwrap_or(0),
                        "reading GPU use through NVML"
                    );
                    Some(NvmlReader {
                        nvml,
                        folder: Folder::default(),
                    })
                }
                Err(e) => {
                    tracing::debug!(error = %e, "no NVML: GPU use is not read");
                    None
                }
            }
        }
    }

    impl super::GpuReader for NvmlReader {
        fn sample(&mut self) -> GpuSample {
            let mut sample = GpuSample::default();
            for index in 0..self.nvml.device_count().unwrap_or(0) {
                let Ok(device) = self.nvml.device_by_index(index) else {
                    continue;
                };
                if let Ok(m) = device.memory_info() {
                    sample.memory_total.insert(index, m.total);
                }
                if let Ok(processes) = device.running_compute_processes() {
                    let used = processes.into_iter().map(|p| match p.used_gpu_memory {
                        UsedGpuMemory::Used(bytes) => (p.pid, Some(bytes)),
                        UsedGpuMemory::Unavailable => (p.pid, None),
                    });
                    super::memory(used, &mut sample.by_pid);
                }
                // No sample since the last read (an idle GPU) is an error, not an empty list.
                let Ok(samples) = device.process_utilization_stats(self.folder.since(index)) else {
                    continue;
                };
                let samples = samples.into_iter().map(|s| UtilizationSample {
                    pid: s.pid,
                    timestamp: s.timestamp,
                    sm_util: s.sm_util,
                });
                self.folder.utilization(index, samples, &mut sample.by_pid);
            }
            sample
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NVML's sample form, as `nvmlDeviceGetProcessUtilization` fills it (memory, encoder
    /// and decoder use beside SM use, which is what counts).
    fn nvml(pid: u32, timestamp: u64, sm_util: u32, _mem_util: u32) -> UtilizationSample {
        UtilizationSample {
            pid,
            timestamp,
            sm_util,
        }
    }

    #[test]
    fn the_newest_sample_of_each_process_counts_summed_over_gpus() {
        let mut folder = Folder::default();
        let mut by_pid = HashMap::new();
        // GPU 0's buffer holds three periods of process 10 and one of process 11, out of
        // order; GPU 1 runs process 10 too.
        let gpu0 = [
            nvml(10, 1_000_000, 30, 5),
            nvml(10, 1_333_000, 90, 40),
            nvml(11, 1_200_000, 7, 1),
            nvml(10, 1_166_000, 60, 20),
        ];
        folder.utilization(0, gpu0, &mut by_pid);
        folder.utilization(1, [nvml(10, 1_300_000, 100, 50)], &mut by_pid);
        memory([(10, Some(3 << 30)), (12, None)], &mut by_pid);
        memory([(10, Some(1 << 30))], &mut by_pid);
        assert_eq!(by_pid[&10].sm_percent, 190.0, "90 on GPU 0, 100 on GPU 1");
        assert_eq!(by_pid[&10].memory_bytes, 4 << 30, "3 GiB and 1 GiB");
        assert_eq!(by_pid[&11].sm_percent, 7.0);
        assert_eq!(by_pid[&12], GpuUse::default(), "known, figure unavailable");
        assert_eq!(
            (folder.since(0), folder.since(1), folder.since(2)),
            (1_333_000, 1_300_000, 0)
        );

        // The next read counts only what is newer than the last: NVML may hand the newest
        // sample back again.
        let mut next = HashMap::new();
        let gpu0 = [nvml(10, 1_333_000, 90, 40), nvml(11, 1_500_000, 12, 2)];
        folder.utilization(0, gpu0, &mut next);
        folder.utilization(1, [], &mut next);
        assert_eq!(next.get(&10), None, "no new sample: idle");
        assert_eq!(next[&11].sm_percent, 12.0);
        assert_eq!((folder.since(0), folder.since(1)), (1_500_000, 1_300_000));
    }
}
