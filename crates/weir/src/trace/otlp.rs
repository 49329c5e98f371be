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
//! 2026-11-29). The `prost` declarations below are the check: the tests decode what
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

/// The request's messages, as a collector decodes them: the tests' check on [`Encoder`].
#[cfg(test)]
pub mod messages {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ExportTraceServiceRequest {
        #[prost(message, repeated, tag = "1")]
        pub resource_spans: Vec<ResourceSpans>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ResourceSpans {
        #[prost(message, optional, tag = "1")]
        pub resource: Option<Resource>,
        #[prost(message, repeated, tag = "2")]
        pub scope_spans: Vec<ScopeSpans>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Resource {
        #[prost(message, repeated, tag = "1")]
        pub attributes: Vec<KeyValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ScopeSpans {
        #[prost(message, optional, tag = "1")]
        pub scope: Option<InstrumentationScope>,
        #[prost(message, repeated, tag = "2")]
        pub spans: Vec<Span>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct InstrumentationScope {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(string, tag = "2")]
        pub version: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Span {
        #[prost(bytes = "vec", tag = "1")]
        pub trace_id: Vec<u8>,
        #[prost(bytes = "vec", tag = "2")]
        pub span_id: Vec<u8>,
        #[prost(string, tag = "3")]
        pub trace_state: String,
        #[prost(bytes = "vec", tag = "4")]
        pub parent_span_id: Vec<u8>,
        #[prost(string, tag = "5")]
        pub name: String,
        /// `SpanKind`: 2 server, 3 client.
        #[prost(int32, tag = "6")]
        pub kind: i32,
        #[prost(fixed64, tag = "7")]
        pub start_time_unix_nano: u64,
        #[prost(fixed64, tag = "8")]
        pub end_time_unix_nano: u64,
        #[prost(message, repeated, tag = "9")]
        pub attributes: Vec<KeyValue>,
        #[prost(message, optional, tag = "15")]
        pub status: Option<Status>,
        /// The W3C trace flags in bits 0–7; bit 8: whether bit 9 says if the parent is remote.
        #[prost(fixed32, tag = "16")]
        pub flags: u32,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Status {
        #[prost(string, tag = "2")]
        pub message: String,
        /// `StatusCode`: 0 unset, 1 ok, 2 error.
        #[prost(int32, tag = "3")]
        pub code: i32,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct KeyValue {
        #[prost(string, tag = "1")]
        pub key: String,
        #[prost(message, optional, tag = "2")]
        pub value: Option<AnyValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct AnyValue {
        #[prost(oneof = "Value", tags = "1, 3")]
        pub value: Option<Value>,
    }

    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Value {
        #[prost(string, tag = "1")]
        String(String),
        #[prost(int64, tag = "3")]
        Int(i64),
    }
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
mod tests {
    use super::messages::*;
    use super::*;
    use crate::trace::span::Fields;
    use prost::Message;

    fn record() -> Record {
        let names = crate::trace::span::Names::new(
            vec![vec!["api".into()]],
            vec![(
                "app".into(),
                vec!["127.0.0.1:8080".into(), "127.0.0.1:8081".into()],
            )],
        );
        let mut r = Record::new(
            Fields {
                names: std::sync::Arc::new(names),
                trace: super::super::context::TraceContext {
                    trace_id: [7; 16],
                    parent: Some([9; 8]),
                    span_id: [1; 8],
                    sampled: true,
                    continued: true,
                },
                start: 1_000,
                end: 5_000,
                method: "GET",
                scheme: "http",
                protocol: "1.1",
                client: "127.0.0.1:5000".parse().unwrap(),
                status: 200,
                listener: 0,
                route: Some(0),
                cache: "MISS",
                upstream: Some((0, 0)),
                grpc_status: Some(0),
                error: None,
                attempts: [
                    Attempt {
                        span_id: [2; 8],
                        start: 1_100,
                        end: 2_000,
                        upstream: 0,
                        server: 1,
                        addr: Some("127.0.0.1:8081".parse().unwrap()),
                        status: 0,
                        error: Some("connect"),
                    },
                    Attempt {
                        span_id: [3; 8],
                        start: 2_100,
                        end: 0,
                        upstream: 0,
                        server: 0,
                        addr: Some("127.0.0.1:8080".parse().unwrap()),
                        status: 200,
                        error: None,
                    },
                ]
                .into_iter()
                .collect(),
            },
            64,
        );
        r.set_text(Text::Path, b"/x");
        r.set_text(Text::Host, b"example.com");
        r.set_text(Text::TraceState, b"a=1");
        r
    }

    #[test]
    fn a_record_becomes_a_server_span_and_a_client_span_per_attempt() {
        let mut out = Vec::new();
        let start = Encoder::default().encode(&[record()], "edge", &mut out);
        // Decoded as a collector reads it.
        let req = ExportTraceServiceRequest::decode(&out[start..]).unwrap();
        let spans = &req.resource_spans[0].scope_spans[0].spans;
        assert_eq!(spans.len(), 3);
        let (server, failed, ok) = (&spans[0], &spans[1], &spans[2]);
        assert_eq!(server.kind, 2);
        assert_eq!(server.trace_id, vec![7; 16]);
        assert_eq!(server.span_id, vec![1; 8]);
        assert_eq!(server.parent_span_id, vec![9; 8]);
        assert_eq!(server.name, "GET api");
        assert_eq!(server.trace_state, "a=1");
        assert_eq!(server.flags, 0x301);
        assert_eq!(
            (server.start_time_unix_nano, server.end_time_unix_nano),
            (1_000, 5_000)
        );
        assert!(server.status.is_none());
        for c in [failed, ok] {
            assert_eq!(c.kind, 3);
            assert_eq!(c.trace_id, vec![7; 16]);
            assert_eq!(
                c.parent_span_id,
                vec![1; 8],
                "a try's parent is weir's server span"
            );
            assert_eq!(c.flags, 0x101);
        }
        assert_eq!(failed.status.as_ref().unwrap().code, 2);
        assert_eq!(failed.status.as_ref().unwrap().message, "connect");
        assert_eq!(
            ok.end_time_unix_nano, 5_000,
            "the last try ends with the request"
        );
        let has = |s: &Span, k: &str, v: Value| {
            s.attributes
                .iter()
                .any(|kv| kv.key == k && kv.value.as_ref().unwrap().value == Some(v.clone()))
        };
        let text = |v: &str| Value::String(v.into());
        assert!(has(ok, "http.request.resend_count", Value::Int(1)));
        assert!(has(ok, "server.port", Value::Int(8080)));
        assert!(has(ok, "server.address", text("127.0.0.1")));
        assert!(has(failed, "weir.upstream.server", text("127.0.0.1:8081")));
        assert!(has(failed, "error.type", text("connect")));
        assert!(has(server, "http.response.status_code", Value::Int(200)));
        assert!(has(server, "weir.cache_status", text("MISS")));
        assert!(has(server, "url.path", text("/x")));
        assert!(has(server, "server.address", text("example.com")));
        assert!(has(server, "client.address", text("127.0.0.1")));
        assert!(has(server, "rpc.grpc.status_code", Value::Int(0)));
        assert!(!server.attributes.iter().any(|kv| kv.key == "url.query"));
        let res = req.resource_spans[0].resource.as_ref().unwrap();
        assert!(res
            .attributes
            .iter()
            .any(|kv| kv.key == "service.name"
                && kv.value.as_ref().unwrap().value == Some(text("edge"))));
        let scope = req.resource_spans[0].scope_spans[0].scope.as_ref().unwrap();
        assert_eq!(scope.name, "weir");
    }

    #[test]
    fn a_failed_server_span_says_why_and_long_values_are_cut() {
        let mut r = record();
        r.status = 502;
        r.error = None;
        let mut long = Record::new(
            Fields {
                names: r.names.clone(),
                trace: r.trace,
                start: 10,
                end: 5,
                method: "POST",
                scheme: "https",
                protocol: "2",
                client: "[::1]:9".parse().unwrap(),
                status: 0,
                listener: 0,
                route: None,
                cache: "-",
                upstream: None,
                grpc_status: None,
                error: Some("client closed"),
                attempts: Default::default(),
            },
            0,
        );
        long.set_text(Text::Path, "é".repeat(600).as_bytes());
        long.set_text(Text::Query, b"q=1");
        let mut out = Vec::new();
        let mut enc = Encoder::default();
        let start = enc.encode(&[r, long], "weir", &mut out);
        let req = ExportTraceServiceRequest::decode(&out[start..]).unwrap();
        let spans = &req.resource_spans[0].scope_spans[0].spans;
        assert_eq!(spans.len(), 4);
        let status = |s: &Span, k: &str| {
            s.attributes
                .iter()
                .find(|kv| kv.key == k)
                .and_then(|kv| kv.value.clone()?.value)
        };
        assert_eq!(
            status(&spans[0], "error.type"),
            Some(Value::String("502".into()))
        );
        assert_eq!(spans[0].status.as_ref().unwrap().code, 2);
        let cut = &spans[3];
        assert_eq!(cut.name, "POST");
        assert_eq!(
            cut.end_time_unix_nano, 10,
            "an end before the start is the start"
        );
        assert_eq!(
            status(cut, "error.type"),
            Some(Value::String("client closed".into()))
        );
        assert_eq!(status(cut, "url.query"), Some(Value::String("q=1".into())));
        assert_eq!(
            status(cut, "client.address"),
            Some(Value::String("::1".into()))
        );
        match status(cut, "url.path") {
            // 512 bytes of 2-byte characters: 256 of them, the cut falling between two.
            Some(Value::String(p)) => assert_eq!(p.chars().count(), 256),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn varint_lengths_match_the_encoding() {
        for v in [0u64, 1, 127, 128, 16_383, 16_384, u32::MAX as u64, u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v), "{v}");
        }
    }
}
