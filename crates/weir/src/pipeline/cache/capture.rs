//! The copy of a response body a cache keeps while it is relayed (the cache's hooks feed it
//! chunk by chunk from the upstream phase), charged to the zone's budget for captures in
//! flight, and the tee that publishes each chunk to coalesced followers.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use weir_http::BodyKind;

use crate::cache::zone::Inflight;
use crate::cache::CacheZone;

/// The copy of a response body kept for the store (and published to followers), charged to the
/// zone's budget for captures in flight while it grows, and given back when it ends.
pub(super) struct Capture {
    copy: BytesMut,
    limit: usize,
    tee: Option<Arc<Inflight>>,
    zone: Option<Arc<CacheZone>>,
    reserved: u64,
    /// The whole body's cost was reserved at head time (its length was known): no chunk
    /// can be refused for the budget.
    prepaid: bool,
    /// Still copying for the store.
    copying: bool,
    /// Body bytes seen.
    seen: usize,
}

impl Capture {
    /// A capture of at most `limit` bytes of a body framed as `body`, publishing to `tee`,
    /// charged to `zone`, which holds `reserved` bytes for it already (the whole body's, when
    /// its length was known at head time).
    pub(super) fn start(
        limit: usize,
        body: BodyKind,
        tee: Option<Arc<Inflight>>,
        zone: Option<Arc<CacheZone>>,
        reserved: u64,
    ) -> Capture {
        Capture {
            // Sized exactly when the length is known, so that the stored body holds no slack.
            copy: match body {
                BodyKind::Length(n) if n <= limit as u64 => BytesMut::with_capacity(n as usize),
                _ => BytesMut::new(),
            },
            limit,
            tee,
            zone,
            reserved,
            prepaid: reserved > 0 || matches!(body, BodyKind::Empty | BodyKind::Length(0)),
            copying: true,
            seen: 0,
        }
    }

    /// Every chunk so far went to the followers.
    pub(super) fn teed(&self) -> bool {
        self.tee.is_some()
    }

    /// The copy, when it is whole (copying never stopped). The reservation is given back when
    /// the capture is dropped.
    pub(super) fn take_copy(&mut self) -> Option<BytesMut> {
        self.copying.then(|| std::mem::take(&mut self.copy))
    }

    /// Copies one chunk for the store while it fits the zone's in-flight budget (a chunk
    /// published to followers is held twice: in the copy and in their queue), and publishes
    /// it to the followers. A copy refused mid-body (a body of unknown length) stops copying
    /// only: the followers still get every chunk and complete (issue 33 §3: they were cut
    /// off mid-body when the copy was dropped). Past `limit` (larger than any object may
    /// be), both stop.
    pub(super) fn take(&mut self, d: &Bytes) {
        self.seen += d.len();
        if self.seen > self.limit {
            self.stop_copying();
            self.tee = None;
            return;
        }
        if self.copying && !self.prepaid {
            let cost = d.len() as u64 * if self.tee.is_some() { 2 } else { 1 };
            match &self.zone {
                Some(z) if !z.reserve(cost) => self.stop_copying(),
                Some(_) => self.reserved += cost,
                None => {}
            }
        }
        if self.copying {
            self.copy.extend_from_slice(d);
        }
        if let Some(t) = &self.tee {
            t.push_chunk(d);
        }
    }

    fn stop_copying(&mut self) {
        self.copying = false;
        self.copy = BytesMut::new();
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if let Some(z) = &self.zone {
            z.release(self.reserved);
        }
    }
}
