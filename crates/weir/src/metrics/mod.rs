//! Metrics: counters kept by each worker, merged when `/metrics` is scraped.
//!
//! Why not `prometheus_client`'s own counters on the request path: they are shared atomics, and
//! a `lock xadd` per counter per request is ~20 cycles even uncontended, more when two workers
//! bounce the cache line. Each worker here owns its counters ([`WorkerMetrics`]) and is their
//! only writer, so an increment is a plain load and store ([`Counter::inc`]: no lock prefix, no
//! shared line); the scrape reads every worker's counters and sums them. `prometheus_client`
//! does the text encoding (`admin/scrape.rs`), so names, types and escaping follow its exposition
//! format.
//!
//! Counters are found by name, not by config index: a reload that keeps a route's listener and
//! name keeps its counters, so they stay monotonic across reloads as Prometheus expects.
//!
//! Rare events (upstream failures, dropped log lines) are plain shared atomics where they happen.
//!
//! [`totals`] sums the workers' counters once, for both `/metrics` and the dashboard's
//! short history (`admin/history.rs`).

pub mod history;
pub mod kubernetes;
pub mod totals;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// A counter with one writer thread: an increment is a load and a store, not a locked RMW.
/// Readers on other threads see a recent value (relaxed), which is what a scrape needs.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds one. Only the owning worker calls this (see the module doc).
    #[inline(always)]
    pub fn inc(&self) {
        self.add(1);
    }

    #[inline(always)]
    pub fn add(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    /// Takes one back (a gauge with one writer: requests in flight).
    #[inline(always)]
    pub fn dec(&self) {
        self.add(u64::MAX);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Upper bounds of the request duration histogram, in seconds (`+Inf` is implied).
/// Starts at 1 µs: a cache hit or a fixed response is answered (head in, response queued) in
/// about a microsecond, and buckets from 10 µs up put every such request in the first one.
pub const DURATION_BUCKETS: [f64; 20] = [
    0.000001, 0.0000025, 0.000005, 0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001,
    0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];
/// The same bounds in nanoseconds, for the hot path.
const BUCKETS_NS: [u64; 20] = [
    1_000,
    2_500,
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    5_000_000_000,
];

/// Statuses 100..=599 each have a counter.
pub(crate) const CODES: usize = 500;

/// A duration histogram on one worker: a count per bucket of [`DURATION_BUCKETS`], plus
/// `+Inf` last (not cumulative; summed at scrape), and the sum.
#[derive(Debug, Default)]
pub struct Histogram {
    pub(crate) buckets: [Counter; 21],
    /// Nanoseconds: sub-microsecond answers would read 0 in whole microseconds.
    pub(crate) sum_ns: Counter,
}

impl Histogram {
    #[inline]
    pub fn observe(&self, nanos: u64) {
        let bucket = BUCKETS_NS
            .iter()
            .position(|b| nanos <= *b)
            .unwrap_or(BUCKETS_NS.len());
        self.buckets[bucket].inc();
        self.sum_ns.add(nanos);
    }
}

/// One route's counters on one worker: requests by status, and the duration histogram.
#[derive(Debug)]
pub struct RouteMetrics {
    pub(crate) codes: Box<[Counter]>,
    pub(crate) latency: Histogram,
    /// gRPC calls by `grpc-status` (0 to 16).
    pub(crate) grpc: [Counter; 17],
}

impl Default for RouteMetrics {
    fn default() -> Self {
        RouteMetrics {
            codes: (0..CODES).map(|_| Counter::default()).collect(),
            latency: Histogram::default(),
            grpc: Default::default(),
        }
    }
}

impl RouteMetrics {
    /// Counts a gRPC call that ended with `code` (its `grpc-status`).
    pub fn record_grpc(&self, code: u8) {
        if let Some(c) = self.grpc.get(code as usize) {
            c.inc();
        }
    }

    /// Counts a finished request with its status (0: no response was sent) and duration (ns).
    #[inline]
    pub fn record(&self, status: u16, nanos: u64) {
        if let Some(c) = (status as usize)
            .checked_sub(100)
            .and_then(|i| self.codes.get(i))
        {
            c.inc();
        }
        self.latency.observe(nanos);
    }
}

/// One upstream server's counters on one worker: responses by status class, the duration of
/// the requests it served, bytes both ways, and requests in flight now.
#[derive(Debug, Default)]
pub struct ServerMetrics {
    /// Index 0: no status (the request failed before one); 1..=5: 1xx..5xx.
    pub(crate) classes: [Counter; 6],
    pub(crate) latency: Histogram,
    /// Response bytes sent to clients, and request body bytes received from them.
    pub(crate) bytes_sent: Counter,
    pub(crate) bytes_received: Counter,
    /// A gauge: taken while a request is sent to the server and its response relayed.
    pub(crate) in_flight: Counter,
}

impl ServerMetrics {
    /// Counts a request this server answered (or failed) with `status`, in `nanos`.
    #[inline]
    pub fn record(&self, status: u16, nanos: u64, sent: u64, received: u64) {
        self.classes[(status as usize / 100).min(5)].inc();
        self.latency.observe(nanos);
        self.bytes_sent.add(sent);
        self.bytes_received.add(received);
    }
}

/// Why a client connection closed (the `reason` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// The client or weir ended it between requests (or after `Connection: close`).
    Done = 0,
    /// Idle past `timeouts.keepalive` / `timeouts.header`, or idle at shutdown.
    Idle = 1,
    /// A timeout in the middle of a request (head, body or write).
    Timeout = 2,
    /// A malformed request.
    BadRequest = 3,
    /// The client's socket failed or it closed mid-request.
    ClientError = 4,
    /// An upstream failed after the response started; the connection was cut.
    UpstreamError = 5,
}

impl CloseReason {
    pub const ALL: [CloseReason; 6] = [
        CloseReason::Done,
        CloseReason::Idle,
        CloseReason::Timeout,
        CloseReason::BadRequest,
        CloseReason::ClientError,
        CloseReason::UpstreamError,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CloseReason::Done => "done",
            CloseReason::Idle => "idle",
            CloseReason::Timeout => "timeout",
            CloseReason::BadRequest => "bad_request",
            CloseReason::ClientError => "client_error",
            CloseReason::UpstreamError => "upstream_error",
        }
    }
}

/// Why a connection was closed as soon as it was accepted (`weir_connections_refused_total`, `server/worker.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The worker's share of `max_connections` (or the admin budget) is in use.
    MaxConnections = 0,
    /// The process is at its descriptor limit.
    FdLimit = 1,
}

impl Refusal {
    pub const ALL: [Refusal; 2] = [Refusal::MaxConnections, Refusal::FdLimit];

    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::MaxConnections => "max_connections",
            Refusal::FdLimit => "fd_limit",
        }
    }
}

/// The key of a route's counters: listener address and route name.
pub type RouteKey = (String, String);

/// One worker's counters.
#[derive(Debug, Default)]
pub struct WorkerMetrics {
    pub accepted: Counter,
    /// TLS handshakes by outcome ([`TlsOutcome`]).
    pub(crate) tls: [Counter; 5],
    /// HTTP/2 connections closed with GOAWAY for abuse (floods, rapid reset).
    pub h2_abuse: Counter,
    /// QUIC connection attempts by what became of them ([`QuicEvent`]).
    pub(crate) quic: [Counter; 5],
    /// HTTP/3 request streams answered.
    pub h3_requests: Counter,
    pub(crate) closed: [Counter; 6],
    /// Idle keep-alive connections parked outside a task now (a gauge, `server/park.rs`).
    pub parked: Counter,
    /// Connections closed as soon as accepted, by [`Refusal`].
    pub(crate) refused: [Counter; 2],
    pub(crate) routes: Mutex<HashMap<RouteKey, Arc<RouteMetrics>>>,
    /// Per `(upstream, server)`.
    pub(crate) servers: Mutex<HashMap<(String, String), Arc<ServerMetrics>>>,
}

/// What became of a QUIC connection attempt: the `event` label of
/// `weir_http3_connections_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuicEvent {
    /// Accepted (its handshake begins).
    Accepted,
    /// Answered with a Retry (address validation under a high handshake rate).
    Retry,
    /// Refused: the worker's connection budget, shutdown, or a listener removed.
    Refused,
    /// Dropped without an answer by the shield.
    Shield,
    /// Closed with H3_EXCESSIVE_LOAD (reset flood).
    Abuse,
}

impl QuicEvent {
    pub const ALL: [QuicEvent; 5] = [
        QuicEvent::Accepted,
        QuicEvent::Retry,
        QuicEvent::Refused,
        QuicEvent::Shield,
        QuicEvent::Abuse,
    ];

    pub fn label(self) -> &'static str {
        match self {
            QuicEvent::Accepted => "accepted",
            QuicEvent::Retry => "retry",
            QuicEvent::Refused => "refused",
            QuicEvent::Shield => "shield",
            QuicEvent::Abuse => "abuse",
        }
    }
}

impl WorkerMetrics {
    /// Counts a QUIC connection attempt's fate.
    pub(crate) fn quic(&self, e: QuicEvent) {
        self.quic[e as usize].inc();
    }
}

/// How a TLS handshake ended: the `result` label of `weir_tls_handshakes_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsOutcome {
    Full,
    Resumed,
    Failed,
    /// Plain HTTP sent to a TLS port.
    Plaintext,
    Timeout,
}

impl TlsOutcome {
    pub const ALL: [TlsOutcome; 5] = [
        TlsOutcome::Full,
        TlsOutcome::Resumed,
        TlsOutcome::Failed,
        TlsOutcome::Plaintext,
        TlsOutcome::Timeout,
    ];

    pub fn label(self) -> &'static str {
        match self {
            TlsOutcome::Full => "full",
            TlsOutcome::Resumed => "resumed",
            TlsOutcome::Failed => "failed",
            TlsOutcome::Plaintext => "plaintext",
            TlsOutcome::Timeout => "timeout",
        }
    }
}

impl WorkerMetrics {
    #[inline]
    pub fn tls(&self, outcome: TlsOutcome) {
        self.tls[outcome as usize].inc();
    }

    #[inline]
    pub fn closed(&self, why: CloseReason) {
        self.closed[why as usize].inc();
    }

    /// The counters of route `route` on listener `listener` (created on first use; a reload
    /// finds the same ones).
    pub fn route(&self, listener: &str, route: &str) -> Arc<RouteMetrics> {
        lock(&self.routes)
            .entry((listener.to_string(), route.to_string()))
            .or_default()
            .clone()
    }

    /// Forgets the counters no runtime holds any more: routes and servers a reload removed
    /// (a runtime still serving keeps its own until the next reload). Kept, the series of every
    /// route a cluster ever made and removed grew without end (the attack review of issue 56:
    /// 1,520 series and 370 MB after 1,500 routes came and went).
    pub fn forget_unused(&self) {
        lock(&self.routes).retain(|_, m| Arc::strong_count(m) > 1);
        lock(&self.servers).retain(|_, m| Arc::strong_count(m) > 1);
    }

    /// The counters of `server` in `upstream`.
    pub fn server(&self, upstream: &str, server: &str) -> Arc<ServerMetrics> {
        lock(&self.servers)
            .entry((upstream.to_string(), server.to_string()))
            .or_default()
            .clone()
    }
}

/// Every worker's counters, and the process-wide rare-event counters.
#[derive(Debug, Default)]
pub struct Metrics {
    workers: Mutex<Vec<Arc<WorkerMetrics>>>,
    /// Access log lines dropped because the writer fell behind.
    pub log_dropped: Arc<AtomicU64>,
}

impl Metrics {
    /// Registers a new worker's counters.
    pub fn add_worker(&self) -> Arc<WorkerMetrics> {
        let w = Arc::new(WorkerMetrics::default());
        lock(&self.workers).push(w.clone());
        w
    }

    pub(crate) fn workers(&self) -> Vec<Arc<WorkerMetrics>> {
        lock(&self.workers).clone()
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_counts_statuses_and_buckets_durations() {
        let r = RouteMetrics::default();
        r.record(200, 50_000);
        r.record(200, 100_000);
        r.record(404, 100_001);
        r.record(599, 10_000_000_000);
        r.record(0, 1_000);
        r.record(200, 700);
        r.record(200, 4_000);
        assert_eq!(r.codes[100].get(), 4);
        assert_eq!(r.codes[304].get(), 1);
        assert_eq!(r.codes[499].get(), 1);
        let counts: Vec<u64> = r.latency.buckets.iter().map(Counter::get).collect();
        assert_eq!(counts[0], 2, "≤1µs: 0.7 and 1");
        assert_eq!(counts[2], 1, "≤5µs: 4");
        assert_eq!(counts[5], 1, "≤50µs: 50");
        assert_eq!(counts[6], 1, "≤100µs: 100");
        assert_eq!(counts[7], 1, "≤250µs: 100.001");
        assert_eq!(counts[20], 1, "+Inf");
        assert_eq!(r.latency.sum_ns.get(), 10_000_255_701);
    }

    #[test]
    fn a_server_counts_classes_bytes_and_in_flight() {
        let s = ServerMetrics::default();
        s.record(204, 10, 100, 5);
        s.record(503, 10, 20, 0);
        s.record(0, 10, 0, 0);
        s.record(700, 10, 0, 0);
        let classes: Vec<u64> = s.classes.iter().map(Counter::get).collect();
        assert_eq!(classes, [1, 0, 1, 0, 0, 2]);
        assert_eq!((s.bytes_sent.get(), s.bytes_received.get()), (120, 5));
        s.in_flight.inc();
        s.in_flight.inc();
        s.in_flight.dec();
        assert_eq!(s.in_flight.get(), 1);
    }

    #[test]
    fn a_worker_finds_the_same_route_counters_by_name() {
        let w = WorkerMetrics::default();
        let a = w.route("127.0.0.1:80", "hello");
        assert!(Arc::ptr_eq(&a, &w.route("127.0.0.1:80", "hello")));
        assert!(!Arc::ptr_eq(&a, &w.route("127.0.0.1:81", "hello")));
    }
}
