//! `kep msg …`

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use kep_api::messaging::{CreateClient, RcsSearch, XmsSearch};
use kep_client::messaging::MessagingClient;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Common, listener_url, print_json};

#[derive(Args)]
pub struct MsgArgs {
    #[command(flatten)]
    pub(super) common: Common,
    /// The messaging listener, e.g. http://127.0.0.1:8803 [default: from addresses.json].
    #[arg(long, global = true, env = "KEP_MESSAGING_URL")]
    messaging_url: Option<String>,
    #[command(subcommand)]
    command: MsgCommand,
}

#[derive(Subcommand)]
enum MsgCommand {
    /// Create an API client (operator token); its secret is shown once.
    Client {
        #[arg(long)]
        name: Option<String>,
        /// The client id to take, 1 to 64 letters and digits [default: generated].
        #[arg(long)]
        client_id: Option<String>,
        /// The client secret to take, 8 to 256 printable characters [default: generated].
        #[arg(long, env = "KEP_MSG_CLIENT_SECRET", hide_env_values = true)]
        client_secret: Option<String>,
    },
    /// What left for the carrier, across clients, newest first (operator token): one line
    /// per hand-over.
    Outbox {
        /// How many (1 to 1000).
        #[arg(long, default_value_t = 20)]
        limit: u32,
        /// The JSON the operator API answers, instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// The carriers messages leave through, in the order they are tried, and how each is
    /// doing on the node asked (operator token).
    Carriers {
        /// The JSON the operator API answers, instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Get an access token and keep it for the other commands.
    Token {
        #[arg(long, env = "KEP_MSG_CLIENT_ID")]
        client_id: String,
        #[arg(
            long,
            env = "KEP_MSG_CLIENT_SECRET",
            hide_env_values = true,
            allow_hyphen_values = true
        )]
        client_secret: String,
    },
    /// Send an XMS message (SM, LM, MM, ISM, ILM), from flags or a JSON file.
    SendXms {
        /// The whole body as a JSON file (flags then fill in what it lacks).
        #[arg(long)]
        json: Option<PathBuf>,
        #[arg(long = "type", default_value = "SM")]
        message_type: String,
        #[arg(long)]
        to: Option<String>,
        #[arg(long)]
        from: Option<String>,
        #[arg(long)]
        text: Option<String>,
        #[arg(long)]
        title: Option<String>,
        #[arg(long)]
        content_group_id: Option<String>,
        #[arg(long)]
        nat_cd: Option<String>,
        /// The customer key [default: generated].
        #[arg(long)]
        cid: Option<String>,
    },
    /// Send an RCS message from a JSON file (the document's RCS fields).
    SendRcs {
        #[arg(long)]
        json: PathBuf,
    },
    /// Upload an RCS image (JPEG or PNG, at most 1 MB).
    UploadRcs {
        file: PathBuf,
        #[arg(long, default_value = "image")]
        description: String,
    },
    /// Upload MMS images (at most 3 JPEGs, 200 KB together).
    UploadMms {
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Take the pending RCS results (up to 1000) and complete their group.
    Results {
        /// Keep polling until interrupted, one JSON line per answer.
        #[arg(long)]
        follow: bool,
    },
    /// Search messages of a day range (today by default).
    Search {
        #[arg(long)]
        rcs: bool,
        #[arg(long)]
        start_date: Option<String>,
        #[arg(long)]
        end_date: Option<String>,
        #[arg(long)]
        size: Option<i64>,
        #[arg(long)]
        last_uid: Option<String>,
    },
    /// One message in detail.
    Show {
        uid: String,
        #[arg(long)]
        rcs: bool,
    },
}

/// What `kep msg token` keeps.
#[derive(Serialize, Deserialize)]
struct SavedToken {
    access_token: String,
}

impl MsgArgs {
    fn url(&self) -> String {
        self.messaging_url
            .clone()
            .unwrap_or_else(|| listener_url(&self.common.data_dir, "messaging", 8803))
    }

    fn token_path(&self) -> PathBuf {
        self.common.data_dir.join("cli").join("msg-token.json")
    }

    /// `KEP_MSG_TOKEN`, else the token of the last `kep msg token`.
    fn client(&self) -> anyhow::Result<MessagingClient> {
        if let Ok(t) = std::env::var("KEP_MSG_TOKEN")
            && !t.is_empty()
        {
            return Ok(MessagingClient::new(&self.url(), t));
        }
        let path = self.token_path();
        let saved: SavedToken =
            serde_json::from_slice(&std::fs::read(&path).with_context(|| {
                format!(
                    "no KEP_MSG_TOKEN and no {}: run `kep msg token`",
                    path.display()
                )
            })?)?;
        Ok(MessagingClient::new(&self.url(), saved.access_token))
    }
}

fn read_json(path: &PathBuf) -> anyhow::Result<Value> {
    serde_json::from_slice(
        &std::fs::read(path).with_context(|| format!("reading {}", path.display()))?,
    )
    .with_context(|| format!("{} is not JSON", path.display()))
}

pub async fn run(args: MsgArgs) -> anyhow::Result<()> {
    match &args.command {
        MsgCommand::Client {
            name,
            client_id,
            client_secret,
        } => print_json(
            &args
                .common
                .admin()?
                .create_messaging_client(&CreateClient {
                    name: name.clone(),
                    client_id: client_id.clone(),
                    client_secret: client_secret.clone(),
                })
                .await?,
        ),
        MsgCommand::Outbox { limit, json } => {
            let entries = args.common.admin()?.messaging_outbox(*limit).await?;
            if *json {
                return print_json(&entries);
            }
            let rows = entries
                .into_iter()
                .map(|e| [e.at, e.uid, e.route, e.phone_number, e.outcome]);
            super::emit(&super::table(
                ["at", "uid", "route", "to", "outcome"],
                5,
                rows,
            ))
        }
        MsgCommand::Carriers { json } => {
            let carriers = args.common.admin()?.messaging_carriers().await?;
            if *json {
                return print_json(&carriers);
            }
            let rows = carriers.into_iter().map(|c| {
                [
                    c.name,
                    c.kind,
                    c.state,
                    c.last_error.unwrap_or_default(),
                    c.submitted.to_string(),
                    c.acknowledged.to_string(),
                    c.window_in_use.to_string(),
                    c.reconnects.to_string(),
                ]
            });
            let head = [
                "name",
                "kind",
                "state",
                "last error",
                "submitted",
                "acknowledged",
                "window",
                "reconnects",
            ];
            super::emit(&super::table(head, 4, rows))?;
            Ok(())
        }
        MsgCommand::Token {
            client_id,
            client_secret,
        } => {
            let answer = MessagingClient::token(&args.url(), client_id, client_secret).await?;
            let path = args.token_path();
            kep_core::private::dir(path.parent().expect("has a parent"))?;
            let saved = SavedToken {
                access_token: answer.access_token.clone(),
            };
            kep_core::private::write(&path, &serde_json::to_vec(&saved)?)?;
            eprintln!("token saved to {}", path.display());
            print_json(&answer)
        }
        MsgCommand::SendXms {
            json,
            message_type,
            to,
            from,
            text,
            title,
            content_group_id,
            nat_cd,
            cid,
        } => {
            let mut body = match json {
                Some(p) => read_json(p)?,
                None => json!({}),
            };
            let generated = format!("cli-{}", kep_core::secret::random_token(6));
            let fields = [
                ("message_type", Some(message_type.clone())),
                ("phone_number", to.clone()),
                ("sender_no", from.clone()),
                ("message", text.clone()),
                ("title", title.clone()),
                ("content_group_id", content_group_id.clone()),
                ("nat_cd", nat_cd.clone()),
                ("cid", Some(cid.clone().unwrap_or(generated))),
            ];
            for (key, value) in fields {
                if let Some(v) = value
                    && body.get(key).is_none()
                {
                    body[key] = json!(v);
                }
            }
            print_json(&args.client()?.send_xms(&body).await?)
        }
        MsgCommand::SendRcs { json } => {
            print_json(&args.client()?.send_rcs(&read_json(json)?).await?)
        }
        MsgCommand::UploadRcs { file, description } => {
            print_json(&args.client()?.upload_rcs(file, description).await?)
        }
        MsgCommand::UploadMms { files } => print_json(&args.client()?.upload_mms(files).await?),
        MsgCommand::Results { follow } => {
            let client = args.client()?;
            loop {
                let answer = client.rcs_results().await?;
                if let Some(group) = &answer.report_group_id {
                    client.complete(group).await?;
                    eprintln!("completed {group}");
                }
                if !follow {
                    return print_json(&answer);
                }
                // One JSON line per group while following.
                super::say(serde_json::to_string(&answer)?)?;
                if answer.report_group_id.is_some() {
                    continue;
                }
                tokio::select! {
                    _ = tokio::time::sleep(std::time::Duration::from_secs(2)) => {}
                    _ = tokio::signal::ctrl_c() => return Ok(()),
                }
            }
        }
        MsgCommand::Search {
            rcs,
            start_date,
            end_date,
            size,
            last_uid,
        } => {
            let client = args.client()?;
            if *rcs {
                let q = RcsSearch {
                    start_date: start_date.clone(),
                    end_date: end_date.clone(),
                    size: *size,
                    last_uid: last_uid.clone(),
                    ..RcsSearch::default()
                };
                print_json(&client.search_rcs(&q).await?)
            } else {
                let q = XmsSearch {
                    start_date: start_date.clone(),
                    end_date: end_date.clone(),
                    size: *size,
                    last_uid: last_uid.clone(),
                    ..XmsSearch::default()
                };
                print_json(&client.search_xms(&q).await?)
            }
        }
        MsgCommand::Show { uid, rcs } => print_json(&args.client()?.detail(uid, *rcs).await?),
    }
}
