//! The load of the crash-recovery tests: the tenants it runs as, what each kind of call does
//! with its answer, and the ledger of what the clients were told.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng as _, RngCore as _, SeedableRng as _};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::common::{Server, port0};

pub const OPERATOR: &str = "crash-operator-token";
pub const INSTANCES: usize = 2;
/// The outbox answers at most 1,000 hand-overs, and every one is checked.
pub const MAX_MESSAGES: usize = 900;
/// A DRM session is short-lived, so one cut off by a kill may expire before it is resumed.
pub const SESSION_TTL_S: u64 = 6;
/// The longest a load runs before its kill.
pub const MAX_CYCLE_MS: u64 = 2000;
/// Senders at once, so several sends are in flight at a kill.
pub const SENDERS: u64 = 4;

/// `kep serve` on port 0 on `dir`; killed outright when dropped.
pub fn start(dir: &Path) -> Server {
    let ttl = SESSION_TTL_S.to_string();
    crate::common::serve(
        dir,
        &port0(),
        &[
            ("KEP_ADMIN_TOKEN", OPERATOR),
            // Nothing reads its logs while it runs.
            ("KEP_LOG", "error"),
            // Hand-overs slow enough that some are in flight at every kill; claims of a
            // killed process come back soon.
            ("KEP_SIMULATOR_DELAY_MS", "100"),
            ("KEP_MESSAGING_DISPATCH_LEASE_S", "1"),
            ("KEP_ADAPTER_SESSION_TTL_S", &ttl),
            ("KEP_ADAPTER_SWEEP_INTERVAL_S", "1"),
            ("KEP_ADAPTER_NOTIFY_ATTEMPTS", "1"),
            ("KEP_SERVING_RESTART_BACKOFF_MS", "100"),
        ],
    )
}

/// What the clients were told, to be checked against what the server kept.
#[derive(Default)]
pub struct Ledger {
    /// cid → (uid, the final status the carrier simulator gives its number).
    pub answered: BTreeMap<String, (String, &'static str)>,
    /// Sends whose answer was lost in a kill: sent again with the same cid later.
    pub unanswered: BTreeMap<String, Value>,
    pub sessions: Vec<DrmSession>,
    /// DRM round trips a kill cut off, so far.
    pub cut_off: usize,
    pub live_tokens: Vec<String>,
    pub messaging_tokens: Vec<String>,
    pub gateway_answered: u64,
    pub gateway_lost: u64,
    pub instances_seen: BTreeSet<u64>,
}

pub struct DrmSession {
    pub id: String,
    pub file_id: String,
    pub file: Vec<u8>,
    /// 0 requested, 1 result answered, 2 file answered.
    pub acknowledged: u8,
    /// A kill cut the round trip off: the status of the agent's retry after the restart.
    pub resumed: Option<u16>,
    /// A cut-off round trip its agent never takes up again: the session must expire cleanly.
    pub abandoned: bool,
}

/// The tenants the load runs as, made once.
pub struct Tenants {
    pub messaging_client: (String, String),
    pub live_service: (String, String),
    pub org: (i64, String),
    /// The endpoint's key; empty where the run deploys nothing.
    pub api_key: String,
    /// Every instance process of this run carries it in its environment.
    pub marker: String,
}

pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

pub async fn operator(
    kep: &Server,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> Value {
    let mut req = http()
        .request(method, format!("{}{path}", kep.admin))
        .bearer_auth(OPERATOR);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let res = req.send().await.unwrap();
    let status = res.status();
    let body: Value = res.json().await.unwrap_or(Value::Null);
    assert!(status.is_success(), "{path}: {status} {body}");
    body
}

/// The tenants, and for `serving` an endpoint with a deployment of `INSTANCES` instances.
pub async fn setup(kep: &Server, dir: &Path, serving: bool) -> Tenants {
    let post = reqwest::Method::POST;
    let c = operator(
        kep,
        post.clone(),
        "/admin/v1/messaging/clients",
        Some(json!({})),
    )
    .await;
    let s = operator(
        kep,
        post.clone(),
        "/admin/v1/live/services",
        Some(json!({"serviceId": "crash"})),
    )
    .await;
    let o = operator(
        kep,
        post,
        "/admin/v1/adapter/org-login-types",
        // The agent's port is closed: the test plays the agent and calls in itself.
        Some(json!({"method": "SAML2", "adapter_agent": "127.0.0.1:9"})),
    )
    .await;
    let marker = format!("KEP_CRASH_RUN={}", dir.display());
    let api_key = if serving {
        deploy(kep, dir).await
    } else {
        String::new()
    };
    Tenants {
        messaging_client: (
            c["client_id"].as_str().unwrap().into(),
            c["client_secret"].as_str().unwrap().into(),
        ),
        live_service: ("crash".into(), s["adminSecret"].as_str().unwrap().into()),
        org: (
            o["id"].as_i64().unwrap(),
            o["secret_key"].as_str().unwrap().into(),
        ),
        api_key,
        marker,
    }
}

/// The endpoint `crash` with the deployment `app` of `INSTANCES` instances, each carrying
/// this run's marker in its environment; the endpoint's key.
pub async fn deploy(kep: &Server, dir: &Path) -> String {
    let post = reqwest::Method::POST;
    let instance = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../kep-serving/tests/instance.py")
        .canonicalize()
        .unwrap();
    operator(
        kep,
        post.clone(),
        "/admin/v1/serving/images",
        Some(json!({"name": "py", "command": ["python3", instance]})),
    )
    .await;
    let e = operator(
        kep,
        post.clone(),
        "/admin/v1/serving/endpoints",
        Some(json!({"name": "crash", "instance_count": INSTANCES})),
    )
    .await;
    operator(
        kep,
        post,
        "/admin/v1/serving/endpoints/crash/deployments",
        Some(json!({"name": "app", "type": "custom-image", "image": "py",
            "env": {"KEP_CRASH_RUN": dir.display().to_string()}})),
    )
    .await;
    e["api_key"].as_str().unwrap().into()
}

/// The pids of the running processes whose environment holds `marker` (zombies are gone).
pub fn instance_processes(marker: &str) -> BTreeSet<u64> {
    let mut pids = BTreeSet::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u64>() else {
            continue;
        };
        let Ok(env) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        let zombie = std::fs::read_to_string(entry.path().join("stat")).map_or(true, |s| {
            s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        });
        if !zombie && env.split(|&b| b == 0).any(|v| v == marker.as_bytes()) {
            pids.insert(pid);
        }
    }
    pids
}

pub fn phone(n: u64) -> (String, &'static str) {
    // One in seven numbers ends in 0000, which the carrier simulator fails.
    if n.is_multiple_of(7) {
        ("821000000000".into(), "API_510")
    } else {
        // Others end in 1000 to 9999: delivered.
        (format!("82101234{:04}", 1000 + n % 9000), "API_200")
    }
}

pub async fn send(
    url: &str,
    token: &str,
    ledger: &Mutex<Ledger>,
    cid: &str,
    body: &Value,
    expect: &'static str,
) {
    let res = http()
        .post(format!("{url}/v2/send/xms"))
        .bearer_auth(token)
        .header("accept", "*/*")
        .json(body)
        .send()
        .await;
    let answer = match res {
        Ok(r) => r.json::<Value>().await.ok(),
        Err(_) => None,
    };
    let mut l = ledger.lock().unwrap();
    match answer {
        Some(a) => {
            assert_eq!(a["code"], "200", "{cid}: {a}");
            let uid = a["uid"].as_str().unwrap().to_owned();
            if let Some((earlier, _)) = l.answered.get(cid) {
                assert_eq!(earlier, &uid, "{cid} answered with two uids");
            }
            l.answered.insert(cid.to_owned(), (uid, expect));
            l.unanswered.remove(cid);
        }
        None => {
            l.unanswered.insert(cid.to_owned(), body.clone());
        }
    }
}

/// XMS sends, each with its own cid, paced so that the quota spans the longest cycle and a
/// kill lands among them, until stopped.
pub async fn messaging_load(
    kep_url: String,
    token: String,
    cycle: usize,
    quota: u64,
    ledger: Arc<Mutex<Ledger>>,
    stop: CancellationToken,
) {
    let pace = Duration::from_millis(MAX_CYCLE_MS * SENDERS / quota.max(1));
    let sender = |first: u64| {
        let (kep_url, token, ledger, stop) = (
            kep_url.clone(),
            token.clone(),
            Arc::clone(&ledger),
            stop.clone(),
        );
        async move {
            for n in (first..quota).step_by(SENDERS as usize) {
                if stop.is_cancelled() {
                    return;
                }
                let cid = format!("crash-{cycle}-{n}");
                let (number, expect) = phone(n + cycle as u64);
                let body = json!({"cid": cid, "message_type": "SM", "phone_number": number,
                    "message": "살아남기", "sender_no": "0212345678"});
                send(&kep_url, &token, &ledger, &cid, &body, expect).await;
                // Deliberate: paced, so that sends are in flight whenever the kill lands.
                tokio::time::sleep(pace).await;
            }
        }
    };
    futures_util::future::join_all((0..SENDERS).map(sender)).await;
}

pub fn agent_headers(
    req: reqwest::RequestBuilder,
    t: &Tenants,
    s: &DrmSession,
) -> reqwest::RequestBuilder {
    req.header("Authorization", format!("Secret {}", t.org.1))
        .header("Kep-OrgLoginType", format!("ID {}", t.org.0))
        .header("Kep-AgentSession", format!("DSID {}", s.id))
        .header("Kep-File-Id", &s.file_id)
}

/// Plays the agent for one session from where it stands: the result, then the file. Returns
/// the status of the last answer, `None` when no answer came.
pub async fn release(adapter: &str, t: &Tenants, s: &mut DrmSession) -> Option<u16> {
    if s.acknowledged == 0 {
        let res = agent_headers(
            http().post(format!("{adapter}/api/trust/drm/v0/uploadResult")),
            t,
            s,
        )
        .header("Kep-File-Type", "DRM")
        .json(&json!({"result": "SUCCESS", "reason": "crash test"}))
        .send()
        .await
        .ok()?;
        match res.status().as_u16() {
            200 => s.acknowledged = 1,
            // The result was kept, but its answer was lost in a kill (or the session expired,
            // and the file is refused too).
            409 => {}
            other => return Some(other),
        }
    }
    let part = reqwest::multipart::Part::bytes(s.file.clone()).file_name(s.file_id.clone());
    let res = agent_headers(
        http().post(format!("{adapter}/api/trust/drm/v0/uploadDecrypted")),
        t,
        s,
    )
    .multipart(reqwest::multipart::Form::new().part("file", part))
    .send()
    .await
    .ok()?;
    if res.status() == 200 {
        s.acknowledged = 2;
    }
    Some(res.status().as_u16())
}

/// DRM release round trips, the test playing the agent, until stopped.
pub async fn drm_load(
    admin: String,
    adapter: String,
    tenants: Arc<Tenants>,
    cycle: usize,
    seed: u64,
    ledger: Arc<Mutex<Ledger>>,
    stop: CancellationToken,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    for n in 0.. {
        if stop.is_cancelled() {
            return;
        }
        let file_id = format!("crash-{cycle}-{n}.pdf");
        let Ok(res) = http()
            .post(format!("{admin}/admin/v1/adapter/drm-requests"))
            .bearer_auth(OPERATOR)
            .json(&json!({"org_login_type_id": tenants.org.0, "file_id": file_id, "file_type": "DRM"}))
            .send()
            .await
        else {
            return;
        };
        let Ok(created) = res.json::<Value>().await else {
            return;
        };
        let mut file = vec![0; rng.random_range(1..=512 * 1024)];
        rng.fill_bytes(&mut file);
        let mut s = DrmSession {
            id: created["session_id"].as_str().unwrap().to_owned(),
            file_id,
            file,
            acknowledged: 0,
            resumed: None,
            abandoned: false,
        };
        release(&adapter, &tenants, &mut s).await;
        ledger.lock().unwrap().sessions.push(s);
    }
}

/// Calls through the gateway until stopped.
pub async fn gateway_load(
    gateway: String,
    key: String,
    ledger: Arc<Mutex<Ledger>>,
    stop: CancellationToken,
) {
    let client = http();
    while !stop.is_cancelled() {
        let res = client
            .get(format!("{gateway}/endpoints/crash/hello"))
            .bearer_auth(&key)
            .send()
            .await;
        let mut l = ledger.lock().unwrap();
        match res {
            Ok(r) if r.status() == 200 => l.gateway_answered += 1,
            Ok(r) => panic!("the gateway answered {} to a call", r.status()),
            Err(_) => l.gateway_lost += 1,
        }
    }
}
