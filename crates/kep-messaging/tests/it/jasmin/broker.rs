use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::START_TIMEOUT;
use super::process::{command, find_on_path, free_ports, spawn};

/// Virtual hosts made at RabbitMQ's boot; more are imported one by one when a test process
/// starts more Jasmins than this.
const VHOSTS: usize = 16;
/// RabbitMQ's user for Jasmin, `kep`/`kep`: its hash is base64(salt ‖ sha256(salt ‖ "kep")).
pub(super) const RABBIT_USER: &str = "kep";
const RABBIT_PASSWORD_HASH: &str = "a2VwMa4AUbj92cOMxxWIMSouGncwVl3UvMmMtI0M+pBdyA3M";

/// RabbitMQ and its `epmd`, shared by the test process's Jasmins.
pub(super) struct Broker {
    pub(super) amqp_port: u16,
    pub(super) dir: PathBuf,
    env: Vec<(&'static str, String)>,
    ctl: PathBuf,
    next: AtomicUsize,
    child: Mutex<Child>,
}

pub(super) static BROKER: OnceLock<Result<Broker, String>> = OnceLock::new();

pub(super) fn broker() -> &'static Broker {
    match BROKER.get_or_init(start_broker) {
        Ok(b) => b,
        Err(e) => panic!("{e}"),
    }
}

impl Broker {
    /// A virtual host no other Jasmin uses, with the user's rights on it.
    pub(super) fn vhost(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        let name = format!("jasmin-{n}");
        if n >= VHOSTS {
            let file = self.dir.join(format!("{name}.json"));
            std::fs::write(&file, definitions(std::slice::from_ref(&name))).unwrap();
            let out = Command::new(&self.ctl)
                .arg("import_definitions")
                .arg(&file)
                .envs(self.env.iter().map(|(k, v)| (*k, v.as_str())))
                .output()
                .expect("rabbitmqctl runs");
            assert!(
                out.status.success(),
                "rabbitmqctl import_definitions: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        name
    }
}

fn start_broker() -> Result<Broker, String> {
    let began = Instant::now();
    let lib = Path::new("/usr/lib/rabbitmq/bin");
    let find = |name: &str| {
        Some(lib.join(name))
            .filter(|p| p.exists())
            .or_else(|| find_on_path(name))
            .ok_or_else(|| {
                format!(
                    "{name} is not installed: run `./test` (README), which installs rabbitmq-server"
                )
            })
    };
    let server = find("rabbitmq-server")?;
    let ctl = find("rabbitmqctl")?;
    let epmd = find_on_path("epmd")
        .or_else(|| Some(PathBuf::from("/usr/lib/erlang/bin/epmd")).filter(|p| p.exists()))
        .ok_or("epmd (Erlang) is not installed: run `./test`, which installs rabbitmq-server")?;
    let dir = tempfile::Builder::new()
        .prefix("kep-rabbitmq-")
        .tempdir()
        .map_err(|e| e.to_string())?
        .keep();
    let [amqp, dist, epmd_port] = free_ports();
    let names: Vec<String> = (0..VHOSTS).map(|n| format!("jasmin-{n}")).collect();
    let write = |name: &str, text: &str| std::fs::write(dir.join(name), text);
    write("definitions.json", &definitions(&names)).map_err(|e| e.to_string())?;
    write(
        "rabbitmq.conf",
        &format!(
            "load_definitions = {}\nlog.file.level = info\nlog.console = false\n\
             disk_free_limit.absolute = 1MB\n",
            dir.join("definitions.json").display()
        ),
    )
    .map_err(|e| e.to_string())?;
    write("enabled_plugins", "[].\n").map_err(|e| e.to_string())?;
    write("rabbitmq-env.conf", "").map_err(|e| e.to_string())?;
    let d = |p: &str| dir.join(p).display().to_string();
    let env = vec![
        // The Erlang cookie goes in $HOME; rabbitmqctl finds it there too.
        ("HOME", d("")),
        ("RABBITMQ_CONF_ENV_FILE", d("rabbitmq-env.conf")),
        ("RABBITMQ_CONFIG_FILE", d("rabbitmq.conf")),
        ("RABBITMQ_ADVANCED_CONFIG_FILE", d("advanced.config")),
        ("RABBITMQ_ENABLED_PLUGINS_FILE", d("enabled_plugins")),
        ("RABBITMQ_MNESIA_BASE", d("mnesia")),
        ("RABBITMQ_LOG_BASE", d("log")),
        ("RABBITMQ_NODENAME", format!("kep-{amqp}@localhost")),
        ("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1".to_owned()),
        ("RABBITMQ_NODE_PORT", amqp.to_string()),
        ("RABBITMQ_DIST_PORT", dist.to_string()),
        // Our own epmd, on a port of its own; the node must not start the shared one.
        ("ERL_EPMD_PORT", epmd_port.to_string()),
        (
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
            "-start_epmd false".to_owned(),
        ),
        ("RABBITMQ_CTL_ERL_ARGS", "-start_epmd false".to_owned()),
    ];
    let out = std::fs::File::create(dir.join("rabbitmq.out")).map_err(|e| e.to_string())?;
    let mut cmd = command(Path::new("sh"));
    cmd.arg("-c")
        .arg(BROKER_SH)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .env("KEP_DIR", &dir)
        .env("KEP_RABBIT", &server)
        .env("KEP_EPMD", &epmd)
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(out.try_clone().map_err(|e| e.to_string())?)
        .stderr(out);
    let mut child = spawn(cmd).map_err(|e| format!("rabbitmq-server does not start: {e}"))?;
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if std::net::TcpStream::connect(("127.0.0.1", amqp)).is_ok() {
            break;
        }
        if !matches!(child.try_wait(), Ok(None)) || Instant::now() > deadline {
            let _ = child.kill();
            let log = std::fs::read_to_string(dir.join("rabbitmq.out")).unwrap_or_default();
            return Err(format!(
                "RabbitMQ did not come up on {amqp} (logs in {}):\n{log}",
                dir.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!(
        "jasmin fixture: RabbitMQ up on {amqp} in {:?}",
        began.elapsed()
    );
    Ok(Broker {
        amqp_port: amqp,
        dir,
        env,
        ctl,
        next: AtomicUsize::new(0),
        child: Mutex::new(child),
    })
}

/// epmd first (RabbitMQ must find it, not start the machine's), then RabbitMQ in the
/// foreground; on SIGTERM (the test process ending: `setpriv --pdeathsig`) both stop and the
/// directory goes.
const BROKER_SH: &str = r#"
"$KEP_EPMD" -port "$ERL_EPMD_PORT" & e=$!
until "$KEP_EPMD" -port "$ERL_EPMD_PORT" -names >/dev/null 2>&1; do
  kill -0 $e 2>/dev/null || exit 1
  sleep 0.02
done
"$KEP_RABBIT" & r=$!
stop() {
  # RabbitMQ's own script stops the node through rabbitmqctl on TERM, which can hang: after
  # 10 s its node (the script's child) and the script are killed.
  kill -TERM $r 2>/dev/null
  i=0
  while kill -0 $r 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
  pkill -KILL -P $r 2>/dev/null; kill -KILL $r 2>/dev/null; wait $r
  kill -TERM $e 2>/dev/null; wait $e
  rm -rf "$KEP_DIR"
  exit 0
}
trap stop TERM INT HUP
wait $r
stop
"#;

fn definitions(vhosts: &[String]) -> String {
    serde_json::json!({
        "users": [{
            "name": RABBIT_USER,
            "password_hash": RABBIT_PASSWORD_HASH,
            "hashing_algorithm": "rabbit_password_hashing_sha256",
            "tags": ["administrator"],
        }],
        "vhosts": vhosts.iter().map(|v| serde_json::json!({"name": v})).collect::<Vec<_>>(),
        // `void` is never started: what is routed to it expires at once rather than pile up.
        "policies": vhosts.iter().map(|v| serde_json::json!({
            "vhost": v, "name": "void", "pattern": "^submit\\.sm\\.void$", "apply-to": "queues",
            "definition": {"message-ttl": 0}, "priority": 0,
        })).collect::<Vec<_>>(),
        "permissions": vhosts.iter().map(|v| serde_json::json!({
            "user": RABBIT_USER, "vhost": v, "configure": ".*", "write": ".*", "read": ".*",
        })).collect::<Vec<_>>(),
    })
    .to_string()
}
