//! Answers with a content type of weir's own, never stored by anyone: the JSON of purges and
//! the admin API's answers.

use bytes::Bytes;
use weir_http::{Framing, Persistence, Reply};

use super::downstream::Downstream;
use super::{send_head, RequestCtx};

/// Queues a JSON response (purges).
pub(crate) fn send_json<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    status: u16,
    json: &Bytes,
    head_only: bool,
    persistence: Persistence,
) -> Persistence {
    send_typed(
        d,
        ctx,
        (status, b"application/json", b""),
        json,
        head_only,
        persistence,
    )
}

/// Queues an admin API answer.
pub(super) fn send_admin<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    reply: crate::admin::AdminReply,
    head_only: bool,
    persistence: Persistence,
) -> Persistence {
    let body = Bytes::from(reply.body);
    send_typed(
        d,
        ctx,
        (reply.status, reply.content_type, &reply.lines),
        &body,
        head_only,
        persistence,
    )
}

/// Queues `body` with its content type, not to be stored by anyone.
fn send_typed<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    (status, content_type, extra): (u16, &[u8], &[u8]),
    json: &Bytes,
    head_only: bool,
    persistence: Persistence,
) -> Persistence {
    let rt = ctx.rt.clone();
    let lines = [
        b"Content-Type: ",
        content_type,
        b"\r\nCache-Control: no-store\r\n",
        extra,
    ]
    .concat();
    let mut reply = Reply::new(status, Framing::Length(json.len() as u64));
    reply.add_lines(&rt.cfg.server_line);
    reply.add_lines(&lines);
    let persistence = send_head(d, ctx, &reply, persistence);
    if !head_only {
        ctx.bytes_sent += json.len() as u64;
        d.send_data(json);
    }
    persistence
}
