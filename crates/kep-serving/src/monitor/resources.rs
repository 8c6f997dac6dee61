//! CPU and resident memory of instance processes, read from the operating system. An
//! instance counts with every process it started (a shell's children, a server's workers).

use std::collections::{HashMap, HashSet};

use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System};

use super::gpu::{self, GpuReader};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Usage {
    /// Cores busy since the previous sample; `None` on a process's first sample, which
    /// has nothing to measure against.
    pub cpu_cores: Option<f64>,
    pub memory_bytes: u64,
    /// GPU compute use in percent of one GPU, where GPUs are read.
    pub gpu_util: Option<f64>,
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
    pub fn sample(&mut self, roots: &[u32]) -> HashMap<u32, Usage> {
        let Some(system) = &mut self.system else {
            return HashMap::new();
        };
        system.refresh_processes_specifics(
            ProcessesToUpdate::All,
            true,
            ProcessRefreshKind::nothing().with_cpu().with_memory(),
        );
        let processes = system.processes();
        let gpu = self.gpu.as_mut().map(|g| g.sample());
        let mut children: HashMap<Pid, Vec<Pid>> = HashMap::new();
        for (pid, p) in processes {
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
            let (mut cpu, mut memory, mut gpu_util) = (0.0f64, 0u64, 0.0f64);
            let mut stack = vec![root_pid];
            while let Some(pid) = stack.pop() {
                if let Some(p) = processes.get(&pid) {
                    cpu += f64::from(p.cpu_usage()) / 100.0;
                    memory += p.memory();
                }
                if let Some(g) = gpu.as_ref().and_then(|g| g.get(&pid.as_u32())) {
                    gpu_util += g;
                }
                stack.extend(children.get(&pid).into_iter().flatten());
            }
            usage.insert(
                root,
                Usage {
                    cpu_cores: self.seen.contains(&root).then_some(cpu),
                    memory_bytes: memory,
                    gpu_util: gpu.is_some().then_some(gpu_util),
                },
            );
        }
        self.seen = roots.iter().copied().collect();
        usage
    }
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
        let first = sampler.sample(&[pid]);
        assert_eq!(first[&pid].cpu_cores, None);
        assert!(first[&pid].memory_bytes > 0);
        std::thread::sleep(std::time::Duration::from_millis(500));
        let second = sampler.sample(&[pid, u32::MAX]);
        let cores = second[&pid].cpu_cores.unwrap();
        // `yes` alone keeps a core busy (less on a loaded machine); the shell takes none.
        assert!(cores > 0.2, "{cores} cores");
        assert!(!second.contains_key(&u32::MAX));
    }
}
