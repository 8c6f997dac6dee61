//! Instance processes: a free port, the spawn (own process group, log file, a clean
//! environment, the owner's mark), stopping the whole group, and finding the ones a killed
//! kep left behind.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

/// Variables of kep's own environment an instance inherits; nothing else (in particular no
/// `KEP_*` secret) leaks into a user's process.
const INHERITED_ENV: &[&str] = &["PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "USER"];

/// The variable that marks every instance process with the kep that started it.
pub(crate) const OWNER_VAR: &str = "KEP_INSTANCE_OWNER";

/// Which kep started an instance: its data dir, which one kep at a time runs on. A kep
/// killed outright cannot stop its instances; the next one on the same data dir finds them
/// by this mark in their environment, even one spawned an instant before the kill.
#[derive(Debug, Clone)]
pub struct Owner(Arc<str>);

impl Owner {
    pub fn of_data_dir(data_dir: &Path) -> std::io::Result<Self> {
        Ok(Owner(data_dir.canonicalize()?.to_string_lossy().into()))
    }

    /// The mark's value: also the owner label of this kep's containers.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Kills the process group of every process that carries this mark (none of them is
    /// ours yet: this runs before any instance starts); returns how many groups.
    pub fn kill_left_behind(&self) -> usize {
        let mark = format!("{OWNER_VAR}={}", self.0);
        let Ok(proc) = std::fs::read_dir("/proc") else {
            return 0;
        };
        let mut groups = std::collections::BTreeSet::new();
        for entry in proc.flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            // Another user's process is unreadable, and not ours either.
            let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
                continue;
            };
            if environ.split(|&b| b == 0).any(|v| v == mark.as_bytes())
                && let Ok(group) = nix::unistd::getpgid(Some(Pid::from_raw(pid)))
            {
                groups.insert(group);
            }
        }
        for group in &groups {
            let _ = killpg(*group, Signal::SIGKILL);
        }
        groups.len()
    }
}

/// A port nothing listens on now, for the instance to bind.
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// What an instance process is given in its environment besides what kep passes on.
pub struct Env<'a> {
    /// The deployment's variables.
    pub vars: &'a BTreeMap<String, String>,
    pub port: u16,
    /// Its GPUs; none hides every GPU.
    pub gpus: &'a [u32],
}

/// Starts `argv` in a process group of its own, stdout and stderr appended to `log`.
pub fn spawn(argv: &[String], env: Env<'_>, log: &Path, owner: &Owner) -> std::io::Result<Child> {
    let port = env.port;
    use std::io::Write as _;
    if let Some(dir) = log.parent() {
        kep_core::private::dir(dir)?;
    }
    let mut out = kep_core::private::options().append(true).open(log)?;
    let gpus = super::gpus::visible_devices_env(env.gpus);
    writeln!(
        out,
        "--- kep: starting {argv:?} with PORT={port} CUDA_VISIBLE_DEVICES={:?}",
        gpus[0].1
    )?;
    let err = out.try_clone()?;
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| std::io::Error::other("empty command"))?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(
            INHERITED_ENV
                .iter()
                .filter_map(|k| Some((*k, std::env::var_os(k)?))),
        )
        .envs(env.vars)
        // After the deployment's own: its variables cannot take another's GPUs.
        .envs(gpus)
        .env("PORT", port.to_string())
        .env(OWNER_VAR, &*owner.0)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        // Its own group, so stopping it stops whatever it started too.
        .process_group(0)
        .kill_on_drop(true);
    cmd.spawn()
}

/// Sends `signal` to the process group led by `pid`; a group already gone is fine.
pub fn signal_group(pid: u32, signal: Signal) {
    let Ok(pid) = i32::try_from(pid) else { return };
    let _ = killpg(Pid::from_raw(pid), signal);
}

/// SIGTERM to the group, SIGKILL after `grace`; reaps the leader.
pub async fn terminate(child: &mut Child, grace: Duration) {
    let Some(pid) = child.id() else { return };
    signal_group(pid, Signal::SIGTERM);
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        signal_group(pid, Signal::SIGKILL);
        let _ = child.wait().await;
    }
    // Anything the leader left behind in its group.
    signal_group(pid, Signal::SIGKILL);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_spawned_group_is_stopped_whole() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("x.log");
        let argv: Vec<String> = ["sh", "-c", "sleep 30 & echo started-$PORT; wait"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let owner = Owner::of_data_dir(dir.path()).unwrap();
        let env = Env {
            vars: &BTreeMap::new(),
            port: 4242,
            gpus: &[],
        };
        let mut child = spawn(&argv, env, &log, &owner).unwrap();
        let pid = child.id().unwrap();
        let proc = std::path::PathBuf::from(format!("/proc/{pid}"));
        assert!(proc.exists());
        tokio::time::sleep(Duration::from_millis(200)).await;
        terminate(&mut child, Duration::from_secs(2)).await;
        assert!(!proc.exists(), "the leader is reaped");
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains("started-4242"), "{text}");
        // No `sleep 30` of that group survives (a zombie waiting for init to reap it is
        // not alive).
        let group_alive = || {
            std::fs::read_dir("/proc").unwrap().flatten().any(|entry| {
                let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
                let fields: Vec<&str> = stat
                    .rsplit_once(')')
                    .map(|(_, rest)| rest.split_whitespace().collect())
                    .unwrap_or_default();
                fields.len() > 2 && fields[2] == pid.to_string() && fields[0] != "Z"
            })
        };
        for _ in 0..50 {
            if !group_alive() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("a process of the group outlived it");
    }
}
