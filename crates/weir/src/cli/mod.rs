//! The `weir` command line: `run`, `check`, `bench`, `version`; signals (SIGHUP reloads,
//! SIGUSR1 reopens access logs, SIGTERM/SIGINT stop) and systemd notifications.

mod handover;
mod logging;
mod notify;
mod signals;
mod upgrade;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config;
use crate::config::assemble::Fragment;
use crate::runtime::{self, Registry, RuntimeConfig};
use crate::server;

#[derive(Debug, Parser)]
#[command(
    name = "weir",
    version,
    about = "HTTP accelerator: reverse proxy, cache and gateway in one binary"
)]
struct Cli {
    /// Error log level or filter (`error`, `warn`, `info`, `debug`, `trace`, or
    /// `info,weir::proxy=debug`). Overrides WEIR_LOG and the config's `log.level`.
    #[arg(long, global = true)]
    log_level: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve. Without -c, serves a built-in welcome config on 127.0.0.1:8080.
    Run {
        /// Config file (YAML).
        #[arg(short, long)]
        config: Option<PathBuf>,
        /// Binary upgrade: take the listening sockets of the weir serving this unix socket (if
        /// one does; it then drains and exits), and serve them here to the next one.
        #[arg(long, value_name = "PATH")]
        upgrade_socket: Option<PathBuf>,
    },
    /// Validate a config file and exit: 0 if valid, 1 with the error otherwise.
    Check {
        /// Config file (YAML).
        #[arg(short, long)]
        config: PathBuf,
    },
    /// Load-test an HTTP server (wrk/hey compatible output, sweeps, charts).
    Bench(Box<crate::bench_cmd::BenchArgs>),
    /// Print the version.
    Version,
}

/// What `weir check` warns about without failing.
fn warnings(cfg: &runtime::RuntimeConfig) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(a) = &cfg.admin {
        if !a.address.ip().is_loopback() && !a.has_token() {
            out.push(format!(
                "admin.address {} is not on loopback and the admin API has no token: anyone who reaches it can purge and reload (set admin.token_file or admin.token_env)",
                a.address
            ));
        }
    }
    out
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(level) = &cli.log_level {
        if let Err(e) = config::log_filter(level) {
            eprintln!("weir: --log-level: {e}");
            return ExitCode::FAILURE;
        }
    }
    let flag = cli.log_level.as_deref();
    match cli.command {
        Command::Version => {
            println!("weir {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Command::Bench(args) => {
            let _ = logging::Logging::init(flag, "info", false);
            match crate::bench_cmd::run(*args) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("weir bench: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Check { config } => match runtime::load_file(&config, &Default::default()) {
            Ok(cfg) => {
                for w in warnings(&cfg) {
                    eprintln!("weir: {}: warning: {w}", config.display());
                }
                println!("{}: ok ({})", config.display(), summary(&cfg));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("weir: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Run {
            config,
            upgrade_socket,
        } => {
            let loaded = crate::reload::read(config.as_deref(), &[]).and_then(|source| {
                let texts = (source.digest, source.dirs.clone());
                runtime::compile(source, &std::sync::Arc::new(Registry::default()))
                    .map(|cfg| (cfg, texts))
                    .map_err(|mut e| {
                        if e.file.is_none() {
                            e.file = config.as_ref().map(|p| p.display().to_string());
                        }
                        e
                    })
            });
            let (cfg, texts) = match loaded {
                Ok(loaded) => loaded,
                Err(e) => {
                    eprintln!("weir: {e}");
                    return ExitCode::FAILURE;
                }
            };
            // A node of a cluster starts on its file merged with etcd's fragments.
            let (cfg, texts, fragments) = match with_etcd(cfg, texts, config.as_deref()) {
                Ok(loaded) => loaded,
                Err(e) => {
                    eprintln!("weir: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let logs = match logging::Logging::init(flag, &cfg.log.level, cfg.log.json) {
                Ok(l) => l,
                Err(e) => {
                    eprintln!("weir: {e}");
                    return ExitCode::FAILURE;
                }
            };
            run(cfg, (config, texts, fragments), logs, upgrade_socket)
        }
    }
}

/// The digest and directories of the texts a config was built from.
type Texts = (u64, Vec<PathBuf>);

/// For a node with etcd endpoints: reads etcd's config fragments (waiting at most 3 s: an
/// unreachable etcd is logged and the node starts on its file) and compiles the file merged
/// with them. Any other config is returned as it is.
fn with_etcd(
    cfg: RuntimeConfig,
    texts: Texts,
    path: Option<&std::path::Path>,
) -> Result<(RuntimeConfig, Texts, Vec<Fragment>), String> {
    let Some(cluster) = cfg.cluster.clone().filter(|c| !c.etcd.is_empty()) else {
        return Ok((cfg, texts, Vec::new()));
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a runtime for etcd: {e}"))?;
    let read = rt.block_on(crate::cluster::etcd::read_fragments(
        &cluster,
        std::time::Duration::from_secs(3),
    ));
    let fragments = match read {
        Ok(f) => f,
        Err(e) => {
            eprintln!(
                "weir: etcd {:?}: {e}; starting on the file alone",
                cluster.etcd
            );
            return Ok((cfg, texts, Vec::new()));
        }
    };
    if fragments.is_empty() {
        return Ok((cfg, texts, fragments));
    }
    let source = crate::reload::read(path, &fragments).map_err(|e| e.to_string())?;
    let texts = (source.digest, source.dirs.clone());
    let cfg = runtime::compile(source, &cfg.registry).map_err(|e| e.to_string())?;
    Ok((cfg, texts, fragments))
}

fn summary(cfg: &RuntimeConfig) -> String {
    let listeners: Vec<String> = cfg
        .listeners
        .iter()
        .map(|l| l.address.to_string())
        .collect();
    format!(
        "{} worker(s), listeners: {}",
        cfg.workers,
        listeners.join(", ")
    )
}

fn run(
    cfg: RuntimeConfig,
    (path, (digest, dirs), fragments): (Option<PathBuf>, Texts, Vec<Fragment>),
    logs: logging::Logging,
    upgrade_socket: Option<PathBuf>,
) -> ExitCode {
    let embedded = path.is_none();
    let workers = cfg.workers;
    let taken = match upgrade_socket
        .as_deref()
        .map(upgrade::take_over)
        .transpose()
    {
        Ok(t) => t.flatten(),
        Err(e) => {
            eprintln!("weir: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (inherited, taken) = match taken {
        Some(mut t) => (std::mem::take(&mut t.sockets), Some(t)),
        None => (Vec::new(), None),
    };
    let upgraded = !inherited.is_empty();
    let handle = match server::start_with(cfg, inherited) {
        Ok(h) => h,
        Err(e) => {
            // The file first, as config errors have it: `weir: FILE: line N: key ...`.
            let file = path.as_ref().map_or_else(
                || "<built-in config>".to_string(),
                |p| p.display().to_string(),
            );
            eprintln!("weir: {file}: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(socket) = &upgrade_socket {
        if upgraded {
            handover::read_in_background(handle.registry(), socket.clone());
        } else {
            handover::forget_stale(&handle.registry(), socket);
        }
    }
    let (drain_tx, drain_rx) = tokio::sync::mpsc::unbounded_channel();
    if let Some(socket) = upgrade_socket.clone() {
        let tx = drain_tx.clone();
        if let Err(e) = upgrade::serve(socket, handle.handoff_sockets(), move || {
            let _ = tx.send(());
        }) {
            eprintln!("weir: {e}");
            return ExitCode::FAILURE;
        }
    }
    let ready = move |handle: &server::ServerHandle| {
        // READY (with MAINPID) before the old process is told to go: under systemd the
        // service must have its new main process before the old one exits.
        notify::notify("READY=1");
        if let Some(t) = taken {
            t.finish();
        }
        if upgraded {
            tracing::info!("took over the listening sockets of the previous weir");
        }
        banner(handle, embedded, workers);
    };
    let reloader = crate::reload::Reloader::new(
        path,
        (digest, dirs),
        std::sync::Arc::new(std::sync::Mutex::new(fragments)),
        Box::new(move |level: &str| logs.apply(level)),
    );
    signals::wait_for_signals(handle, reloader, (drain_rx, upgrade_socket), ready);
    ExitCode::SUCCESS
}

/// The start-up lines: every listener and the admin API.
fn banner(handle: &server::ServerHandle, embedded: bool, workers: usize) {
    let urls = handle.local_urls();
    let admin = handle
        .admin_addr()
        .map(|a| format!("; admin API on http://{a}/"))
        .unwrap_or_default();
    if embedded {
        eprintln!("weir: no config file given (-c FILE), serving the built-in config");
        eprintln!(
            "weir: {} — try /hello, /json, /echo; Ctrl-C stops",
            urls.join(" ")
        );
    } else {
        eprintln!(
            "weir: serving {} with {workers} worker(s){admin}; Ctrl-C stops, SIGHUP reloads",
            urls.join(" ")
        );
    }
}

/// Writes the memory caches to their disk tiers and unlocks them, for the next process (the
/// new binary of an upgrade, or the next start).
pub(super) fn hand_over(registry: &runtime::Registry) {
    let started = std::time::Instant::now();
    let n = registry.hand_over_disks();
    if n > 0 {
        tracing::info!(
            objects = n,
            ms = started.elapsed().as_millis() as u64,
            "memory cache written to disk"
        );
    }
}
