//! A throwaway PostgreSQL cluster from Debian's `postgresql` package: initdb into a temp dir
//! (as the `postgres` user when the tests run as root, which initdb refuses), started on a
//! free loopback port with its socket in that dir, stopped by its postmaster's pid. One
//! that takes only TLS has a certificate for 127.0.0.1 ([`kep_testkit::tls`]).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

pub struct Postgres {
    /// `postgres://postgres@127.0.0.1:<port>/postgres`
    pub url: String,
    pid: String,
    dir: tempfile::TempDir,
}

fn bin_dir() -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("Debian's postgresql package (./test installs it)")
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|p| p.join("initdb").exists())
        .collect();
    dirs.sort_by_key(|p| {
        let version = p.parent().and_then(|v| v.file_name());
        version.and_then(|v| v.to_str()?.parse::<u32>().ok())
    });
    dirs.pop().expect("an initdb under /usr/lib/postgresql")
}

/// Whether this process runs as root (`/proc/self` belongs to whom it runs as).
fn root() -> bool {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// The command, as the `postgres` user when we are root.
fn as_postgres(program: PathBuf) -> Command {
    if root() {
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", "postgres", "--"]).arg(program);
        cmd
    } else {
        Command::new(program)
    }
}

fn run(mut cmd: Command, what: &str) {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Postgres {
    pub fn start() -> Postgres {
        Postgres::start_with(false)
    }

    /// One that takes TLS connections only (`hostssl`; a plain one is rejected): its CAs
    /// are [`Postgres::ca`] and [`Postgres::other_ca`].
    pub fn start_tls() -> Postgres {
        Postgres::start_with(true)
    }

    /// The CA that signed its certificate.
    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// A CA that did not.
    pub fn other_ca(&self) -> PathBuf {
        self.dir.path().join("other-ca.pem")
    }

    fn start_with(tls: bool) -> Postgres {
        let bin = bin_dir();
        let dir = tempfile::tempdir().unwrap();
        let mut options = String::new();
        if tls {
            kep_testkit::tls::certificates(dir.path());
            let d = dir.path().display();
            options = format!(
                " -c ssl=on -c ssl_cert_file={d}/server.pem -c ssl_key_file={d}/server.key -c hba_file={d}/pg_hba.conf"
            );
            std::fs::write(
                dir.path().join("pg_hba.conf"),
                "local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostnossl all all 127.0.0.1/32 reject\n",
            )
            .unwrap();
        }
        if root() {
            run(
                {
                    let mut c = Command::new("chown");
                    c.arg("-R").arg("postgres").arg(dir.path());
                    c
                },
                "chown",
            );
        }
        let data = dir.path().join("data");
        let mut initdb = as_postgres(bin.join("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-A", "trust", "-U", "postgres"]);
        run(initdb, "initdb");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut start = as_postgres(bin.join("pg_ctl"));
        start
            .arg("-D")
            .arg(&data)
            .arg("-l")
            .arg(dir.path().join("server.log"))
            .arg("-w")
            .arg("-o")
            .arg(format!(
                "-p {port} -k {} -c listen_addresses=127.0.0.1 -c max_connections=400 -c fsync=off{options}",
                dir.path().display()
            ))
            .arg("start");
        run(start, "pg_ctl start");
        let pid = std::fs::read_to_string(data.join("postmaster.pid"))
            .unwrap()
            .lines()
            .next()
            .unwrap()
            .to_owned();
        Postgres {
            url: format!("postgres://postgres@127.0.0.1:{port}/postgres"),
            pid,
            dir,
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // SIGINT: PostgreSQL's fast shutdown.
        let _ = Command::new("kill").args(["-INT", &self.pid]).status();
        let proc = PathBuf::from(format!("/proc/{}", self.pid));
        for _ in 0..100 {
            if !proc.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
