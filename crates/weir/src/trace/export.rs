//! Span export, off the workers (issue 55 §4): a worker hands a sampled request's spans
//! (`span.rs`) to a bounded queue with `try_send` and goes on; one exporter thread (its own
//! current-thread runtime) gathers them into batches of `batch` requests or `interval`, turns
//! them into OTLP (`otlp.rs`) and sends them (`transport.rs`).
//!
//! A slow or dead collector costs spans, never requests: a full queue drops the new spans, a
//! failed export drops its batch, and after a failure the thread waits `interval` before
//! trying again (the queue fills and drops meanwhile). Counted in `/metrics`:
//! `weir_trace_spans_exported_total`, `weir_trace_spans_dropped_total{reason}`
//! (`queue_full`, `export_failed`, `rejected` by the collector). Failures are logged, at most
//! a few lines a second.
//!
//! The thread starts with the first span (a config that is only checked starts nothing) and
//! ends when its config is replaced and the last worker lets go of it (the queue's senders are
//! gone), sending what it holds first.
//!
//! Cost on a worker per sampled request: building the record (a few small string copies) and
//! one `try_send` (`bench/ab_weir.sh`'s `trace-100%` row); the encoding and the system calls
//! are the exporter thread's.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::span::Record;
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

/// The compiled `tracing.otlp`: the queue's sending end and the thread's settings.
#[derive(Debug)]
pub struct Exporter {
    tx: SyncSender<Record>,
    /// The receiving end until the thread takes it.
    rx: Mutex<Option<Receiver<Record>>>,
    started: OnceLock<()>,
    settings: Arc<Settings>,
}

#[derive(Debug)]
struct Settings {
    dest: Destination,
    service: String,
    batch: usize,
    interval: Duration,
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
        if c.queue == 0 || c.batch == 0 {
            return Err((key("queue"), "queue and batch are at least 1".into()));
        }
        if c.interval.0.is_zero() || c.timeout.0.is_zero() {
            return Err((
                key("interval"),
                "interval and timeout are longer than 0".into(),
            ));
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(c.queue);
        Ok(Some(Exporter {
            tx,
            rx: Mutex::new(Some(rx)),
            started: OnceLock::new(),
            settings: Arc::new(Settings {
                dest: Destination {
                    url,
                    grpc,
                    headers,
                    timeout: c.timeout.0,
                },
                service: c.service_name.clone(),
                batch: c.batch,
                interval: c.interval.0,
            }),
        }))
    }

    /// Queues a request's spans, or drops them when the queue is full.
    pub fn push(&self, record: Record) {
        self.started.get_or_init(|| self.start());
        match self.tx.try_send(record) {
            Ok(()) => {}
            Err(TrySendError::Full(r) | TrySendError::Disconnected(r)) => {
                DROPPED_QUEUE.fetch_add(r.spans(), Relaxed);
            }
        }
    }

    fn start(&self) {
        let Some(rx) = crate::metrics::lock(&self.rx).take() else {
            return;
        };
        let settings = self.settings.clone();
        let spawned = std::thread::Builder::new()
            .name("weir-otlp".into())
            .spawn(move || run(rx, &settings));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "tracing: the exporter thread did not start; spans are dropped");
        }
    }
}

/// The exporter thread: batches until the queue's senders are all gone.
fn run(rx: Receiver<Record>, s: &Settings) {
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
    let mut batch = Vec::with_capacity(s.batch);
    loop {
        // A batch starts with its first span and waits at most `interval` for more.
        match rx.recv() {
            Ok(r) => batch.push(r),
            Err(_) => return,
        }
        let until = Instant::now() + s.interval;
        let mut closed = false;
        while batch.len() < s.batch {
            match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
                Ok(r) => batch.push(r),
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => {
                    closed = true;
                    break;
                }
            }
        }
        let spans: u64 = batch.iter().map(Record::spans).sum();
        let req = super::otlp::request(&batch, &s.service);
        batch.clear();
        match rt.block_on(transport.send(&s.dest, req)) {
            Ok(rejected) => {
                let rejected = rejected.clamp(0, spans as i64) as u64;
                EXPORTED.fetch_add(spans - rejected, Relaxed);
                REJECTED.fetch_add(rejected, Relaxed);
            }
            Err(e) => {
                DROPPED_EXPORT.fetch_add(spans, Relaxed);
                if let Some(suppressed) = FAILURE_LOG.admit() {
                    tracing::warn!(endpoint = %s.dest.url, error = %e, spans, suppressed, "tracing: an OTLP export failed; its spans are dropped");
                }
                if !closed {
                    // Not a tight loop against a dead collector.
                    std::thread::sleep(s.interval);
                }
            }
        }
        if closed {
            return;
        }
    }
}
