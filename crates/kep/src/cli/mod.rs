//! The CLI: subcommands that speak to a running `kep serve` through `kep-client`, and
//! `kep smsc`, an SMSC to try carriers with.

pub mod adapter;
pub mod apply;
pub mod events;
pub mod live;
pub mod msg;
pub mod probe;
pub mod serving;
pub mod smsc;
pub mod status;

use std::path::{Path, PathBuf};

/// Where the CLI finds the server: the URLs `kep serve` wrote (`https` where a listener
/// speaks TLS), else the addresses an older kep wrote, else the defaults.
pub fn listener_url(data_dir: &Path, listener: &str, default_port: u16) -> String {
    let written = |file: &str| {
        std::fs::read(data_dir.join(file))
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v[listener].as_str().map(str::to_owned))
    };
    if let Some(url) = written("urls.json") {
        return url;
    }
    format!(
        "http://{}",
        written("addresses.json").unwrap_or_else(|| format!("127.0.0.1:{default_port}"))
    )
}

/// The CLI trusts the CA of `kep serve --tls-self-signed` in `data_dir`, when there is one,
/// beside the system's roots.
pub fn trust_data_dir_ca(data_dir: &Path) -> anyhow::Result<()> {
    let path = data_dir.join("tls").join("ca.pem");
    match std::fs::read_to_string(&path) {
        Ok(pem) => {
            kep_client::tls::trust(&pem).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => anyhow::bail!("{}: {e}", path.display()),
    }
}

/// The operator token: `KEP_ADMIN_TOKEN`, else `<data-dir>/admin-token`.
pub fn operator_token(data_dir: &Path) -> anyhow::Result<String> {
    if let Ok(t) = std::env::var("KEP_ADMIN_TOKEN")
        && !t.is_empty()
    {
        return Ok(t);
    }
    let path = data_dir.join("admin-token");
    let t = std::fs::read_to_string(&path).map_err(|e| {
        anyhow::anyhow!("no KEP_ADMIN_TOKEN and {} unreadable: {e}", path.display())
    })?;
    Ok(t.trim().to_owned())
}

pub fn print_json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    say(serde_json::to_string_pretty(value)?)
}

/// Writes `text` to stdout, as `print!` does but returning the error: a reader that went
/// away (`kep … | head`) ends the command quietly (main), where `print!` would panic.
pub fn emit(text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// [`emit`] of `line` and a newline.
pub fn say(line: impl std::fmt::Display) -> anyhow::Result<()> {
    emit(&format!("{line}\n"))
}

/// The CLI's one table look, for any command that prints one: no borders, every column two
/// spaces in, the first `text_columns` left-aligned and the rest (numbers) right-aligned, no
/// trailing blanks, and never ANSI styling (the crate is built without its terminal feature).
pub fn table<const N: usize>(
    header: [&str; N],
    text_columns: usize,
    rows: impl IntoIterator<Item = [String; N]>,
) -> String {
    let mut t = comfy_table::Table::new();
    t.load_style(comfy_table::presets::NOTHING)
        .set_header(header)
        .add_rows(rows);
    for (i, column) in t.column_iter_mut().enumerate() {
        column.set_padding((2, 0));
        if i >= text_columns {
            column.set_cell_alignment(comfy_table::CellAlignment::Right);
        }
    }
    let mut out = t.trim_fmt();
    out.push('\n');
    out
}

/// Options every CLI command group shares.
#[derive(clap::Args, Clone)]
pub struct Common {
    /// The server's data dir, where its addresses and operator token are read: `kep`'s
    /// global `--data-dir`, set by [`WithCommon::at`].
    #[arg(skip)]
    pub data_dir: PathBuf,
    /// The admin listener, e.g. http://127.0.0.1:8800 [default: from addresses.json].
    #[arg(long, global = true, env = "KEP_ADMIN_URL")]
    pub admin_url: Option<String>,
}

/// A command group's arguments, which hold its [`Common`] options.
pub trait WithCommon: Sized {
    fn common(&mut self) -> &mut Common;

    /// These arguments, reading the server's files in `data_dir`.
    fn at(mut self, data_dir: PathBuf) -> Self {
        self.common().data_dir = data_dir;
        self
    }
}

macro_rules! with_common {
    ($($args:ty),*) => {$(
        impl WithCommon for $args {
            fn common(&mut self) -> &mut Common {
                &mut self.common
            }
        }
    )*};
}

with_common!(
    adapter::AdapterArgs,
    apply::ApplyArgs,
    events::EventsArgs,
    live::LiveArgs,
    msg::MsgArgs,
    probe::ProbeArgs,
    serving::ServingArgs,
    status::StatusArgs
);

impl Common {
    pub fn admin(&self) -> anyhow::Result<kep_client::AdminClient> {
        Ok(kep_client::AdminClient::new(
            self.admin_url(),
            operator_token(&self.data_dir)?,
        ))
    }

    /// The admin listener: `--admin-url`, else from the data dir's addresses.json.
    pub fn admin_url(&self) -> String {
        self.admin_url
            .clone()
            .unwrap_or_else(|| listener_url(&self.data_dir, "admin", 8800))
    }
}
