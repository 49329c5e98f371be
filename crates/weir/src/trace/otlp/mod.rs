//! OTLP's trace messages (`opentelemetry/proto/collector/trace/v1/trace_service.proto` and the
//! `trace`, `common` and `resource` protos it imports, v1.x), field numbers copied from the
//! protos, only the fields weir sets (a collector skips absent ones).
//!
//! [`encode`] writes one `ExportTraceServiceRequest` straight into a buffer: every nested
//! length is known before its bytes (an attribute's from its key and value), save a span's,
//! written into a scratch buffer first, so a batch costs no allocation once the buffers have
//! grown. Written by hand because it is the exporter's whole cost: the first version built
//! `prost` messages (a `String` per key and value, `encoded_len` recomputed at each level) and
//! cost 4.05× a proxied request's instructions at 100% sampling (`bench/ab_weir.sh`,
//! 2026-11-29). `prost` declarations of the request are the check: the tests (`tests.rs`) decode what
//! [`encode`] wrote with them, and the answer (`ExportTraceServiceResponse`) is read with them.
//! The SDK crates (`opentelemetry_sdk`, `opentelemetry-otlp`) would add a span object per
//! request behind an `Arc` and a batch processor's mutex on the workers.
//!
//! Attributes are those of OpenTelemetry's HTTP semantic conventions (stable, v1.23+) plus
//! weir's own: `weir.route`, `weir.cache_status`, `weir.upstream`, `weir.upstream.server`.

use std::io::Write;

use super::span::{Attempt, Record, Text};

#[derive(Clone, PartialEq, prost::Message)]
pub struct ExportTraceServiceResponse {
    #[prost(message, optional, tag = "1")]
    pub partial_success: Option<ExportTracePartialSuccess>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ExportTracePartialSuccess {
    #[prost(int64, tag = "1")]
    pub rejected_spans: i64,
    #[prost(string, tag = "2")]
    pub error_message: String,
}

const SERVER: u64 = 2;
const CLIENT: u64 = 3;
const STATUS_ERROR: u64 = 2;
/// `SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK` and `SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK`.
const HAS_IS_REMOTE: u32 = 0x100;
const IS_REMOTE: u32 = 0x200;

/// Wire types.
const VARINT: u64 = 0;
const FIXED64: u64 = 1;
const LEN: u64 = 2;
const FIXED32: u64 = 5;

/// Buffers an exporter keeps from batch to batch.
#[derive(Debug, Default)]
pub struct Encoder {
    head: Vec<u8>,
    span: Vec<u8>,
    number: Vec<u8>,
}

/// Room left before the spans for the messages around them (three lengths, the resource's
/// attributes and the scope): the spans are written once, where they are sent from.
const HEADROOM: usize = 192;

impl Encoder {
    /// The export of `records` for `service` (`service.name`) into `out` (cleared first),
    /// from the offset returned.
    pub fn encode(&mut self, records: &[Record], service: &str, out: &mut Vec<u8>) -> usize {
        let service = &service[..service.len().min(64)];
        out.clear();
        out.resize(HEADROOM, 0);
        for r in records {
            self.span.clear();
            server_span(&mut self.span, &mut self.number, r);
            put_bytes(out, 2, &self.span);
            for a in &r.attempts {
                self.span.clear();
                client_span(&mut self.span, &mut self.number, r, a);
                put_bytes(out, 2, &self.span);
            }
        }
        let spans_len = out.len() - HEADROOM;
        let version = env!("CARGO_PKG_VERSION");
        // Resource { attributes = 1 }.
        let resource_len = field_len(kv_str_len("service.name", service))
            + field_len(kv_str_len("service.version", version))
            + field_len(kv_str_len("telemetry.sdk.name", "weir"));
        // InstrumentationScope { name = 1, version = 2 }.
        let scope_len = str_len("weir") + str_len(version);
        // ScopeSpans { scope = 1, spans = 2 }.
        let scope_spans_len = field_len(scope_len) + spans_len;
        // ResourceSpans { resource = 1, scope_spans = 2 }.
        let resource_spans_len = field_len(resource_len) + field_len(scope_spans_len);
        let body = out;
        let out = &mut self.head;
        out.clear();
        put_key(out, 1, LEN);
        put_varint(out, resource_spans_len as u64);
        put_key(out, 1, LEN);
        put_varint(out, resource_len as u64);
        put_kv_str(out, 1, "service.name", service);
        put_kv_str(out, 1, "service.version", version);
        put_kv_str(out, 1, "telemetry.sdk.name", "weir");
        put_key(out, 2, LEN);
        put_varint(out, scope_spans_len as u64);
        put_key(out, 1, LEN);
        put_varint(out, scope_len as u64);
        put_bytes(out, 1, b"weir");
        put_bytes(out, 2, version.as_bytes());
        // The head goes right before the spans (it fits: the service name is cut to 64
        // bytes, the rest is weir's).
        match HEADROOM.checked_sub(out.len()) {
            Some(start) => {
                body[start..HEADROOM].copy_from_slice(out);
                start
            }
            None => {
                out.extend_from_slice(&body[HEADROOM..]);
                std::mem::swap(body, out);
                0
            }
        }
    }
}

/// What differs between a server span's head and a client span's.
struct Head<'a> {
    span_id: &'a [u8; 8],
    trace_state: Option<&'a str>,
    parent: Option<&'a [u8; 8]>,
    /// The method, and the route when the name has one.
    name: (&'a str, Option<&'a str>),
    kind: u64,
    start: u64,
    end: u64,
}

/// The span's fields common to both kinds, up to its attributes.
fn head(out: &mut Vec<u8>, r: &Record, h: Head<'_>) {
    let Head {
        span_id,
        trace_state,
        parent,
        name,
        kind,
        start,
        end,
    } = h;
    put_bytes(out, 1, &r.trace.trace_id);
    put_bytes(out, 2, span_id);
    if let Some(state) = trace_state {
        put_bytes(out, 3, state.as_bytes());
    }
    if let Some(p) = parent {
        put_bytes(out, 4, p);
    }
    match name {
        (method, Some(route)) => {
            put_key(out, 5, LEN);
            put_varint(out, (method.len() + 1 + route.len()) as u64);
            out.extend_from_slice(method.as_bytes());
            out.push(b' ');
            out.extend_from_slice(route.as_bytes());
        }
        (method, None) => put_bytes(out, 5, method.as_bytes()),
    }
    put_key(out, 6, VARINT);
    put_varint(out, kind);
    put_key(out, 7, FIXED64);
    out.extend_from_slice(&start.to_le_bytes());
    put_key(out, 8, FIXED64);
    out.extend_from_slice(&end.max(start).to_le_bytes());
}

/// The span's status (an error, with `message`) and flags, after its attributes.
fn tail(out: &mut Vec<u8>, failed: Option<&str>, flags: u32) {
    if let Some(message) = failed {
        // Status { message = 2, code = 3 }.
        let len = if message.is_empty() {
            0
        } else {
            str_len(message)
        } + 2;
        put_key(out, 15, LEN);
        put_varint(out, len as u64);
        if !message.is_empty() {
            put_bytes(out, 2, message.as_bytes());
        }
        put_key(out, 3, VARINT);
        put_varint(out, STATUS_ERROR);
    }
    put_key(out, 16, FIXED32);
    out.extend_from_slice(&flags.to_le_bytes());
}

fn server_span(out: &mut Vec<u8>, number: &mut Vec<u8>, r: &Record) {
    let route = r.route_name();
    let state = r.text(Text::TraceState);
    head(
        out,
        r,
        Head {
            span_id: &r.trace.span_id,
            trace_state: state.as_deref(),
            parent: r.trace.parent.as_ref(),
            name: (r.method, route),
            kind: SERVER,
            start: r.start,
            end: r.end,
        },
    );
    put_kv_str(out, 9, "http.request.method", r.method);
    if let Some(path) = r.text(Text::Path) {
        put_kv_str(out, 9, "url.path", &path);
    }
    if let Some(q) = r.text(Text::Query) {
        put_kv_str(out, 9, "url.query", &q);
    }
    put_kv_str(out, 9, "url.scheme", r.scheme);
    put_kv_str(out, 9, "network.protocol.name", "http");
    put_kv_str(out, 9, "network.protocol.version", r.protocol);
    put_kv_str(out, 9, "client.address", ip_text(number, r.client.ip()));
    put_kv_int(out, 9, "client.port", r.client.port().into());
    put_kv_str(out, 9, "weir.cache_status", r.cache);
    if let Some(h) = r.text(Text::Host) {
        put_kv_str(out, 9, "server.address", &h);
    }
    if let Some(ua) = r.text(Text::UserAgent) {
        put_kv_str(out, 9, "user_agent.original", &ua);
    }
    if r.status != 0 {
        put_kv_int(out, 9, "http.response.status_code", r.status.into());
    }
    if let Some(route) = route {
        put_kv_str(out, 9, "weir.route", route);
    }
    if let Some(served) = r.upstream {
        let (upstream, server) = r.server(served);
        put_kv_str(out, 9, "weir.upstream", upstream);
        put_kv_str(out, 9, "weir.upstream.server", server);
    }
    if let Some(code) = r.grpc_status {
        put_kv_int(out, 9, "rpc.grpc.status_code", code.into());
    }
    // The conventions: a server span is an error for a 5xx (a 4xx is the client's).
    let failed = r.status >= 500 || r.error.is_some();
    if failed {
        match r.error {
            Some(e) => put_kv_str(out, 9, "error.type", e),
            None => {
                let mut n = itoa::Buffer::new();
                put_kv_str(out, 9, "error.type", n.format(r.status));
            }
        }
    }
    let remote = match r.trace.parent {
        Some(_) => HAS_IS_REMOTE | IS_REMOTE,
        None => HAS_IS_REMOTE,
    };
    tail(
        out,
        failed.then(|| r.error.unwrap_or_default()),
        u32::from(r.trace.sampled) | remote,
    );
}

fn client_span(out: &mut Vec<u8>, number: &mut Vec<u8>, r: &Record, a: &Attempt) {
    let end = if a.end == 0 { r.end } else { a.end };
    head(
        out,
        r,
        Head {
            span_id: &a.span_id,
            trace_state: None,
            parent: Some(&r.trace.span_id),
            name: (r.method, None),
            kind: CLIENT,
            start: a.start,
            end,
        },
    );
    let (upstream, server) = r.server((a.upstream, a.server));
    let addr = a.addr;
    put_kv_str(out, 9, "http.request.method", r.method);
    if let Some(path) = r.text(Text::Path) {
        put_kv_str(out, 9, "url.path", &path);
    }
    put_kv_str(out, 9, "weir.upstream", upstream);
    put_kv_str(out, 9, "weir.upstream.server", server);
    if let Some(addr) = addr {
        put_kv_str(out, 9, "server.address", ip_text(number, addr.ip()));
        put_kv_int(out, 9, "server.port", addr.port().into());
    }
    if a.status != 0 {
        put_kv_int(out, 9, "http.response.status_code", a.status.into());
    }
    let resend = r
        .attempts
        .iter()
        .position(|b| b.span_id == a.span_id)
        .unwrap_or(0);
    if resend > 0 {
        put_kv_int(out, 9, "http.request.resend_count", resend as i64);
    }
    // The conventions: a client span is an error for any status from 400, or no answer.
    let failed = a.status >= 400 || a.error.is_some() || a.status == 0;
    if failed {
        match (a.error, a.status) {
            (Some(e), _) => put_kv_str(out, 9, "error.type", e),
            (None, 0) => put_kv_str(out, 9, "error.type", "no response"),
            (None, status) => {
                let mut n = itoa::Buffer::new();
                put_kv_str(out, 9, "error.type", n.format(status));
            }
        }
    }
    tail(
        out,
        failed.then(|| a.error.unwrap_or_default()),
        u32::from(r.trace.sampled) | HAS_IS_REMOTE,
    );
}

/// An address as text in `buf`: IPv4 by hand (`Display` was ~1,500 instructions a request
/// of the exporter's, two addresses a request), IPv6 through `Display`.
fn ip_text(buf: &mut Vec<u8>, ip: std::net::IpAddr) -> &str {
    buf.clear();
    match ip {
        std::net::IpAddr::V4(v4) => {
            let mut n = itoa::Buffer::new();
            for (i, o) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    buf.push(b'.');
                }
                buf.extend_from_slice(n.format(o).as_bytes());
            }
        }
        std::net::IpAddr::V6(v6) => {
            let _ = write!(buf, "{v6}");
        }
    }
    std::str::from_utf8(buf).unwrap_or("")
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

fn put_key(out: &mut Vec<u8>, field: u64, wire: u64) {
    put_varint(out, field << 3 | wire);
}

/// A length-delimited field (string, bytes or message) of `field` < 16.
fn put_bytes(out: &mut Vec<u8>, field: u64, b: &[u8]) {
    put_key(out, field, LEN);
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// A length-delimited field's size with its one-byte key (fields below 16), given its body's.
fn field_len(body: usize) -> usize {
    1 + varint_len(body as u64) + body
}

fn str_len(s: &str) -> usize {
    field_len(s.len())
}

/// `KeyValue { key = 1, value = 2: AnyValue { string_value = 1 } }`: its body's size.
fn kv_str_len(key: &str, v: &str) -> usize {
    str_len(key) + field_len(str_len(v))
}

/// A `KeyValue` with a string value, as field `field` of the enclosing message.
fn put_kv_str(out: &mut Vec<u8>, field: u64, key: &str, v: &str) {
    put_key(out, field, LEN);
    put_varint(out, kv_str_len(key, v) as u64);
    put_bytes(out, 1, key.as_bytes());
    put_key(out, 2, LEN);
    put_varint(out, str_len(v) as u64);
    put_bytes(out, 1, v.as_bytes());
}

/// A `KeyValue` with an integer value (`AnyValue.int_value = 3`).
fn put_kv_int(out: &mut Vec<u8>, field: u64, key: &str, v: i64) {
    let any = 1 + varint_len(v as u64);
    put_key(out, field, LEN);
    put_varint(out, (str_len(key) + field_len(any)) as u64);
    put_bytes(out, 1, key.as_bytes());
    put_key(out, 2, LEN);
    put_varint(out, any as u64);
    put_key(out, 3, VARINT);
    put_varint(out, v as u64);
}

#[cfg(test)]
mod tests;
