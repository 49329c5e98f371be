//! The access log: one line per request, off the hot path.
//!
//! * [`format`]: `combined`, `common`, `json` and `$variable` templates, compiled at load.
//! * [`sink`]: per-worker buffers handed to a writer thread per destination (file, stdout,
//!   syslog), dropping and counting lines rather than blocking a worker; SIGUSR1 reopens files.
//!
//! Where a request's line goes is decided at config load: a route's `access_log`, else its
//! listener's, else the top-level one. Destinations are shared by target ([`Sinks`]): two
//! listeners logging to one file share one writer, and a reload that keeps the file keeps the
//! writer, its open file and whatever it has queued.

pub mod format;
pub mod sink;

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::config::model::AccessLogSetting;
use crate::config::CompileError;
pub use format::{Entry, Format};
pub use sink::{LogBuffer, Sink, Target};

/// A compiled access log: a format and where it writes.
#[derive(Debug)]
pub struct AccessLog {
    pub format: Format,
    pub sink: Arc<Sink>,
    /// Response fields the format reports (captured per request only when non-empty).
    pub response_fields: Vec<String>,
    /// Whether the format reports the request id (then one is made for every request).
    pub uses_request_id: bool,
}

/// Seconds since the Unix epoch and the millisecond.
pub fn now() -> (u64, u32) {
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    (t.as_secs(), t.subsec_millis())
}

thread_local! {
    /// A wall-clock reading and the monotonic instant it was taken at, renewed every second.
    static WALL: std::cell::Cell<Option<(crate::clock::Mono, Duration)>> =
        const { std::cell::Cell::new(None) };
}

/// The wall-clock time at monotonic instant `at` (the one the request's duration was measured
/// with), as [`now`] gives it: saves a clock read per logged request, reading the wall clock
/// once a second per thread instead.
pub fn wall_at(at: crate::clock::Mono) -> (u64, u32) {
    let t = since_epoch_at(at);
    (t.as_secs(), t.subsec_millis())
}

/// The time since the Unix epoch at monotonic instant `at` (see [`wall_at`]); a span's start
/// and end (`trace/`).
pub fn since_epoch_at(at: crate::clock::Mono) -> Duration {
    let (base, wall) = match WALL.get() {
        // `since` is zero for an instant before the base: counted back from it below.
        Some((base, wall)) if at.since(base) < Duration::from_secs(1) => (base, wall),
        _ => {
            let wall = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or(Duration::ZERO);
            WALL.set(Some((at, wall)));
            (at, wall)
        }
    };
    // An instant before the cached base (a request started before the base was renewed).
    match at >= base {
        true => wall + at.since(base),
        false => wall.saturating_sub(base.since(at)),
    }
}

/// Open destinations by target, outliving configs (held by `runtime::Registry`).
#[derive(Debug, Default)]
pub struct Sinks {
    open: Mutex<HashMap<Target, Arc<Sink>>>,
}

impl Sinks {
    fn get(&self, target: Target, dropped: &Arc<AtomicU64>) -> Result<Arc<Sink>, String> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = open.get(&target) {
            return Ok(s.clone());
        }
        let sink = Arc::new(Sink::open(target.clone(), dropped.clone())?);
        open.insert(target, sink.clone());
        Ok(sink)
    }

    /// Forgets destinations no log in `logs` uses (their writers exit once the last config
    /// holding them is gone).
    pub fn retain(&self, logs: &[Arc<AccessLog>]) {
        self.open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|t, _| logs.iter().any(|l| &l.sink.target == t));
    }

    /// Every open destination.
    pub fn all(&self) -> Vec<Arc<Sink>> {
        self.open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// SIGUSR1: every file is reopened before its next write.
    pub fn reopen(&self) {
        for s in self.all() {
            s.reopen();
        }
    }
}

/// Compiles the access logs of one config: each distinct setting becomes one [`AccessLog`],
/// referred to by its index (a slot in each worker's buffers).
#[derive(Debug)]
pub struct LogCompiler<'a> {
    sinks: &'a Sinks,
    dropped: Arc<AtomicU64>,
    logs: RefCell<Vec<Arc<AccessLog>>>,
}

impl<'a> LogCompiler<'a> {
    pub fn new(sinks: &'a Sinks, dropped: Arc<AtomicU64>) -> LogCompiler<'a> {
        LogCompiler {
            sinks,
            dropped,
            logs: RefCell::new(Vec::new()),
        }
    }

    /// The slot for `setting` at `key` (`None`: no log), or `inherited` when not set.
    pub fn slot(
        &self,
        setting: Option<&AccessLogSetting>,
        key: &str,
        inherited: Option<usize>,
    ) -> Result<Option<usize>, CompileError> {
        let log = match setting {
            None => return Ok(inherited),
            Some(AccessLogSetting::Off) => return Ok(None),
            Some(AccessLogSetting::On(l)) => l,
        };
        let format = Format::parse(&log.format).map_err(|m| (format!("{key}.format"), m))?;
        let target = Target::parse(log.path.as_deref(), log.syslog.as_deref())
            .map_err(|m| (key.to_string(), m))?;
        let mut logs = self.logs.borrow_mut();
        if let Some(i) = logs
            .iter()
            .position(|l| l.sink.target == target && l.format == format)
        {
            return Ok(Some(i));
        }
        let which = if log.syslog.is_some() {
            "syslog"
        } else {
            "path"
        };
        let sink = self
            .sinks
            .get(target, &self.dropped)
            .map_err(|m| (format!("{key}.{which}"), m))?;
        logs.push(Arc::new(AccessLog {
            response_fields: format.response_fields(),
            uses_request_id: format.uses_request_id(),
            format,
            sink,
        }));
        Ok(Some(logs.len() - 1))
    }

    pub fn finish(self) -> Vec<Arc<AccessLog>> {
        self.logs.into_inner()
    }
}
