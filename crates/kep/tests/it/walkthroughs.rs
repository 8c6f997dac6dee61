//! The README's walk-throughs, run as written: every fenced block opened with
//! `` ```sh walkthrough=NAME ``, in the README's order, as one bash script (`set -euo
//! pipefail`) in a fresh folder where `kep serve` runs with its data in `./kep-data` on free
//! ports, and `kep` is on `PATH`. A walk-through that stops working fails the build
//! (DEVELOPMENT.md: a later section adds its own the same way).

use std::io::Read as _;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{KEP, free_port, serve};

/// The blocks of walk-through `name`, in order; a block indented in a list item loses its
/// indent.
fn blocks(readme: &str, name: &str) -> Vec<String> {
    let opening = format!("```sh walkthrough={name}");
    let mut found = Vec::new();
    let mut lines = readme.lines();
    while let Some(line) = lines.next() {
        if line.trim() == opening {
            let indent = &line[..line.len() - line.trim_start().len()];
            let block: Vec<&str> = lines
                .by_ref()
                .take_while(|l| l.trim() != "```")
                .map(|l| l.strip_prefix(indent).unwrap_or(l))
                .collect();
            found.push(block.join("\n"));
        }
    }
    found
}

/// Runs walk-through `name` against `kep serve`, whose variables `in_folder` name files in
/// the walk-through's folder (a socket it makes); `env` reaches the script (where its own
/// servers listen).
fn walk(name: &str, in_folder: &[(&str, &str)], env: &[(&str, String)]) {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let blocks = blocks(&readme, name);
    assert!(!blocks.is_empty(), "no walk-through {name} in README.md");
    let dir = tempfile::tempdir().unwrap();
    let serve_env: Vec<(&str, String)> = in_folder
        .iter()
        .map(|(k, file)| (*k, dir.path().join(file).display().to_string()))
        .collect();
    let serve_env: Vec<(&str, &str)> = serve_env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let srv = serve(
        &dir.path().join("kep-data"),
        &["--port-base", "0"],
        &serve_env,
    );
    let script = dir.path().join(format!("{name}.sh"));
    std::fs::write(&script, blocks.join("\n")).unwrap();
    let bin = Path::new(KEP).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = dir.path().join(format!("{name}.out"));
    let mut child = Command::new("bash")
        .args(["-euo", "pipefail", "-x"])
        .arg(&script)
        .current_dir(dir.path())
        .env("PATH", path)
        .env_remove("KEP_DATA_DIR")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(Stdio::piped())
        // Its own group: what it left running in the background goes with it.
        .process_group(0)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(240);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let group = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
    let _ = child.wait();
    remove_containers(dir.path());
    let mut trace = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut trace)
        .unwrap();
    if status.is_none_or(|s| !s.success()) {
        let tail = |text: &str, n: usize| {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        };
        panic!(
            "walk-through {name}: {}\n--- output ---\n{}\n--- trace ---\n{}\n--- kep log ---\n{}",
            status.map_or("still running after 240 s".into(), |s| s.to_string()),
            tail(&std::fs::read_to_string(&out).unwrap_or_default(), 40),
            tail(&trace, 40),
            tail(&srv.logs(), 20),
        );
    }
}

/// The containers a walk-through's own Podman (`./podman`) still has, as when it stopped
/// half-way: removed, with their mounts, before its folder is.
fn remove_containers(dir: &Path) {
    let podman = dir.join("podman");
    if podman.join("containers.conf").exists() {
        let _ = Command::new("podman")
            .args(["rm", "--all", "--force", "--time", "0"])
            .env("CONTAINERS_CONF", podman.join("containers.conf"))
            .env("CONTAINERS_STORAGE_CONF", podman.join("storage.conf"))
            .output();
    }
}

#[test]
fn live() {
    walk(
        "live",
        &[],
        &[("RECEIVER", format!("127.0.0.1:{}", free_port()))],
    );
}

#[test]
fn adapter() {
    walk(
        "adapter",
        &[],
        &[("AGENT", format!("127.0.0.1:{}", free_port()))],
    );
}

#[test]
fn messaging() {
    walk("messaging", &[], &[]);
}

#[test]
fn declared() {
    walk("declared", &[], &[]);
}

#[test]
fn serving() {
    walk(
        "serving",
        &[],
        &[("HOOK", format!("127.0.0.1:{}", free_port()))],
    );
}

/// TensorFlow and PyTorch come from PyPI (./test installs them).
#[test]
fn frameworks() {
    walk("frameworks", &[], &[]);
}

#[test]
fn activity() {
    walk("activity", &[], &[]);
}

/// Podman, runc and busybox-static come from Debian (./test installs them).
#[test]
fn images() {
    let socket = ("KEP_SERVING_CONTAINER_SOCKET", "podman/podman.sock");
    walk("images", &[socket], &[]);
}

#[test]
fn carriers() {
    // Any free port, which `kep smsc` prints: none is chosen here and taken before it binds.
    let smsc = ("SMSC_PORT", "0".to_owned());
    walk("carriers", &[], &[smsc, ("PORT_BASE", "0".into())]);
}

#[test]
fn the_blocks_of_a_walk_through_are_taken_in_order() {
    let readme = "a\n```sh walkthrough=x\none\n```\n```sh\nnot\n```\n```sh walkthrough=y\nother\n```\n- item:\n  ```sh walkthrough=x\n  two\n    three\n  ```\n";
    assert_eq!(blocks(readme, "x"), ["one", "two\n  three"]);
    assert!(blocks(readme, "z").is_empty());
}
