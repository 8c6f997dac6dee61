//! `kep adapter …`

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Args, Subcommand, ValueEnum};
use kep_api::adapter::{
    AgentNotification, CreateOrgLoginType, DrmRequest, FileType, OrgLoginTypeRequest, UploadResult,
};
use kep_client::adapter::AgentClient;
use reqwest::multipart::Part;

use super::{Common, listener_url, print_json};

#[derive(Args)]
pub struct AdapterArgs {
    #[command(flatten)]
    pub(super) common: Common,
    /// The adapter listener, e.g. http://127.0.0.1:8802 [default: from addresses.json].
    #[arg(long, global = true, env = "KEP_ADAPTER_URL")]
    adapter_url: Option<String>,
    #[command(subcommand)]
    command: AdapterCommand,
}

#[derive(Subcommand)]
enum AdapterCommand {
    /// Org login types (operator token).
    #[command(subcommand)]
    Org(OrgCommand),
    /// DRM release requests (operator token).
    #[command(subcommand)]
    Drm(DrmCommand),
    /// A reference adapter agent: receives DRM notifications and answers them by a policy.
    Agent(AgentArgs),
}

#[derive(Subcommand)]
enum OrgCommand {
    /// Register an org login type; its secret key is shown once.
    Create {
        /// OAUTH2 or SAML2.
        #[arg(long)]
        method: String,
        /// Host[:port] (or http(s):// URL) of the organisation's agent server.
        #[arg(long)]
        agent: String,
        /// A JSON file with the `data_model` object.
        #[arg(long)]
        data_model: Option<PathBuf>,
        /// The id to take [default: the next free one].
        #[arg(long)]
        id: Option<i64>,
        /// The secret key to take, 8 to 256 printable characters [default: generated].
        #[arg(long, env = "KEP_ADAPTER_SECRET_KEY", hide_env_values = true)]
        secret_key: Option<String>,
    },
    Show {
        id: i64,
    },
    /// A new secret key; the old one stops working.
    RotateKey {
        id: i64,
    },
}

#[derive(Subcommand)]
enum DrmCommand {
    /// Ask for a DRM release: a PENDING session, and a notification to the org's agent.
    Request {
        #[arg(long)]
        org: i64,
        #[arg(long)]
        file_id: String,
        #[arg(long, value_enum, default_value_t = FileTypeArg::Drm)]
        file_type: FileTypeArg,
        #[arg(long)]
        user: Option<String>,
    },
    /// Status, result and notification history of a session.
    Show {
        // Session ids are URL-safe base64: one may start with '-'.
        #[arg(allow_hyphen_values = true)]
        session: String,
    },
    /// Save the released file.
    Fetch {
        #[arg(allow_hyphen_values = true)]
        session: String,
        /// Where to write it [default: ./<session>].
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum FileTypeArg {
    Drm,
    Plain,
}

impl From<FileTypeArg> for FileType {
    fn from(f: FileTypeArg) -> Self {
        match f {
            FileTypeArg::Drm => FileType::Drm,
            FileTypeArg::Plain => FileType::Plain,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum Policy {
    /// SUCCESS for DRM files (then upload the file), FAILURE for PLAIN ones.
    Grant,
    /// FAILURE for every file.
    Deny,
}

#[derive(Args)]
struct AgentArgs {
    /// Where to listen for notifications (the org's `adapter_agent`).
    #[arg(long, default_value = "127.0.0.1:9000")]
    listen: SocketAddr,
    /// The path notifications are POSTed to (the server's `adapter.notify_path`).
    #[arg(long, default_value = "/drm/notify")]
    path: String,
    #[arg(long)]
    org: i64,
    #[arg(
        long,
        env = "KEP_ADAPTER_SECRET_KEY",
        hide_env_values = true,
        allow_hyphen_values = true
    )]
    secret_key: String,
    /// The scheme word of `Authorization` (the server's `adapter.auth_scheme`).
    #[arg(long, default_value = "Secret")]
    scheme: String,
    #[arg(long, value_enum, default_value_t = Policy::Grant)]
    policy: Policy,
    /// The released file to upload [default: a small text naming the file id].
    #[arg(long)]
    file: Option<PathBuf>,
}

impl AdapterArgs {
    fn adapter_url(&self) -> String {
        self.adapter_url
            .clone()
            .unwrap_or_else(|| listener_url(&self.common.data_dir, "adapter", 8802))
    }
}

pub async fn run(args: AdapterArgs) -> anyhow::Result<()> {
    match &args.command {
        AdapterCommand::Org(cmd) => {
            let admin = args.common.admin()?;
            match cmd {
                OrgCommand::Create {
                    method,
                    agent,
                    data_model,
                    id,
                    secret_key,
                } => {
                    let data_model = match data_model {
                        Some(path) => Some(serde_json::from_slice(
                            &std::fs::read(path)
                                .with_context(|| format!("reading {}", path.display()))?,
                        )?),
                        None => None,
                    };
                    let req = CreateOrgLoginType {
                        org: OrgLoginTypeRequest {
                            method: method.clone(),
                            adapter_agent: agent.clone(),
                            data_model,
                        },
                        id: *id,
                        secret_key: secret_key.clone(),
                    };
                    print_json(&admin.create_org(req).await?)
                }
                OrgCommand::Show { id } => print_json(&admin.org(*id).await?),
                OrgCommand::RotateKey { id } => print_json(&admin.rotate_org_key(*id).await?),
            }
        }
        AdapterCommand::Drm(cmd) => {
            let admin = args.common.admin()?;
            match cmd {
                DrmCommand::Request {
                    org,
                    file_id,
                    file_type,
                    user,
                } => {
                    let req = DrmRequest {
                        org_login_type_id: *org,
                        file_id: file_id.clone(),
                        file_type: (*file_type).into(),
                        user: user.clone(),
                    };
                    print_json(&admin.drm_request(&req).await?)
                }
                DrmCommand::Show { session } => print_json(&admin.drm_session(session).await?),
                DrmCommand::Fetch { session, output } => {
                    use futures_util::StreamExt as _;
                    use tokio::io::AsyncWriteExt as _;
                    let path = output.clone().unwrap_or_else(|| PathBuf::from(session));
                    let res = admin.drm_file(session).await?;
                    let mut file = tokio::fs::File::create(&path).await?;
                    let mut body = res.bytes_stream();
                    let mut size = 0u64;
                    while let Some(chunk) = body.next().await {
                        let chunk = chunk?;
                        size += chunk.len() as u64;
                        file.write_all(&chunk).await?;
                    }
                    file.flush().await?;
                    print_json(&serde_json::json!({ "path": path, "size": size }))
                }
            }
        }
        AdapterCommand::Agent(agent) => run_agent(agent, args.adapter_url()).await,
    }
}

/// The reference agent: prints every step as one JSON line.
async fn run_agent(args: &AgentArgs, adapter_url: String) -> anyhow::Result<()> {
    // Found now, not at the first release, when the session would be left GRANTED.
    if let Some(file) = &args.file {
        std::fs::File::open(file).with_context(|| format!("--file {}", file.display()))?;
    }
    let client = AgentClient::new(&adapter_url, args.org, &args.scheme, &args.secret_key);
    let login = client
        .get_org_login_type()
        .await
        .context("getOrgLoginType")?;
    println!(
        "{}",
        serde_json::json!({ "step": "getOrgLoginType", "answer": login })
    );
    let policy = args.policy;
    let file = args.file.clone();
    let app = axum::Router::new().route(
        &args.path,
        axum::routing::post(move |axum::Json(notice): axum::Json<AgentNotification>| {
            let client = client.clone();
            let file = file.clone();
            async move {
                println!(
                    "{}",
                    serde_json::json!({ "step": "notified", "notice": notice })
                );
                // Answer the notification at once; the adapter calls follow on their own.
                tokio::spawn(answer(client, notice, policy, file));
                axum::http::StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    eprintln!(
        "agent listening on http://{}{}",
        listener.local_addr()?,
        args.path
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}

async fn answer(client: AgentClient, n: AgentNotification, policy: Policy, file: Option<PathBuf>) {
    let grant = matches!((policy, n.file_type), (Policy::Grant, FileType::Drm));
    let body = UploadResult {
        result: if grant { "SUCCESS" } else { "FAILURE" }.into(),
        reason: match (grant, n.file_type) {
            (true, _) => "allowed by policy".into(),
            (false, FileType::Plain) => "plain file: no release needed".into(),
            (false, FileType::Drm) => "denied by policy".into(),
        },
        extra: Some(serde_json::json!({ "agent": "kep adapter agent" })),
    };
    let res = client
        .upload_result(&n.session_id, &n.file_id, n.file_type, &body)
        .await;
    println!(
        "{}",
        serde_json::json!({ "step": "uploadResult", "result": body.result, "answer": res.as_ref().map_err(|e| e.to_string()).ok() })
    );
    if !grant || res.is_err() {
        return;
    }
    let uploaded = match &file {
        Some(path) => {
            client
                .upload_decrypted_file(&n.session_id, &n.file_id, path)
                .await
        }
        None => {
            let content = format!("released {}\n", n.file_id).into_bytes();
            client
                .upload_decrypted(
                    &n.session_id,
                    &n.file_id,
                    Part::bytes(content).file_name(n.file_id.clone()),
                )
                .await
        }
    };
    println!(
        "{}",
        serde_json::json!({ "step": "uploadDecrypted", "answer": uploaded.map_err(|e| e.to_string()) })
    );
}
