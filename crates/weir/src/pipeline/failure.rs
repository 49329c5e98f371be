//! What an upstream failure logs: the request it failed (method, host, target, request id),
//! as nginx's `upstream prematurely closed ... request: "GET /x"` does, and the mid-response
//! abort, which also counts against the server's health. Split from `forward.rs`, which
//! decides what to answer.

use weir_http::RequestHead;

use super::RequestCtx;
use crate::error::{Error, ErrorKind};
use crate::proxy::upstream::{now_ms, Upstream};

static ABORT_LOG: crate::logs::Limited = crate::logs::Limited::new();

/// Logs an upstream failure after the response started: the client connection is cut.
pub(super) fn aborted(
    ctx: &mut RequestCtx,
    (up, server, head): (&Upstream, usize, &RequestHead),
    why: &str,
) -> Error {
    let s = &up.servers[server];
    s.health.count_failure();
    up.record_passive_failure(server, now_ms());
    if let Some(suppressed) = ABORT_LOG.admit() {
        let (request, id) = described(ctx, head, None);
        tracing::warn!(upstream = %up.name, server = %s.name, reason = %why, request = %request, request_id = %id, suppressed, "upstream failed mid-response, aborting the client connection");
    }
    Error::with(ErrorKind::UpstreamAborted, why)
}

/// The request as failure lines name it (nginx's `request: "GET /x"`): `GET host/path?query`
/// (at most 200 bytes of target), and its id (made now if nothing asked for it yet and the
/// client's address is known, so the access log's `$request_id` is the same; else `-`).
pub(super) fn described(
    ctx: &mut RequestCtx,
    head: &RequestHead,
    peer: Option<std::net::IpAddr>,
) -> (String, String) {
    let target = head
        .target
        .get(..head.target.len().min(200))
        .unwrap_or(&head.target);
    let host = head.host().unwrap_or(b"-");
    let request = format!(
        "{} {}{}",
        head.method.as_str(),
        String::from_utf8_lossy(host),
        String::from_utf8_lossy(target)
    );
    let known = ctx.known_request_id();
    let id = match (known, peer) {
        (Some(id), _) => Some(id),
        (None, Some(ip)) => Some(ctx.request_id(head, ip)),
        (None, None) => None,
    };
    let id = id.map_or_else(
        || "-".to_string(),
        |i| String::from_utf8_lossy(&i).into_owned(),
    );
    (request, id)
}
