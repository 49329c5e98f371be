//! weir's own refusals to gRPC requests (`content-type: application/grpc…`, gRPC-Web too):
//! gRPC clients read the status from `grpc-status`, not from HTTP's, and take a 401 or a 503
//! with a text body as a broken server (`UNKNOWN`, "unexpected content-type"). So a refusal is
//! a trailers-only response as the gRPC protocol has it: `200`, the call's content type (one
//! of [`KINDS`]: a value is never echoed), `grpc-status` and `grpc-message`, and no body (over
//! HTTP/2 one HEADERS frame that ends the stream). The status mapping is issue 55's (Envoy's
//! for the same cases); a status it does not name maps as gRPC's own HTTP-to-gRPC table does.
//! The access log's `$status` and the metrics record the refusal's HTTP status (502, 401…), as
//! for any other client, so that error rates and alerts see gRPC failures; the wire carries
//! `200`, and `$sent_http_grpc_status` the gRPC status. Errors a protocol answers itself (a
//! declared body over the limit, a body timeout) take the same shape over HTTP/2
//! (`server/h2/stream.rs`).

use weir_http::{Framing, Persistence, Reply, RequestHead};

use super::context::RequestCtx;
use super::downstream::Downstream;
use super::send_head;

/// The content types a refusal answers with: the call's when it is one of these (in order of
/// specificity), else the plain gRPC or gRPC-Web type its prefix names.
pub(crate) const KINDS: [&str; 7] = [
    "application/grpc-web-text+proto",
    "application/grpc-web-text",
    "application/grpc-web+proto",
    "application/grpc-web",
    "application/grpc+proto",
    "application/grpc+json",
    "application/grpc",
];
const GRPC_WEB: u8 = 3;
const GRPC: u8 = 6;

/// Which of [`KINDS`] a request's content type is (`None`: not a gRPC call). Every call is a
/// POST: other requests cost one comparison (the HTTP/2 stream asks this of each request).
#[inline]
pub(crate) fn kind(head: &RequestHead) -> Option<u8> {
    if head.method != weir_http::Method::Post {
        return None;
    }
    let v = head.header("content-type")?;
    if v.len() < 16 || !v[..16].eq_ignore_ascii_case(b"application/grpc") {
        return None;
    }
    let exact = KINDS
        .iter()
        .position(|k| v.eq_ignore_ascii_case(k.as_bytes()));
    Some(match exact {
        Some(i) => i as u8,
        None if v.len() >= 20 && v[..20].eq_ignore_ascii_case(b"application/grpc-web") => GRPC_WEB,
        None => GRPC,
    })
}

/// Whether `head` is a gRPC (or gRPC-Web) call: [`kind`] without telling which (one
/// comparison of the type's prefix).
#[inline]
pub(crate) fn is_grpc(head: &RequestHead) -> bool {
    head.method == weir_http::Method::Post
        && head
            .header("content-type")
            .is_some_and(|v| v.len() >= 16 && v[..16].eq_ignore_ascii_case(b"application/grpc"))
}

/// The gRPC status code for weir's HTTP refusal `status`.
pub(crate) fn grpc_status(status: u16) -> u8 {
    match status {
        400 => 13,       // INTERNAL
        401 => 16,       // UNAUTHENTICATED
        403 => 7,        // PERMISSION_DENIED
        404 => 12,       // UNIMPLEMENTED
        413 | 429 => 8,  // RESOURCE_EXHAUSTED
        502 | 503 => 14, // UNAVAILABLE
        504 => 4,        // DEADLINE_EXCEEDED
        _ => 2,          // UNKNOWN
    }
}

/// Answers a gRPC request that weir refuses with `status` as a trailers-only gRPC response,
/// keeping the refusal's field `lines` (`Retry-After`, `WWW-Authenticate`).
#[cold]
pub(crate) fn send<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    head: &RequestHead,
    status: u16,
    lines: &[u8],
    persistence: Persistence,
) -> Persistence {
    let rt = ctx.rt.clone();
    let fields = fields(status, kind(head).unwrap_or(GRPC));
    let mut reply = reply(&rt.cfg.server_line, &fields);
    reply.add_lines(lines);
    let persistence = send_head(d, ctx, &reply, persistence);
    // The log and the metrics count the refusal, not the `200` gRPC requires on the wire.
    ctx.status = status;
    ctx.extra.get_or_insert_with(Default::default).grpc_status = Some(grpc_status(status));
    persistence
}

/// A `grpc-status` value as gRPC defines it (0 to 16); `None` for anything else.
pub(crate) fn parse_status(v: &[u8]) -> Option<u8> {
    match v {
        [d @ b'0'..=b'9'] => Some(d - b'0'),
        [b'1', d @ b'0'..=b'6'] => Some(10 + d - b'0'),
        _ => None,
    }
}

/// Notes the status of a proxied gRPC call from `fields` (a trailers-only head, or the
/// trailers), when they carry one.
#[cold]
pub(crate) fn note_status(ctx: &mut RequestCtx, fields: &[weir_http::Header]) {
    let found = fields
        .iter()
        .find(|f| f.name.eq_ignore_ascii_case(b"grpc-status"))
        .and_then(|f| parse_status(&f.value));
    if let Some(code) = found {
        ctx.extra.get_or_insert_with(Default::default).grpc_status = Some(code);
    }
}

/// The field lines of the refusal `status` to a call of [`KINDS`]`[kind]`.
pub(crate) fn fields(status: u16, kind: u8) -> Vec<u8> {
    let content_type = KINDS.get(kind as usize).unwrap_or(&KINDS[GRPC as usize]);
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(b"Content-Type: ");
    out.extend_from_slice(content_type.as_bytes());
    out.extend_from_slice(b"\r\ngrpc-status: ");
    out.extend_from_slice(grpc_status(status).to_string().as_bytes());
    // `grpc-message` is percent-encoded text; a reason phrase is printable ASCII already.
    out.extend_from_slice(b"\r\ngrpc-message: ");
    out.extend_from_slice(status.to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(weir_http::response::reason(status).as_bytes());
    out.extend_from_slice(b"\r\n");
    out
}

/// The trailers-only reply carrying `fields` (see [`fields`]).
pub(crate) fn reply<'a>(server_line: &'a [u8], fields: &'a [u8]) -> Reply<'a> {
    let mut reply = Reply::new(200, Framing::Length(0));
    reply.add_lines(server_line);
    reply.add_lines(fields);
    reply
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(method: &str, content_type: &[u8]) -> RequestHead {
        let mut raw =
            bytes::BytesMut::from(format!("{method} /s/M HTTP/1.1\r\nHost: a\r\n").as_str());
        raw.extend_from_slice(b"Content-Type: ");
        raw.extend_from_slice(content_type);
        raw.extend_from_slice(b"\r\n\r\n");
        weir_http::parse_request(&mut raw, &weir_http::Limits::default())
            .unwrap()
            .unwrap()
    }

    /// The refusal's content type is one of `KINDS`, never the request's bytes (obs-text, tabs
    /// and 30 KB suffixes were echoed: the review of issue 55's first part).
    #[test]
    fn a_refusal_names_a_known_content_type() {
        let kind_of = |m: &str, ct: &[u8]| kind(&head(m, ct)).map(|k| KINDS[k as usize]);
        let cases: [(&str, &[u8], Option<&str>); 8] = [
            (
                "POST",
                b"application/grpc+proto",
                Some("application/grpc+proto"),
            ),
            ("POST", b"Application/GRPC", Some("application/grpc")),
            (
                "POST",
                b"application/grpc-web-text",
                Some("application/grpc-web-text"),
            ),
            ("POST", b"application/grpc\tx", Some("application/grpc")),
            ("POST", b"application/grpcaaaa", Some("application/grpc")),
            (
                "POST",
                b"application/grpc-web+thrift",
                Some("application/grpc-web"),
            ),
            ("POST", b"application/json", None),
            // Every gRPC call is a POST.
            ("PUT", b"application/grpc", None),
        ];
        for (method, content_type, want) in cases {
            let got = kind_of(method, content_type);
            assert_eq!(
                got,
                want,
                "{method} {}",
                String::from_utf8_lossy(content_type)
            );
        }
        let fields = fields(502, GRPC_WEB);
        assert!(fields.starts_with(b"Content-Type: application/grpc-web\r\ngrpc-status: 14\r\n"));
    }

    #[test]
    fn refusals_map_to_the_grpc_statuses_clients_act_on() {
        let cases = [
            (401, 16),
            (403, 7),
            (429, 8),
            (413, 8),
            (502, 14),
            (503, 14),
            (504, 4),
            (404, 12),
            (400, 13),
            (500, 2),
        ];
        for (http, grpc) in cases {
            assert_eq!(grpc_status(http), grpc, "{http}");
        }
    }
}
