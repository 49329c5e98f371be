//! The hand-written encoder checked against `prost`'s decoding of the same messages.

use super::*;
use crate::trace::span::Fields;
use messages::*;
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
    assert!(res.attributes.iter().any(
        |kv| kv.key == "service.name" && kv.value.as_ref().unwrap().value == Some(text("edge"))
    ));
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

/// The request's messages, as a collector decodes them: the tests' check on [`Encoder`].
mod messages {
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
