//! `kep-bench soak`: mixed traffic against every service of one `kep serve` at a steady
//! rate, sampling the server's RSS, open file descriptors and each service's latency every
//! few seconds, and judging whether memory or descriptors grow (RELIABILITY.md).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use kep_api::adapter::{FileType, UploadResult};
use kep_client::live::{LiveClient, Participant};
use kep_client::messaging::MessagingClient;
use serde_json::{Value, json};

#[derive(clap::Args)]
pub struct SoakArgs {
    /// The data dir of the `kep serve` under test (its addresses.json).
    #[arg(long)]
    data_dir: PathBuf,
    /// Its operator token.
    #[arg(long)]
    token: String,
    /// Its pid, whose memory and descriptors are sampled.
    #[arg(long)]
    pid: u32,
    #[arg(long, default_value_t = 600)]
    seconds: u64,
    /// Seconds between samples.
    #[arg(long, default_value_t = 5)]
    interval: u64,
    /// Calls per second to each service.
    #[arg(long, default_value_t = 20)]
    rate: u32,
}

/// The services driven, in the order of the sample columns.
const SERVICES: [&str; 5] = ["live", "adapter", "messaging", "gateway", "operator"];
/// Samples before this share of the run are warm-up (caches, pools, SQLite pages filling).
const WARM_UP: f64 = 0.2;

/// Latencies (µs) and errors per service since the last sample.
#[derive(Default)]
struct Window {
    latencies: [Vec<u64>; SERVICES.len()],
    errors: [u64; SERVICES.len()],
}

type Shared = Arc<Mutex<Window>>;

struct Target {
    admin: String,
    live: String,
    adapter: String,
    messaging: String,
    gateway: String,
    token: String,
    http: reqwest::Client,
}

impl Target {
    async fn operator(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Value,
    ) -> anyhow::Result<Value> {
        let res = self
            .http
            .request(method, format!("{}{path}", self.admin))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await?;
        let status = res.status();
        let body: Value = res.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            bail!("{path}: {status} {body}");
        }
        Ok(body)
    }
}

pub async fn soak(args: SoakArgs) -> anyhow::Result<()> {
    let addresses: Value = serde_json::from_slice(
        &std::fs::read(args.data_dir.join("addresses.json")).context("addresses.json")?,
    )?;
    let url = |name: &str| format!("http://{}", addresses[name].as_str().unwrap_or_default());
    let t = Arc::new(Target {
        admin: url("admin"),
        live: url("live"),
        adapter: url("adapter"),
        messaging: url("messaging"),
        gateway: url("gateway"),
        token: args.token.clone(),
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()?,
    });
    let window: Shared = Arc::default();
    let period = Duration::from_secs_f64(1.0 / f64::from(args.rate.max(1)));
    let end = Instant::now() + Duration::from_secs(args.seconds);

    let live = setup_live(&t).await?;
    let org = t
        .operator(
            reqwest::Method::POST,
            "/admin/v1/adapter/org-login-types",
            // Nothing listens there: the notifications fail, and the soak plays the agent.
            json!({"method": "SAML2", "adapter_agent": "127.0.0.1:9"}),
        )
        .await?;
    let client = t
        .operator(
            reqwest::Method::POST,
            "/admin/v1/messaging/clients",
            json!({}),
        )
        .await?;
    let messaging = MessagingClient::new(
        &t.messaging,
        MessagingClient::token(
            &t.messaging,
            client["client_id"].as_str().unwrap_or_default(),
            client["client_secret"].as_str().unwrap_or_default(),
        )
        .await?
        .access_token,
    );
    let api_key = setup_endpoint(&t).await?;

    let mut workers = Vec::new();
    let mut every = |service: usize, call: Box<dyn Fn(u64) -> CallFuture + Send + Sync>| {
        let window = Arc::clone(&window);
        workers.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            for n in 0.. {
                tick.tick().await;
                if Instant::now() >= end {
                    return;
                }
                let started = Instant::now();
                let outcome = call(n).await;
                let mut w = window.lock().expect("window");
                match outcome {
                    Ok(()) => w.latencies[service].push(started.elapsed().as_micros() as u64),
                    Err(e) => {
                        if w.errors[service] == 0 {
                            eprintln!("{}: {e:#}", SERVICES[service]);
                        }
                        w.errors[service] += 1;
                    }
                }
            }
        }));
    };
    {
        let (t, live) = (Arc::clone(&t), Arc::new(live));
        every(
            0,
            Box::new(move |n| Box::pin(live_call(Arc::clone(&t), Arc::clone(&live), n))),
        );
    }
    {
        let (t, org) = (Arc::clone(&t), Arc::new(org));
        every(
            1,
            Box::new(move |n| Box::pin(drm_call(Arc::clone(&t), Arc::clone(&org), n))),
        );
    }
    {
        let messaging = Arc::new(messaging);
        every(
            2,
            Box::new(move |n| Box::pin(messaging_call(Arc::clone(&messaging), n))),
        );
    }
    {
        let (t, key) = (Arc::clone(&t), Arc::new(api_key));
        every(
            3,
            Box::new(move |_| {
                let (t, key) = (Arc::clone(&t), Arc::clone(&key));
                Box::pin(async move {
                    let res = t
                        .http
                        .get(format!("{}/endpoints/soak/predict", t.gateway))
                        .bearer_auth(&*key)
                        .send()
                        .await?;
                    ensure_ok(res).await.map(drop)
                })
            }),
        );
    }
    {
        let t = Arc::clone(&t);
        every(
            4,
            Box::new(move |_| {
                let t = Arc::clone(&t);
                Box::pin(async move {
                    t.operator(
                        reqwest::Method::GET,
                        "/admin/v1/serving/endpoints/soak/metrics",
                        Value::Null,
                    )
                    .await
                    .map(drop)
                })
            }),
        );
    }

    sample(&args, &window, end).await
}

type CallFuture = std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<()>> + Send>>;

async fn ensure_ok(res: reqwest::Response) -> anyhow::Result<Value> {
    let status = res.status();
    let body: Value = res.json().await.unwrap_or(Value::Null);
    if !status.is_success() {
        bail!("{status} {body}");
    }
    Ok(body)
}

struct LiveTenant {
    service_id: String,
    admin_secret: String,
    service_secret: String,
    /// Provisioned again well before its TTL runs out.
    token: Mutex<(String, Instant)>,
}

async fn setup_live(t: &Target) -> anyhow::Result<LiveTenant> {
    let s = t
        .operator(reqwest::Method::POST, "/admin/v1/live/services", json!({}))
        .await?;
    let service_id = s["serviceId"].as_str().unwrap_or_default().to_owned();
    let admin_secret = s["adminSecret"].as_str().unwrap_or_default().to_owned();
    let token = LiveClient::new(&t.live)
        .provision(&service_id, &admin_secret)
        .await?
        .token;
    Ok(LiveTenant {
        service_id,
        admin_secret,
        service_secret: s["serviceSecret"].as_str().unwrap_or_default().to_owned(),
        token: Mutex::new((token, Instant::now())),
    })
}

/// A participant joins, publishes, is listed by the service's admin and leaves: a socket and
/// a room made and ended each time.
async fn live_call(t: Arc<Target>, live: Arc<LiveTenant>, n: u64) -> anyhow::Result<()> {
    let room = format!("soak-{}", n % 8);
    let stale = live.token.lock().expect("token").1.elapsed() > Duration::from_secs(600);
    if stale {
        let fresh = LiveClient::new(&t.live)
            .provision(&live.service_id, &live.admin_secret)
            .await?
            .token;
        *live.token.lock().expect("token") = (fresh, Instant::now());
    }
    let mut p =
        Participant::join(&t.live, &live.service_id, &live.service_secret, &room, None).await?;
    p.publish().await?;
    let token = live.token.lock().expect("token").0.clone();
    LiveClient::new(&t.live)
        .with_token(token)
        .list_participants(&room)
        .await?;
    drop(p);
    Ok(())
}

/// A DRM release round trip, the soak playing the agent.
async fn drm_call(t: Arc<Target>, org: Arc<Value>, n: u64) -> anyhow::Result<()> {
    let file_id = format!("soak-{n}.pdf");
    let created = t
        .operator(
            reqwest::Method::POST,
            "/admin/v1/adapter/drm-requests",
            json!({"org_login_type_id": org["id"], "file_id": file_id, "file_type": "DRM"}),
        )
        .await?;
    let agent = kep_client::adapter::AgentClient::new(
        &t.adapter,
        org["id"].as_i64().unwrap_or_default(),
        "Secret",
        org["secret_key"].as_str().unwrap_or_default(),
    );
    let session = created["session_id"].as_str().unwrap_or_default();
    agent
        .upload_result(
            session,
            &file_id,
            FileType::Drm,
            &UploadResult {
                result: "SUCCESS".into(),
                reason: "soak".into(),
                extra: None,
            },
        )
        .await?;
    let part = reqwest::multipart::Part::bytes(vec![b'k'; 16 * 1024]).file_name(file_id.clone());
    agent.upload_decrypted(session, &file_id, part).await?;
    Ok(())
}

/// An XMS send; every tenth call a search of today's messages too.
async fn messaging_call(m: Arc<MessagingClient>, n: u64) -> anyhow::Result<()> {
    let body = json!({"cid": format!("soak-{n}"), "message_type": "SM",
        "phone_number": format!("82101234{:04}", 1000 + n % 9000),
        "message": "오래 달리기", "sender_no": "0212345678"});
    m.send_xms(&body).await?;
    if n.is_multiple_of(10) {
        m.search_xms(&serde_json::from_value(json!({"size": 100}))?)
            .await?;
    }
    Ok(())
}

/// An endpoint whose one instance is this binary's `upstream`.
async fn setup_endpoint(t: &Target) -> anyhow::Result<String> {
    let me = std::env::current_exe()?;
    let post = reqwest::Method::POST;
    t.operator(
        post.clone(),
        "/admin/v1/serving/images",
        json!({"name": "soak-upstream", "command": [me, "upstream"]}),
    )
    .await?;
    let e = t
        .operator(
            post.clone(),
            "/admin/v1/serving/endpoints",
            json!({"name": "soak"}),
        )
        .await?;
    t.operator(
        post,
        "/admin/v1/serving/endpoints/soak/deployments",
        json!({"name": "app", "type": "custom-image", "image": "soak-upstream"}),
    )
    .await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while t
        .operator(
            reqwest::Method::GET,
            "/admin/v1/serving/endpoints/soak/deployments/app",
            Value::Null,
        )
        .await?["state"]
        != "Available"
    {
        if Instant::now() > deadline {
            bail!("the soak deployment never became Available");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(e["api_key"].as_str().unwrap_or_default().to_owned())
}

/// The resident set (bytes) and open descriptors of `pid`.
fn footprint(pid: u32) -> anyhow::Result<(u64, usize)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("kep (pid {pid}) is gone"))?;
    let rss_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .context("VmRSS")?;
    let fds = std::fs::read_dir(Path::new(&format!("/proc/{pid}/fd")))?.count();
    Ok((rss_kb * 1024, fds))
}

fn percentile(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1] as f64 / 1000.0
}

/// Least-squares slope of `ys` over `xs`.
fn slope(xs: &[f64], ys: &[f64]) -> f64 {
    let n = xs.len() as f64;
    let (mx, my) = (xs.iter().sum::<f64>() / n, ys.iter().sum::<f64>() / n);
    let cov: f64 = xs.iter().zip(ys).map(|(x, y)| (x - mx) * (y - my)).sum();
    let var: f64 = xs.iter().map(|x| (x - mx).powi(2)).sum();
    if var == 0.0 { 0.0 } else { cov / var }
}

/// Prints a line per sample, then the verdict; fails on any error or on growth.
async fn sample(args: &SoakArgs, window: &Shared, end: Instant) -> anyhow::Result<()> {
    let started = Instant::now();
    print!("t_s rss_mib fds");
    for s in SERVICES {
        print!(" {s}_calls {s}_p50_ms {s}_p99_ms");
    }
    println!();
    let (mut ts, mut rss, mut fds) = (Vec::new(), Vec::new(), Vec::new());
    let (mut calls, mut errors) = ([0u64; SERVICES.len()], [0u64; SERVICES.len()]);
    let mut all: [Vec<u64>; SERVICES.len()] = Default::default();
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_secs(args.interval)).await;
        let (bytes, open) = footprint(args.pid)?;
        let w = std::mem::take(&mut *window.lock().expect("window"));
        let t = started.elapsed().as_secs_f64();
        print!("{t:.0} {:.1} {open}", bytes as f64 / 1048576.0);
        for (i, mut lat) in w.latencies.into_iter().enumerate() {
            lat.sort_unstable();
            print!(
                " {} {:.2} {:.2}",
                lat.len(),
                percentile(&lat, 0.5),
                percentile(&lat, 0.99)
            );
            calls[i] += lat.len() as u64;
            errors[i] += w.errors[i];
            all[i].extend(lat);
        }
        println!();
        ts.push(t);
        rss.push(bytes as f64 / 1048576.0);
        fds.push(open as f64);
    }
    let warm = ((ts.len() as f64 * WARM_UP).ceil() as usize).min(ts.len().saturating_sub(2));
    let (ts, rss, fds) = (&ts[warm..], &rss[warm..], &fds[warm..]);
    let hours = (ts[ts.len() - 1] - ts[0]) / 3600.0;
    let rss_slope = slope(ts, rss) * 3600.0;
    let fds_slope = slope(ts, fds) * 3600.0;
    let max = |v: &[f64]| v.iter().cloned().fold(f64::MIN, f64::max);
    println!(
        "after warm-up ({:.0} s): RSS {:.1} → {:.1} MiB (max {:.1}), trend {rss_slope:+.1} MiB/h; \
         fds {} → {} (max {}), trend {fds_slope:+.1}/h",
        ts[0],
        rss[0],
        rss[rss.len() - 1],
        max(rss),
        fds[0],
        fds[fds.len() - 1],
        max(fds)
    );
    for (i, s) in SERVICES.iter().enumerate() {
        all[i].sort_unstable();
        println!(
            "{s}: {} calls, {} errors, p50 {:.2} ms, p99 {:.2} ms",
            calls[i],
            errors[i],
            percentile(&all[i], 0.5),
            percentile(&all[i], 0.99)
        );
    }
    // Flat: what the trend adds over the measured span stays within 5% of the memory held
    // (and within 10 descriptors).
    let rss_growth = rss_slope * hours;
    let fds_growth = fds_slope * hours;
    let failed: u64 = errors.iter().sum();
    if failed > 0 {
        bail!("{failed} calls failed");
    }
    if rss_growth > 0.05 * rss[0] || fds_growth > 10.0 {
        bail!("growth: {rss_growth:+.1} MiB and {fds_growth:+.1} descriptors over the run");
    }
    println!("flat: {rss_growth:+.1} MiB and {fds_growth:+.1} descriptors over the trend");
    Ok(())
}
