//! What a sampled request hands the exporter: weir's server span for the request and a client
//! span for each upstream attempt (retries visible), as plain values made on the worker, turned
//! into OTLP on the exporter's thread (`otlp.rs`).
//!
//! Made only for sampled requests with `tracing.otlp` set; a record owns its strings (a few
//! small copies) so that nothing of the worker's buffers or config is held by the queue.

use std::net::SocketAddr;

use super::context::TraceContext;

/// One request's spans.
#[derive(Debug, Clone)]
pub struct Record {
    pub trace: TraceContext,
    /// The client's `tracestate`, when the trace was continued.
    pub trace_state: Option<String>,
    /// Unix nanoseconds.
    pub start: u64,
    pub end: u64,
    pub method: &'static str,
    pub path: String,
    pub query: Option<String>,
    pub host: Option<String>,
    /// `http` or `https`.
    pub scheme: &'static str,
    /// `1.1`, `2` or `3`.
    pub protocol: &'static str,
    pub client: SocketAddr,
    pub user_agent: Option<String>,
    /// The status sent (0: none, the connection ended first).
    pub status: u16,
    /// The route's name.
    pub route: Option<String>,
    /// `HIT`, `MISS`, … (`-` when the route does not cache).
    pub cache: &'static str,
    /// The upstream and server that answered.
    pub upstream: Option<(String, String)>,
    pub grpc_status: Option<u8>,
    /// Why the request failed, when it did.
    pub error: Option<&'static str>,
    pub attempts: Vec<Attempt>,
}

/// One try of an upstream server (`pipeline/forward.rs`).
#[derive(Debug, Clone)]
pub struct Attempt {
    pub span_id: [u8; 8],
    /// Unix nanoseconds; `end` 0 until it is known (the last try ends with the request).
    pub start: u64,
    pub end: u64,
    pub upstream: String,
    pub server: String,
    pub addr: Option<SocketAddr>,
    /// The answer's status (0: none came).
    pub status: u16,
    pub error: Option<&'static str>,
    /// Tries of this request before this one (`http.request.resend_count`).
    pub resend: u32,
}

impl Record {
    /// How many spans the record carries (the server's and one per attempt).
    pub fn spans(&self) -> u64 {
        1 + self.attempts.len() as u64
    }
}
