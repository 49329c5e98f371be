//! The named points where a caller takes part in the upstream phase ([`super::forward`]), and
//! how it may steer it. The upstream phase knows nothing of caches: it relays one exchange and
//! calls [`UpstreamHooks`] at each point; the cache's hooks (`cache/hooks.rs`) decide what to
//! add to the head, copy the body, publish it to coalesced followers and store it. A plain
//! proxied request passes [`Plain`], which does nothing.
//!
//! The points follow Pingora's `ProxyHttp` (`upstream_response_filter`,
//! `response_body_filter`, and the cache's miss handler fed from them) and Envoy's encoder
//! filters (`encodeHeaders`, `encodeData`): head, each body piece, the end, or a failure
//! before any head. Hooks are `&mut dyn`: one indirect call per point (a proxied 1 KiB response
//! makes three) instead of one copy of the upstream phase per caller.

use bytes::{Bytes, BytesMut};
use weir_http::ResponseHead;

/// What a caller does at the upstream phase's named points. Every method has a default that
/// does nothing.
pub(crate) trait UpstreamHooks {
    /// The final response head arrived and is about to be relayed: field lines for the
    /// client's head go in `lines` (the route's response filters run after).
    fn on_head(&mut self, _resp: &ResponseHead, _lines: &mut BytesMut) {}
    /// One piece of the response body, as it is relayed to the client.
    fn on_body(&mut self, _chunk: &Bytes) {}
    /// The response ended cleanly: every body byte was relayed. Not called when the body was
    /// cut short (the client's connection is then aborted), nor after a `101`. By reference:
    /// a plain proxied request would otherwise move the head (~270 bytes) only to drop it.
    fn on_end(&mut self, _resp: &ResponseHead) {}
    /// No response head came: the failure's status (502/503/504), answered to the client
    /// unless [`Steer::fallback`].
    fn on_failure(&mut self, _status: u16) {}
}

/// A plain proxied request: no hooks.
pub(crate) struct Plain;

impl UpstreamHooks for Plain {}

/// How a caller other than a plain proxy route steers the exchange.
#[derive(Default, Clone, Copy)]
pub(crate) struct Steer<'a> {
    /// Drop the client's conditional and range fields (a cache fetches whole responses).
    pub strip_conditionals: bool,
    /// Field lines added to the upstream request (a revalidation's validators, a range).
    pub extra: &'a [u8],
    /// This upstream and server, whatever the route, filters and balancer would choose (a
    /// sharded zone's owner).
    pub pin: Option<(usize, usize)>,
    /// A failure before the response head is not answered: [`UpstreamHooks::on_failure`]
    /// hears of it and the caller goes elsewhere (a peer fill falls back to the origin).
    pub fallback: bool,
    /// The response filters to run instead of the route's (a peer fill goes through the peers
    /// upstream's route but answers the client of the route it was asked on).
    pub respond: Option<&'a crate::filters::Chain>,
}
