//! Crash recovery (RELIABILITY.md): mixed load against a real `kep serve`, SIGKILL at a
//! random moment, a restart on the same data dir, and so on; then every answer the clients
//! got is checked against what the server kept.
//!
//! `KEP_CRASH_KILLS` kills (3 by default, so CI stays quick); `KEP_CRASH_SEED` replays a run.
//! The figures it prints at the end are RELIABILITY.md's.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kep_client::live::LiveClient;
use rand::rngs::StdRng;
use rand::{Rng as _, RngCore as _, SeedableRng as _};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use tokio_util::sync::CancellationToken;

use crate::common::{Server, StopsGracefully, port0};

const OPERATOR: &str = "crash-operator-token";
const INSTANCES: usize = 2;
/// The outbox answers at most 1,000 hand-overs, and every one is checked.
const MAX_MESSAGES: usize = 900;
/// A DRM session is short-lived, so one cut off by a kill may expire before it is resumed.
const SESSION_TTL_S: u64 = 6;
/// The statuses a message ends in.
const FINAL: [&str; 3] = ["API_200", "API_510", "API_520"];

/// `kep serve` on port 0 on `dir`; killed outright when dropped.
fn start(dir: &Path) -> Server {
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
struct Ledger {
    /// cid → (uid, the final status the carrier simulator gives its number).
    answered: BTreeMap<String, (String, &'static str)>,
    /// Sends whose answer was lost in a kill: sent again with the same cid later.
    unanswered: BTreeMap<String, Value>,
    sessions: Vec<DrmSession>,
    /// DRM round trips a kill cut off, so far.
    cut_off: usize,
    live_tokens: Vec<String>,
    messaging_tokens: Vec<String>,
    gateway_answered: u64,
    gateway_lost: u64,
    instances_seen: BTreeSet<u64>,
}

struct DrmSession {
    id: String,
    file_id: String,
    file: Vec<u8>,
    /// 0 requested, 1 result answered, 2 file answered.
    acknowledged: u8,
    /// A kill cut the round trip off: the status of the agent's retry after the restart.
    resumed: Option<u16>,
    /// A cut-off round trip its agent never takes up again: the session must expire cleanly.
    abandoned: bool,
}

/// The tenants the load runs as, made once.
struct Tenants {
    messaging_client: (String, String),
    live_service: (String, String),
    org: (i64, String),
    api_key: String,
    /// Every instance process of this run carries it in its environment.
    marker: String,
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

async fn operator(kep: &Server, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
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

async fn setup(kep: &Server, dir: &Path) -> Tenants {
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
        post.clone(),
        "/admin/v1/adapter/org-login-types",
        // The agent's port is closed: the test plays the agent and calls in itself.
        Some(json!({"method": "SAML2", "adapter_agent": "127.0.0.1:9"})),
    )
    .await;
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
    let marker = format!("KEP_CRASH_RUN={}", dir.display());
    operator(
        kep,
        post,
        "/admin/v1/serving/endpoints/crash/deployments",
        Some(json!({"name": "app", "type": "custom-image", "image": "py",
            "env": {"KEP_CRASH_RUN": dir.display().to_string()}})),
    )
    .await;
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
        api_key: e["api_key"].as_str().unwrap().into(),
        marker,
    }
}

/// The pids of the running processes whose environment holds `marker` (zombies are gone).
fn instance_processes(marker: &str) -> BTreeSet<u64> {
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

/// Waits until the deployment is `Available` and exactly its instances run, no orphan of an
/// earlier kep among them; returns their pids.
async fn reconciled(kep: &Server, t: &Tenants) -> BTreeSet<u64> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let d = operator(
            kep,
            reqwest::Method::GET,
            "/admin/v1/serving/endpoints/crash/deployments/app",
            None,
        )
        .await;
        let reported: BTreeSet<u64> = d["instances"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|i| i["pid"].as_u64())
            .collect();
        let running = instance_processes(&t.marker);
        if d["state"] == "Available" && reported.len() == INSTANCES && running == reported {
            return running;
        }
        assert!(
            Instant::now() < deadline,
            "instances not reconciled: kep reports {reported:?} ({}), running {running:?}",
            d["state"]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn phone(n: u64) -> (String, &'static str) {
    // One in seven numbers ends in 0000, which the carrier simulator fails.
    if n.is_multiple_of(7) {
        ("821000000000".into(), "API_510")
    } else {
        // Others end in 1000 to 9999: delivered.
        (format!("82101234{:04}", 1000 + n % 9000), "API_200")
    }
}

async fn send(
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

/// The longest a load runs before its kill.
const MAX_CYCLE_MS: u64 = 2000;
/// Senders at once, so several sends are in flight at a kill.
const SENDERS: u64 = 4;

/// XMS sends, each with its own cid, paced so that the quota spans the longest cycle and a
/// kill lands among them, until stopped.
async fn messaging_load(
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
                tokio::time::sleep(pace).await;
            }
        }
    };
    futures_util::future::join_all((0..SENDERS).map(sender)).await;
}

fn agent_headers(
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
async fn release(adapter: &str, t: &Tenants, s: &mut DrmSession) -> Option<u16> {
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
async fn drm_load(
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
async fn gateway_load(
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

/// The agent retries, after a restart, the round trips a kill cut off, but for one in three,
/// which it abandons.
async fn resume_cut_off(kep: &Server, t: &Tenants, ledger: &Mutex<Ledger>) {
    let (mut sessions, mut seen) = {
        let mut l = ledger.lock().unwrap();
        (std::mem::take(&mut l.sessions), l.cut_off)
    };
    let cut_off = sessions
        .iter_mut()
        .filter(|s| s.acknowledged < 2 && s.resumed.is_none() && !s.abandoned);
    for s in cut_off {
        seen += 1;
        if seen % 3 == 0 {
            s.abandoned = true;
            continue;
        }
        s.resumed = match release(&kep.url("adapter"), t, s).await {
            // Released now; or a file refused because the lost call did release it, or
            // because the session expired meanwhile.
            Some(status @ (200 | 409)) => Some(status),
            other => panic!("resuming session {}: {other:?}", s.id),
        };
    }
    let mut l = ledger.lock().unwrap();
    l.sessions.extend(sessions);
    l.cut_off = seen;
}

/// What a restarted kep must still honour: every token issued before, the endpoint's key,
/// and exactly its instances.
async fn check_after_restart(kep: &Server, t: &Tenants, ledger: &Mutex<Ledger>) {
    let (live_tokens, messaging_tokens) = {
        let l = ledger.lock().unwrap();
        (l.live_tokens.clone(), l.messaging_tokens.clone())
    };
    for token in &live_tokens {
        let rooms = LiveClient::new(&kep.live)
            .with_token(token)
            .list_rooms()
            .await;
        assert!(
            rooms.is_ok(),
            "a live token issued before the kill: {rooms:?}"
        );
    }
    for token in &messaging_tokens {
        let res = http()
            .post(format!("{}/v2/info/message/search", kep.url("messaging")))
            .bearer_auth(token)
            .json(&json!({"size": 1}))
            .send()
            .await
            .unwrap();
        assert_eq!(
            res.status(),
            200,
            "a messaging token issued before the kill"
        );
    }
    let pids = reconciled(kep, t).await;
    let res = http()
        .get(format!("{}/endpoints/crash/hello", kep.url("gateway")))
        .bearer_auth(&t.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200, "the endpoint's key after the kill");
    ledger.lock().unwrap().instances_seen.extend(pids);
    resume_cut_off(kep, t, ledger).await;
}

/// One cycle's load: new tokens, then every kind of call at once until the kill.
async fn load_until_kill(
    mut kep: Server,
    t: &Arc<Tenants>,
    ledger: &Arc<Mutex<Ledger>>,
    cycle: usize,
    quota: u64,
    rng: &mut StdRng,
) {
    let live = LiveClient::new(&kep.live)
        .provision(&t.live_service.0, &t.live_service.1)
        .await
        .unwrap();
    let token = kep_client::messaging::MessagingClient::token(
        &kep.url("messaging"),
        &t.messaging_client.0,
        &t.messaging_client.1,
    )
    .await
    .unwrap()
    .access_token;
    {
        let mut l = ledger.lock().unwrap();
        l.live_tokens.push(live.token);
        l.messaging_tokens.push(token.clone());
    }
    let stop = CancellationToken::new();
    let tasks = [
        tokio::spawn(messaging_load(
            kep.url("messaging"),
            token,
            cycle,
            quota,
            Arc::clone(ledger),
            stop.clone(),
        )),
        tokio::spawn(drm_load(
            kep.admin.clone(),
            kep.url("adapter"),
            Arc::clone(t),
            cycle,
            rng.next_u64(),
            Arc::clone(ledger),
            stop.clone(),
        )),
        tokio::spawn(gateway_load(
            kep.url("gateway"),
            t.api_key.clone(),
            Arc::clone(ledger),
            stop.clone(),
        )),
    ];
    tokio::time::sleep(Duration::from_millis(rng.random_range(200..MAX_CYCLE_MS))).await;
    // No new calls; those in flight are cut off by the kill.
    stop.cancel();
    kep.child.kill().unwrap(); // SIGKILL
    kep.child.wait().unwrap();
    for task in tasks {
        task.await.unwrap();
    }
}

/// After the last restart: the clients finish what the kills cut off, as a client would,
/// then every answer is checked against what the server kept.
async fn check_everything(kep: &Server, dir: &Path, ledger: &Mutex<Ledger>) -> String {
    let token = ledger.lock().unwrap().messaging_tokens[0].clone();
    // Sends whose answer was lost are sent again with their cid: the server must find the
    // message it kept, if it kept it, and keep one message per cid either way.
    let retries: Vec<(String, Value)> = ledger
        .lock()
        .unwrap()
        .unanswered
        .iter()
        .map(|(c, b)| (c.clone(), b.clone()))
        .collect();
    for (cid, body) in &retries {
        let expect = phone_expectation(body);
        send(&kep.url("messaging"), &token, ledger, cid, body, expect).await;
    }
    assert!(ledger.lock().unwrap().unanswered.is_empty());

    // Every message answered 200 reaches its final status.
    let answered = ledger.lock().unwrap().answered.clone();
    let deadline = Instant::now() + Duration::from_secs(120);
    for (cid, (uid, expect)) in &answered {
        loop {
            let d: Value = http()
                .get(format!(
                    "{}/v2/info/message/search/detail/{uid}",
                    kep.url("messaging")
                ))
                .bearer_auth(&token)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let status = d["result"]["status_code"].as_str().unwrap_or("");
            if status == *expect {
                break;
            }
            assert!(
                !FINAL.contains(&status),
                "{cid} ({uid}) ended {status}, not {expect}"
            );
            assert!(
                Instant::now() < deadline,
                "{cid} ({uid}) never finished: {d}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // …and was handed to the carrier with one recorded outcome: one outbox entry per
    // message, one message per cid.
    let outbox = operator(
        kep,
        reqwest::Method::GET,
        "/admin/v1/messaging/outbox?limit=1000",
        None,
    )
    .await;
    let mut per_uid: BTreeMap<String, usize> = BTreeMap::new();
    for entry in outbox.as_array().unwrap() {
        *per_uid
            .entry(entry["uid"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    let uids: BTreeMap<String, usize> = answered.values().map(|(u, _)| (u.clone(), 1)).collect();
    assert_eq!(
        per_uid, uids,
        "one recorded hand-over for each message answered 200"
    );

    // Every DRM session is released with its file intact, or resumed by its agent, or
    // expired with nothing left of it.
    let sessions = std::mem::take(&mut ledger.lock().unwrap().sessions);
    let (mut intact, mut resumed, mut expired) = (0, 0, 0);
    let abandoned = sessions.iter().filter(|s| s.abandoned).count();
    let mut released = BTreeSet::new();
    for s in &sessions {
        if s.resumed == Some(200) {
            resumed += 1;
        }
        let deadline = Instant::now() + Duration::from_secs(SESSION_TTL_S + 30);
        let d = loop {
            let d = operator(
                kep,
                reqwest::Method::GET,
                &format!("/admin/v1/adapter/drm-requests/{}", s.id),
                None,
            )
            .await;
            // An abandoned session ends when its time is up.
            if !(s.abandoned && ["PENDING", "GRANTED"].contains(&d["status"].as_str().unwrap())) {
                break d;
            }
            assert!(
                Instant::now() < deadline,
                "session {} never expired: {d}",
                s.id
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        match d["status"].as_str().unwrap() {
            "RELEASED" => {
                let res = http()
                    .get(format!(
                        "{}/admin/v1/adapter/drm-requests/{}/file",
                        kep.admin, s.id
                    ))
                    .bearer_auth(OPERATOR)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(res.status(), 200);
                let body = res.bytes().await.unwrap();
                assert!(
                    body[..] == s.file[..],
                    "session {}: the released file differs",
                    s.id
                );
                assert_eq!(d["file"]["sha256"], hex::encode(Sha256::digest(&s.file)));
                if s.resumed.is_none() && !s.abandoned {
                    intact += 1;
                }
                released.insert(s.id.clone());
            }
            "EXPIRED" => {
                assert!(
                    s.acknowledged < 2 && s.resumed != Some(200),
                    "session {} was released, then expired",
                    s.id
                );
                expired += 1;
            }
            other => panic!("session {} left {other}: {d}", s.id),
        }
    }
    // On disk: the released files, and nothing else (no half-written part, no file of a
    // session that was not released).
    let on_disk: BTreeSet<String> = std::fs::read_dir(dir.join("adapter-files"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let stray: Vec<_> = on_disk.symmetric_difference(&released).collect();
    assert!(
        stray.is_empty(),
        "adapter-files holds exactly the released files; these differ: {stray:?}"
    );

    let l = ledger.lock().unwrap();
    format!(
        "{} messages answered 200 ({} after a lost answer), each final once; {} DRM sessions \
         ({intact} released before a kill and intact, {resumed} resumed, {abandoned} abandoned, \
         {expired} expired cleanly); {} live \
         and {} messaging tokens still valid; {} gateway calls answered, \
         {} cut off; {} instance processes, none orphaned",
        answered.len(),
        retries.len(),
        sessions.len(),
        l.live_tokens.len(),
        l.messaging_tokens.len(),
        l.gateway_answered,
        l.gateway_lost,
        l.instances_seen.len(),
    )
}

fn phone_expectation(body: &Value) -> &'static str {
    if body["phone_number"].as_str().unwrap().ends_with("0000") {
        "API_510"
    } else {
        "API_200"
    }
}

fn data_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().canonicalize().unwrap();
    (dir, path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_answered_is_lost_across_kill_9() {
    let kills: usize = std::env::var("KEP_CRASH_KILLS")
        .ok()
        .and_then(|k| k.parse().ok())
        .unwrap_or(3);
    let seed = std::env::var("KEP_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    eprintln!("crash recovery: {kills} kills, KEP_CRASH_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let (_keep, dir) = data_dir();
    let ledger = Arc::new(Mutex::new(Ledger::default()));

    let kep = start(&dir);
    let tenants = Arc::new(setup(&kep, &dir).await);
    let first = reconciled(&kep, &tenants).await;
    ledger.lock().unwrap().instances_seen.extend(first);
    let quota = (MAX_MESSAGES / kills.max(1)) as u64;
    load_until_kill(kep, &tenants, &ledger, 0, quota, &mut rng).await;
    let mut during_startup = 0;
    for cycle in 1..kills {
        let mut kep = start(&dir);
        // One kill in four lands while kep reconciles and spawns the instances.
        if rng.random_bool(0.25) {
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..300))).await;
            kep.child.kill().unwrap();
            kep.child.wait().unwrap();
            during_startup += 1;
            continue;
        }
        check_after_restart(&kep, &tenants, &ledger).await;
        load_until_kill(kep, &tenants, &ledger, cycle, quota, &mut rng).await;
    }

    let kep = start(&dir);
    check_after_restart(&kep, &tenants, &ledger).await;
    let summary = check_everything(&kep, &dir, &ledger).await;
    drop(StopsGracefully(kep));
    assert_eq!(
        instance_processes(&tenants.marker),
        BTreeSet::new(),
        "a stopped kep leaves no instance behind"
    );
    eprintln!(
        "crash recovery: {kills} kills survived ({during_startup} while starting up): {summary}"
    );
}
