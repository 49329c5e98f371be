//! Where access log lines go, and how they get there without a worker ever waiting on a disk.
//!
//! Each worker appends lines to its own buffer ([`LogBuffer`]). A full buffer (32 KiB), the
//! worker's sweeper tick (at most 1 s apart) and shutdown hand it to the sink's writer thread
//! through a bounded channel with `try_send`: when the writer is behind (a slow or stalled disk),
//! the buffer is dropped and its lines counted (`weir_access_log_dropped_lines_total`), and the
//! worker goes on. The writer thread owns the file, stdout or syslog socket; on SIGUSR1 it
//! reopens the file (logrotate's `postrotate`), and it exits when the last config naming the
//! sink is gone.

use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::UdpSocket;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Duration;

/// A worker hands its buffer over once it holds this much.
pub const FLUSH_AT: usize = 32 * 1024;
/// Buffers queued for the writer before workers start dropping lines (2 MiB at most).
const QUEUE: usize = 64;

/// Where lines are written.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    File(PathBuf),
    Stdout,
    /// RFC 5424 over UDP.
    SyslogUdp(String),
    /// RFC 5424 over a unix datagram socket (`/dev/log`).
    SyslogUnix(PathBuf),
}

impl Target {
    /// `stdout`, a file path, `udp://host:port` or `unix:///dev/log` (the last two: syslog).
    pub fn parse(path: Option<&str>, syslog: Option<&str>) -> Result<Target, String> {
        match (path, syslog) {
            (Some("stdout"), None) => Ok(Target::Stdout),
            (Some(p), None) if !p.is_empty() => Ok(Target::File(PathBuf::from(p))),
            (None, Some(s)) => {
                if let Some(a) = s.strip_prefix("udp://") {
                    Ok(Target::SyslogUdp(a.to_string()))
                } else if let Some(p) = s.strip_prefix("unix://") {
                    Ok(Target::SyslogUnix(PathBuf::from(p)))
                } else {
                    Err(format!(
                        "syslog: {s:?} is not udp://host:port or unix:///path"
                    ))
                }
            }
            (Some(_), Some(_)) => Err("give path or syslog, not both".into()),
            _ => Err("give path (a file, or stdout) or syslog".into()),
        }
    }
}

enum Msg {
    Lines(Vec<u8>),
    /// Answered once everything before it was written.
    Sync(SyncSender<()>),
}

/// A log destination and its writer thread.
#[derive(Debug)]
pub struct Sink {
    pub target: Target,
    tx: SyncSender<Msg>,
    reopen: Arc<AtomicBool>,
    dropped: Arc<AtomicU64>,
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Msg")
    }
}

impl Sink {
    /// Opens `target` (a file is created and appended to) and starts its writer; `dropped`
    /// counts the lines dropped when the writer falls behind.
    pub fn open(target: Target, dropped: Arc<AtomicU64>) -> Result<Sink, String> {
        let out = Output::open(&target)?;
        let (tx, rx) = sync_channel(QUEUE);
        let reopen = Arc::new(AtomicBool::new(false));
        let flag = reopen.clone();
        let t = target.clone();
        std::thread::Builder::new()
            .name("weir-access-log".into())
            .spawn(move || writer(t, out, rx, flag))
            .map_err(|e| format!("cannot start the log writer: {e}"))?;
        Ok(Sink {
            target,
            tx,
            reopen,
            dropped,
        })
    }

    /// Hands a buffer of `lines` lines to the writer, or drops and counts it when the writer
    /// is behind. Never blocks.
    pub fn send(&self, buf: Vec<u8>, lines: u64) {
        match self.tx.try_send(Msg::Lines(buf)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(lines, Ordering::Relaxed);
            }
        }
    }

    /// Asks the writer to reopen its file before its next write (SIGUSR1).
    pub fn reopen(&self) {
        self.reopen.store(true, Ordering::Relaxed);
    }

    /// Waits (up to `wait`) until what was handed over so far is written.
    pub fn sync(&self, wait: Duration) {
        let (tx, rx) = sync_channel(1);
        let deadline = std::time::Instant::now() + wait;
        let mut msg = Msg::Sync(tx);
        loop {
            match self.tx.try_send(msg) {
                Ok(()) => break,
                Err(TrySendError::Full(m)) if std::time::Instant::now() < deadline => {
                    msg = m;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(_) => return,
            }
        }
        let _ = rx.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()));
    }
}

/// The writer's open destination.
enum Output {
    File(File),
    Stdout,
    Udp(UdpSocket),
    Unix(UnixDatagram),
}

impl Output {
    fn open(target: &Target) -> Result<Output, String> {
        Ok(match target {
            Target::File(p) => Output::File(
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .map_err(|e| format!("cannot open {}: {e}", p.display()))?,
            ),
            Target::Stdout => Output::Stdout,
            Target::SyslogUdp(a) => {
                let addr = std::net::ToSocketAddrs::to_socket_addrs(a.as_str())
                    .map_err(|e| format!("cannot resolve syslog address {a:?}: {e}"))?
                    .next()
                    .ok_or_else(|| format!("syslog address {a:?} resolved to nothing"))?;
                let local = if addr.is_ipv4() {
                    "0.0.0.0:0"
                } else {
                    "[::]:0"
                };
                let s = UdpSocket::bind(local).map_err(|e| format!("syslog socket: {e}"))?;
                s.connect(addr)
                    .map_err(|e| format!("cannot reach syslog at {a}: {e}"))?;
                Output::Udp(s)
            }
            Target::SyslogUnix(p) => {
                let s = UnixDatagram::unbound().map_err(|e| format!("syslog socket: {e}"))?;
                s.connect(p)
                    .map_err(|e| format!("cannot reach syslog at {}: {e}", p.display()))?;
                Output::Unix(s)
            }
        })
    }

    /// Writes a buffer of whole lines; syslog gets one RFC 5424 message per line.
    fn write(&mut self, buf: &[u8], header: &[u8]) -> std::io::Result<()> {
        match self {
            Output::File(f) => f.write_all(buf),
            Output::Stdout => std::io::stdout().lock().write_all(buf),
            Output::Udp(_) | Output::Unix(_) => {
                let mut msg = Vec::with_capacity(512);
                for line in buf.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                    msg.clear();
                    syslog_head(header, &mut msg);
                    msg.extend_from_slice(line);
                    let sent = match self {
                        Output::Udp(s) => s.send(&msg),
                        Output::Unix(s) => s.send(&msg),
                        _ => unreachable!(),
                    };
                    // A datagram syslog loses messages when nobody listens; so do we, quietly.
                    let _ = sent;
                }
                Ok(())
            }
        }
    }
}

/// `<134>1 2026-11-22T17:38:23.123Z HOST weir PID access - `: facility local0, severity info.
fn syslog_head(host_and_pid: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(b"<134>1 ");
    super::format::iso8601(super::now(), out);
    out.push(b' ');
    out.extend_from_slice(host_and_pid);
}

fn writer(target: Target, mut out: Output, rx: Receiver<Msg>, reopen: Arc<AtomicBool>) {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "-".into());
    let header = format!("{host} weir {} access - ", std::process::id()).into_bytes();
    let mut warned = false;
    loop {
        let msg = match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(m) => Some(m),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        if reopen.swap(false, Ordering::Relaxed) {
            match Output::open(&target) {
                Ok(o) => {
                    out = o;
                    tracing::info!(target = ?target, "access log reopened");
                }
                Err(e) => {
                    tracing::error!(error = %e, "access log reopen failed, writing to the old file")
                }
            }
        }
        match msg {
            Some(Msg::Lines(buf)) => {
                if let Err(e) = out.write(&buf, &header) {
                    // Once per failure streak: a full disk must not flood the error log.
                    if !warned {
                        tracing::error!(target = ?target, error = %e, "access log write failed");
                        warned = true;
                    }
                } else {
                    warned = false;
                }
            }
            Some(Msg::Sync(done)) => {
                if let Output::File(f) = &mut out {
                    let _ = f.flush();
                }
                let _ = done.try_send(());
            }
            None => {}
        }
    }
}

/// One worker's buffer for one sink.
#[derive(Debug)]
pub struct LogBuffer {
    pub sink: Arc<Sink>,
    buf: RefCell<Vec<u8>>,
    lines: std::cell::Cell<u64>,
    /// The second `time_local` was rendered for, and its rendering.
    time: RefCell<(u64, Vec<u8>)>,
}

impl LogBuffer {
    pub fn new(sink: Arc<Sink>) -> LogBuffer {
        LogBuffer {
            sink,
            buf: RefCell::new(Vec::new()),
            lines: std::cell::Cell::new(0),
            time: RefCell::new((u64::MAX, Vec::new())),
        }
    }

    /// Appends one line through `write(time_local, out)`; hands the buffer over when full.
    pub fn append(&self, secs: u64, write: impl FnOnce(&[u8], &mut Vec<u8>)) {
        let mut time = self.time.borrow_mut();
        if time.0 != secs {
            time.1.clear();
            super::format::time_local(secs, &mut time.1);
            time.0 = secs;
        }
        let full = {
            let mut buf = self.buf.borrow_mut();
            write(&time.1, &mut buf);
            buf.len() >= FLUSH_AT
        };
        self.lines.set(self.lines.get() + 1);
        if full {
            self.flush();
        }
    }

    /// Hands what is buffered to the writer.
    pub fn flush(&self) {
        let lines = self.lines.replace(0);
        if lines == 0 {
            return;
        }
        let buf = std::mem::replace(&mut *self.buf.borrow_mut(), Vec::with_capacity(FLUSH_AT));
        self.sink.send(buf, lines);
    }
}

impl Drop for LogBuffer {
    fn drop(&mut self) {
        self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_and_refuse_ambiguity() {
        assert_eq!(Target::parse(Some("stdout"), None), Ok(Target::Stdout));
        assert_eq!(
            Target::parse(None, Some("udp://127.0.0.1:514")),
            Ok(Target::SyslogUdp("127.0.0.1:514".into()))
        );
        assert_eq!(
            Target::parse(None, Some("unix:///dev/log")),
            Ok(Target::SyslogUnix("/dev/log".into()))
        );
        assert!(Target::parse(Some("a"), Some("udp://x:1")).is_err());
        assert!(Target::parse(None, None).is_err());
        assert!(Target::parse(None, Some("tcp://x:1")).is_err());
    }

    #[test]
    fn a_stalled_writer_drops_and_counts_instead_of_blocking() {
        let dir = std::env::temp_dir().join(format!("weir-sink-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let dropped = Arc::new(AtomicU64::new(0));
        // A sink whose channel nobody drains: build one by hand with a receiver kept aside.
        let (tx, rx) = sync_channel(QUEUE);
        let sink = Sink {
            target: Target::File(dir.join("x.log")),
            tx,
            reopen: Arc::new(AtomicBool::new(false)),
            dropped: dropped.clone(),
        };
        for _ in 0..QUEUE + 3 {
            sink.send(b"a\nb\n".to_vec(), 2);
        }
        assert_eq!(dropped.load(Ordering::Relaxed), 6);
        drop(rx);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
