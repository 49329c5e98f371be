//! `weir reload`, `weir stop [--fast]`, `weir upgrade`, `weir status`: controlling a running
//! weir, as `nginx -s` and `caddy reload` do.
//!
//! The running weir is found through its config (default `/etc/weir/weir.yaml`, where the
//! packages install it): its `pid_file` (or `--pid-file`) for signals, its admin API (with
//! the admin token the config names) for answers. `reload` asks the admin API when there is
//! one (the answer says whether the new config was taken, and why not) and sends SIGHUP
//! otherwise; `stop` sends SIGTERM (graceful: in-flight requests finish; `--fast` sends a
//! second one, which stops at once) and waits for the process to end; `upgrade` sends SIGUSR2
//! and waits until the pid file names the new process; `status` reads the pid file and
//! `GET /status`. After an upgrade the new process has rewritten the pid file and serves the
//! same admin address, so the verbs reach it.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use super::pidfile;

/// Where the packages install the config, and where the verbs and `check` look by default.
pub const DEFAULT_CONFIG: &str = "/etc/weir/weir.yaml";

/// How the verbs find the running weir.
#[derive(Debug, clap::Args)]
pub struct Target {
    /// The running weir's config file: its `pid_file` and admin API are read from it
    /// [default: /etc/weir/weir.yaml].
    #[arg(short, long)]
    config: Option<PathBuf>,
    /// The running weir's pid file (instead of the config's `pid_file`).
    #[arg(long, value_name = "PATH")]
    pid_file: Option<PathBuf>,
}

/// What was found of the running weir.
struct Found {
    pid_file: Option<PathBuf>,
    admin: Option<(SocketAddr, Option<String>)>,
}

impl Target {
    fn find(&self) -> Result<Found, String> {
        let explicit = self.config.is_some();
        let path = self
            .config
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG));
        let mut found = Found {
            pid_file: self.pid_file.clone(),
            admin: None,
        };
        if !explicit && !path.exists() && found.pid_file.is_some() {
            return Ok(found);
        }
        let source = crate::config::load_file(&path).map_err(|e| e.to_string())?;
        let (base, file) = (source.base, source.file);
        if found.pid_file.is_none() {
            found.pid_file = file.pid_file.as_ref().map(|p| base.0.join(p));
        }
        if let Some(a) = &file.admin {
            let addr: SocketAddr = a
                .address
                .parse()
                .map_err(|e| format!("{}: admin.address: {e}", path.display()))?;
            let env = |v: &str| std::env::var(v).ok();
            let settings =
                crate::runtime::admin_settings::AdminSettings::compile(a, addr, &base, &env)
                    .map_err(|(k, m)| format!("{}: {k}: {m}", path.display()))?;
            let addr = match addr.ip().is_unspecified() {
                true => SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), addr.port()),
                false => addr,
            };
            found.admin = Some((addr, settings.token().map(str::to_string)));
        }
        if found.pid_file.is_none() && found.admin.is_none() {
            return Err(format!(
                "{}: neither pid_file nor admin is set: give --pid-file, or set pid_file: in the config",
                path.display()
            ));
        }
        Ok(found)
    }
}

impl Target {
    /// The running process's pid, from its pid file, else from its admin API's `/status` (as
    /// `weir status` finds it: `stop` and `upgrade` once refused what `status` showed running),
    /// with the pid file when there is one.
    fn running(&self) -> Result<(i32, Option<PathBuf>, Found), String> {
        let found = self.find()?;
        let by_file = found.pid().map(|(pid, path)| (pid, path.to_path_buf()));
        match by_file {
            Ok((pid, path)) => Ok((pid, Some(path), found)),
            Err(e) => match found.admin_pid() {
                Some(pid) => Ok((pid, None, found)),
                None => Err(e),
            },
        }
    }
}

impl Found {
    fn pid(&self) -> Result<(i32, &Path), String> {
        let path = self
            .pid_file
            .as_deref()
            .ok_or("this needs the pid file: set pid_file: in the config or give --pid-file")?;
        let pid = pidfile::read(path)?;
        if !pidfile::alive(pid) {
            return Err(format!(
                "{} names process {pid}, which is not running (a stale pid file)",
                path.display()
            ));
        }
        Ok((pid, path))
    }

    /// The pid the admin API's `/status` reports, when it answers.
    fn admin_pid(&self) -> Option<i32> {
        self.admin.as_ref()?;
        match self.call("GET", "/status") {
            Ok((200, s)) => s["pid"].as_i64().map(|p| p as i32),
            _ => None,
        }
    }

    fn call(&self, method: &str, path: &str) -> Result<(u16, serde_json::Value), String> {
        let (addr, token) = self.admin.as_ref().ok_or("no admin API in the config")?;
        admin_call(*addr, token.as_deref(), method, path)
    }
}

/// One request to the admin API: its status and JSON body.
fn admin_call(
    addr: SocketAddr,
    token: Option<&str>,
    method: &str,
    path: &str,
) -> Result<(u16, serde_json::Value), String> {
    let mut conn = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(3))
        .map_err(|e| format!("admin API at {addr}: {e} (is weir running?)"))?;
    let _ = conn.set_read_timeout(Some(Duration::from_secs(70)));
    let request = crate::admin::client::request(method, path, addr, token, "");
    conn.write_all(request.as_bytes())
        .map_err(|e| format!("admin API at {addr}: {e}"))?;
    let mut answer = Vec::new();
    conn.take(1 << 20)
        .read_to_end(&mut answer)
        .map_err(|e| format!("admin API at {addr}: {e}"))?;
    let (status, body) = crate::admin::client::answer(&answer)
        .ok_or_else(|| format!("admin API at {addr}: no HTTP answer"))?;
    let json = serde_json::from_str(&body).unwrap_or(serde_json::Value::String(body));
    Ok((status, json))
}

fn fail(e: impl std::fmt::Display) -> ExitCode {
    eprintln!("weir: {e}");
    ExitCode::FAILURE
}

/// `weir reload`.
pub fn reload(t: &Target) -> ExitCode {
    let found = match t.find() {
        Ok(f) => f,
        Err(e) => return fail(e),
    };
    if found.admin.is_some() {
        return match found.call("POST", "/reload") {
            Ok((200, _)) => {
                println!("weir: reloaded");
                ExitCode::SUCCESS
            }
            Ok((_, body)) => fail(format!(
                "reload refused, the running config stays: {}",
                body["error"].as_str().unwrap_or(&body.to_string())
            )),
            Err(e) => fail(e),
        };
    }
    match found
        .pid()
        .and_then(|(pid, _)| pidfile::send(pid, libc::SIGHUP).map(|()| pid))
    {
        Ok(pid) => {
            println!("weir: sent SIGHUP to pid {pid} (the outcome is in weir's log)");
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

/// `weir stop [--fast]`: waits at most `timeout` for the process to end.
pub fn stop(t: &Target, fast: bool, timeout: Duration) -> ExitCode {
    let (pid, _, _) = match t.running() {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    if let Err(e) = pidfile::send(pid, libc::SIGTERM) {
        return fail(e);
    }
    if fast {
        // The second signal stops at once; sent apart from the first so the two are not
        // merged into one.
        std::thread::sleep(Duration::from_millis(200));
        if pidfile::alive(pid) {
            let _ = pidfile::send(pid, libc::SIGTERM);
        }
    }
    let start = Instant::now();
    while pidfile::alive(pid) {
        if start.elapsed() > timeout {
            return fail(format!(
                "pid {pid} still runs after {timeout:?} (finishing requests); `weir stop --fast` stops at once"
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    println!("weir: stopped (pid {pid})");
    ExitCode::SUCCESS
}

/// `weir upgrade`: waits at most `timeout` for the new process to write the pid file (or,
/// without one, to answer the admin API).
pub fn upgrade(t: &Target, timeout: Duration) -> ExitCode {
    let (pid, path, found) = match t.running() {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    if let Err(e) = pidfile::send(pid, libc::SIGUSR2) {
        return fail(e);
    }
    let start = Instant::now();
    let new_pid = || match &path {
        Some(p) => pidfile::read(p).ok(),
        None => found.admin_pid(),
    };
    loop {
        if let Some(new) = new_pid() {
            if new != pid && pidfile::alive(new) {
                println!("weir: upgraded: pid {pid} -> {new} (the old one finishes its requests and exits)");
                return ExitCode::SUCCESS;
            }
        }
        if start.elapsed() > timeout || !pidfile::alive(pid) && new_pid().is_none() {
            return fail(format!(
                "no new weir took over within {timeout:?}: see the log (an upgrade needs `weir run --upgrade-socket PATH`; the running one keeps serving)"
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `weir status`: 0 when running, 3 when not (as `systemctl status` and LSB init scripts).
pub fn status(t: &Target) -> ExitCode {
    let found = match t.find() {
        Ok(f) => f,
        Err(e) => return fail(e),
    };
    let pid = found.pid();
    let admin = found.admin.as_ref().map(|_| found.call("GET", "/status"));
    match (&pid, &admin) {
        (Err(e), None | Some(Err(_))) => {
            println!("weir: not running ({e})");
            return ExitCode::from(3);
        }
        (Ok((pid, _)), None) => {
            println!("weir: running, pid {pid} (no admin API in the config: nothing more to show)");
        }
        (_, Some(Err(e))) => println!("weir: pid file names a running process, but {e}"),
        (_, Some(Ok((_, s)))) => {
            let listeners: Vec<String> = s["listeners"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|l| {
                    let a = l["address"].as_str().unwrap_or("?");
                    match (l["admin"].as_bool(), l["tls"].as_bool()) {
                        (Some(true), _) => format!("{a} (admin)"),
                        (_, Some(true)) => format!("{a} (tls)"),
                        _ => a.to_string(),
                    }
                })
                .collect();
            println!(
                "weir: running, pid {}, version {}, up {}",
                s["pid"],
                s["version"].as_str().unwrap_or("?"),
                uptime(s["uptime_s"].as_u64().unwrap_or(0))
            );
            println!(
                "config: {} (generation {})",
                s["config_file"].as_str().unwrap_or("<built-in>"),
                s["generation"]
            );
            println!("workers: {}", s["workers"]);
            println!("listeners: {}", listeners.join(", "));
            if let Some(p) = s["pid_file"].as_str() {
                println!("pid file: {p}");
            }
        }
    }
    ExitCode::SUCCESS
}

fn uptime(s: u64) -> String {
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{}s", s / 60, s % 60),
        3600..86400 => format!("{}h{}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{}h", s / 86400, s % 86400 / 3600),
    }
}
