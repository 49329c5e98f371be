//! HTTP/2 to upstreams (`protocol: h2`), for gRPC-style backends: what a request is to an
//! HTTP/2 server. The exchange itself is the pipeline's (`pipeline/forward_h2.rs`), over
//! weir's own client (`h2_client/`); this is the conversion both ends of it share, and the
//! HTTP health check.
//!
//! The request the server sees is the one any upstream would: `exchange::build_request`
//! writes it (the route's target, the Host it chooses, the fields the filters keep, drop and
//! add, the forwarding fields, the trace context) and it is read back here into HTTP/2's
//! pseudo-fields and fields: one builder, so a filter binds the same way whichever protocol
//! the upstream speaks, as FastCGI's parameters are read back from it (`pipeline/forward_cgi.rs`).
//! Until issue 55 §2 the request went through an in-memory HTTP/1.1 pipe to a task of its
//! own and the `h2` crate, and the answer came back the same way; the pipe, the task and the
//! body's re-framing are gone.

use std::time::Duration;

use bytes::BytesMut;
use weir_http::RequestHead;

use super::grpc_web;
use super::upstream::Upstream;

/// Largest request head read back.
const MAX_HEAD: usize = 256 * 1024;

/// A request as HTTP/2 carries it, borrowing the head it was read from.
pub(crate) struct Request<'h> {
    pub scheme: &'static [u8],
    pub authority: &'h [u8],
    pub fields: Vec<(&'h [u8], &'h [u8])>,
    /// A gRPC-Web call: how its bodies are written (it is asked in gRPC).
    pub web: Option<grpc_web::Mode>,
}

/// Reads back the request `build_request` wrote into `built` (consumed), for `server` of `up`.
pub(crate) fn read_back(built: &mut BytesMut) -> Option<RequestHead> {
    weir_http::parse_request(built, &limits()).ok().flatten()
}

/// The HTTP/2 form of `head` (read back by [`read_back`]) to `server` of `up`; `web_type`
/// holds the gRPC content type a gRPC-Web call is asked with.
pub(crate) fn convert<'h>(
    head: &'h RequestHead,
    up: &Upstream,
    server: usize,
    authority: &'h str,
    web_type: &'h mut Vec<u8>,
) -> Request<'h> {
    let s = &up.servers[server];
    let scheme: &'static [u8] = if s.tls_name.is_some() {
        b"https"
    } else {
        b"http"
    };
    let host = head.host().unwrap_or(authority.as_bytes());
    // A gRPC-Web call is asked in gRPC (`grpc_web.rs`).
    let web = match head.method {
        weir_http::Method::Post => head.header("content-type").and_then(grpc_web::mode),
        _ => None,
    };
    if let Some((_, codec)) = web {
        *web_type = grpc_web::upstream_type(codec);
    }
    let mut fields: Vec<(&[u8], &[u8])> = Vec::with_capacity(16);
    for h in head.headers() {
        if h.name.eq_ignore_ascii_case(b"host") || forbidden(&h.name) {
            continue;
        }
        if web.is_some()
            && (h.name.eq_ignore_ascii_case(b"content-type")
                || h.name.eq_ignore_ascii_case(b"content-length"))
        {
            continue;
        }
        fields.push((&h.name, &h.value));
    }
    // gRPC servers want to know trailers are understood; a proxy that relays them does.
    fields.push((b"te", b"trailers"));
    if web.is_some() {
        fields.push((b"content-type", web_type.as_slice()));
    }
    Request {
        scheme,
        authority: host,
        fields,
        web: web.map(|(mode, _)| mode),
    }
}

/// How the built request is read back: the pipeline's own request, its path normalised
/// already when the client's was read, so taken as it is.
fn limits() -> weir_http::Limits {
    weir_http::Limits {
        max_head_bytes: MAX_HEAD,
        max_uri_bytes: MAX_HEAD,
        normalize_path: false,
        keep_encoded_slashes: true,
        keep_semicolons: true,
        keep_utf8: true,
        underscores: weir_http::Underscores::Allow,
    }
}

/// Fields HTTP/2 forbids (RFC 9113 §8.2.2), and `te`, which is set here.
pub(crate) fn forbidden(name: &[u8]) -> bool {
    weir_http::hop::not_in_h2(name) || name.eq_ignore_ascii_case(b"te")
}

/// One health check over HTTP/2: `GET path`, its status.
pub async fn check(
    up: &Upstream,
    server: usize,
    path: &str,
    within: Duration,
) -> Result<u16, String> {
    let fields: [(&[u8], &[u8]); 1] = [(b"user-agent", b"weir-health-check")];
    let answer =
        super::h2_client::check::call(up, server, (b"GET", path.as_bytes()), &fields, None, within)
            .await?;
    Ok(answer.status)
}
