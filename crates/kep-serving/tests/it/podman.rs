//! A real container engine with no registry (issue #24's test setup): Podman's
//! Docker-compatible API from `podman system service` on a socket of its own, its storage
//! and state in a temp dir, and the issue's busybox httpd image built locally. Shared with
//! `crates/kep/tests/it/serve/images.rs` by path, so it uses only std, nix and tempfile.

use std::io::{Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The command the busybox image runs: HTTP on 8080, files from /www.
const HTTPD_CMD: &str = r#"CMD ["/bin/httpd","-f","-p","8080","-h","/www"]"#;
/// What the busybox image serves at `/`.
pub const HTTPD_INDEX: &str = "kep-test httpd\n";

/// A Podman API service, stopped by its pid and its storage removed when dropped.
pub struct Podman {
    service: Child,
    dir: tempfile::TempDir,
}

impl Podman {
    /// Starts one and waits until `/_ping` answers. crun fails in this sandbox, so the
    /// runtime is runc; root's file limit is below Podman's default for containers, so the
    /// containers' limits are set lower. Containers get slirp4netns, whose published ports
    /// are a process's sockets: root's default bridge publishes them as DNAT rules in the
    /// host's netfilter, which outlive a container Podman tears down unfinished and send a
    /// later server's loopback port (any test's) to a dead container's address.
    pub fn start() -> Podman {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        std::fs::write(
            dir.path().join("containers.conf"),
            format!(
                "[containers]\n\
                 default_ulimits = [\"nofile=1024:1024\", \"nproc=1024:1024\"]\n\
                 netns = \"slirp4netns\"\n\
                 [engine]\n\
                 runtime = \"runc\"\n\
                 tmp_dir = \"{d}/tmp\"\n\
                 [network]\n\
                 network_config_dir = \"{d}/networks\"\n"
            ),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("storage.conf"),
            format!(
                "[storage]\ndriver = \"overlay\"\ngraphroot = \"{d}/graph\"\nrunroot = \"{d}/run\"\n"
            ),
        )
        .unwrap();
        let service = command_in(dir.path())
            .args(["system", "service", "--time", "0"])
            .arg(format!("unix://{d}/podman.sock"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("service.log")).unwrap())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("podman: {e} (./test installs podman runc uidmap slirp4netns fuse-overlayfs busybox-static)")
            });
        let mut podman = Podman { service, dir };
        let started = Instant::now();
        while !podman.pings() {
            if let Some(status) = podman.service.try_wait().unwrap() {
                panic!(
                    "podman system service exited with {status}: {}",
                    podman.log()
                );
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "podman system service did not answer /_ping: {}",
                podman.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        podman
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("podman.sock")
    }

    /// `unix://…`, as `serving.container_socket` takes it.
    pub fn socket_url(&self) -> String {
        format!("unix://{}", self.socket().display())
    }

    /// `podman` on this service's storage and settings.
    pub fn command(&self) -> Command {
        command_in(self.dir.path())
    }

    /// Runs `podman ARGS`, which must succeed.
    pub fn run(&self, args: &[&str]) -> Output {
        let out = self.command().args(args).output().unwrap();
        assert!(
            out.status.success(),
            "podman {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// Builds the busybox httpd image as `reference` (`kep-test/httpd:1`): a rootfs of
    /// Debian's static busybox with `/bin/sh`, `/bin/httpd` and `/www/index.html`, imported
    /// with its command. Its id, without `sha256:`.
    pub fn httpd_image(&self, reference: &str) -> String {
        self.busybox_image(reference, HTTPD_INDEX, HTTPD_CMD)
    }

    /// The busybox image as `reference` with `index` as `/www/index.html` and `cmd` (a
    /// Dockerfile `CMD` line) as its command: another page, or a command that fails.
    pub fn busybox_image(&self, reference: &str, index: &str, cmd: &str) -> String {
        let root = self.dir.path().join("rootfs");
        if !root.exists() {
            std::fs::create_dir_all(root.join("bin")).unwrap();
            std::fs::create_dir_all(root.join("www")).unwrap();
            std::fs::copy("/bin/busybox", root.join("bin/busybox"))
                .expect("/bin/busybox (Debian's busybox-static)");
            for tool in ["sh", "httpd"] {
                std::os::unix::fs::symlink("busybox", root.join("bin").join(tool)).unwrap();
            }
        }
        std::fs::write(root.join("www/index.html"), index).unwrap();
        let tar = self.dir.path().join("rootfs.tar");
        let made = Command::new("tar")
            .arg("-C")
            .arg(&root)
            .arg("-cf")
            .arg(&tar)
            .arg(".")
            .status()
            .unwrap();
        assert!(made.success(), "tar of the rootfs");
        let out = self.run(&["import", "--quiet", "--change", cmd, path(&tar), reference]);
        let id = String::from_utf8(out.stdout).unwrap();
        id.trim().trim_start_matches("sha256:").to_owned()
    }

    /// The ids of the containers, running or not, that carry `label` (`key=value`).
    pub fn containers(&self, label: &str) -> Vec<String> {
        let filter = format!("label={label}");
        let out = self.run(&["ps", "--all", "--quiet", "--no-trunc", "--filter", &filter]);
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// `podman save` of `reference` into `file`, as docker-archive.
    pub fn save(&self, reference: &str, file: &Path) {
        self.run(&["save", "--quiet", "--output", path(file), reference]);
    }

    /// The image's size as the engine reports it.
    pub fn size(&self, reference: &str) -> u64 {
        let out = self.run(&["image", "inspect", "--format", "{{.Size}}", reference]);
        String::from_utf8(out.stdout)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// Whether the service answers `/_ping`, and then `/version`, which needs the runtime
    /// Podman sets up at its first real call (seconds on a loaded machine): the tests' first
    /// calls then find it ready.
    fn pings(&self) -> bool {
        self.answers("/_ping", |a| a.ends_with("OK")) && self.answers("/version", |_| true)
    }

    fn answers(&self, path: &str, body_ok: fn(&str) -> bool) -> bool {
        let Ok(mut s) = UnixStream::connect(self.socket()) else {
            return false;
        };
        let mut answer = String::new();
        s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
            .is_ok()
            && s.read_to_string(&mut answer).is_ok()
            && answer.starts_with("HTTP/1.")
            && answer.split_whitespace().nth(1) == Some("200")
            && body_ok(&answer)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("service.log")).unwrap_or_default()
    }
}

impl Drop for Podman {
    /// SIGTERM, SIGKILL after 5 s; then whatever containers are left go (their mounts
    /// with them) before the temp dir is removed.
    fn drop(&mut self) {
        let pid = Pid::from_raw(self.service.id() as i32);
        let _ = kill(pid, Signal::SIGTERM);
        let stopping = Instant::now();
        while matches!(self.service.try_wait(), Ok(None)) {
            if stopping.elapsed() > Duration::from_secs(5) {
                let _ = self.service.kill();
                let _ = self.service.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self
            .command()
            .args(["rm", "--all", "--force", "--time", "0"])
            .output();
    }
}

/// `podman` with the settings and storage written in `dir`.
fn command_in(dir: &Path) -> Command {
    let mut cmd = Command::new("podman");
    cmd.env("CONTAINERS_CONF", dir.join("containers.conf"))
        .env("CONTAINERS_STORAGE_CONF", dir.join("storage.conf"));
    cmd
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}
