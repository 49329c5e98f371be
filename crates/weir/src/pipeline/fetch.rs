//! Whole fetches for the cache's revalidation, through the one upstream phase
//! ([`super::forward::forward`]): the same pick, retries and their budget and backoff, request
//! id, timeouts, outlier accounting and upstream caps as a proxied request. There is no client
//! to relay to: the response goes to a [`Capture`] downstream that discards what it is given,
//! while [`Whole`]'s hooks keep the upstream's head and a copy of the body.

use std::net::SocketAddr;

use bytes::{Bytes, BytesMut};
use weir_http::{Persistence, Reply, RequestHead, ResponseHead, Version};

use super::downstream::Downstream;
use super::forward::{forward, Steer, UpstreamHooks};
use super::RequestCtx;
use crate::error::{Error, ErrorKind};
use crate::proxy::route::ProxyRoute;

/// A downstream with no client behind it: answers are dropped, there is no request body.
#[derive(Debug)]
pub(crate) struct Capture {
    peer: SocketAddr,
}

impl Downstream for Capture {
    fn peer(&self) -> SocketAddr {
        self.peer
    }

    fn version(&self) -> Version {
        Version::Http11
    }

    fn persistence(&self, _: &RequestHead) -> Persistence {
        Persistence::KeepAlive
    }

    fn shutting_down(&self) -> bool {
        false
    }

    fn tls(&self) -> Option<&crate::tls::TlsInfo> {
        None
    }

    async fn body_chunk(&mut self) -> Result<Option<Bytes>, Error> {
        Ok(None)
    }

    fn request_trailers(&mut self) -> Vec<weir_http::Header> {
        Vec::new()
    }

    async fn send_interim(&mut self, _: &Reply<'_>) -> Result<(), Error> {
        Ok(())
    }

    fn send_head(&mut self, _: &Reply<'_>, persistence: Persistence) -> Persistence {
        persistence
    }

    fn send_data(&mut self, _: &Bytes) {}

    fn send_trailers(&mut self, _: &[weir_http::Header]) {}

    fn end_body(&mut self) {}

    fn should_flush(&self) -> bool {
        false
    }

    async fn flush(&mut self) -> Result<(), Error> {
        Ok(())
    }

    async fn tunnel(
        &mut self,
        _: &mut dyn crate::pipeline::downstream::Tunnel,
        _: &[u8],
    ) -> Result<(), Error> {
        Err(Error::with(ErrorKind::BadResponse, "101 to a revalidation"))
    }
}

/// Fetches `head` (its conditionals and ranges dropped, `extra` field lines added: the
/// validators) from `route`'s upstream, whole: the response head and a body of at most
/// `max_body` bytes. `ctx` is the request's (its id and upstream are reported), or a fresh one
/// for a background revalidation.
pub(crate) async fn fetch_whole(
    ctx: &mut RequestCtx,
    peer: SocketAddr,
    head: &RequestHead,
    route: &ProxyRoute,
    extra: &[u8],
    max_body: usize,
) -> Result<(ResponseHead, Bytes), Error> {
    let mut sink = Capture { peer };
    let mut whole = Whole {
        limit: max_body,
        body: Some(BytesMut::new()),
        response: None,
        failed: None,
    };
    let steer = Steer {
        strip_conditionals: true,
        extra,
        ..Default::default()
    };
    // What the client of this request was sent is not touched: status and bytes are put back.
    let (status, sent) = (ctx.status, ctx.bytes_sent);
    let result = forward(
        &mut sink,
        ctx,
        head,
        route,
        Persistence::KeepAlive,
        steer,
        &mut whole,
    )
    .await;
    (ctx.status, ctx.bytes_sent) = (status, sent);
    result?;
    if let Some(failed) = whole.failed {
        return Err(Error::with(
            match failed {
                504 => ErrorKind::ResponseTimeout,
                503 => ErrorKind::NoServer,
                _ => ErrorKind::UpstreamReset,
            },
            format!("revalidation failed with {failed}"),
        ));
    }
    let resp = whole
        .response
        .ok_or_else(|| Error::with(ErrorKind::UpstreamReset, "no response"))?;
    let Some(body) = whole.body else {
        return Err(Error::with(
            ErrorKind::UpstreamReset,
            "response larger than max_object_size",
        ));
    };
    Ok((resp, weir_cache::object::exact(body)))
}

/// Keeps the head and the body (up to `limit` bytes: past it, none) of a whole fetch.
struct Whole {
    limit: usize,
    body: Option<BytesMut>,
    response: Option<ResponseHead>,
    failed: Option<u16>,
}

impl UpstreamHooks for Whole {
    fn on_head(&mut self, resp: &ResponseHead, _: &mut BytesMut) {
        if let weir_http::BodyKind::Length(n) = resp.body {
            match usize::try_from(n).ok().filter(|n| *n <= self.limit) {
                Some(n) => self.body = Some(BytesMut::with_capacity(n)),
                None => self.body = None,
            }
        }
    }

    fn on_body(&mut self, chunk: &Bytes) {
        if let Some(b) = &mut self.body {
            if b.len() + chunk.len() > self.limit {
                self.body = None;
            } else {
                b.extend_from_slice(chunk);
            }
        }
    }

    fn on_end(&mut self, resp: &ResponseHead) {
        self.response = Some(resp.clone());
    }

    fn on_failure(&mut self, status: u16) {
        self.failed = Some(status);
    }
}
