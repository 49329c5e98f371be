//! Binary upgrade: `weir run --upgrade-socket PATH` serves its listening sockets on a unix
//! socket at PATH; a new `weir run` started with the same PATH takes them over, starts serving
//! on them, and tells the old one, which drains (every idle connection answers one more request
//! with `Connection: close`) and exits. No listening socket is ever closed, so no connection
//! is refused during the switch. See `server/handoff.rs` for the wire format.
//!
//! The exchange, on one unix stream: new → `takeover\n`; old → the sockets; new starts, then
//! → `ready\n`; old drains. If the new process fails before `ready` (a bad config, a crash),
//! the old one keeps serving.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::server::{handoff, Endpoint, ListenSocket, SharedSockets};

/// A hand-over in progress, on the new process's side.
#[derive(Debug)]
pub struct TakeOver {
    stream: UnixStream,
    pub sockets: Vec<(Endpoint, ListenSocket)>,
}

/// Takes the listening sockets of the weir serving at `path`, if one does. `Ok(None)`: nobody
/// answers there (a first start, or a stale socket file, which is removed).
pub fn take_over(path: &Path) -> Result<Option<TakeOver>, String> {
    let stream = match UnixStream::connect(path) {
        Ok(s) => s,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            let _ = std::fs::remove_file(path);
            return Ok(None);
        }
        Err(e) => return Err(format!("--upgrade-socket {}: {e}", path.display())),
    };
    let fail = |e: std::io::Error| format!("taking over from {}: {e}", path.display());
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(fail)?;
    (&stream).write_all(b"takeover\n").map_err(fail)?;
    let sockets = handoff::receive(&stream).map_err(fail)?;
    Ok(Some(TakeOver { stream, sockets }))
}

impl TakeOver {
    /// Tells the old process this one serves: it drains and exits.
    pub fn finish(self) {
        if let Err(e) = (&self.stream).write_all(b"ready\n") {
            tracing::warn!(error = %e, "could not tell the old weir to drain");
        }
    }
}

/// Serves hand-overs at `path`: for each new weir that asks, sends `sockets`, and when it says
/// it serves, calls `drain` (once). Binds `path` anew (an old file is replaced).
pub fn serve(
    path: PathBuf,
    sockets: SharedSockets,
    drain: impl Fn() + Send + 'static,
) -> Result<(), String> {
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path)
        .map_err(|e| format!("--upgrade-socket {}: {e}", path.display()))?;
    std::thread::Builder::new()
        .name("weir-upgrade".into())
        .spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                match hand_over(&conn, &sockets) {
                    Ok(true) => {
                        tracing::info!("a new weir took over the listening sockets: draining");
                        drain();
                        return;
                    }
                    Ok(false) => {
                        tracing::warn!("the new weir ended before serving: this one keeps serving")
                    }
                    Err(e) => tracing::warn!(error = %e, "binary upgrade hand-over failed"),
                }
            }
        })
        .map_err(|e| format!("cannot start the upgrade listener: {e}"))?;
    Ok(())
}

/// One hand-over: `Ok(true)` once the new process says it serves.
fn hand_over(conn: &UnixStream, sockets: &SharedSockets) -> std::io::Result<bool> {
    conn.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut lines = BufReader::new(conn).lines();
    if lines.next().transpose()?.as_deref() != Some("takeover") {
        return Ok(false);
    }
    {
        let held = sockets.lock().unwrap_or_else(|e| e.into_inner());
        if held.is_empty() {
            return Err(std::io::Error::other(
                "shutting down: no sockets to hand over",
            ));
        }
        let fds: Vec<(Endpoint, RawFd)> = held
            .iter()
            .map(|b| (b.endpoint.clone(), b.socket.as_raw_fd()))
            .collect();
        handoff::send(conn, &fds)?;
    }
    Ok(lines.next().transpose()?.as_deref() == Some("ready"))
}

/// SIGUSR2: starts the binary now at `exe` (the path this process was started from, which an
/// install may have replaced) with this process's arguments. It takes over through the upgrade
/// socket; this process then drains. Under systemd the new process reports itself as the main
/// process (`MAINPID`, with `NotifyAccess=all`).
pub fn spawn_new(exe: &Path) -> Result<(), String> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if !args.iter().any(|a| a == "--upgrade-socket") {
        return Err("SIGUSR2 upgrades only a weir started with --upgrade-socket PATH".into());
    }
    let mut child = std::process::Command::new(exe)
        .args(&args)
        .stdin(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
    tracing::info!(pid = child.id(), exe = %exe.display(), "binary upgrade: started the new weir");
    std::thread::spawn(move || match child.wait() {
        Ok(s) if s.success() => {}
        Ok(s) => {
            tracing::error!(status = %s, "binary upgrade: the new weir failed; this one keeps serving")
        }
        Err(e) => tracing::error!(error = %e, "binary upgrade: lost the new weir"),
    });
    Ok(())
}
