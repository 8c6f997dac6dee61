//! `kep`: `kep serve` runs the platform; the other subcommands are its CLI.

mod app;
mod cli;
mod declaration;
mod init;
mod model_server;
mod serve;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use cli::WithCommon as _;

/// Small per-request allocations (headers, bodies, futures) are a measurable share of a
/// proxied call; mimalloc serves them faster than glibc's allocator (BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "kep", version, about = "The kep platform: one server, its CLI")]
struct Cli {
    /// Where `kep serve` keeps its databases and files, and where the CLI reads the
    /// server's addresses and operator token; before or after the subcommand
    /// [default: ./kep-data].
    #[arg(long, global = true, env = "KEP_DATA_DIR")]
    data_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run every service (or those named by --only) until SIGINT or SIGTERM.
    Serve(serve::ServeArgs),
    /// The live-streaming admin API: provision, rooms, participants.
    Live(cli::live::LiveArgs),
    /// The account adapter API: org login types, DRM releases, a reference agent.
    Adapter(cli::adapter::AdapterArgs),
    /// The text-message sending API: tokens, sends, uploads, results, search.
    Msg(cli::msg::MsgArgs),
    /// Create or change what a TOML file declares (live services, org login types,
    /// messaging clients): `kep apply -f kep.toml`.
    Apply(cli::apply::ApplyArgs),
    /// The model-serving management API: images, models, endpoints, deployments, traffic.
    Serving(cli::serving::ServingArgs),
    /// The platform at a glance: rooms, DRM sessions, the message queue, deployments, the
    /// process (from the admin listener's /metrics and operator lists).
    Status(cli::status::StatusArgs),
    /// The platform's activity as it happens (every service's state changes), one JSON
    /// line per event.
    Events(cli::events::EventsArgs),
    /// Whether the server is ready (`kep probe ready`: exit 0 when it is), for a container's
    /// health check.
    Probe(cli::probe::ProbeArgs),
    /// A small SMSC on 127.0.0.1 to try SMPP carriers without a carrier's: it acknowledges
    /// every submit_sm, prints it as a JSON line and sends its delivery receipt.
    Smsc(cli::smsc::SmscArgs),
    /// Print the completion script of a shell: `kep completions bash > /etc/bash_completion.d/kep`.
    Completions { shell: clap_complete::Shell },
    /// Serve one model file over the TensorFlow Serving REST API or KServe v2, as a model
    /// deployment's instance does (the runtime starts it with PORT set).
    ModelServer(model_server::ModelServerArgs),
}

/// An error ends the process with one line, its causes joined, and exit code 1: never a
/// Debug dump or a backtrace, whatever `RUST_BACKTRACE` says.
fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        // What reads the output went away (`kep … | head`): it has what it wanted.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kep: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn run(cli: Cli) -> anyhow::Result<()> {
    if matches!(cli.command, Command::Serve(_)) {
        // As PostgreSQL's postmaster does: what the server and its children make (SQLite's
        // files, a model repository, a clone) is its user's alone, whatever umask it was
        // started with. Before the runtime's threads, so none makes a file first.
        nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    }
    let runtime = tokio::runtime::Runtime::new()?;
    // `kep serve` takes it among its settings (flag over variable over file); the CLI, as
    // given or its default.
    let data_dir = || {
        cli.data_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from("./kep-data"))
    };
    if !matches!(
        cli.command,
        Command::Serve(_)
            | Command::Smsc(_)
            | Command::Completions { .. }
            | Command::ModelServer(_)
    ) {
        cli::trust_data_dir_ca(&data_dir())?;
    }
    match cli.command {
        Command::Serve(args) => runtime.block_on(serve::run(args, cli.data_dir)),
        Command::Apply(args) => runtime.block_on(cli::apply::run(args.at(data_dir()))),
        Command::Live(args) => runtime.block_on(cli::live::run(args.at(data_dir()))),
        Command::Adapter(args) => runtime.block_on(cli::adapter::run(args.at(data_dir()))),
        Command::Msg(args) => runtime.block_on(cli::msg::run(args.at(data_dir()))),
        Command::Serving(args) => runtime.block_on(cli::serving::run(args.at(data_dir()))),
        Command::Events(args) => runtime.block_on(cli::events::run(args.at(data_dir()))),
        Command::Status(args) => runtime.block_on(cli::status::run(args.at(data_dir()))),
        Command::Probe(args) => runtime.block_on(cli::probe::run(args.at(data_dir()))),
        Command::Smsc(args) => runtime.block_on(cli::smsc::run(args)),
        Command::Completions { shell } => {
            use clap::CommandFactory as _;
            // Written whole, so that a closed pipe is an error, not a panic.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "kep", &mut script);
            std::io::Write::write_all(&mut std::io::stdout(), &script)?;
            Ok(())
        }
        Command::ModelServer(args) => runtime.block_on(model_server::run(args)),
    }
}
