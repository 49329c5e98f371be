//! The `weir` command line: `run`, `check`, `bench`, `version`; signals (SIGHUP reloads,
//! SIGUSR1 reopens access logs, SIGTERM/SIGINT stop) and systemd notifications.

mod handover;
mod logging;
mod notify;
mod upgrade;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config;
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
            let loaded = match &config {
                Some(path) => runtime::load_file(path, &std::sync::Arc::new(Registry::default())),
                None => runtime::load_str(config::DEFAULT_CONFIG, std::path::Path::new("."), |v| {
                    std::env::var(v).ok()
                }),
            };
            let cfg = match loaded {
                Ok(cfg) => cfg,
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
            run(cfg, config, logs, upgrade_socket)
        }
    }
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
    path: Option<std::path::PathBuf>,
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
    wait_for_signals(handle, path, logs, (drain_rx, upgrade_socket), ready);
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

/// Re-reads and compiles the config (the file, or the built-in one) against the running server's
/// registry and swaps it in. On any error the running config stays, and the error is logged.
fn reload(
    handle: &server::ServerHandle,
    path: Option<&std::path::Path>,
    logs: &logging::Logging,
) -> Result<(), String> {
    notify::notify("RELOADING=1");
    let registry = handle.registry();
    let compiled = match path {
        Some(p) => runtime::load_file(p, &registry),
        None => runtime::compile_str(
            config::DEFAULT_CONFIG,
            std::path::Path::new("."),
            |v| std::env::var(v).ok(),
            &registry,
        ),
    };
    let from = path.map_or("the built-in config".to_string(), |p| {
        p.display().to_string()
    });
    let result = compiled.map_err(|e| e.to_string()).and_then(|cfg| {
        let level = cfg.log.level.clone();
        handle.reload(cfg).map_err(|e| e.to_string())?;
        logs.apply(&level);
        Ok(())
    });
    match &result {
        Ok(()) => tracing::info!(config = %from, "reloaded"),
        Err(e) => {
            tracing::error!(config = %from, error = %e, "reload failed, the running config stays")
        }
    }
    notify::notify("READY=1");
    result
}

/// Writes the memory caches to their disk tiers and unlocks them, for the next process (the
/// new binary of an upgrade, or the next start).
fn hand_over(registry: &runtime::Registry) {
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

/// Blocks until SIGINT/SIGTERM, shuts down gracefully; a second signal exits at once. SIGHUP
/// reloads the config, as nginx and HAProxy users expect.
fn wait_for_signals(
    handle: server::ServerHandle,
    path: Option<std::path::PathBuf>,
    logs: logging::Logging,
    (mut taken_over, socket): (tokio::sync::mpsc::UnboundedReceiver<()>, Option<PathBuf>),
    ready: impl FnOnce(&server::ServerHandle),
) {
    // Where this binary was started from, read now: once an install replaces the file,
    // /proc/self/exe names the deleted old one.
    let exe = std::env::current_exe().ok();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("weir: cannot wait for signals: {e}");
            handle.join();
            return;
        }
    };
    rt.block_on(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut int), Ok(mut hup), Ok(mut usr1), Ok(mut usr2)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::hangup()),
            signal(SignalKind::user_defined1()),
            signal(SignalKind::user_defined2()),
        ) else {
            eprintln!("weir: cannot install signal handlers");
            return;
        };
        // `POST /reload` on the admin API asks here, like SIGHUP.
        let (tx, mut asked) = tokio::sync::mpsc::unbounded_channel();
        *handle
            .registry()
            .reloader
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(tx);
        // Ready only now: a SIGHUP or a `POST /reload` sent as soon as weir says it serves must
        // find its handler (the reloader was once registered after, and a fast client's reload
        // was answered "not started by `weir run`").
        ready(&handle);
        let drain = loop {
            tokio::select! {
                _ = term.recv() => break false,
                _ = int.recv() => break false,
                Some(()) = taken_over.recv() => break true,
                _ = hup.recv() => {
                    let _ = reload(&handle, path.as_deref(), &logs);
                }
                Some(answer) = asked.recv() => {
                    let _ = answer.send(reload(&handle, path.as_deref(), &logs));
                }
                _ = usr1.recv() => {
                    tracing::info!("reopening access logs");
                    handle.registry().sinks.reopen();
                }
                _ = usr2.recv() => {
                    let started = exe
                        .as_deref()
                        .ok_or_else(|| "cannot tell which binary this is".to_string())
                        .and_then(upgrade::spawn_new);
                    if let Err(e) = started {
                        tracing::error!(error = %e, "binary upgrade not started");
                    }
                }
            }
        };
        if drain {
            // The new process is the service now: it tells systemd its own MAINPID.
            tracing::info!("draining: each idle connection answers one more request, then closes");
            handle.drain();
            hand_over(&handle.registry());
            if let Some(socket) = &socket {
                handover::write(&handle.registry(), socket);
            }
        } else {
            notify::notify("STOPPING=1");
            tracing::info!(
                "shutting down: finishing in-flight requests (a second signal stops at once)"
            );
            handle.shutdown();
        }
        let join = tokio::task::spawn_blocking(move || {
            let registry = handle.registry();
            handle.join();
            hand_over(&registry);
        });
        tokio::select! {
            _ = join => tracing::info!("stopped"),
            _ = term.recv() => std::process::exit(130),
            _ = int.recv() => std::process::exit(130),
        }
    });
}
