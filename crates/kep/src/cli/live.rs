//! `kep live …`

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use kep_api::live::{ClientMessage, CreateServiceRequest, JoinClaims, ProvisionResult};
use kep_client::live::{LiveClient, Participant, join_token};
use serde::{Deserialize, Serialize};

use super::{Common, listener_url, print_json};

#[derive(Args)]
pub struct LiveArgs {
    #[command(flatten)]
    pub(super) common: Common,
    /// The live listener, e.g. http://127.0.0.1:8801 [default: the provisioned `api`, else
    /// from addresses.json].
    #[arg(long, global = true, env = "KEP_LIVE_URL")]
    live_url: Option<String>,
    #[command(subcommand)]
    command: LiveCommand,
}

#[derive(Subcommand)]
enum LiveCommand {
    /// Live services (operator token).
    #[command(subcommand)]
    Service(ServiceCommand),
    /// A service's webhook: where its room events are posted, signed (operator token).
    #[command(subcommand)]
    Webhook(WebhookCommand),
    /// Provision an admin token (both steps) and keep it for the room commands.
    Provision {
        #[arg(long, env = "KEP_LIVE_SERVICE_ID")]
        service_id: String,
        #[arg(
            long,
            env = "KEP_LIVE_ADMIN_SECRET",
            hide_env_values = true,
            allow_hyphen_values = true
        )]
        admin_secret: String,
    },
    /// Room.ListRooms
    Rooms,
    /// Room.ListParticipants
    Participants { room: String },
    /// Room.KickParticipant
    Kick {
        room: String,
        #[arg(required = true)]
        participants: Vec<String>,
    },
    /// Room.InactiveStream, targets as PARTICIPANT:STREAM
    Inactivate {
        room: String,
        #[arg(required = true, value_parser = parse_stream_target)]
        targets: Vec<(String, i64)>,
    },
    /// Room.DestroyRoom
    Destroy { room: String },
    /// Join a room as a participant and print every message that arrives, one JSON per line.
    Join {
        /// The room (a join token names its own).
        #[arg(required_unless_present = "token")]
        room: Option<String>,
        #[arg(long, env = "KEP_LIVE_SERVICE_ID", required_unless_present = "token")]
        service_id: Option<String>,
        #[arg(
            long,
            env = "KEP_LIVE_SERVICE_SECRET",
            hide_env_values = true,
            allow_hyphen_values = true,
            required_unless_present = "token"
        )]
        service_secret: Option<String>,
        #[arg(long)]
        participant_id: Option<String>,
        /// Join with a join token instead of the service secret.
        #[arg(long, env = "KEP_LIVE_JOIN_TOKEN", hide_env_values = true, conflicts_with_all = ["room", "participant_id"])]
        token: Option<String>,
        /// Publish a stream once joined.
        #[arg(long)]
        publish: bool,
    },
    /// Mint a join token (a JWT, HS256, keyed by the service secret's hash), as a
    /// customer's server does for its participants.
    Token {
        room: String,
        participant: String,
        #[command(flatten)]
        service: ServiceSecret,
        /// The token may not publish.
        #[arg(long)]
        no_publish: bool,
        /// The token may not subscribe.
        #[arg(long)]
        no_subscribe: bool,
        /// How long it is valid: `90s`, `30m`, `1h`, `2d`.
        #[arg(long, default_value = "1h", value_parser = parse_ttl)]
        ttl: i64,
    },
}

/// A live service and its (ordinary) service secret.
#[derive(Args)]
struct ServiceSecret {
    #[arg(long, env = "KEP_LIVE_SERVICE_ID")]
    service_id: String,
    #[arg(
        long,
        env = "KEP_LIVE_SERVICE_SECRET",
        hide_env_values = true,
        allow_hyphen_values = true
    )]
    service_secret: String,
}

/// A duration as `jiff` reads one (`1h`, `30m`, `1h30m`), in whole seconds, at least 1.
fn parse_ttl(s: &str) -> Result<i64, String> {
    let span: jiff::Span = s.parse().map_err(|e| format!("{s:?}: {e}"))?;
    let seconds = span
        .total(jiff::Unit::Second)
        .map_err(|e| format!("{s:?}: {e}"))?;
    if seconds < 1.0 {
        return Err(format!("{s:?}: at least one second"));
    }
    Ok(seconds as i64)
}

#[derive(Subcommand)]
enum ServiceCommand {
    /// Create a live service; its secrets are shown once.
    Create {
        #[arg(long)]
        id: Option<String>,
        /// Verifier for `scheme: external` provisioning.
        #[arg(long)]
        verifier_url: Option<String>,
        /// The admin secret to take, 8 to 256 printable characters [default: generated].
        #[arg(long, env = "KEP_LIVE_ADMIN_SECRET", hide_env_values = true)]
        admin_secret: Option<String>,
        /// The service secret to take [default: generated].
        #[arg(long, env = "KEP_LIVE_SERVICE_SECRET", hide_env_values = true)]
        service_secret: Option<String>,
    },
    List,
    /// One service and its external verifier.
    Show {
        id: String,
    },
    /// New admin and service secrets.
    Rotate {
        id: String,
    },
    /// Set (or, without URL, remove) the external verifier.
    Verifier {
        id: String,
        url: Option<String>,
    },
}

#[derive(clap::Subcommand)]
enum WebhookCommand {
    /// Post the service's room events to URL (or keep them, with --off); shows the signing
    /// secret.
    Set {
        service: String,
        url: String,
        /// Keep the URL but send nothing.
        #[arg(long)]
        off: bool,
    },
    /// The webhook, without its secret (and why kep turned it off, if it did).
    Show { service: String },
    /// The service's events, newest first, with their attempts and last error.
    Deliveries {
        service: String,
        /// How many (1 to 1000) [server default: 100].
        #[arg(long)]
        limit: Option<i64>,
    },
    /// A new signing secret, shown once.
    RotateSecret { service: String },
}

fn parse_stream_target(s: &str) -> Result<(String, i64), String> {
    let (p, sid) = s.rsplit_once(':').ok_or("expected PARTICIPANT:STREAM")?;
    Ok((
        p.to_owned(),
        sid.parse()
            .map_err(|_| format!("{sid:?} is not a stream id"))?,
    ))
}

/// What `kep live provision` keeps for the room commands.
#[derive(Serialize, Deserialize)]
struct SavedToken {
    service_id: String,
    #[serde(flatten)]
    result: ProvisionResult,
}

fn saved_token_path(args: &LiveArgs) -> PathBuf {
    args.common.data_dir.join("cli").join("live-token.json")
}

impl LiveArgs {
    fn live_url(&self) -> String {
        self.live_url
            .clone()
            .unwrap_or_else(|| listener_url(&self.common.data_dir, "live", 8801))
    }

    /// A Room API client: `KEP_LIVE_TOKEN`, else the token of the last `kep live provision`.
    fn room_client(&self) -> anyhow::Result<LiveClient> {
        if let Ok(token) = std::env::var("KEP_LIVE_TOKEN")
            && !token.is_empty()
        {
            return Ok(LiveClient::new(&self.live_url()).with_token(token));
        }
        let path = saved_token_path(self);
        let saved: SavedToken =
            serde_json::from_slice(&std::fs::read(&path).with_context(|| {
                format!(
                    "no KEP_LIVE_TOKEN and no {}: run `kep live provision`",
                    path.display()
                )
            })?)?;
        let base = self.live_url.clone().unwrap_or(saved.result.api);
        Ok(LiveClient::new(&base).with_token(saved.result.token))
    }
}

pub async fn run(args: LiveArgs) -> anyhow::Result<()> {
    match &args.command {
        LiveCommand::Service(cmd) => {
            let admin = args.common.admin()?;
            match cmd {
                ServiceCommand::Create {
                    id,
                    verifier_url,
                    admin_secret,
                    service_secret,
                } => {
                    let req = CreateServiceRequest {
                        service_id: id.clone(),
                        external_verifier_url: verifier_url.clone(),
                        admin_secret: admin_secret.clone(),
                        service_secret: service_secret.clone(),
                    };
                    print_json(&admin.create_live_service(&req).await?)
                }
                ServiceCommand::List => print_json(&admin.list_live_services().await?),
                ServiceCommand::Show { id } => print_json(&admin.live_service(id).await?),
                ServiceCommand::Rotate { id } => print_json(&admin.rotate_live_secrets(id).await?),
                ServiceCommand::Verifier { id, url } => {
                    print_json(&admin.set_live_verifier(id, url.clone()).await?)
                }
            }
        }
        LiveCommand::Webhook(cmd) => {
            let admin = args.common.admin()?;
            match cmd {
                WebhookCommand::Set { service, url, off } => {
                    print_json(&admin.set_live_webhook(service, url, !off).await?)
                }
                WebhookCommand::Show { service } => print_json(&admin.live_webhook(service).await?),
                WebhookCommand::Deliveries { service, limit } => {
                    print_json(&admin.live_webhook_deliveries(service, *limit).await?)
                }
                WebhookCommand::RotateSecret { service } => {
                    print_json(&admin.rotate_live_webhook_secret(service).await?)
                }
            }
        }
        LiveCommand::Provision {
            service_id,
            admin_secret,
        } => {
            let result = LiveClient::new(&args.live_url())
                .provision(service_id, admin_secret)
                .await?;
            let path = saved_token_path(&args);
            kep_core::private::dir(path.parent().expect("has a parent"))?;
            let saved = SavedToken {
                service_id: service_id.clone(),
                result,
            };
            kep_core::private::write(&path, &serde_json::to_vec_pretty(&saved)?)?;
            eprintln!("token saved to {}", path.display());
            print_json(&saved.result)
        }
        LiveCommand::Rooms => print_json(&args.room_client()?.list_rooms().await?),
        LiveCommand::Participants { room } => {
            print_json(&args.room_client()?.list_participants(room).await?)
        }
        LiveCommand::Kick { room, participants } => {
            // Room.KickParticipant answers `{}`: what was done is said instead.
            args.room_client()?.kick(room, participants).await?;
            print_json(&serde_json::json!({ "roomId": room, "kicked": participants }))
        }
        LiveCommand::Inactivate { room, targets } => {
            args.room_client()?.inactivate(room, targets).await?;
            let inactivated: Vec<_> = targets
                .iter()
                .map(|(p, s)| serde_json::json!({ "participantId": p, "streamId": s }))
                .collect();
            print_json(&serde_json::json!({ "roomId": room, "inactivated": inactivated }))
        }
        LiveCommand::Destroy { room } => print_json(&args.room_client()?.destroy_room(room).await?),
        LiveCommand::Join {
            room,
            service_id,
            service_secret,
            participant_id,
            token,
            publish,
        } => {
            let base = args.live_url();
            let p = match (token, service_id, service_secret, room) {
                (Some(token), ..) => Participant::join_with_token(&base, token).await?,
                (None, Some(id), Some(secret), Some(room)) => {
                    Participant::join(&base, id, secret, room, participant_id.as_deref()).await?
                }
                _ => anyhow::bail!("a room with --service-id and --service-secret, or --token"),
            };
            join(p, *publish).await
        }
        LiveCommand::Token {
            room,
            participant,
            service,
            no_publish,
            no_subscribe,
            ttl,
        } => {
            let exp = jiff::Timestamp::now().as_second() + ttl;
            let claims = JoinClaims {
                iss: service.service_id.clone(),
                room: room.clone(),
                sub: participant.clone(),
                exp,
                publish: no_publish.then_some(false),
                subscribe: no_subscribe.then_some(false),
            };
            let token = join_token(&service.service_id, &service.service_secret, &claims);
            print_json(&serde_json::json!({ "token": token, "exp": exp }))
        }
    }
}

/// A participant in the terminal: prints what arrives until the server closes the socket;
/// Ctrl-C leaves the room.
async fn join(mut p: Participant, publish: bool) -> anyhow::Result<()> {
    super::say(serde_json::to_string(&p.joined)?)?;
    if publish {
        p.send(&ClientMessage::Publish).await?;
    }
    loop {
        tokio::select! {
            msg = p.next() => match msg? {
                Ok(m) => super::say(serde_json::to_string(&m)?)?,
                Err(closed) => {
                    super::say(serde_json::json!({ "closed": closed.code, "reason": closed.reason }))?;
                    return Ok(());
                }
            },
            _ = tokio::signal::ctrl_c() => {
                p.send(&ClientMessage::Leave).await?;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(subcommand)]
        live: super::LiveCommand,
    }

    #[test]
    fn a_secret_may_start_with_a_hyphen() {
        // Secrets are URL-safe base64, which may begin with '-'.
        let cli = Cli::try_parse_from([
            "kep",
            "provision",
            "--service-id",
            "s",
            "--admin-secret",
            "-QR_0Ot",
        ])
        .unwrap();
        assert!(
            matches!(cli.live, super::LiveCommand::Provision { ref admin_secret, .. } if admin_secret == "-QR_0Ot")
        );
    }
}
