//! CPU and memory of instance processes, read from the operating system, and their GPU
//! use where GPUs are read. An instance counts with every process it started (a shell's
//! children, a server's workers).
//!
//! Memory is a process's resident anonymous and shared memory (`RssAnon` + `RssShmem` of
//! `/proc/<pid>/status`), not its whole RSS: RSS also counts resident pages of mapped files,
//! which for a CUDA process are its libraries (cuDNN, cuBLAS: gigabytes, shared with every
//! other process that maps them, and given back by the kernel under pressure) and the
//! pages the NVIDIA driver maps in through its device files (pinned host buffers, unified
//! memory), which the driver allocates and accounts itself. What is left is what the
//! process alone holds and what a container's memory limit would hold it to.

use std::collections::{HashMap, HashSet};

use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System};

use super::gpu::{self, GpuReader, GpuUse};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Usage {
    /// Cores busy since the previous sample; `None` on a process's first sample, which
    /// has nothing to measure against.
    pub cpu_cores: Option<f64>,
    pub memory_bytes: u64,
    /// Where GPUs are read.
    pub gpu: Option<GpuUse>,
}

/// One sample: each root process's usage, and each GPU's memory (by host index).
#[derive(Debug, Default)]
pub struct Sample {
    pub usage: HashMap<u32, Usage>,
    pub gpu_memory_total: HashMap<u32, u64>,
}

pub struct ProcessSampler {
    /// `None` where the operating system cannot be read: no figures, nothing else lost.
    system: Option<System>,
    gpu: Option<Box<dyn GpuReader>>,
    seen: HashSet<u32>,
}

impl Default for ProcessSampler {
    fn default() -> Self {
        ProcessSampler {
            system: System::new().ok(),
            gpu: gpu::reader(),
            seen: HashSet::new(),
        }
    }
}

impl ProcessSampler {
    /// The usage of each root process with its descendants. Blocking: it reads `/proc`.
    pub fn sample(&mut self, roots: &[u32]) -> Sample {
        let Some(system) = &mut self.system else {
            return Sample::default();
        };
        system.refresh_processes_specifics(
            ProcessesToUpdate::All,
            true,
            ProcessRefreshKind::nothing().with_cpu().with_memory(),
        );
        let processes = system.processes();
        let gpu = self.gpu.as_mut().map(|g| g.sample());
        let gpu_memory_total = gpu.as_ref().map(|g| g.memory_total.clone());
        let mut children: HashMap<Pid, Vec<Pid>> = HashMap::new();
        for (pid, p) in processes {
            // A process's threads are listed too, each with the whole process's memory and
            // its own share of the process's CPU: counted, a 25-thread ONNX Runtime server
            // showed 25 times its memory.
            if p.thread_kind().is_some() {
                continue;
            }
            if let Some(parent) = p.parent() {
                children.entry(parent).or_default().push(*pid);
            }
        }
        let mut usage = HashMap::new();
        for &root in roots {
            let root_pid = Pid::from_u32(root);
            if !processes.contains_key(&root_pid) {
                continue;
            }
            let (mut cpu, mut memory, mut gpu_use) = (0.0f64, 0u64, GpuUse::default());
            let mut stack = vec![root_pid];
            while let Some(pid) = stack.pop() {
                if let Some(p) = processes.get(&pid) {
                    cpu += f64::from(p.cpu_usage()) / 100.0;
                    memory += private_memory(pid.as_u32()).unwrap_or_else(|| p.memory());
                }
                if let Some(g) = gpu.as_ref().and_then(|g| g.by_pid.get(&pid.as_u32())) {
                    gpu_use.sm_percent += g.sm_percent;
                    gpu_use.memory_bytes += g.memory_bytes;
                }
                stack.extend(children.get(&pid).into_iter().flatten());
            }
            usage.insert(
                root,
                Usage {
                    cpu_cores: self.seen.contains(&root).then_some(cpu),
                    memory_bytes: memory,
                    gpu: gpu.is_some().then_some(gpu_use),
                },
            );
        }
        self.seen = roots.iter().copied().collect();
        Sample {
            usage,
            gpu_memory_total: gpu_memory_total.unwrap_or_default(),
        }
    }
}

/// `RssAnon` + `RssShmem` of a process, in bytes (the module's note says why not RSS);
/// `None` where `/proc/<pid>/status` cannot be read or lacks them.
fn private_memory(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |name: &str| {
        status.lines().find_map(|l| {
            l.strip_prefix(name)?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse::<u64>()
                .ok()
        })
    };
    Some((kib("RssAnon:")? + kib("RssShmem:")?) * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kills the test's process group however the test ends.
    struct Group(std::process::Child);

    impl Drop for Group {
        fn drop(&mut self) {
            let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
            let _ = nix::sys::signal::killpg(pid, nix::sys::signal::Signal::SIGKILL);
            let _ = self.0.wait();
        }
    }

    /// A busy child process is counted with its parent; a first sample has no CPU figure.
    #[test]
    fn a_process_tree_is_measured_as_one() {
        use std::os::unix::process::CommandExt as _;
        let group = Group(
            std::process::Command::new("sh")
                .args(["-c", "yes > /dev/null & wait"])
                .process_group(0)
                .spawn()
                .unwrap(),
        );
        let pid = group.0.id();
        // The child is forked by then: a process's first sample has no CPU figure.
        std::thread::sleep(std::time::Duration::from_millis(300));
        let mut sampler = ProcessSampler::default();
        let first = sampler.sample(&[pid]).usage;
        assert_eq!(first[&pid].cpu_cores, None);
        assert!(first[&pid].memory_bytes > 0);
        std::thread::sleep(std::time::Duration::from_millis(500));
        let second = sampler.sample(&[pid, u32::MAX]).usage;
        let cores = second[&pid].cpu_cores.unwrap();
        // `yes` alone keeps a core busy, the waiting shell none: any share of a core is the
        // child's. Small, as a machine busy with other work gives `yes` little (CI saw 0.14).
        assert!(cores > 0.03, "{cores} cores");
        assert!(!second.contains_key(&u32::MAX));
    }

    /// Runs `script` in a Python process of its own group, once it has made the file named
    /// `ready` it is given.
    fn ready_python(dir: &std::path::Path, script: &str) -> Group {
        use std::os::unix::process::CommandExt as _;
        let ready = dir.join("ready");
        let group = Group(
            std::process::Command::new("python3")
                .args(["-c", script, ready.to_str().unwrap()])
                .process_group(0)
                .spawn()
                .unwrap(),
        );
        for _ in 0..200 {
            if ready.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert!(ready.exists(), "the script did not get ready");
        group
    }

    fn mib_counted(pid: u32) -> (u64, String) {
        let memory = ProcessSampler::default().sample(&[pid]).usage[&pid].memory_bytes;
        let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:").map(|v| v.trim().to_owned()))
            .unwrap();
        (memory >> 20, rss)
    }

    /// Threads share their process's memory: 64 MiB held by a process of 9 threads is 64
    /// MiB, not 9 times that.
    #[test]
    fn threads_are_counted_once() {
        let dir = tempfile::tempdir().unwrap();
        let script = "import sys, threading, time\n\
                      heap = bytearray(b'x' * (64 << 20))\n\
                      for _ in range(8): threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n\
                      open(sys.argv[1], 'w').close()\n\
                      time.sleep(30)\n";
        let group = ready_python(dir.path(), script);
        let (mib, rss) = mib_counted(group.0.id());
        assert!((64..120).contains(&mib), "{mib} MiB counted, RSS {rss}");
    }

    /// A process's memory is what it alone holds: 64 MiB it writes to its heap count, the
    /// 64 MiB of a file it maps and reads (a library, a model file) do not.
    #[test]
    fn a_mapped_file_is_not_the_process_memory() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("weights");
        std::fs::write(&file, vec![1u8; 64 << 20]).unwrap();
        let script = format!(
            "import mmap, sys, time\n\
             f = open({file:?}, 'rb')\n\
             m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)\n\
             s = sum(m[i] for i in range(0, len(m), 4096))\n\
             heap = bytearray(b'x' * (64 << 20))\n\
             open(sys.argv[1], 'w').close()\n\
             time.sleep(30)\n"
        );
        let group = ready_python(dir.path(), &script);
        let (mib, rss) = mib_counted(group.0.id());
        assert!((64..120).contains(&mib), "{mib} MiB counted, RSS {rss}");
    }
}
