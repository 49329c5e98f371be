//! Log lines a client (or an upstream) can cause, rate-limited, and the panic hook.
//!
//! A client controls how often it fails a handshake, resets a stream or makes an upstream fail:
//! one line per event let a 10-minute soak write 258k lines (45 MB). Each kind of such event
//! has a [`Limited`] gate: at most [`PER_SECOND`] lines a second, then nothing until the next
//! second, whose first line says how many were suppressed. Every event is still counted (the
//! counters in `/metrics`); only the lines are limited.
//!
//! A panic while serving one connection ends that connection's task only (the release profile
//! unwinds; tokio catches a task's panic): [`install_panic_hook`] counts it
//! (`weir_panics_total`) and logs it through a gate.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

/// Lines per second and kind.
pub const PER_SECOND: u64 = 5;

/// One kind of client-triggered log line.
#[derive(Debug)]
pub struct Limited {
    /// `second << 16 | lines written in it` (lines saturate at 0xffff).
    window: AtomicU64,
    /// Events not logged since the last line written.
    suppressed: AtomicU64,
    /// Every event, logged or not.
    total: AtomicU64,
    /// Lines a second.
    rate: u64,
}

impl Limited {
    pub const fn new() -> Limited {
        Limited::with_rate(PER_SECOND)
    }

    /// A gate letting `rate` lines a second through.
    pub const fn with_rate(rate: u64) -> Limited {
        Limited {
            window: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
            total: AtomicU64::new(0),
            rate,
        }
    }

    /// Counts an event; `Some(n)` when a line may be written now, `n` being the events
    /// suppressed before it.
    pub fn admit(&self) -> Option<u64> {
        self.total.fetch_add(1, Ordering::Relaxed);
        let now = seconds_since_start() + 1;
        let w = self.window.load(Ordering::Relaxed);
        let (sec, lines) = (w >> 16, w & 0xffff);
        let next = if sec == now {
            if lines >= self.rate {
                self.suppressed.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            (now << 16) | (lines + 1)
        } else {
            (now << 16) | 1
        };
        // A lost race only lets one more line through or holds one back: no lock for that.
        let _ = self
            .window
            .compare_exchange(w, next, Ordering::Relaxed, Ordering::Relaxed);
        Some(self.suppressed.swap(0, Ordering::Relaxed))
    }

    /// Events counted since start.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }
}

impl Default for Limited {
    fn default() -> Self {
        Limited::new()
    }
}

/// Whole seconds since the first call (monotonic).
fn seconds_since_start() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_secs()
}

/// Panics caught while serving a connection (or anywhere in the process).
pub static PANICS: Limited = Limited::new();

/// Installs (once per process) a panic hook that counts panics and logs them rate-limited,
/// with their location and message, through `tracing` (so `log.format: json` applies).
pub fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            let admitted = PANICS.admit();
            if !tracing::dispatcher::has_been_set() {
                // No log to write to (a library user, a test harness): stderr, as Rust's own
                // hook would (counted all the same).
                eprintln!("{info}");
                return;
            }
            if let Some(suppressed) = admitted {
                let message = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                let location = info
                    .location()
                    .map(|l| format!("{}:{}", l.file(), l.line()))
                    .unwrap_or_default();
                let thread = std::thread::current();
                tracing::error!(
                    thread = thread.name().unwrap_or("-"),
                    %location,
                    %message,
                    suppressed,
                    "panic: the connection being served is closed, the worker goes on"
                );
            }
        }));
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_writes_a_few_lines_and_counts_every_event() {
        let gate = Limited::new();
        let written = (0..10_000).filter(|_| gate.admit().is_some()).count() as u64;
        // One second or two, if the burst straddles a second's end.
        assert!((1..=2 * PER_SECOND).contains(&written), "{written}");
        assert_eq!(gate.total(), 10_000);
    }
}
