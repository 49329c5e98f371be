//! The cache's part in the upstream phase, at its named points
//! ([`crate::pipeline::hooks::UpstreamHooks`]):
//!
//! * [`Status`]: a forward the cache does not store (a bypass, hit-for-miss, an unsafe
//!   method): `Cache-Status` on the head, and the response head kept for invalidation.
//! * [`PostStore`]: a POST whose response may answer later GETs (`store_post_responses`).
//! * [`Leader`]: the coalescing leader of a miss: the store decision when the head arrives
//!   (storable, not too large, within the zone's capture budget), the copy of the body, and the
//!   tee to its followers; `miss.rs` stores what it kept.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use weir_cache::policy::{self, storable, NoStore};
use weir_cache::stored;
use weir_http::{BodyKind, Method, ResponseHead};

use super::capture::Capture;
use super::Stage;
use crate::cache::status::Fwd;
use crate::cache::zone::{Inflight, StreamHead};
use crate::cache::CacheStatus;
use crate::pipeline::hooks::UpstreamHooks;

/// `Cache-Status` only (nothing is stored); the response head is kept once relayed.
pub(super) struct Status {
    pub fwd: Fwd,
    pub detail: Option<&'static str>,
    pub x_cache: bool,
    pub response: Option<ResponseHead>,
}

impl Status {
    pub(super) fn new(fwd: Fwd, detail: Option<&'static str>, x_cache: bool) -> Status {
        Status {
            fwd,
            detail,
            x_cache,
            response: None,
        }
    }
}

impl UpstreamHooks for Status {
    fn on_head(&mut self, resp: &ResponseHead, lines: &mut BytesMut) {
        CacheStatus {
            fwd: Some(self.fwd),
            fwd_status: Some(resp.status),
            detail: self.detail,
            ..Default::default()
        }
        .render(lines, self.x_cache);
    }

    fn on_end(&mut self, resp: &ResponseHead) {
        self.response = Some(resp.clone());
    }
}

/// A POST on a route with `store_post_responses`: `Cache-Status` as for any unsafe method, and a
/// copy of the body when the response may serve later GETs (RFC 9110 §9.3.3).
pub(super) struct PostStore<'s> {
    pub stage: Stage<'s>,
    capture: Option<Capture>,
    pub response: Option<ResponseHead>,
    pub body: Option<BytesMut>,
}

impl<'s> PostStore<'s> {
    pub(super) fn new(stage: Stage<'s>) -> PostStore<'s> {
        PostStore {
            stage,
            capture: None,
            response: None,
            body: None,
        }
    }
}

impl UpstreamHooks for PostStore<'_> {
    fn on_head(&mut self, resp: &ResponseHead, lines: &mut BytesMut) {
        let uri = super::storing::target_uri(self.stage.head);
        let authority = self.stage.head.authority_bytes().unwrap_or_default();
        let reusable =
            policy::post_response_reusable(&uri, &authority, resp.status, resp.headers());
        CacheStatus {
            fwd: Some(Fwd::Bypass),
            fwd_status: Some(resp.status),
            detail: Some("method"),
            stored: reusable,
            ..Default::default()
        }
        .render(lines, self.stage.cache.x_cache);
        let zone = Some(self.stage.zone.clone());
        self.capture = reusable
            .then(|| Capture::start(self.stage.cache.max_object_size, resp.body, None, zone, 0));
    }

    fn on_body(&mut self, chunk: &Bytes) {
        if let Some(c) = &mut self.capture {
            c.take(chunk);
        }
    }

    fn on_end(&mut self, resp: &ResponseHead) {
        self.body = self.capture.take().and_then(|mut c| c.take_copy());
        self.response = Some(resp.clone());
    }
}

/// The coalescing leader of a miss.
pub(super) struct Leader<'s> {
    stage: Stage<'s>,
    fwd: Fwd,
    inflight: Arc<Inflight>,
    /// At head time: storable (`Some(true)`), not (`Some(false)`: a hit-for-miss mark), or the
    /// capture budget was spent (`None`: no verdict on the response).
    pub verdict: Option<bool>,
    capture: Option<Capture>,
    /// Once the body ended cleanly: the head, the copy (when whole), and whether every chunk
    /// reached the followers.
    pub response: Option<ResponseHead>,
    pub body: Option<BytesMut>,
    pub teed: bool,
}

impl<'s> Leader<'s> {
    pub(super) fn new(stage: Stage<'s>, fwd: Fwd, inflight: Arc<Inflight>) -> Leader<'s> {
        Leader {
            stage,
            fwd,
            inflight,
            verdict: None,
            capture: None,
            response: None,
            body: None,
            teed: false,
        }
    }

    /// Whether the response may be stored, and what it costs the zone's budget for captures in
    /// flight (reserved here when the length is known).
    fn decide(&self, resp: &ResponseHead) -> (Result<(), NoStore>, u64) {
        let (head, proxy, settings, zone) = (
            self.stage.head,
            self.stage.proxy,
            self.stage.cache,
            self.stage.zone,
        );
        let length = match resp.body {
            BodyKind::Length(n) => Some(n),
            BodyKind::Empty => Some(0),
            _ => None,
        };
        let verdict = storable(
            &head.method,
            head.headers(),
            resp.status,
            resp.headers(),
            &settings.rules,
            zone.now(),
        )
        .map(|_| ());
        let verdict = match verdict {
            Ok(()) if length.is_some_and(|n| n > settings.max_object_size as u64) => {
                Err(NoStore::TooLarge)
            }
            Ok(()) if !proxy.filters.before_store(resp) => Err(NoStore::Filter),
            v => v,
        };
        // A body of known length is paid for now, whole, from the zone's budget for captures
        // in flight (held twice when followers share it): refused up front, not dropped under
        // way with followers streaming it.
        match (verdict, length) {
            (Ok(()), Some(n)) if n > 0 => {
                let cost = n * if head.method == Method::Get { 2 } else { 1 };
                if zone.reserve(cost) {
                    (Ok(()), cost)
                } else {
                    (Err(NoStore::Busy), 0)
                }
            }
            (v, _) => (v, 0),
        }
    }
}

impl UpstreamHooks for Leader<'_> {
    fn on_head(&mut self, resp: &ResponseHead, lines: &mut BytesMut) {
        let (verdict, reserved) = self.decide(resp);
        let mut st = CacheStatus {
            fwd: Some(self.fwd),
            fwd_status: Some(resp.status),
            ..Default::default()
        };
        match verdict {
            Ok(()) => {
                st.stored = true;
                // Followers can share the body only of a GET (a HEAD's has none).
                let tee = (self.stage.head.method == Method::Get).then(|| {
                    self.inflight.publish_head(StreamHead {
                        status: resp.status,
                        reason: resp.reason.clone(),
                        headers: stored::stored_headers(resp.headers()),
                        content_length: match resp.body {
                            BodyKind::Length(n) => Some(n),
                            BodyKind::Empty => Some(0),
                            _ => None,
                        },
                    });
                    self.inflight.clone()
                });
                let zone = Some(self.stage.zone.clone());
                let limit = self.stage.cache.max_object_size;
                self.capture = Some(Capture::start(limit, resp.body, tee, zone, reserved));
            }
            Err(why) => st.detail = Some(why.as_str()),
        }
        // A spent budget is no verdict on the response: no hit-for-miss mark.
        self.verdict = (verdict != Err(NoStore::Busy)).then_some(verdict.is_ok());
        st.render(lines, self.stage.cache.x_cache);
    }

    fn on_body(&mut self, chunk: &Bytes) {
        if let Some(c) = &mut self.capture {
            c.take(chunk);
        }
    }

    fn on_end(&mut self, resp: &ResponseHead) {
        // The reservation ends here; `miss.rs` stores the copy right after.
        if let Some(mut c) = self.capture.take() {
            self.teed = c.teed();
            self.body = c.take_copy();
        }
        self.response = Some(resp.clone());
    }
}
