//! The host's GPUs, each held by at most one instance process at a time. An instance of a
//! GPU instance type takes its GPUs just before its process starts and gives them back
//! once the process (its whole group) is gone: at an exit, a restart, a stop.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The GPUs that instances can be given (host indices), and which of them are held.
pub struct GpuPool {
    devices: Vec<u32>,
    held: Mutex<BTreeSet<u32>>,
    freed: Notify,
}

/// GPUs one instance process holds; given back when dropped.
pub struct GpuLease {
    pool: Arc<GpuPool>,
    devices: Vec<u32>,
}

/// `serving.gpus` when set, else every GPU NVML sees (the `nvml` feature, with a driver),
/// else none.
pub fn discover(setting: Option<&[u32]>) -> Vec<u32> {
    if let Some(devices) = setting {
        let unique: BTreeSet<u32> = devices.iter().copied().collect();
        return unique.into_iter().collect();
    }
    #[cfg(feature = "nvml")]
    if let Ok(nvml) = nvml_wrapper::Nvml::init()
        && let Ok(n) = nvml.device_count()
    {
        return (0..n).collect();
    }
    Vec::new()
}

impl GpuPool {
    pub fn new(devices: Vec<u32>) -> Arc<GpuPool> {
        Arc::new(GpuPool {
            devices,
            held: Mutex::new(BTreeSet::new()),
            freed: Notify::new(),
        })
    }

    /// `n` GPUs no one holds, the lowest first; none when fewer are free. Zero GPUs are
    /// always there.
    pub fn try_take(self: &Arc<Self>, n: u32) -> Option<GpuLease> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let free: Vec<u32> = self
            .devices
            .iter()
            .copied()
            .filter(|d| !held.contains(d))
            .take(n as usize)
            .collect();
        if free.len() < n as usize {
            return None;
        }
        held.extend(&free);
        Some(GpuLease {
            pool: Arc::clone(self),
            devices: free,
        })
    }

    /// Waits until `n` GPUs are free and takes them; `waiting` is called once if they are
    /// not free at once. `None` when cancelled first.
    pub async fn take(
        self: &Arc<Self>,
        n: u32,
        cancel: &CancellationToken,
        mut waiting: impl FnMut(String),
    ) -> Option<GpuLease> {
        let mut told = false;
        loop {
            // Registered before the check, so a release between the two is not missed.
            let freed = self.freed.notified();
            if let Some(lease) = self.try_take(n) {
                return Some(lease);
            }
            if !told {
                told = true;
                waiting(self.shortage(n));
            }
            tokio::select! {
                _ = freed => {}
                _ = cancel.cancelled() => return None,
            }
        }
    }

    /// Why `n` GPUs cannot be had now.
    fn shortage(&self, n: u32) -> String {
        let held = self
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        format!(
            "Unschedulable: needs {n} GPU{}; {} of {} free",
            if n == 1 { "" } else { "s" },
            self.devices.len() - held,
            self.devices.len()
        )
    }
}

impl GpuLease {
    pub fn devices(&self) -> &[u32] {
        &self.devices
    }
}

impl Drop for GpuLease {
    fn drop(&mut self) {
        if self.devices.is_empty() {
            return;
        }
        let mut held = (self.pool.held.lock()).unwrap_or_else(PoisonError::into_inner);
        for d in &self.devices {
            held.remove(d);
        }
        drop(held);
        self.pool.freed.notify_waiters();
    }
}

/// The variables that show a process its GPUs and no other: comma-separated host indices,
/// empty for none (an empty `CUDA_VISIBLE_DEVICES` hides every GPU from CUDA, which is
/// right for a CPU instance on a GPU host). CUDA numbers GPUs fastest first unless told to
/// number them as NVML and `nvidia-smi` do, which the indices are.
pub fn visible_devices_env(devices: &[u32]) -> [(&'static str, String); 3] {
    let list = devices
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    [
        ("CUDA_VISIBLE_DEVICES", list.clone()),
        ("NVIDIA_VISIBLE_DEVICES", list),
        ("CUDA_DEVICE_ORDER", "PCI_BUS_ID".to_owned()),
    ]
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn no_two_leases_share_a_gpu_and_a_dropped_lease_frees_its_own() {
        let pool = GpuPool::new(vec![0, 1, 2]);
        let a = pool.try_take(2).unwrap();
        assert_eq!(a.devices(), [0, 1]);
        assert!(pool.try_take(2).is_none(), "one is left");
        let b = pool.try_take(1).unwrap();
        assert_eq!(b.devices(), [2]);
        assert!(pool.try_take(1).is_none());
        assert!(
            pool.try_take(0).unwrap().devices().is_empty(),
            "none is always there"
        );
        drop(a);
        let c = pool.try_take(2).unwrap();
        assert_eq!(c.devices(), [0, 1]);
        drop(b);
        assert_eq!(pool.try_take(1).unwrap().devices(), [2]);
    }

    #[test]
    fn the_setting_wins_and_lists_each_gpu_once() {
        assert_eq!(discover(Some(&[3, 1, 3])), [1, 3]);
        assert!(discover(Some(&[])).is_empty(), "an empty list: no GPU");
    }

    #[test]
    fn the_variables_name_the_gpus_or_hide_them_all() {
        assert_eq!(visible_devices_env(&[2, 5])[0].1, "2,5");
        assert_eq!(visible_devices_env(&[2, 5])[1].1, "2,5");
        assert_eq!(visible_devices_env(&[])[0].1, "");
    }

    #[tokio::test]
    async fn a_waiting_instance_gets_the_gpu_given_back_and_a_cancelled_one_none() {
        let pool = GpuPool::new(vec![7]);
        let first = pool.try_take(1).unwrap();
        let cancel = CancellationToken::new();
        let (tx, mut told) = tokio::sync::mpsc::unbounded_channel();
        let waiter = {
            let (pool, cancel) = (Arc::clone(&pool), cancel.clone());
            tokio::spawn(async move {
                let lease = pool.take(1, &cancel, |why| tx.send(why).unwrap()).await;
                lease.map(|l| l.devices().to_vec())
            })
        };
        let why = told.recv().await.unwrap();
        assert_eq!(why, "Unschedulable: needs 1 GPU; 0 of 1 free");
        drop(first);
        let got = tokio::time::timeout(Duration::from_secs(5), waiter).await;
        assert_eq!(got.unwrap().unwrap(), Some(vec![7]));

        let _held = pool.try_take(1).unwrap();
        let waiter = {
            let (pool, cancel) = (Arc::clone(&pool), cancel.clone());
            tokio::spawn(async move { pool.take(1, &cancel, |_| {}).await.is_some() })
        };
        cancel.cancel();
        assert!(!waiter.await.unwrap());
    }
}
