use std::io;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

/// `program` under `setpriv --pdeathsig TERM` where there is one: the child gets SIGTERM when
/// the thread that spawned it ends. All are spawned from one thread that lives as long as the
/// test process ([`spawn`]), so nothing outlives the tests, even when they are killed.
pub(super) fn command(program: &Path) -> Command {
    static SETPRIV: OnceLock<bool> = OnceLock::new();
    let setpriv = *SETPRIV.get_or_init(|| {
        Command::new("setpriv")
            .args(["--pdeathsig", "TERM", "--", "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    if setpriv {
        let mut cmd = Command::new("setpriv");
        cmd.args(["--pdeathsig", "TERM", "--"]).arg(program);
        cmd
    } else {
        Command::new(program)
    }
}

type SpawnRequest = (Command, mpsc::Sender<io::Result<Child>>);

/// Spawns on the fixture's own thread, which never ends (see [`command`]).
pub(super) fn spawn(cmd: Command) -> io::Result<Child> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("jasmin-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("the spawner thread");
        Mutex::new(tx)
    });
    let (tx, rx) = mpsc::channel();
    spawner
        .lock()
        .unwrap()
        .send((cmd, tx))
        .expect("the spawner thread runs");
    rx.recv().expect("the spawner answers")
}

/// SIGTERM, then SIGKILL after `grace`; reaps it.
pub(super) fn terminate(mut child: Child, grace: Duration) {
    if matches!(child.try_wait(), Ok(None)) {
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + grace;
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

pub(super) async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(f).await {
        Ok(v) => v,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// Ports free now, and never handed out before in this process: the Jasmins of tests
/// running at once (and a restarted one's new ports) never draw the same one.
pub(super) fn free_ports<const N: usize>() -> [u16; N] {
    static HANDED: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let mut handed = HANDED.lock().unwrap();
    let mut held = Vec::new();
    let mut ports = Vec::with_capacity(N);
    while ports.len() < N {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
        let port = listener.local_addr().unwrap().port();
        if !handed.contains(&port) {
            handed.push(port);
            ports.push(port);
        }
        held.push(listener);
    }
    std::array::from_fn(|i| ports[i])
}

pub(super) fn find_on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The interpreter in `script`'s `#!` line (a virtual environment's), else `python3`.
pub(super) fn python_of(script: &Path) -> PathBuf {
    std::fs::read_to_string(script)
        .ok()
        .and_then(|s| {
            s.lines()
                .next()
                .and_then(|l| l.strip_prefix("#!"))
                .map(|l| l.trim().to_owned())
        })
        .map(PathBuf::from)
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("python3"))
}
