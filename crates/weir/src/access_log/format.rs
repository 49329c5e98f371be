//! Access log formats: `combined`, `common`, `json`, or a template of `$variables` (nginx
//! syntax: `$status`, `${request_time}`, `$http_user_agent`, `$sent_http_content_type`).
//! A template is parsed once at config load into literal and variable pieces, and an unknown
//! variable is a config error; rendering a line is a walk over the pieces into the worker's
//! buffer, with no allocation.

use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

/// nginx's and Apache's `combined` format.
pub const COMBINED: &str = r#"$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent""#;
/// nginx's and Apache's `common` format.
pub const COMMON: &str =
    r#"$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent"#;

/// What a log line can report about one request.
pub struct Entry<'a> {
    /// Seconds since the Unix epoch, and the millisecond.
    pub time: (u64, u32),
    pub client: SocketAddr,
    pub method: &'a str,
    pub path: &'a [u8],
    pub query: Option<&'a [u8]>,
    pub protocol: &'a str,
    pub status: u16,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub request_time: Option<Duration>,
    pub upstream_time: Option<Duration>,
    pub upstream_addr: Option<SocketAddr>,
    pub cache: &'static str,
    pub route: &'a str,
    /// What the TLS handshake settled; `None` over plain TCP.
    pub tls: Option<&'a crate::tls::TlsInfo>,
    pub request_id: Option<&'a [u8]>,
    /// A gRPC call's `grpc-status` (the upstream's, or weir's refusal's).
    pub grpc_status: Option<u8>,
    /// The request's trace and weir's span (with `tracing`).
    pub trace: Option<crate::trace::context::TraceContext>,
    /// Who an authentication filter said the client is.
    pub identity: Option<&'a crate::vars::Identity>,
    /// A request field by lowercase name.
    pub request_field: &'a dyn Fn(&str) -> Option<&'a [u8]>,
    /// A response field by lowercase name (captured when the head was sent).
    pub response_field: &'a dyn Fn(&str) -> Option<&'a [u8]>,
}

impl std::fmt::Debug for Entry<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("method", &self.method)
            .field("status", &self.status)
            .finish()
    }
}

/// One variable of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Var {
    RemoteAddr,
    RemotePort,
    TimeLocal,
    TimeIso8601,
    Msec,
    Request,
    Method,
    Path,
    Query,
    Uri,
    Protocol,
    Status,
    BytesSent,
    BytesReceived,
    RequestTime,
    UpstreamTime,
    UpstreamAddr,
    Cache,
    Route,
    TlsProtocol,
    TlsCipher,
    TlsSni,
    TlsClientSubject,
    RequestId,
    /// A gRPC call's `grpc-status`.
    GrpcStatus,
    /// The W3C trace id, and weir's span id (`tracing`).
    TraceId,
    SpanId,
    /// Request field, lowercase with `-` (from `$http_user_agent`).
    RequestField(String),
    /// Response field (from `$sent_http_content_type`).
    ResponseField(String),
    /// A query parameter (`$arg_page`).
    Arg(String),
    /// A cookie (`$cookie_session`).
    Cookie(String),
    /// The Host field's host, without the port.
    Host,
    /// The consumer an authentication filter named (`-` when none did).
    Consumer,
    /// A claim of a verified token (`$jwt_claim_sub`).
    Claim(String),
}

const NAMES: &[(&str, Var)] = &[
    ("remote_addr", Var::RemoteAddr),
    ("remote_port", Var::RemotePort),
    ("time_local", Var::TimeLocal),
    ("time_iso8601", Var::TimeIso8601),
    ("msec", Var::Msec),
    ("request", Var::Request),
    ("method", Var::Method),
    ("request_method", Var::Method),
    ("path", Var::Path),
    // nginx's `$uri`: the normalised path, without the query (weir's paths are normalised
    // before anything reads them: docs/config.md, "Request paths").
    ("uri", Var::Path),
    ("query", Var::Query),
    ("args", Var::Query),
    ("request_uri", Var::Uri),
    ("protocol", Var::Protocol),
    ("server_protocol", Var::Protocol),
    ("status", Var::Status),
    ("body_bytes_sent", Var::BytesSent),
    ("bytes_sent", Var::BytesSent),
    ("bytes_received", Var::BytesReceived),
    ("request_time", Var::RequestTime),
    ("upstream_time", Var::UpstreamTime),
    ("upstream_response_time", Var::UpstreamTime),
    ("upstream_addr", Var::UpstreamAddr),
    ("cache", Var::Cache),
    ("upstream_cache_status", Var::Cache),
    ("route", Var::Route),
    ("tls_protocol", Var::TlsProtocol),
    ("ssl_protocol", Var::TlsProtocol),
    ("tls_cipher", Var::TlsCipher),
    ("ssl_cipher", Var::TlsCipher),
    ("tls_sni", Var::TlsSni),
    ("ssl_server_name", Var::TlsSni),
    ("tls_client_subject", Var::TlsClientSubject),
    ("ssl_client_s_dn", Var::TlsClientSubject),
    ("request_id", Var::RequestId),
    ("grpc_status", Var::GrpcStatus),
    ("trace_id", Var::TraceId),
    ("span_id", Var::SpanId),
    ("host", Var::Host),
    ("consumer", Var::Consumer),
    ("remote_user", Var::Consumer),
];

/// A piece of a compiled template.
pub type Piece = crate::vars::Piece<Var>;

/// A compiled format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Format {
    Template(Vec<Piece>),
    Json,
}

impl Format {
    /// `combined`, `common`, `json`, or a template.
    pub fn parse(spec: &str) -> Result<Format, String> {
        match spec {
            "combined" => Format::template(COMBINED),
            "common" => Format::template(COMMON),
            "json" => Ok(Format::Json),
            t if t.contains('$') => Format::template(t),
            other => Err(format!(
                "unknown format {other:?}: use combined, common, json, or a template with $variables"
            )),
        }
    }

    fn template(t: &str) -> Result<Format, String> {
        crate::vars::scan(t, variable).map(Format::Template)
    }

    /// Whether the format reports response fields (then they are captured per request).
    pub fn uses_response_fields(&self) -> bool {
        matches!(self, Format::Template(p) if p.iter().any(|p| matches!(p, Piece::Var(Var::ResponseField(_)))))
    }

    /// Whether the format reports the request id.
    pub fn uses_request_id(&self) -> bool {
        match self {
            Format::Json => true,
            Format::Template(p) => p.contains(&Piece::Var(Var::RequestId)),
        }
    }

    /// The response fields the format reports.
    pub fn response_fields(&self) -> Vec<String> {
        match self {
            Format::Json => Vec::new(),
            Format::Template(p) => p
                .iter()
                .filter_map(|p| match p {
                    Piece::Var(Var::ResponseField(n)) => Some(n.clone()),
                    _ => None,
                })
                .collect(),
        }
    }

    /// Appends one line (with its `\n`) for `e` to `out`; `time_local` is the cached rendering
    /// of `e.time`'s second in `[10/Oct/2000:13:55:36 +0000]` form without brackets.
    pub fn render(&self, e: &Entry<'_>, time_local: &[u8], out: &mut Vec<u8>) {
        match self {
            Format::Json => json(e, out),
            Format::Template(pieces) => {
                for p in pieces {
                    match p {
                        Piece::Text(t) => out.extend_from_slice(t),
                        Piece::Var(v) => text_var(v, e, time_local, out),
                    }
                }
            }
        }
        out.push(b'\n');
    }
}

fn variable(name: &str) -> Result<Var, String> {
    if let Some((_, v)) = NAMES.iter().find(|(n, _)| *n == name) {
        return Ok(v.clone());
    }
    let field = |n: &str| n.replace('_', "-").to_ascii_lowercase();
    if let Some(n) = name.strip_prefix("http_").filter(|n| !n.is_empty()) {
        return Ok(Var::RequestField(field(n)));
    }
    if let Some(n) = name.strip_prefix("sent_http_").filter(|n| !n.is_empty()) {
        return Ok(Var::ResponseField(field(n)));
    }
    if let Some(n) = name.strip_prefix("arg_").filter(|n| !n.is_empty()) {
        return Ok(Var::Arg(n.to_string()));
    }
    if let Some(n) = name.strip_prefix("cookie_").filter(|n| !n.is_empty()) {
        return Ok(Var::Cookie(n.to_string()));
    }
    if let Some(n) = name.strip_prefix("jwt_claim_").filter(|n| !n.is_empty()) {
        return Ok(Var::Claim(n.to_string()));
    }
    let known: Vec<&str> = NAMES.iter().map(|(n, _)| *n).collect();
    Err(format!(
        "unknown variable ${name}; known: {}, http_NAME (request field), sent_http_NAME (response field), arg_NAME, cookie_NAME, jwt_claim_NAME",
        known.join(", ")
    ))
}

/// The bytes [`escaped`] writes as `\xHH`: a table lookup per byte.
static ESCAPE: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = i < 0x20 || i >= 0x7f || i == b'"' as usize || i == b'\\' as usize;
        i += 1;
    }
    t
};

/// Bytes from the request, escaped as nginx does for text logs: `"`, `\`, controls and bytes
/// beyond ASCII as `\xHH`, so a line cannot be split or forged by what a client sends.
fn escaped(v: &[u8], out: &mut Vec<u8>) {
    let clean = v
        .iter()
        .position(|b| ESCAPE[*b as usize])
        .unwrap_or(v.len());
    out.extend_from_slice(&v[..clean]);
    for &b in &v[clean..] {
        if ESCAPE[b as usize] {
            let _ = write!(out, "\\x{b:02X}");
        } else {
            out.push(b);
        }
    }
}

/// A number, without the `fmt` machinery (a combined line's numbers and address through
/// `write!` cost ~1,500 instructions per request under callgrind).
fn number(n: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

thread_local! {
    /// The last client address rendered on this thread, and its text: consecutive lines mostly
    /// come from the same keep-alive client.
    static LAST_IP: std::cell::RefCell<(Option<std::net::IpAddr>, Vec<u8>)> =
        const { std::cell::RefCell::new((None, Vec::new())) };
}

fn ip(a: std::net::IpAddr, out: &mut Vec<u8>) {
    LAST_IP.with_borrow_mut(|(last, text)| {
        if *last != Some(a) {
            let mut buf = [0u8; 64];
            text.clear();
            text.extend_from_slice(crate::vars::format_ip(a, &mut buf));
            *last = Some(a);
        }
        out.extend_from_slice(text);
    });
}

fn seconds(d: Duration, out: &mut Vec<u8>) {
    decimal(d.as_secs(), d.subsec_millis(), 3, out);
}

/// `whole.fraction`, the fraction zero-padded to `width` digits.
fn decimal(whole: u64, fraction: u32, width: usize, out: &mut Vec<u8>) {
    number(whole, out);
    out.push(b'.');
    let mut digits = itoa::Buffer::new();
    let f = digits.format(fraction).as_bytes();
    out.extend(std::iter::repeat_n(b'0', width.saturating_sub(f.len())));
    out.extend_from_slice(f);
}

fn text_var(v: &Var, e: &Entry<'_>, time_local: &[u8], out: &mut Vec<u8>) {
    let dash = |out: &mut Vec<u8>| out.push(b'-');
    match v {
        Var::RemoteAddr => ip(e.client.ip(), out),
        Var::RemotePort => number(e.client.port().into(), out),
        Var::TimeLocal => out.extend_from_slice(time_local),
        Var::TimeIso8601 => iso8601(e.time, out),
        Var::Msec => {
            decimal(e.time.0, e.time.1, 3, out);
        }
        Var::Request => {
            out.extend_from_slice(e.method.as_bytes());
            out.push(b' ');
            uri(e, out);
            out.push(b' ');
            out.extend_from_slice(e.protocol.as_bytes());
        }
        Var::Method => out.extend_from_slice(e.method.as_bytes()),
        Var::Path => escaped(e.path, out),
        Var::Query => match e.query {
            Some(q) => escaped(q, out),
            None => dash(out),
        },
        Var::Uri => uri(e, out),
        Var::Protocol => out.extend_from_slice(e.protocol.as_bytes()),
        Var::Status => number(e.status.into(), out),
        Var::GrpcStatus => match e.grpc_status {
            Some(code) => number(code.into(), out),
            None => dash(out),
        },
        Var::TraceId => match &e.trace {
            Some(t) => crate::trace::context::put_hex(&t.trace_id, out),
            None => dash(out),
        },
        Var::SpanId => match &e.trace {
            Some(t) => crate::trace::context::put_hex(&t.span_id, out),
            None => dash(out),
        },
        Var::BytesSent => number(e.bytes_sent, out),
        Var::BytesReceived => number(e.bytes_received, out),
        Var::RequestTime => match e.request_time {
            Some(d) => seconds(d, out),
            None => dash(out),
        },
        Var::UpstreamTime => match e.upstream_time {
            Some(d) => seconds(d, out),
            None => dash(out),
        },
        Var::UpstreamAddr => match e.upstream_addr {
            Some(a) => {
                let _ = write!(out, "{a}");
            }
            None => dash(out),
        },
        Var::Cache => out.extend_from_slice(e.cache.as_bytes()),
        Var::Route => escaped(e.route.as_bytes(), out),
        Var::TlsProtocol => out.extend_from_slice(e.tls.map_or("-", |t| t.protocol).as_bytes()),
        Var::TlsCipher => out.extend_from_slice(e.tls.map_or("-", |t| t.cipher).as_bytes()),
        Var::TlsSni => match e.tls.and_then(|t| t.sni.as_deref()) {
            Some(v) => escaped(v.as_bytes(), out),
            None => dash(out),
        },
        Var::TlsClientSubject => match e.tls.and_then(|t| t.client_subject.as_deref()) {
            Some(v) => escaped(v.as_bytes(), out),
            None => dash(out),
        },
        Var::RequestId => match e.request_id {
            Some(id) => escaped(id, out),
            None => dash(out),
        },
        Var::RequestField(n) => match (e.request_field)(n) {
            Some(v) => escaped(v, out),
            None => dash(out),
        },
        Var::ResponseField(n) => match (e.response_field)(n) {
            Some(v) => escaped(v, out),
            None => dash(out),
        },
        Var::Arg(n) => match e.query.and_then(|q| crate::vars::arg(q, n.as_bytes())) {
            Some(v) => escaped(v, out),
            None => dash(out),
        },
        Var::Cookie(n) => {
            let found =
                (e.request_field)("cookie").and_then(|c| crate::vars::cookie_in(c, n.as_bytes()));
            match found {
                Some(v) => escaped(v, out),
                None => dash(out),
            }
        }
        Var::Consumer => match e.identity.filter(|i| !i.consumer.is_empty()) {
            Some(i) => escaped(i.consumer.as_bytes(), out),
            None => dash(out),
        },
        Var::Claim(n) => {
            let mut v = Vec::new();
            if let Some(i) = e.identity {
                i.claim(n, &mut v);
            }
            match v.is_empty() {
                false => escaped(&v, out),
                true => dash(out),
            }
        }
        Var::Host => match (e.request_field)("host") {
            Some(v) => {
                let host = match v.iter().rposition(|b| *b == b':') {
                    Some(i) if !v.ends_with(b"]") => &v[..i],
                    _ => v,
                };
                escaped(&host.to_ascii_lowercase(), out)
            }
            None => dash(out),
        },
    }
}

fn uri(e: &Entry<'_>, out: &mut Vec<u8>) {
    escaped(e.path, out);
    if let Some(q) = e.query {
        out.push(b'?');
        escaped(q, out);
    }
}

/// `2026-11-22T17:38:23.123Z`.
pub fn iso8601((secs, ms): (u64, u32), out: &mut Vec<u8>) {
    out.extend_from_slice(&weir_http::date::rfc3339(secs, ms));
}

/// `22/Nov/2026:17:38:23 +0000` (weir logs in UTC).
pub fn time_local(secs: u64, out: &mut Vec<u8>) {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (y, mo, d, h, mi, s) = weir_http::date::civil(secs);
    let _ = write!(
        out,
        "{d:02}/{}/{y:04}:{h:02}:{mi:02}:{s:02} +0000",
        MONTHS[(mo - 1) as usize]
    );
}

/// One JSON object with stable field names; absent values are `null`.
fn json(e: &Entry<'_>, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"time\":\"");
    iso8601(e.time, out);
    out.extend_from_slice(b"\",\"client\":\"");
    ip(e.client.ip(), out);
    out.extend_from_slice(b"\",\"method\":");
    json_str(Some(e.method.as_bytes()), out);
    out.extend_from_slice(b",\"path\":");
    json_str(Some(e.path), out);
    out.extend_from_slice(b",\"query\":");
    json_str(e.query, out);
    out.extend_from_slice(b",\"protocol\":");
    json_str(Some(e.protocol.as_bytes()), out);
    out.extend_from_slice(b",\"status\":");
    number(e.status.into(), out);
    if let Some(code) = e.grpc_status {
        out.extend_from_slice(b",\"grpc_status\":");
        number(code.into(), out);
    }
    if let Some(t) = &e.trace {
        out.extend_from_slice(b",\"trace_id\":\"");
        crate::trace::context::put_hex(&t.trace_id, out);
        out.extend_from_slice(b"\",\"span_id\":\"");
        crate::trace::context::put_hex(&t.span_id, out);
        out.push(b'"');
    }
    out.extend_from_slice(b",\"bytes_sent\":");
    number(e.bytes_sent, out);
    out.extend_from_slice(b",\"bytes_received\":");
    number(e.bytes_received, out);
    out.extend_from_slice(b",\"request_time\":");
    json_secs(e.request_time, out);
    out.extend_from_slice(b",\"upstream_time\":");
    json_secs(e.upstream_time, out);
    out.extend_from_slice(b",\"upstream_addr\":");
    match e.upstream_addr {
        Some(a) => {
            let _ = write!(out, "\"{a}\"");
        }
        None => out.extend_from_slice(b"null"),
    }
    // Not a cached route: `null`, as the docs promise for absent values (not the text `-`).
    out.extend_from_slice(b",\"cache\":");
    json_str((e.cache != "-").then_some(e.cache.as_bytes()), out);
    out.extend_from_slice(b",\"route\":");
    json_str(Some(e.route.as_bytes()), out);
    out.extend_from_slice(b",\"tls_protocol\":");
    json_str(e.tls.map(|t| t.protocol.as_bytes()), out);
    out.extend_from_slice(b",\"tls_cipher\":");
    json_str(e.tls.map(|t| t.cipher.as_bytes()), out);
    out.extend_from_slice(b",\"tls_sni\":");
    json_str(e.tls.and_then(|t| t.sni.as_deref()).map(str::as_bytes), out);
    out.extend_from_slice(b",\"tls_client_subject\":");
    json_str(
        e.tls
            .and_then(|t| t.client_subject.as_deref())
            .map(str::as_bytes),
        out,
    );
    out.extend_from_slice(b",\"request_id\":");
    json_str(e.request_id, out);
    out.extend_from_slice(b",\"consumer\":");
    json_str(e.identity.map(|i| i.consumer.as_bytes()), out);
    out.extend_from_slice(b",\"referer\":");
    json_str((e.request_field)("referer"), out);
    out.extend_from_slice(b",\"user_agent\":");
    json_str((e.request_field)("user-agent"), out);
    out.push(b'}');
}

fn json_secs(d: Option<Duration>, out: &mut Vec<u8>) {
    match d {
        Some(d) => {
            decimal(d.as_secs(), d.subsec_micros(), 6, out);
        }
        None => out.extend_from_slice(b"null"),
    }
}

/// A JSON string; bytes that are not UTF-8 become U+FFFD.
fn json_str(v: Option<&[u8]>, out: &mut Vec<u8>) {
    let Some(v) = v else {
        out.extend_from_slice(b"null");
        return;
    };
    out.push(b'"');
    for c in String::from_utf8_lossy(v).chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => {
                let mut b = [0; 4];
                out.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
            }
        }
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry<'a>(
        fields: &'a dyn Fn(&str) -> Option<&'a [u8]>,
        sent: &'a dyn Fn(&str) -> Option<&'a [u8]>,
    ) -> Entry<'a> {
        Entry {
            time: (1_795_369_103, 123),
            client: "192.0.2.7:5555".parse().unwrap(),
            method: "GET",
            path: b"/a\"b",
            query: Some(b"x=1"),
            protocol: "HTTP/1.1",
            status: 200,
            bytes_sent: 12,
            bytes_received: 0,
            request_time: Some(Duration::from_micros(1500)),
            upstream_time: None,
            upstream_addr: None,
            cache: "hit",
            route: "hello",
            tls: None,
            request_id: Some(b"abc"),
            grpc_status: None,
            trace: None,
            identity: None,
            request_field: fields,
            response_field: sent,
        }
    }

    fn line(spec: &str) -> String {
        let fields = |n: &str| match n {
            "user-agent" => Some(&b"curl/8 \"x\"\n"[..]),
            "x-tenant" => Some(&b"blue"[..]),
            _ => None,
        };
        let sent = |n: &str| (n == "content-type").then_some(&b"text/plain"[..]);
        let e = entry(&fields, &sent);
        let mut t = Vec::new();
        time_local(e.time.0, &mut t);
        let mut out = Vec::new();
        Format::parse(spec).unwrap().render(&e, &t, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_named_formats_render_as_nginx_does() {
        assert_eq!(
            line("combined"),
            "192.0.2.7 - - [22/Nov/2026:17:38:23 +0000] \"GET /a\\x22b?x=1 HTTP/1.1\" 200 12 \"-\" \"curl/8 \\x22x\\x22\\x0A\"\n"
        );
        assert_eq!(
            line("common"),
            "192.0.2.7 - - [22/Nov/2026:17:38:23 +0000] \"GET /a\\x22b?x=1 HTTP/1.1\" 200 12\n"
        );
    }

    #[test]
    fn templates_take_every_variable_kind() {
        assert_eq!(
            line("$status ${request_time}s $cache $route $request_id $http_x_tenant $sent_http_content_type $upstream_addr $msec"),
            "200 0.001s hit hello abc blue text/plain - 1795369103.123\n"
        );
        assert!(Format::parse("$status $nope")
            .unwrap_err()
            .contains("$nope"));
        // A `$` that starts no name is text (`vars::scan`), as in every other config value.
        assert!(Format::parse("$ $").is_ok());
        assert!(Format::parse("${status").is_err());
        assert!(Format::parse("plain").is_err());
        assert!(Format::parse("$sent_http_etag")
            .unwrap()
            .uses_response_fields());
    }

    #[test]
    fn json_lines_parse_and_keep_odd_bytes_safe() {
        let v: serde_json::Value = serde_json::from_str(line("json").trim_end()).unwrap();
        assert_eq!(v["time"], "2026-11-22T17:38:23.123Z");
        assert_eq!(v["path"], "/a\"b");
        assert_eq!(v["status"], 200);
        assert_eq!(v["request_time"], 0.0015);
        assert_eq!(v["upstream_time"], serde_json::Value::Null);
        assert_eq!(v["user_agent"], "curl/8 \"x\"\n");
        assert_eq!(v["request_id"], "abc");
    }

    #[test]
    fn civil_dates_cross_leap_years() {
        let mut out = Vec::new();
        iso8601((951_782_400, 0), &mut out); // 2000-02-29
        assert_eq!(out, b"2000-02-29T00:00:00.000Z");
        out.clear();
        time_local(0, &mut out);
        assert_eq!(out, b"01/Jan/1970:00:00:00 +0000");
    }
}
