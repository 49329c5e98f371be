//! Span export, off the workers (issue 55 §4): a worker hands a sampled request's spans
//! (`span.rs`) to a bounded queue with `try_send` and goes on; one exporter thread (its own
//! current-thread runtime) wakes every `interval`, or when a worker has queued a whole
//! `batch` since it last took one (one wake-up per batch, not per span), takes batches of
//! `batch` requests, encodes them into OTLP (`otlp.rs`) and sends them (`transport.rs`).
//!
//! A slow or dead collector costs spans, never requests: a full queue drops the new spans, a
//! failed export drops its batch, and after a failure the thread waits `interval` before
//! trying again (the queue fills and drops meanwhile). Counted in `/metrics`:
//! `weir_trace_spans_exported_total`, `weir_trace_spans_dropped_total{reason}`
//! (`queue_full`, `export_failed`, `rejected` by the collector). Failures are logged, at most
//! a few lines a second.
//!
//! The queue and the thread start with the first span (a config that is only checked
//! allocates and starts nothing). When the config is replaced and the last worker lets go of
//! it, the thread sends what it holds and ends; if an export fails then (a collector down
//! during a reload), the rest is dropped and counted at once, so that reloads during an outage
//! do not pile up threads and queues.
//!
//! Cost (`bench/ab_weir.sh`'s `proxy-1KiB-trace100` and `-trace1` rows, 2026-11-29, the
//! exporter thread counted too): a proxied request at 1.68× its instructions with every
//! request's spans exported, 1.03× with 1% sampled. On a worker a sampled request costs the
//! record (one buffer for the client's values) and a `try_send`; the encoding (~7,000
//! instructions for the two spans) and the system calls are the exporter thread's.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::span::{Names, Record};
use super::transport::{Destination, Transport};
use crate::config::{model, CompileError};

/// Spans the collector took.
pub static EXPORTED: AtomicU64 = AtomicU64::new(0);
/// Spans dropped because the queue was full.
pub static DROPPED_QUEUE: AtomicU64 = AtomicU64::new(0);
/// Spans dropped with an export that failed.
pub static DROPPED_EXPORT: AtomicU64 = AtomicU64::new(0);
/// Spans the collector answered it rejected (a partial success).
pub static REJECTED: AtomicU64 = AtomicU64::new(0);

/// Export failures are the collector's doing, not a client's, but a dead collector fails
/// every batch: rate-limited all the same.
static FAILURE_LOG: crate::logs::Limited = crate::logs::Limited::new();

/// The most requests' spans a queue holds (a slot is ~400 bytes: 26 MB).
const MAX_QUEUE: usize = 65_536;
/// The most requests' spans in one export.
const MAX_BATCH: usize = 8_192;

/// The compiled `tracing.otlp`: the queue, the thread and their settings.
#[derive(Debug)]
pub struct Exporter {
    /// The queue's sending end and the thread, made with the first span (`None`: the
    /// thread could not start).
    live: OnceLock<Option<Live>>,
    /// The config's names, taken with the first span.
    names: OnceLock<Arc<Names>>,
    /// Records queued and not yet taken: a worker that makes it `batch` wakes the thread.
    pending: Arc<AtomicUsize>,
    /// Set when the config is let go of: the thread drops what it cannot send at once.
    retired: Arc<AtomicBool>,
    settings: Arc<Settings>,
}

#[derive(Debug)]
struct Live {
    tx: SyncSender<Record>,
    thread: std::thread::Thread,
}

#[derive(Debug)]
struct Settings {
    dest: Destination,
    service: String,
    queue: usize,
    batch: usize,
    interval: Duration,
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.retired.store(true, Relaxed);
        if let Some(Some(live)) = self.live.get() {
            live.thread.unpark();
        }
    }
}

impl Exporter {
    /// `None` for an empty endpoint (export off).
    pub fn compile(c: &model::Otlp) -> Result<Option<Exporter>, CompileError> {
        let endpoint = c.endpoint.trim();
        if endpoint.is_empty() {
            return Ok(None);
        }
        let key = |k: &str| format!("tracing.otlp.{k}");
        let grpc = match c.protocol.as_str() {
            "http/protobuf" => false,
            "grpc" => true,
            other => {
                return Err((
                    key("protocol"),
                    format!("`{other}`: http/protobuf or grpc (http/json is not offered)"),
                ))
            }
        };
        let uri: http::Uri = endpoint.parse().map_err(|e| {
            (
                key("endpoint"),
                format!("`{endpoint}`: {e} (http://host:4318, or http://host:4317 for grpc)"),
            )
        })?;
        match (uri.scheme_str(), grpc) {
            (Some("http"), _) | (Some("https"), false) => {}
            (Some("https"), true) => {
                return Err((
                    key("endpoint"),
                    "an https endpoint is offered with http/protobuf; grpc export is h2c (http://)"
                        .into(),
                ))
            }
            _ => {
                return Err((
                    key("endpoint"),
                    format!("`{endpoint}`: a URL with http:// or https://"),
                ))
            }
        }
        if uri.host().is_none() {
            return Err((key("endpoint"), format!("`{endpoint}`: no host")));
        }
        // As OpenTelemetry's SDKs read OTEL_EXPORTER_OTLP_ENDPOINT: the signal's path is
        // added unless the URL already names it.
        let url = if grpc || endpoint.ends_with("/v1/traces") {
            endpoint.to_string()
        } else {
            format!("{}/v1/traces", endpoint.trim_end_matches('/'))
        };
        let mut headers = Vec::new();
        for (name, value) in &c.headers {
            let n = http::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| (key("headers"), format!("`{name}` is not a field name")))?;
            let v = http::HeaderValue::from_str(value).map_err(|_| {
                (
                    key("headers"),
                    format!("the value of `{name}` is not a field value"),
                )
            })?;
            headers.push((n, v));
        }
        if !(1..=MAX_QUEUE).contains(&c.queue) {
            return Err((
                key("queue"),
                format!("from 1 to {MAX_QUEUE} requests' spans"),
            ));
        }
        if !(1..=MAX_BATCH.min(c.queue)).contains(&c.batch) {
            return Err((
                key("batch"),
                format!("from 1 to {MAX_BATCH}, and at most `queue`"),
            ));
        }
        if c.interval.0.is_zero() || c.timeout.0.is_zero() {
            return Err((
                key("interval"),
                "interval and timeout are longer than 0".into(),
            ));
        }
        Ok(Some(Exporter {
            live: OnceLock::new(),
            names: OnceLock::new(),
            pending: Arc::default(),
            retired: Arc::default(),
            settings: Arc::new(Settings {
                dest: Destination {
                    url,
                    grpc,
                    headers,
                    timeout: c.timeout.0,
                },
                service: c.service_name.clone(),
                queue: c.queue,
                batch: c.batch,
                interval: c.interval.0,
            }),
        }))
    }

    /// The names of the config this exporter was compiled with, for records (`make`: from
    /// that config, on the first span).
    pub fn names(&self, make: impl FnOnce() -> Names) -> Arc<Names> {
        self.names.get_or_init(|| Arc::new(make())).clone()
    }

    /// Queues a request's spans, or drops them when the queue is full.
    pub fn push(&self, record: Record) {
        let Some(live) = self.live.get_or_init(|| self.start()) else {
            DROPPED_QUEUE.fetch_add(record.spans(), Relaxed);
            return;
        };
        // Counted before it is queued: the thread may take it at once.
        let before = self.pending.fetch_add(1, Relaxed);
        match live.tx.try_send(record) {
            Ok(()) => {
                if before + 1 == self.settings.batch {
                    live.thread.unpark();
                }
            }
            Err(TrySendError::Full(r) | TrySendError::Disconnected(r)) => {
                self.pending.fetch_sub(1, Relaxed);
                DROPPED_QUEUE.fetch_add(r.spans(), Relaxed);
            }
        }
    }

    fn start(&self) -> Option<Live> {
        let (tx, rx) = std::sync::mpsc::sync_channel(self.settings.queue);
        let settings = self.settings.clone();
        let pending = self.pending.clone();
        let retired = self.retired.clone();
        let spawned = std::thread::Builder::new()
            .name("weir-otlp".into())
            .spawn(move || run(rx, &settings, &pending, &retired));
        match spawned {
            Ok(handle) => Some(Live {
                tx,
                thread: handle.thread().clone(),
            }),
            Err(e) => {
                tracing::error!(error = %e, "tracing: the exporter thread did not start; spans are dropped");
                None
            }
        }
    }
}

/// The exporter thread: batches until the queue's senders are all gone.
fn run(rx: Receiver<Record>, s: &Settings, pending: &AtomicUsize, retired: &AtomicBool) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "tracing: no runtime for the exporter; spans are dropped");
            return;
        }
    };
    let mut transport = match rt.block_on(async { Transport::new(&s.dest) }) {
        Ok(t) => t,
        Err(e) => {
            tracing::error!(error = %e, "tracing: no OTLP client; spans are dropped");
            return;
        }
    };
    let mut encoder = super::otlp::Encoder::default();
    let mut batch = Vec::with_capacity(s.batch);
    let mut out = Vec::new();
    loop {
        // Woken early by a worker that queued a whole batch.
        std::thread::park_timeout(s.interval);
        loop {
            let mut closed = false;
            while batch.len() < s.batch {
                match rx.try_recv() {
                    Ok(r) => batch.push(r),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        closed = true;
                        break;
                    }
                }
            }
            let full = batch.len() == s.batch;
            if !batch.is_empty() {
                pending.fetch_sub(batch.len(), Relaxed);
                let spans: u64 = batch.iter().map(Record::spans).sum();
                let start = encoder.encode(&batch, &s.service, &mut out);
                // The records (and the configs they hold) go before the send waits.
                batch.clear();
                // Handed over whole, not copied: the next batch grows a new buffer.
                let body = bytes::Bytes::from(std::mem::take(&mut out)).slice(start..);
                let retiring = retired.load(Relaxed);
                if !export(&rt, &mut transport, s, body, spans, retiring) && retiring {
                    // The config is gone and the collector with it: what is left is dropped.
                    let mut left = 0;
                    while let Ok(r) = rx.try_recv() {
                        left += r.spans();
                    }
                    DROPPED_EXPORT.fetch_add(left, Relaxed);
                    return;
                }
            }
            if closed {
                return;
            }
            if !full {
                break;
            }
        }
    }
}

/// Sends one batch; counts it either way. Whether it went.
fn export(
    rt: &tokio::runtime::Runtime,
    transport: &mut Transport,
    s: &Settings,
    body: bytes::Bytes,
    spans: u64,
    closing: bool,
) -> bool {
    match rt.block_on(transport.send(&s.dest, body)) {
        Ok(rejected) => {
            let rejected = rejected.clamp(0, spans as i64) as u64;
            EXPORTED.fetch_add(spans - rejected, Relaxed);
            REJECTED.fetch_add(rejected, Relaxed);
            true
        }
        Err(e) => {
            DROPPED_EXPORT.fetch_add(spans, Relaxed);
            if let Some(suppressed) = FAILURE_LOG.admit() {
                tracing::warn!(endpoint = %s.dest.url, error = %e, spans, suppressed, "tracing: an OTLP export failed; its spans are dropped");
            }
            if !closing {
                // Not a tight loop against a dead collector.
                std::thread::sleep(s.interval);
            }
            false
        }
    }
}
