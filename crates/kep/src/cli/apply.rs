//! `kep apply -f FILE [--prune]`: the declared resources of FILE, applied through the
//! operator API (`POST /admin/v1/apply`); one line per object, and a non-zero exit with
//! nothing applied when the server refuses the file.

use std::path::PathBuf;

use kep_api::declared::ApplyRequest;

use super::Common;

#[derive(clap::Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    pub(super) common: Common,
    /// The TOML file of declared resources.
    #[arg(short = 'f', long = "file")]
    file: PathBuf,
    /// Also delete what FILE does not name, of the kinds it names.
    #[arg(long)]
    prune: bool,
}

pub async fn run(args: ApplyArgs) -> anyhow::Result<()> {
    let declaration = crate::declaration::read(&args.file)?;
    let answer = args
        .common
        .admin()?
        .apply(&ApplyRequest {
            declaration,
            prune: args.prune,
        })
        .await
        .map_err(|e| anyhow::anyhow!("{}: {}", args.file.display(), refusal(e)))?;
    super::emit(&crate::declaration::lines(&answer.objects))
}

/// What the server said of a refused file: its error's message, else the error.
fn refusal(e: kep_client::ClientError) -> String {
    if let kep_client::ClientError::Api { body, .. } = &e
        && let Ok(v) = serde_json::from_str::<serde_json::Value>(body)
        && let Some(message) = v["error"]["message"].as_str()
    {
        return format!("{message} (nothing applied)");
    }
    e.to_string()
}
