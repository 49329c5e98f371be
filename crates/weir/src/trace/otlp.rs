//! OTLP's trace messages (`opentelemetry/proto/collector/trace/v1/trace_service.proto` and the
//! `trace`, `common` and `resource` protos it imports, v1.x), declared with `prost`'s derive,
//! field numbers copied from the protos, only the fields weir sets (a collector skips absent
//! ones). As `cluster/etcd_rpc.rs` does for etcd, and for the same reason: the
//! `opentelemetry-proto` crate's messages would do, but the SDK around them
//! (`opentelemetry_sdk`, `opentelemetry-otlp`) makes a span object per request behind an
//! `Arc` and a mutex-guarded batch processor on the worker, which is the cost this exporter
//! keeps off the workers (see `export.rs`); the messages themselves are 90 lines here.
//!
//! [`request`] turns records (`span.rs`) into one `ExportTraceServiceRequest`, with the
//! attributes of OpenTelemetry's HTTP semantic conventions (stable, v1.23+) plus weir's own:
//! `weir.route`, `weir.cache_status`, `weir.upstream`, `weir.upstream.server`.

use super::span::{Attempt, Record};

#[derive(Clone, PartialEq, prost::Message)]
pub struct ExportTraceServiceRequest {
    #[prost(message, repeated, tag = "1")]
    pub resource_spans: Vec<ResourceSpans>,
}

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

const SERVER: i32 = 2;
const CLIENT: i32 = 3;
const STATUS_ERROR: i32 = 2;
/// `SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK` and `SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK`.
const HAS_IS_REMOTE: u32 = 0x100;
const IS_REMOTE: u32 = 0x200;

/// The export of `records` for `service` (`service.name`).
pub fn request(records: &[Record], service: &str) -> ExportTraceServiceRequest {
    let mut spans = Vec::with_capacity(records.iter().map(|r| r.spans() as usize).sum());
    for r in records {
        spans.push(server_span(r));
        spans.extend(r.attempts.iter().map(|a| client_span(r, a)));
    }
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![
                    text("service.name", service),
                    text("service.version", env!("CARGO_PKG_VERSION")),
                    text("telemetry.sdk.name", "weir"),
                ],
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "weir".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                }),
                spans,
            }],
        }],
    }
}

fn server_span(r: &Record) -> Span {
    let mut attributes = vec![
        text("http.request.method", r.method),
        text("url.path", &r.path),
        text("url.scheme", r.scheme),
        text("network.protocol.name", "http"),
        text("network.protocol.version", r.protocol),
        text("client.address", &r.client.ip().to_string()),
        int("client.port", r.client.port().into()),
        text("weir.cache_status", r.cache),
    ];
    if let Some(q) = &r.query {
        attributes.push(text("url.query", q));
    }
    if let Some(h) = &r.host {
        attributes.push(text("server.address", h));
    }
    if let Some(ua) = &r.user_agent {
        attributes.push(text("user_agent.original", ua));
    }
    if r.status != 0 {
        attributes.push(int("http.response.status_code", r.status.into()));
    }
    if let Some(route) = &r.route {
        attributes.push(text("weir.route", route));
    }
    if let Some((upstream, server)) = &r.upstream {
        attributes.push(text("weir.upstream", upstream));
        attributes.push(text("weir.upstream.server", server));
    }
    if let Some(code) = r.grpc_status {
        attributes.push(int("rpc.grpc.status_code", code.into()));
    }
    // The conventions: a server span is an error for a 5xx (a 4xx is the client's).
    let failed = r.status >= 500 || r.error.is_some();
    if failed {
        let kind = r.error.map_or_else(|| r.status.to_string(), str::to_string);
        attributes.push(text("error.type", &kind));
    }
    let name = match &r.route {
        Some(route) => format!("{} {route}", r.method),
        None => r.method.to_string(),
    };
    let parent_remote = if r.trace.parent.is_some() {
        HAS_IS_REMOTE | IS_REMOTE
    } else {
        HAS_IS_REMOTE
    };
    Span {
        trace_id: r.trace.trace_id.to_vec(),
        span_id: r.trace.span_id.to_vec(),
        trace_state: r.trace_state.clone().unwrap_or_default(),
        parent_span_id: r.trace.parent.map(|p| p.to_vec()).unwrap_or_default(),
        name,
        kind: SERVER,
        start_time_unix_nano: r.start,
        end_time_unix_nano: r.end.max(r.start),
        attributes,
        status: failed.then(|| Status {
            message: r.error.unwrap_or_default().into(),
            code: STATUS_ERROR,
        }),
        flags: u32::from(r.trace.sampled) | parent_remote,
    }
}

fn client_span(r: &Record, a: &Attempt) -> Span {
    let mut attributes = vec![
        text("http.request.method", r.method),
        text("url.path", &r.path),
        text("weir.upstream", &a.upstream),
        text("weir.upstream.server", &a.server),
    ];
    if let Some(addr) = a.addr {
        attributes.push(text("server.address", &addr.ip().to_string()));
        attributes.push(int("server.port", addr.port().into()));
    }
    if a.status != 0 {
        attributes.push(int("http.response.status_code", a.status.into()));
    }
    if a.resend > 0 {
        attributes.push(int("http.request.resend_count", a.resend.into()));
    }
    // The conventions: a client span is an error for any status from 400, or no answer.
    let failed = a.status >= 400 || a.error.is_some() || a.status == 0;
    if failed {
        let kind = match a.error {
            Some(e) => e.to_string(),
            None if a.status == 0 => "no response".to_string(),
            None => a.status.to_string(),
        };
        attributes.push(text("error.type", &kind));
    }
    Span {
        trace_id: r.trace.trace_id.to_vec(),
        span_id: a.span_id.to_vec(),
        trace_state: String::new(),
        parent_span_id: r.trace.span_id.to_vec(),
        name: r.method.to_string(),
        kind: CLIENT,
        start_time_unix_nano: a.start,
        end_time_unix_nano: if a.end == 0 { r.end } else { a.end }.max(a.start),
        attributes,
        status: failed.then(|| Status {
            message: a.error.unwrap_or_default().into(),
            code: STATUS_ERROR,
        }),
        flags: u32::from(r.trace.sampled) | HAS_IS_REMOTE,
    }
}

fn text(key: &str, v: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(Value::String(v.into())),
        }),
    }
}

fn int(key: &str, v: i64) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(Value::Int(v)),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    fn record() -> Record {
        Record {
            trace: super::super::context::TraceContext {
                trace_id: [7; 16],
                parent: Some([9; 8]),
                span_id: [1; 8],
                sampled: true,
                continued: true,
            },
            trace_state: Some("a=1".into()),
            start: 1_000,
            end: 5_000,
            method: "GET",
            path: "/x".into(),
            query: None,
            host: Some("example.com".into()),
            scheme: "http",
            protocol: "1.1",
            client: "127.0.0.1:5000".parse().unwrap(),
            user_agent: None,
            status: 200,
            route: Some("api".into()),
            cache: "MISS",
            upstream: Some(("app".into(), "a".into())),
            grpc_status: None,
            error: None,
            attempts: vec![
                Attempt {
                    span_id: [2; 8],
                    start: 1_100,
                    end: 2_000,
                    upstream: "app".into(),
                    server: "b".into(),
                    addr: None,
                    status: 0,
                    error: Some("connect"),
                    resend: 0,
                },
                Attempt {
                    span_id: [3; 8],
                    start: 2_100,
                    end: 0,
                    upstream: "app".into(),
                    server: "a".into(),
                    addr: Some("127.0.0.1:8080".parse().unwrap()),
                    status: 200,
                    error: None,
                    resend: 1,
                },
            ],
        }
    }

    #[test]
    fn a_record_becomes_a_server_span_and_a_client_span_per_attempt() {
        let req = request(&[record()], "edge");
        // Through the wire format and back, as a collector reads it.
        let req = ExportTraceServiceRequest::decode(&req.encode_to_vec()[..]).unwrap();
        let spans = &req.resource_spans[0].scope_spans[0].spans;
        assert_eq!(spans.len(), 3);
        let (server, failed, ok) = (&spans[0], &spans[1], &spans[2]);
        assert_eq!(server.kind, SERVER);
        assert_eq!(server.parent_span_id, vec![9; 8]);
        assert_eq!(server.name, "GET api");
        assert_eq!(server.trace_state, "a=1");
        assert_eq!(server.flags, 0x301);
        assert!(server.status.is_none());
        for c in [failed, ok] {
            assert_eq!(c.kind, CLIENT);
            assert_eq!(c.trace_id, vec![7; 16]);
            assert_eq!(
                c.parent_span_id,
                vec![1; 8],
                "a try's parent is weir's server span"
            );
        }
        assert_eq!(failed.status.as_ref().unwrap().code, STATUS_ERROR);
        assert_eq!(
            ok.end_time_unix_nano, 5_000,
            "the last try ends with the request"
        );
        let has = |s: &Span, k: &str, v: Value| {
            s.attributes
                .iter()
                .any(|kv| kv.key == k && kv.value.as_ref().unwrap().value == Some(v.clone()))
        };
        assert!(has(ok, "http.request.resend_count", Value::Int(1)));
        assert!(has(ok, "server.port", Value::Int(8080)));
        assert!(has(failed, "error.type", Value::String("connect".into())));
        assert!(has(server, "http.response.status_code", Value::Int(200)));
        assert!(has(
            server,
            "weir.cache_status",
            Value::String("MISS".into())
        ));
        let res = req.resource_spans[0].resource.as_ref().unwrap();
        assert!(res.attributes.contains(&text("service.name", "edge")));
    }
}
