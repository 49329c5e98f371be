//! Weir's own error answers: the canned body for a status, or the route's (else listener's)
//! error page for it (`actions/error_pages.rs`). The one writer of error replies; `error.rs`
//! says which status an error gets.

use bytes::Bytes;
use weir_http::{Framing, Method, Persistence, Reply, RequestHead};

use super::context::RequestCtx;
use super::downstream::Downstream;
use super::send_head;
use crate::error::canned_body;

/// Queues the canned response for `status` with extra field `lines`: the one writer of error
/// replies (`error.rs` says which status an error gets).
pub(crate) fn send_error<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    head: &RequestHead,
    status: u16,
    lines: &[u8],
    persistence: Persistence,
) -> Persistence {
    if super::grpc_refusal::is_grpc(head) {
        return super::grpc_refusal::send(d, ctx, head, status, lines, persistence);
    }
    if let Some(pages) = error_pages(ctx) {
        if let Some(page) = pages.page(status) {
            return send_error_page(d, ctx, head, status, lines, page, persistence);
        }
    }
    let body = canned_body(status);
    let rt = ctx.rt.clone();
    let mut reply = crate::error::canned(status, body.len(), &rt.cfg.server_line);
    reply.add_lines(lines);
    let persistence = send_head(d, ctx, &reply, persistence);
    if head.method != Method::Head {
        ctx.bytes_sent += body.len() as u64;
        d.send_data(&Bytes::from(body));
    }
    persistence
}

/// The error pages of the request's route, else of its listener (`None`: weir's own bodies).
#[inline]
pub(crate) fn error_pages(
    ctx: &RequestCtx,
) -> Option<std::sync::Arc<crate::actions::error_pages::ErrorPages>> {
    let l = &ctx.rt.cfg.listeners[ctx.listener];
    match ctx.route.and_then(|r| l.routes.get(r as usize)) {
        Some(route) => route.error_pages.clone(),
        None => l.error_pages.clone(),
    }
}

/// Answers `status` with an error page, keeping `lines` (`Allow`, `Retry-After`, ...).
#[cold]
pub(crate) fn send_error_page<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    head: &RequestHead,
    status: u16,
    lines: &[u8],
    page: &crate::actions::error_pages::Page,
    persistence: Persistence,
) -> Persistence {
    let rt = ctx.rt.clone();
    let mut reply = Reply::new(status, Framing::Length(page.body.len() as u64));
    reply.add_lines(&rt.cfg.server_line);
    reply.add_lines(&page.type_line);
    reply.add_lines(lines);
    let persistence = send_head(d, ctx, &reply, persistence);
    if head.method != Method::Head {
        ctx.bytes_sent += page.body.len() as u64;
        d.send_data(&page.body);
    }
    persistence
}
