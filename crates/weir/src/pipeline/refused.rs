//! Answers the pipeline makes instead of the route's action: a request filter's answer, and a
//! request the DoS shield refused (429 with `Retry-After`, or the connection closed without a
//! reply; `shield/`).

use bytes::Bytes;
use weir_http::{BodyKind, Framing, Method, Persistence, Reply, RequestHead};

use super::context::RequestCtx;
use super::downstream::Downstream;
use super::send_head;
use crate::error::Error;
use crate::filters::Answer;
use crate::runtime::WorkerRuntime;

/// The shield's request limits (`shield/`): `Some` with the answer when the request is refused.
#[inline(always)]
pub(super) fn shield_refusal<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    rt: &WorkerRuntime,
    head: &RequestHead,
) -> Option<Result<Persistence, Error>> {
    let shield = rt.cfg.shield.as_ref()?;
    // A member's peer fill was counted where its client asked: every fill of a node comes
    // from one address, which would otherwise be refused as one very busy client.
    if rt.cfg.listeners[ctx.listener].admin || ctx.peer_fill() {
        return None;
    }
    let refusal = shield.request(d.peer().ip()).err()?;
    Some(refuse(d, ctx, head, refusal))
}

/// Answers a request the shield refused: 429 with `Retry-After` (and the connection closed
/// when the client is now blocked), or the connection closed without a reply.
#[cold]
fn refuse<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    head: &RequestHead,
    r: crate::shield::Refusal,
) -> Result<Persistence, Error> {
    use crate::shield::Action;
    if r.action == Action::Close {
        return Err(Error::with(
            crate::error::ErrorKind::Refused,
            r.limit.as_str(),
        ));
    }
    let a = Answer {
        status: 429,
        fields: vec![(
            Bytes::from_static(b"Retry-After"),
            Bytes::from(r.retry_after.to_string()),
        )],
        body: Bytes::from_static(b"Too Many Requests\n"),
    };
    Ok(respond_with(d, ctx, head, a, r.action == Action::Block))
}

/// A request filter answered.
pub(super) fn respond_for_filter<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    head: &RequestHead,
    a: Answer,
) -> Persistence {
    respond_with(d, ctx, head, a, false)
}

/// Answers with `a`; `close`: and close the connection after it.
fn respond_with<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    head: &RequestHead,
    a: Answer,
    close: bool,
) -> Persistence {
    // The request body, if any, is not read: the connection cannot be reused.
    let persistence = if head.body == BodyKind::Empty && !close {
        d.persistence(head)
    } else {
        Persistence::Close
    };
    if a.status >= 400 && super::grpc_refusal::is_grpc(head) {
        // A refusal (auth, limits, the shield) to a gRPC call: a gRPC status, with the
        // filter's fields but its type and body.
        let lines = fields_but_type(&a);
        return super::grpc_refusal::send(d, ctx, head, a.status, &lines, persistence);
    }
    if let Some(pages) = super::error_pages(ctx) {
        if let Some(page) = pages.page(a.status) {
            // The filter's fields but its type (the page has its own).
            let lines = fields_but_type(&a);
            return super::send_error_page(d, ctx, head, a.status, &lines, page, persistence);
        }
    }
    let rt = ctx.rt.clone();
    let typed = a
        .fields
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case(b"content-type"));
    let mut reply = Reply::new(a.status, Framing::Length(a.body.len() as u64));
    reply.add_lines(&rt.cfg.server_line);
    if !typed {
        reply.add_lines(b"Content-Type: text/plain; charset=utf-8\r\n");
    }
    reply.add_fields(&a.fields);
    let persistence = send_head(d, ctx, &reply, persistence);
    if head.method != Method::Head {
        ctx.bytes_sent += a.body.len() as u64;
        d.send_data(&a.body);
    }
    persistence
}

/// The answer's fields as lines, but its `Content-Type` (the page or gRPC reply has its own).
fn fields_but_type(a: &Answer) -> bytes::BytesMut {
    let mut lines = bytes::BytesMut::new();
    for (n, v) in a.fields.iter() {
        if !n.eq_ignore_ascii_case(b"content-type") {
            weir_http::response::put_header(&mut lines, n, v);
        }
    }
    lines
}
