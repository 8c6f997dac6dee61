//! GPU use per process, through NVML (the NVIDIA driver's library, opened at run time) when
//! kep is built with the `nvml` feature and a driver is present; otherwise no figures, and
//! the GPU conditions never hold.

use std::collections::HashMap;

/// SM (compute) utilization per process id, in percent of one GPU, summed over GPUs.
pub trait GpuReader: Send {
    fn sample(&mut self) -> HashMap<u32, f64>;
}

/// The reader this build and machine have: NVML's, or none.
pub fn reader() -> Option<Box<dyn GpuReader>> {
    #[cfg(feature = "nvml")]
    if let Some(r) = nvml::NvmlReader::open() {
        return Some(Box::new(r));
    }
    None
}

#[cfg(feature = "nvml")]
mod nvml {
    use std::collections::HashMap;

    use nvml_wrapper::Nvml;

    pub struct NvmlReader {
        nvml: Nvml,
        /// NVML's timestamp of the newest sample already read, per device.
        last_seen: HashMap<u32, u64>,
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
                        last_seen: HashMap::new(),
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
        fn sample(&mut self) -> HashMap<u32, f64> {
            let mut by_pid = HashMap::new();
            for index in 0..self.nvml.device_count().unwrap_or(0) {
                let Ok(device) = self.nvml.device_by_index(index) else {
                    continue;
                };
                let since = self.last_seen.get(&index).copied().unwrap_or(0);
                // No sample since the last read (an idle GPU) is an error, not an empty list.
                let Ok(samples) = device.process_utilization_stats(since) else {
                    continue;
                };
                // The newest sample of each process counts once.
                let mut newest: HashMap<u32, (u64, u32)> = HashMap::new();
                for s in samples {
                    let e = newest.entry(s.pid).or_insert((s.timestamp, s.sm_util));
                    if s.timestamp >= e.0 {
                        *e = (s.timestamp, s.sm_util);
                    }
                }
                if let Some(latest) = newest.values().map(|(t, _)| *t).max() {
                    self.last_seen.insert(index, latest);
                }
                for (pid, (_, util)) in newest {
                    *by_pid.entry(pid).or_insert(0.0) += f64::from(util);
                }
            }
            by_pid
        }
    }
}
