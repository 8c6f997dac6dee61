//! Crash recovery (RELIABILITY.md): load against a real `kep serve`, SIGKILL at a random
//! moment, a restart on the same data dir, and so on; then every answer the clients got is
//! checked against what the server kept. One test per kind of call, each with its own server
//! and data dir: message sends, DRM round trips, calls through the gateway to instances,
//! and the tokens issued along the way.
//!
//! `KEP_CRASH_KILLS` kills (3 by default, so CI stays quick); `KEP_CRASH_SEED` replays a run.
//! The figures each test prints at the end are RELIABILITY.md's.

mod load;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kep_client::live::LiveClient;
use rand::rngs::StdRng;
use rand::{Rng as _, RngCore as _, SeedableRng as _};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use tokio_util::sync::CancellationToken;

use crate::common::{Server, StopsGracefully, eventually};
pub(crate) use load::instance_processes;
use load::*;

/// The statuses a message ends in.
const FINAL: [&str; 3] = ["API_200", "API_510", "API_520"];

/// Every XMS send answered 200 before a kill reaches its final status, with exactly one
/// recorded hand-over; a send whose answer a kill cut off, sent again with its cid, finds the
/// message the server kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_answered_before_a_kill_reach_one_final_status_each() {
    survives_kill_9(Kind::Messages).await;
}

/// Every DRM round trip is released with its file intact, resumed by its agent after the
/// restart, or expired with nothing left of it on disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drm_round_trips_a_kill_cut_off_resume_or_expire_cleanly() {
    survives_kill_9(Kind::DrmSessions).await;
}

/// After each restart the deployment is `Available` with exactly its instances, none
/// orphaned by the killed kep, and the endpoint's key still works; a stopped kep leaves no
/// instance behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_are_reconciled_after_a_kill_and_none_is_orphaned() {
    survives_kill_9(Kind::Instances).await;
}

/// Every live and messaging token issued before a kill is still accepted after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_issued_before_a_kill_stay_valid() {
    survives_kill_9(Kind::Tokens).await;
}

/// What a test puts under load, and checks after each restart and at the end.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    /// XMS sends by four senders.
    Messages,
    /// DRM release round trips, the test playing the agent.
    DrmSessions,
    /// Calls through the gateway to an endpoint's instances.
    Instances,
    /// A new live Provision token and messaging access token each cycle, and no other load.
    Tokens,
}

/// Load of `kind`, SIGKILL at a random moment (one restart in four killed while it starts
/// up), a restart on the same data dir, `KEP_CRASH_KILLS` times; then the checks of `kind`.
async fn survives_kill_9(kind: Kind) {
    let kills: usize = std::env::var("KEP_CRASH_KILLS")
        .ok()
        .and_then(|k| k.parse().ok())
        .unwrap_or(3);
    let seed = std::env::var("KEP_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    eprintln!("crash recovery, {kind:?}: {kills} kills, KEP_CRASH_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let (_keep, dir) = data_dir();
    let ledger = Arc::new(Mutex::new(Ledger::default()));

    let kep = start(&dir);
    let tenants = Arc::new(setup(&kep, &dir, kind == Kind::Instances).await);
    if kind == Kind::Instances {
        let first = reconciled(&kep, &tenants).await;
        ledger.lock().unwrap().instances_seen.extend(first);
    }
    let quota = (MAX_MESSAGES / kills.max(1)) as u64;
    load_until_kill(kind, kep, &tenants, &ledger, 0, quota, &mut rng).await;
    let mut during_startup = 0;
    for cycle in 1..kills {
        let mut kep = start(&dir);
        // One kill in four lands while kep reconciles and spawns the instances. Deliberate:
        // a random moment of its start-up.
        if rng.random_bool(0.25) {
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..300))).await;
            kep.child.kill().unwrap();
            kep.child.wait().unwrap();
            during_startup += 1;
            continue;
        }
        check_after_restart(kind, &kep, &tenants, &ledger).await;
        load_until_kill(kind, kep, &tenants, &ledger, cycle, quota, &mut rng).await;
    }

    let kep = start(&dir);
    check_after_restart(kind, &kep, &tenants, &ledger).await;
    let summary = match kind {
        Kind::Messages => check_messages(&kep, &ledger).await,
        Kind::DrmSessions => check_sessions(&kep, &dir, &ledger).await,
        Kind::Instances => {
            let l = ledger.lock().unwrap();
            format!(
                "{} gateway calls answered, {} cut off; {} instance processes, none orphaned",
                l.gateway_answered,
                l.gateway_lost,
                l.instances_seen.len(),
            )
        }
        Kind::Tokens => {
            let l = ledger.lock().unwrap();
            format!(
                "{} live and {} messaging tokens still valid",
                l.live_tokens.len(),
                l.messaging_tokens.len(),
            )
        }
    };
    drop(StopsGracefully(kep));
    assert_eq!(
        instance_processes(&tenants.marker),
        BTreeSet::new(),
        "a stopped kep leaves no instance behind"
    );
    eprintln!(
        "crash recovery, {kind:?}: {kills} kills survived ({during_startup} while starting up): \
         {summary}"
    );
}

/// One cycle's load: new tokens, then the calls of `kind` until the kill.
async fn load_until_kill(
    kind: Kind,
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
    let drm_seed = rng.next_u64();
    let task = match kind {
        Kind::Messages => tokio::spawn(messaging_load(
            kep.url("messaging"),
            token,
            cycle,
            quota,
            Arc::clone(ledger),
            stop.clone(),
        )),
        Kind::DrmSessions => tokio::spawn(drm_load(
            kep.admin.clone(),
            kep.url("adapter"),
            Arc::clone(t),
            cycle,
            drm_seed,
            Arc::clone(ledger),
            stop.clone(),
        )),
        Kind::Instances => tokio::spawn(gateway_load(
            kep.url("gateway"),
            t.api_key.clone(),
            Arc::clone(ledger),
            stop.clone(),
        )),
        Kind::Tokens => tokio::spawn(async {}),
    };
    // Deliberate: the kill lands at a random moment of the load.
    tokio::time::sleep(Duration::from_millis(rng.random_range(200..MAX_CYCLE_MS))).await;
    // No new calls; those in flight are cut off by the kill.
    stop.cancel();
    kep.child.kill().unwrap(); // SIGKILL
    kep.child.wait().unwrap();
    task.await.unwrap();
}

/// What a restarted kep must still honour, for `kind`: every token issued before; exactly
/// the deployment's instances and the endpoint's key; the round trips a kill cut off.
async fn check_after_restart(kind: Kind, kep: &Server, t: &Tenants, ledger: &Mutex<Ledger>) {
    match kind {
        Kind::Messages => {}
        Kind::DrmSessions => resume_cut_off(kep, t, ledger).await,
        Kind::Instances => {
            let pids = reconciled(kep, t).await;
            let res = http()
                .get(format!("{}/endpoints/crash/hello", kep.url("gateway")))
                .bearer_auth(&t.api_key)
                .send()
                .await
                .unwrap();
            assert_eq!(res.status(), 200, "the endpoint's key after the kill");
            ledger.lock().unwrap().instances_seen.extend(pids);
        }
        Kind::Tokens => tokens_still_valid(kep, ledger).await,
    }
}

/// Every live and messaging token issued before the kill is still accepted.
async fn tokens_still_valid(kep: &Server, ledger: &Mutex<Ledger>) {
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
}

/// Waits until the deployment is `Available` and exactly its instances run, no orphan of an
/// earlier kep among them; returns their pids.
async fn reconciled(kep: &Server, t: &Tenants) -> BTreeSet<u64> {
    eventually(
        Duration::from_secs(60),
        "instances reconciled",
        async || {
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
                Ok(running)
            } else {
                Err(format!(
                    "kep reports {reported:?} ({}), running {running:?}",
                    d["state"]
                ))
            }
        },
    )
    .await
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

/// After the last restart: sends whose answer was lost are sent again, as a client would;
/// then every message answered 200 is checked against what the server kept.
async fn check_messages(kep: &Server, ledger: &Mutex<Ledger>) -> String {
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
    for (cid, (uid, expect)) in &answered {
        let url = format!(
            "{}/v2/info/message/search/detail/{uid}",
            kep.url("messaging")
        );
        let what = format!("{cid} ({uid}) finishes");
        eventually(Duration::from_secs(120), &what, async || {
            let d: Value = http()
                .get(&url)
                .bearer_auth(&token)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let status = d["result"]["status_code"].as_str().unwrap_or("");
            assert!(
                status == *expect || !FINAL.contains(&status),
                "{cid} ({uid}) ended {status}, not {expect}"
            );
            if status == *expect { Ok(()) } else { Err(d) }
        })
        .await;
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
    format!(
        "{} messages answered 200 ({} after a lost answer), each final once",
        answered.len(),
        retries.len(),
    )
}

/// After the last restart: every DRM session is checked against what the server kept, and
/// its data dir holds exactly the released files.
async fn check_sessions(kep: &Server, dir: &Path, ledger: &Mutex<Ledger>) -> String {
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
        let path = format!("/admin/v1/adapter/drm-requests/{}", s.id);
        let what = format!("session {} expires", s.id);
        let timeout = Duration::from_secs(SESSION_TTL_S + 30);
        let d = eventually(timeout, &what, async || {
            let d = operator(kep, reqwest::Method::GET, &path, None).await;
            // An abandoned session ends when its time is up.
            if s.abandoned && ["PENDING", "GRANTED"].contains(&d["status"].as_str().unwrap()) {
                Err(d)
            } else {
                Ok(d)
            }
        })
        .await;
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
    format!(
        "{} DRM sessions ({intact} released before a kill and intact, {resumed} resumed, \
         {abandoned} abandoned, {expired} expired cleanly)",
        sessions.len(),
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
