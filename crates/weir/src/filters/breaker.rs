//! `circuit_breaker`: Easegress's state machine, shared by every route that names the filter.
//!
//! ```text
//! closed ── failure or slow-call rate ≥ threshold (over ≥ min_calls in the window) ──→ open
//! open ──── `wait` elapsed ──→ half-open (lets `half_open_calls` through)
//! half-open ── those calls under both thresholds ──→ closed;  otherwise ──→ open
//! ```
//!
//! The window holds the last `window_size` calls (`count`) or the calls of the last
//! `window_size` seconds (`time`, one bucket per second). A call fails when its status is in
//! `failure_codes` or weir answered for an upstream that failed; it is slow when it took
//! `slow_call` or longer. Outcomes are recorded in the log phase, for the calls the breaker let
//! through (they carry a zero-sized marker as state: no allocation). While open, requests get
//! `status` (503) with the reason in the body and `Retry-After`, or, with `fallback: UPSTREAM`
//! on a proxy route, go to that upstream instead (their outcomes are not the breaker's). The state is in /metrics
//! (`weir_circuit_breaker_state`) and the admin API (`GET /breakers`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::compile::{Compiled, Kind};
use super::registry::{Build, Built, Cx};
use super::{Answer, Caps, Done, Flow, Phases, Req, State};
use crate::config::{model, CompileError};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Closed,
    Open,
    HalfOpen,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Closed => "closed",
            Phase::Open => "open",
            Phase::HalfOpen => "half_open",
        }
    }

    /// The /metrics value.
    pub fn number(self) -> u8 {
        match self {
            Phase::Closed => 0,
            Phase::Open => 1,
            Phase::HalfOpen => 2,
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Window {
    Count(usize),
    Time(u64),
}

#[derive(Debug)]
pub struct Breaker {
    pub name: String,
    window: Window,
    failure_rate: f64,
    slow_rate: f64,
    slow: Duration,
    min_calls: u32,
    half_open_calls: u32,
    wait: Duration,
    failure_codes: Vec<u16>,
    status: u16,
    /// While open, send requests to this upstream instead of answering `status`.
    fallback: Option<usize>,
    inner: Arc<Shared>,
}

/// A breaker's state, kept across reloads (`Registry::filter_state`).
#[derive(Debug)]
pub struct Shared(Mutex<Inner>);

impl Default for Shared {
    fn default() -> Self {
        let now = Instant::now();
        Shared(Mutex::new(Inner {
            phase: Phase::Closed,
            since: now,
            outcomes: VecDeque::new(),
            buckets: VecDeque::new(),
            total: Tally::default(),
            admitted: 0,
            trial: Tally::default(),
            epoch: now,
            opened: 0,
        }))
    }
}

/// Calls, failures, slow calls.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    calls: u32,
    failed: u32,
    slow: u32,
}

impl Tally {
    fn add(&mut self, calls: u32, failed: u32, slow: u32) {
        self.calls += calls;
        self.failed += failed;
        self.slow += slow;
    }

    fn sub(&mut self, calls: u32, failed: u32, slow: u32) {
        self.calls -= calls;
        self.failed -= failed;
        self.slow -= slow;
    }
}

#[derive(Debug)]
struct Inner {
    phase: Phase,
    since: Instant,
    /// Count window: the outcomes (failed, slow); time window: (second, tally) buckets.
    outcomes: VecDeque<(bool, bool)>,
    buckets: VecDeque<(u64, Tally)>,
    /// The window's tally, kept as outcomes come and go (a walk over the window per call cost
    /// ~400 instructions at the default 100 calls).
    total: Tally,
    /// Half-open: calls let through, and their outcomes.
    admitted: u32,
    trial: Tally,
    epoch: Instant,
    pub opened: u64,
}

/// The marker an admitted call carries to the log phase.
#[derive(Debug)]
struct Admitted;

/// What `GET /breakers` reports.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub name: String,
    pub phase: Phase,
    pub calls: u32,
    pub failed: u32,
    pub slow: u32,
    pub opened: u64,
}

/// Its counts kept across reloads under a key of its name and window.
impl Build<&Cx<'_>> for model::CircuitBreaker {
    type Output = Built;

    fn build(self, cx: &Cx<'_>) -> Built {
        let key = format!(
            "circuit_breaker/{}/{}/{}",
            cx.name, self.window, self.window_size
        );
        let shared = cx.kept(&key, || Arc::new(Shared::default()));
        let f = Arc::new(Breaker::compile(
            cx.name,
            self,
            cx.path,
            shared,
            cx.upstreams,
        )?);
        Ok(Compiled {
            filter: f.clone(),
            kind: Kind::Breaker(f),
            state_key: Some(key),
        })
    }
}

impl Breaker {
    pub(crate) fn compile(
        name: &str,
        c: model::CircuitBreaker,
        path: &str,
        kept: Option<Arc<Shared>>,
        upstreams: &std::collections::HashMap<String, usize>,
    ) -> Result<Breaker, CompileError> {
        let fallback = match &c.fallback {
            Some(name) => Some(super::split::upstream(
                name,
                format!("{path}.fallback"),
                upstreams,
            )?),
            None => None,
        };
        let window = match c.window.as_str() {
            "count" => Window::Count(c.window_size.max(1) as usize),
            "time" => Window::Time(u64::from(c.window_size.max(1))),
            other => {
                return Err((
                    format!("{path}.window"),
                    format!("{other:?}: use count or time"),
                ))
            }
        };
        for (k, v) in [
            ("failure_rate", c.failure_rate),
            ("slow_call_rate", c.slow_call_rate),
        ] {
            if !(0.0..=100.0).contains(&v) {
                return Err((format!("{path}.{k}"), "a percentage, 0-100".into()));
            }
        }
        if !(400..=599).contains(&c.status) {
            return Err((format!("{path}.status"), "must be 400-599".into()));
        }
        Ok(Breaker {
            name: name.to_string(),
            window,
            failure_rate: c.failure_rate,
            slow_rate: c.slow_call_rate,
            slow: c.slow_call.0,
            min_calls: c.min_calls.max(1),
            half_open_calls: c.half_open_calls.max(1),
            wait: c.wait.0,
            failure_codes: c.failure_codes,
            status: c.status,
            fallback,
            inner: kept.unwrap_or_default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a call may go now (`Err`: how long until the breaker tries again).
    pub fn admit(&self, now: Instant) -> Result<(), Duration> {
        let mut s = self.lock();
        if s.phase == Phase::Open {
            let open_for = now.saturating_duration_since(s.since);
            if open_for < self.wait {
                return Err(self.wait - open_for);
            }
            s.phase = Phase::HalfOpen;
            s.since = now;
            s.admitted = 0;
            s.trial = Tally::default();
            tracing::warn!(breaker = %self.name, "circuit breaker half-open: letting trial calls through");
        }
        if s.phase == Phase::HalfOpen {
            if s.admitted >= self.half_open_calls {
                return Err(Duration::from_secs(1));
            }
            s.admitted += 1;
        }
        Ok(())
    }

    /// Records one call's outcome.
    pub fn record(&self, failed: bool, slow: bool, now: Instant) {
        let mut s = self.lock();
        match s.phase {
            Phase::Open => {}
            Phase::HalfOpen => {
                s.trial.calls += 1;
                s.trial.failed += u32::from(failed);
                s.trial.slow += u32::from(slow);
                if s.trial.calls >= self.half_open_calls {
                    let t = s.trial;
                    if self.trips(t) {
                        self.open(&mut s, now, t);
                    } else {
                        s.phase = Phase::Closed;
                        s.since = now;
                        s.outcomes.clear();
                        s.buckets.clear();
                        s.total = Tally::default();
                        tracing::warn!(breaker = %self.name, "circuit breaker closed");
                    }
                }
            }
            Phase::Closed => {
                let t = self.push(&mut s, failed, slow, now);
                if t.calls >= self.min_calls && self.trips(t) {
                    self.open(&mut s, now, t);
                }
            }
        }
    }

    fn trips(&self, t: Tally) -> bool {
        let rate = |n: u32| f64::from(n) * 100.0 / f64::from(t.calls.max(1));
        (t.failed > 0 && rate(t.failed) >= self.failure_rate)
            || (t.slow > 0 && rate(t.slow) >= self.slow_rate)
    }

    fn open(&self, s: &mut Inner, now: Instant, t: Tally) {
        s.phase = Phase::Open;
        s.since = now;
        s.opened += 1;
        s.outcomes.clear();
        s.buckets.clear();
        s.total = Tally::default();
        tracing::warn!(breaker = %self.name, calls = t.calls, failed = t.failed, slow = t.slow, "circuit breaker open");
    }

    /// Adds an outcome to the window; returns the window's tally.
    fn push(&self, s: &mut Inner, failed: bool, slow: bool, now: Instant) -> Tally {
        match self.window {
            Window::Count(n) => {
                s.outcomes.push_back((failed, slow));
                s.total.add(1, u32::from(failed), u32::from(slow));
                while s.outcomes.len() > n {
                    if let Some((f, sl)) = s.outcomes.pop_front() {
                        s.total.sub(1, u32::from(f), u32::from(sl));
                    }
                }
                s.total
            }
            Window::Time(secs) => {
                let second = now.saturating_duration_since(s.epoch).as_secs();
                while s.buckets.front().is_some_and(|(b, _)| b + secs <= second) {
                    if let Some((_, t)) = s.buckets.pop_front() {
                        s.total.sub(t.calls, t.failed, t.slow);
                    }
                }
                if s.buckets.back().is_none_or(|(b, _)| *b != second) {
                    s.buckets.push_back((second, Tally::default()));
                }
                if let Some((_, t)) = s.buckets.back_mut() {
                    t.add(1, u32::from(failed), u32::from(slow));
                }
                s.total.add(1, u32::from(failed), u32::from(slow));
                s.total
            }
        }
    }

    pub fn snapshot(&self) -> Snapshot {
        let s = self.lock();
        let t = match s.phase {
            Phase::HalfOpen => s.trial,
            _ => s.total,
        };
        Snapshot {
            name: self.name.clone(),
            phase: s.phase,
            calls: t.calls,
            failed: t.failed,
            slow: t.slow,
            opened: s.opened,
        }
    }
}

impl super::Filter for Breaker {
    fn phases(&self) -> Phases {
        Phases::REQUEST | Phases::LOG
    }

    fn caps(&self) -> Caps {
        match self.fallback {
            Some(_) => Caps::STATE | Caps::UPSTREAM_CHOICE,
            None => Caps::STATE,
        }
    }

    fn request(&self, _: &Req<'_>, state: &mut State, upstream: &mut Option<usize>) -> Flow {
        match self.admit(Instant::now()) {
            Ok(()) => {
                *state = Some(Box::new(Admitted));
                Flow::Continue
            }
            Err(_) if self.fallback.is_some() => {
                *upstream = self.fallback;
                Flow::Continue
            }
            Err(retry) => Flow::Respond(Answer {
                status: self.status,
                fields: vec![(
                    Bytes::from_static(b"Retry-After"),
                    Bytes::from(retry.as_secs().max(1).to_string()),
                )],
                body: Bytes::from(format!("circuit breaker {:?} is open\n", self.name)),
            }),
        }
    }

    fn log(&self, done: &Done, state: &mut State) {
        if state.take().is_none() {
            return;
        }
        if done.client_ended {
            // Neither a failure nor a success: a client that sets `grpc-timeout: 1n` could
            // otherwise open the breaker for everyone (the review of issue 55).
            return;
        }
        let failed =
            done.upstream_failed || self.failure_codes.contains(&done.status) || done.status == 0;
        let slow = done.elapsed.is_some_and(|e| e >= self.slow);
        self.record(failed, slow, Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker(yaml: &str) -> Breaker {
        let m: model::CircuitBreaker = serde_yaml::from_str(yaml).unwrap();
        Breaker::compile("b", m, "f", None, &Default::default()).unwrap()
    }

    /// The state machine by table, on a manual clock.
    #[test]
    fn state_machine_table() {
        let b = breaker(
            "{window_size: 4, min_calls: 4, failure_rate: 50, half_open_calls: 2, wait: 10s}",
        );
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        // (second, outcome failed?, phase after)
        let table = [
            (0, false, Phase::Closed),
            (0, true, Phase::Closed),
            (0, false, Phase::Closed),
            (0, true, Phase::Open), // 2 of 4 failed: 50%
        ];
        for (s, failed, want) in table {
            assert!(b.admit(at(s)).is_ok() || want == Phase::Open);
            b.record(failed, false, at(s));
            assert_eq!(b.snapshot().phase, want);
        }
        assert_eq!(b.admit(at(5)), Err(Duration::from_secs(5)));
        // After the wait: two trial calls, a third is refused.
        assert!(b.admit(at(10)).is_ok());
        assert_eq!(b.snapshot().phase, Phase::HalfOpen);
        assert!(b.admit(at(10)).is_ok());
        assert!(b.admit(at(10)).is_err());
        b.record(true, false, at(10));
        b.record(false, false, at(10));
        assert_eq!(b.snapshot().phase, Phase::Open, "1 of 2 trials failed: 50%");
        assert!(b.admit(at(20)).is_ok());
        assert!(b.admit(at(20)).is_ok());
        b.record(false, false, at(20));
        b.record(false, false, at(20));
        assert_eq!(b.snapshot().phase, Phase::Closed);
        assert_eq!(b.snapshot().opened, 2);
    }

    #[test]
    fn slow_calls_and_time_windows() {
        let b = breaker(
            "{window: time, window_size: 2, min_calls: 3, slow_call_rate: 60, slow_call: 1s}",
        );
        let t0 = Instant::now();
        b.record(false, true, t0);
        b.record(false, true, t0);
        // Two seconds later the first two have left the window.
        b.record(false, true, t0 + Duration::from_secs(2));
        assert_eq!(b.snapshot().phase, Phase::Closed);
        b.record(false, true, t0 + Duration::from_secs(2));
        b.record(false, false, t0 + Duration::from_secs(3));
        assert_eq!(b.snapshot().phase, Phase::Open, "2 slow of 3: 67%");
    }
}
