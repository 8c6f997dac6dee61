use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;

use super::Jasmin;
use super::broker::{Broker, RABBIT_USER};
use super::process::{command, spawn};

impl Jasmin {
    pub(super) fn spawn_daemon(&mut self) {
        let path = self.dir.path();
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path.join("jasmind.out"))
            .unwrap();
        let mut cmd = command(&self.python);
        cmd.arg(path.join("jasmind-unlocked.py"))
            .arg(&self.jasmind)
            .arg("-c")
            .arg(path.join("jasmin.cfg"))
            .args(["--enable-dlr-lookup", "--enable-dlr-thrower"])
            .current_dir(path)
            .env("ROOT_PATH", path.join("root"))
            .env("STORE_PATH", path.join("store"))
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out);
        match spawn(cmd) {
            Ok(child) => self.daemon = Some(child),
            Err(e) => panic!("{} does not start: {e}", self.jasmind.display()),
        }
    }

    pub(super) async fn wait_port(&mut self, port: u16, deadline: Instant, what: &str) {
        loop {
            if TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                return;
            }
            let dead = [&mut self.redis, &mut self.daemon]
                .into_iter()
                .flatten()
                .any(|c| !matches!(c.try_wait(), Ok(None)));
            if dead || Instant::now() > deadline {
                panic!("Jasmin's {what} did not come up on {port}\n{}", self.logs());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// jasmind.py takes a lock on `/tmp/jasmind` so that one runs per machine; these run one per
/// test. The AMQP spec is txAMQP's own (the wheel ships none of Jasmin's configuration).
pub(super) const UNLOCKED_JASMIND: &str = r#"
import os, runpy, sys
import lockfile, txamqp

class NoLock:
    def __init__(self, *args, **kwargs): pass
    def acquire(self, timeout=None): pass
    def release(self): pass
    def i_am_locking(self): return False

lockfile.FileLock = NoLock
os.environ.setdefault('AMQP_BROKER_SPEC', os.path.join(
    os.path.dirname(txamqp.__file__), 'specs', 'standard', 'amqp0-9-1.stripped.xml'))
script = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_path(script, run_name='__main__')
"#;

/// jasmin.cfg: everything on 127.0.0.1 and the given ports, logs in `dir`, retries after a
/// second rather than Jasmin's 10 to 30, receipts on a successful `submit_sm_resp`.
pub(super) fn jasmin_cfg(dir: &Path, ports: [u16; 7], broker: &Broker, vhost: &str) -> String {
    let [smpp, smpp_pb, cm, router, http, jcli, redis] = ports;
    let d = dir.display();
    format!(
        "[smpp-server]
bind = 127.0.0.1
port = {smpp}
log_file = {d}/smpp-server.log
log_rotate = D
log_privacy = False

[smpp-server-pb]
bind = 127.0.0.1
port = {smpp_pb}
log_file = {d}/smpp-server-pb.log

[client-management]
bind = 127.0.0.1
port = {cm}
store_path = {d}/store
log_file = {d}/smppclient-manager.log

[service-smppclient]
log_file = {d}/service-smppclient.log

[sm-listener]
log_level = DEBUG
log_file = {d}/loop.log
log_rotate = D
log_privacy = False
submit_retrial_delay_smppc_not_ready = 1

[dlr]
smpp_receipt_on_success_submit_sm_resp = True
dlr_lookup_retry_delay = 1
log_file = {d}/messages.log
log_rotate = D
log_privacy = False

[amqp-broker]
host = 127.0.0.1
port = {amqp}
vhost = {vhost}
username = {RABBIT_USER}
password = {RABBIT_USER}
log_file = {d}/amqp-client.log
connection_loss_retry_delay = 1
connection_failure_retry_delay = 1

[http-api]
bind = 127.0.0.1
port = {http}
access_log = {d}/http-access.log
log_file = {d}/http-api.log
log_privacy = False

[router]
bind = 127.0.0.1
port = {router}
store_path = {d}/store
log_file = {d}/router.log

[deliversm-thrower]
retry_delay = 1
log_file = {d}/deliversm-thrower.log

[dlr-thrower]
retry_delay = 1
log_file = {d}/dlr-thrower.log

[redis-client]
host = 127.0.0.1
port = {redis}
log_file = {d}/redis-client.log

[jcli]
bind = 127.0.0.1
port = {jcli}
log_file = {d}/jcli.log
",
        amqp = broker.amqp_port,
    )
}
