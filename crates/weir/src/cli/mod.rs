//! The `weir` command line: `run`, `check`, the control verbs (`reload`, `stop`, `upgrade`,
//! `status`), `bench`, `version`; signals (SIGHUP reloads, SIGUSR1 reopens access logs,
//! SIGUSR2 upgrades the binary, SIGTERM/SIGINT stop) and systemd notifications.

mod check;
mod control;
mod handover;
mod logging;
mod notify;
mod pidfile;
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
        /// Write the process id here (overrides the config's `pid_file`).
        #[arg(long, value_name = "PATH")]
        pid_file: Option<PathBuf>,
    },
    /// Validate a config and exit: 0 if valid (warnings on stderr), 1 with the error.
    Check(check::CheckArgs),
    /// Reload the running weir's config (its admin API, else SIGHUP through its pid file).
    Reload(control::Target),
    /// Stop the running weir: in-flight requests finish (`--fast`: at once).
    Stop {
        #[command(flatten)]
        target: control::Target,
        /// Stop at once instead of finishing in-flight requests.
        #[arg(long)]
        fast: bool,
        /// How long to wait for it to end.
        #[arg(long, default_value = "60s", value_parser = humantime_secs)]
        timeout: std::time::Duration,
    },
    /// Replace the running weir with this binary without dropping a connection (SIGUSR2; it
    /// must run with --upgrade-socket).
    Upgrade(control::Target),
    /// Show the running weir: pid, uptime, config generation and file, listeners, workers.
    Status(control::Target),
    /// Load-test an HTTP server (wrk/hey compatible output, sweeps, charts).
    Bench(Box<crate::bench_cmd::BenchArgs>),
    /// Convert an nginx configuration, or Kubernetes Ingress manifests (ingress-nginx's
    /// annotations): the weir config on stdout, what could not be translated (file:line, or
    /// the object) on stderr; exit 0 when something was converted. A location with something
    /// untranslated refuses (503, 404 for `internal`, 403 for access rules), never widens.
    Import {
        /// nginx.conf (or a file of `server` blocks); its includes are followed.
        file: PathBuf,
        /// Exit non-zero (2) when anything was left out or made to refuse.
        #[arg(long)]
        strict: bool,
        /// What relative paths (`root html`) are under, as `nginx -p DIR` (default: Debian's
        /// /usr/share/nginx).
        #[arg(long, value_name = "DIR")]
        prefix: Option<String>,
        /// Kubernetes manifests: the Ingress class taken.
        #[arg(long, value_name = "CLASS", default_value = "nginx")]
        ingress_class: String,
        /// Kubernetes manifests: a backend Service's address, `{service}`, `{namespace}` and
        /// `{port}` replaced (weir outside the cluster: a node port, a port-forward).
        #[arg(
            long,
            value_name = "TEMPLATE",
            default_value = "{service}.{namespace}.svc.cluster.local:{port}"
        )]
        service_address: String,
        /// Kubernetes manifests: where the Secrets' files are to be written (`tls/NS-NAME.crt`
        /// and `.key`, `auth/NS-NAME.htpasswd`).
        #[arg(long, value_name = "DIR", default_value = "/etc/weir")]
        secrets_dir: String,
    },
    /// Print the version.
    Version,
}

/// `weir import`: Kubernetes manifests (a document with `apiVersion` and `kind`) or nginx.
fn import_any(
    file: &std::path::Path,
    prefix: Option<&str>,
    opts: crate::import::ingress::Options,
) -> Result<crate::import::Imported, String> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    if crate::import::ingress::is_manifest(&text) {
        return crate::import::kubernetes(file, &opts);
    }
    crate::import::nginx(file, prefix)
}

/// `60s`, `500ms`, `2m`: a duration argument.
fn humantime_secs(s: &str) -> Result<std::time::Duration, String> {
    s.parse::<crate::config::units::Dur>().map(|d| d.0)
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
        Command::Check(args) => check::check(&args),
        Command::Import {
            file,
            strict,
            prefix,
            ingress_class,
            service_address,
            secrets_dir,
        } => match import_any(
            &file,
            prefix.as_deref(),
            crate::import::ingress::Options {
                class: ingress_class,
                service_address,
                secrets_dir,
                cluster: None,
            },
        ) {
            Ok(i) => {
                print!("{}", i.yaml);
                for s in &i.skipped {
                    eprintln!("weir import: not translated: {s}");
                }
                if i.translated == 0 {
                    eprintln!(
                        "weir import: nothing in {} could be converted",
                        file.display()
                    );
                    ExitCode::FAILURE
                } else if strict && !i.skipped.is_empty() {
                    eprintln!(
                        "weir import: --strict: {} directives not translated (listed above)",
                        i.skipped.len()
                    );
                    ExitCode::from(2)
                } else {
                    ExitCode::SUCCESS
                }
            }
            Err(e) => {
                eprintln!("weir import: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Reload(t) => control::reload(&t),
        Command::Stop {
            target,
            fast,
            timeout,
        } => control::stop(&target, fast, timeout),
        Command::Upgrade(t) => control::upgrade(&t, std::time::Duration::from_secs(30)),
        Command::Status(t) => control::status(&t),
        Command::Run {
            config,
            upgrade_socket,
            pid_file,
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
            run(
                cfg,
                (config, texts, fragments),
                logs,
                (upgrade_socket, pid_file),
            )
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

fn run(
    cfg: RuntimeConfig,
    (path, (digest, dirs), fragments): (Option<PathBuf>, Texts, Vec<Fragment>),
    logs: logging::Logging,
    (upgrade_socket, pid_flag): (Option<PathBuf>, Option<PathBuf>),
) -> ExitCode {
    let embedded = path.is_none();
    let workers = cfg.workers;
    let pid_path = pid_flag.or_else(|| cfg.pid_file.clone());
    if let Some(p) = &path {
        let shown = std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
        let _ = cfg
            .registry
            .process
            .config_file
            .set(shown.display().to_string());
    }
    let pid_path = pid_path.map(|p| std::path::absolute(&p).unwrap_or(p));
    if let Some(p) = &pid_path {
        let _ = cfg.registry.process.pid_file.set(p.display().to_string());
    }
    let json = cfg.log.json;
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
    let pid_file = std::sync::Arc::new(std::sync::Mutex::new(None));
    let written = pid_file.clone();
    let ready = move |handle: &server::ServerHandle| {
        // READY (with MAINPID) before the old process is told to go: under systemd the
        // service must have its new main process before the old one exits.
        notify::notify("READY=1");
        // The pid file names this process from now on (after an upgrade: the new one).
        if let Some(p) = &pid_path {
            match pidfile::PidFile::write(p) {
                Ok(f) => *written.lock().unwrap_or_else(|e| e.into_inner()) = Some(f),
                Err(e) => tracing::error!(error = %e, "the pid file was not written"),
            }
        }
        if let Some(t) = taken {
            t.finish();
        }
        if upgraded {
            tracing::info!("took over the listening sockets of the previous weir");
        }
        banner(handle, embedded, workers, json);
    };
    let reloader = crate::reload::Reloader::new(
        path,
        (digest, dirs),
        std::sync::Arc::new(std::sync::Mutex::new(fragments)),
        Box::new(move |level: &str| logs.apply(level)),
    );
    signals::wait_for_signals(handle, reloader, (drain_rx, upgrade_socket), ready);
    // Removed only if it still names this process (an upgrade's new one has rewritten it).
    drop(pid_file);
    ExitCode::SUCCESS
}

/// The start-up lines: every listener and the admin API.
/// With `log.format: json` they are log records like every other line on stderr.
fn banner(handle: &server::ServerHandle, embedded: bool, workers: usize, json: bool) {
    let urls = handle.local_urls();
    if json {
        let admin = handle.admin_addr().map(|a| format!("http://{a}/"));
        tracing::info!(
            urls = %urls.join(" "),
            workers,
            admin = admin.as_deref().unwrap_or("none"),
            pid = std::process::id(),
            "serving"
        );
        return;
    }
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
