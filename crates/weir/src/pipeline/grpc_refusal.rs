//! weir's own refusals to gRPC requests (`content-type: application/grpc…`, gRPC-Web too):
//! gRPC clients read the status from `grpc-status`, not from HTTP's, and take a 401 or a 503
//! with a text body as a broken server (`UNKNOWN`, "unexpected content-type"). So a refusal is
//! a trailers-only response as the gRPC protocol has it: `200`, `content-type` as asked,
//! `grpc-status` and `grpc-message`, and no body (over HTTP/2 one HEADERS frame that ends the
//! stream). The status mapping is issue 55's (Envoy's for the same cases); a status it does not
//! name maps as gRPC's own HTTP-to-gRPC table does. The access log records what went on the
//! wire (200), and `$sent_http_grpc_status` the gRPC status. Errors a protocol answers itself
//! (a declared body over the limit, a body timeout) take the same shape over HTTP/2
//! (`server/h2/stream.rs`).

use weir_http::{Framing, Persistence, Reply, RequestHead};

use super::context::RequestCtx;
use super::downstream::Downstream;
use super::send_head;

/// Whether `head` is a gRPC (or gRPC-Web) request. Every call is a POST: other requests cost
/// one comparison (the HTTP/2 stream asks this of each request).
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
    let asked = head.header("content-type").unwrap_or(b"application/grpc");
    let fields = fields(status, asked);
    let mut reply = reply(&rt.cfg.server_line, &fields);
    reply.add_lines(lines);
    send_head(d, ctx, &reply, persistence)
}

/// The field lines of the refusal `status` to a call of `content_type`.
pub(crate) fn fields(status: u16, content_type: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(96 + content_type.len());
    out.extend_from_slice(b"Content-Type: ");
    out.extend_from_slice(content_type);
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
