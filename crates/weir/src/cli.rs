//! The `weir` command line: `run`, `check`, `version`.

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

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    match cli.command {
        Command::Version => {
            println!("weir {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Command::Bench(args) => match crate::bench_cmd::run(*args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("weir bench: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Check { config } => match runtime::load_file(&config, &Default::default()) {
            Ok(cfg) => {
                println!("{}: ok ({})", config.display(), summary(&cfg));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("weir: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Run { config } => {
            let loaded = match &config {
                Some(path) => runtime::load_file(path, &std::sync::Arc::new(Registry::default())),
                None => runtime::load_str(config::DEFAULT_CONFIG, std::path::Path::new("."), |v| {
                    std::env::var(v).ok()
                }),
            };
            match loaded {
                Ok(cfg) => run(cfg, config),
                Err(e) => {
                    eprintln!("weir: {e}");
                    ExitCode::FAILURE
                }
            }
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

fn run(cfg: RuntimeConfig, path: Option<std::path::PathBuf>) -> ExitCode {
    let embedded = path.is_none();
    let workers = cfg.workers;
    let handle = match server::start(cfg) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("weir: {e}");
            return ExitCode::FAILURE;
        }
    };
    let urls: Vec<String> = handle
        .local_addrs()
        .iter()
        .map(|a| format!("http://{a}/"))
        .collect();
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
    wait_for_signals(handle, path);
    ExitCode::SUCCESS
}

/// Re-reads and compiles the config (the file, or the built-in one) against the running server's
/// registry and swaps it in. On any error the running config stays, and the error is logged.
fn reload(handle: &server::ServerHandle, path: Option<&std::path::Path>) {
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
    match compiled
        .map_err(|e| e.to_string())
        .and_then(|cfg| handle.reload(cfg).map_err(|e| e.to_string()))
    {
        Ok(()) => tracing::info!(config = %from, "reloaded"),
        Err(e) => {
            tracing::error!(config = %from, error = %e, "reload failed, the running config stays")
        }
    }
}

/// Blocks until SIGINT/SIGTERM, shuts down gracefully; a second signal exits at once. SIGHUP
/// reloads the config, as nginx and HAProxy users expect.
fn wait_for_signals(handle: server::ServerHandle, path: Option<std::path::PathBuf>) {
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
        let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::hangup()),
        ) else {
            eprintln!("weir: cannot install signal handlers");
            return;
        };
        loop {
            tokio::select! {
                _ = term.recv() => break,
                _ = int.recv() => break,
                _ = hup.recv() => reload(&handle, path.as_deref()),
            }
        }
        tracing::info!(
            "shutting down: finishing in-flight requests (a second signal stops at once)"
        );
        handle.shutdown();
        let join = tokio::task::spawn_blocking(move || handle.join());
        tokio::select! {
            _ = join => tracing::info!("stopped"),
            _ = term.recv() => std::process::exit(130),
            _ = int.recv() => std::process::exit(130),
        }
    });
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("WEIR_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
