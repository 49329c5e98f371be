//! The defences against a peer that makes the connection work without asking for anything,
//! decided per frame header and per event, with the time given by the caller (sans-IO).
//!
//! The same two counters as weir's `server/h2/flood.rs` (which sits under the `h2` crate
//! today), so the connection built on this codec keeps every defence:
//! - a flood count per second: PING, SETTINGS, RST_STREAM and PRIORITY frames, empty DATA or
//!   HEADERS that do not end a stream, empty CONTINUATION (the 2019 family: CVE-2019-9512,
//!   -9514, -9515, -9516, -9518); past the limit the connection ends (GOAWAY
//!   ENHANCE_YOUR_CALM);
//! - a glitch count over the connection's life (HAProxy's `glitches-threshold`, weir's
//!   `shield.http2_glitches`): streams the peer resets (rapid reset, CVE-2023-44487), streams
//!   this side resets because of the peer's error (MadeYouReset, CVE-2025-8671: a malformed
//!   frame that costs the server a reset), and the empty frames above. At three quarters the
//!   connection is asked to go away (graceful GOAWAY), at the threshold it ends.
//!
//! And, new with the codec, the CONTINUATION bounds (the 2024 family: a header block sent as
//! endless CONTINUATION frames, never ending, held and decoded by the server): at most
//! [`MAX_CONTINUATIONS`] frames and the advertised header list size (plus a margin for HPACK's
//! own encoding) per header block.

use std::time::{Duration, Instant};

use crate::frame::{flag, kind};

/// CONTINUATION frames allowed after one HEADERS (a block over this many frames is refused:
/// at the default frame size, 8 frames carry 128 KiB, past any list size weir advertises).
pub const MAX_CONTINUATIONS: u32 = 8;

/// What the guard says after a frame or an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Fine,
    /// Three quarters of the glitch threshold: ask the peer to go away (GOAWAY NO_ERROR with
    /// the last stream, then finish what is open).
    GoAway,
    /// Over a limit: end the connection (GOAWAY ENHANCE_YOUR_CALM).
    Close,
}

/// The counters of one connection.
#[derive(Debug, Clone)]
pub struct Guard {
    flood_limit: u32,
    flood: u32,
    second: Instant,
    glitch_limit: u32,
    glitches: u32,
    /// The header block being received: its CONTINUATION frames and octets so far.
    block_frames: u32,
    block_len: usize,
    max_block: usize,
}

impl Guard {
    /// `flood_limit` frames a second, `glitch_limit` glitches a connection (0: no glitch
    /// limit), header blocks of at most `max_block` octets (the advertised header list size
    /// and HPACK's margin), counted from `now`.
    pub fn new(flood_limit: u32, glitch_limit: u32, max_block: usize, now: Instant) -> Guard {
        Guard {
            flood_limit,
            flood: 0,
            second: now,
            glitch_limit,
            glitches: 0,
            block_frames: 0,
            block_len: 0,
            max_block,
        }
    }

    /// A frame header arrived: its type, flags and payload length, at `now`.
    pub fn frame(&mut self, k: u8, flags: u8, len: usize, now: Instant) -> Verdict {
        let empty_open =
            matches!(k, kind::DATA | kind::HEADERS) && len == 0 && flags & flag::END_STREAM == 0;
        let empty_continuation = k == kind::CONTINUATION && len == 0;
        let flooding = matches!(
            k,
            kind::PING | kind::SETTINGS | kind::RST_STREAM | kind::PRIORITY
        ) || empty_open
            || empty_continuation;
        let mut verdict = Verdict::Fine;
        if flooding {
            if now.duration_since(self.second) >= Duration::from_secs(1) {
                self.second = now;
                self.flood = 0;
            }
            self.flood += 1;
            if self.flood > self.flood_limit {
                return Verdict::Close;
            }
        }
        if k == kind::RST_STREAM || empty_open || empty_continuation {
            verdict = self.glitch();
        }
        // CONTINUATION bounds: counted from the HEADERS that starts a block.
        match k {
            kind::HEADERS => {
                self.block_frames = 0;
                self.block_len = len;
            }
            kind::CONTINUATION => {
                self.block_frames += 1;
                self.block_len += len;
                if self.block_frames > MAX_CONTINUATIONS || self.block_len > self.max_block {
                    return Verdict::Close;
                }
            }
            _ => {}
        }
        if k == kind::HEADERS && len > self.max_block {
            return Verdict::Close;
        }
        verdict
    }

    /// This side reset a stream because of the peer's error (a malformed frame, a window
    /// overflow, a frame on a closed stream): a glitch (MadeYouReset).
    pub fn reset_for_peer(&mut self) -> Verdict {
        self.glitch()
    }

    /// The glitches so far.
    pub fn glitches(&self) -> u32 {
        self.glitches
    }

    fn glitch(&mut self) -> Verdict {
        if self.glitch_limit == 0 {
            return Verdict::Fine;
        }
        self.glitches += 1;
        if self.glitches >= self.glitch_limit {
            Verdict::Close
        } else if u64::from(self.glitches) * 4 == u64::from(self.glitch_limit) * 3
            || (self.glitch_limit < 4 && self.glitches == 1)
        {
            Verdict::GoAway
        } else {
            Verdict::Fine
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(flood: u32, glitches: u32) -> (Guard, Instant) {
        let now = Instant::now();
        (Guard::new(flood, glitches, 64 * 1024, now), now)
    }

    /// A PING flood (CVE-2019-9512): past the limit in one second, the connection ends; the
    /// same count spread over seconds is fine.
    #[test]
    fn floods_are_counted_per_second() {
        let (mut g, t0) = guard(100, 0);
        for _ in 0..100 {
            assert_eq!(g.frame(kind::PING, 0, 8, t0), Verdict::Fine);
        }
        assert_eq!(g.frame(kind::PING, 0, 8, t0), Verdict::Close);
        let (mut g, t0) = guard(100, 0);
        for s in 0..5u64 {
            let t = t0 + Duration::from_secs(s);
            for _ in 0..100 {
                assert_eq!(g.frame(kind::SETTINGS, 0, 6, t), Verdict::Fine);
            }
        }
        // Requests and their bodies never count.
        let (mut g, t0) = guard(1, 0);
        for _ in 0..1000 {
            assert_eq!(
                g.frame(kind::HEADERS, flag::END_HEADERS, 20, t0),
                Verdict::Fine
            );
            assert_eq!(
                g.frame(kind::DATA, flag::END_STREAM, 100, t0),
                Verdict::Fine
            );
        }
    }

    /// Rapid reset (CVE-2023-44487) and MadeYouReset (CVE-2025-8671): the peer's resets and
    /// the resets it provokes count as glitches; at three quarters the connection is asked to
    /// go away, at the threshold it ends.
    #[test]
    fn resets_the_peer_makes_or_provokes_are_glitches() {
        let (mut g, t0) = guard(u32::MAX, 8);
        for i in 0..5 {
            assert_eq!(g.frame(kind::RST_STREAM, 0, 4, t0), Verdict::Fine, "{i}");
        }
        assert_eq!(g.reset_for_peer(), Verdict::GoAway);
        assert_eq!(g.reset_for_peer(), Verdict::Fine);
        assert_eq!(g.frame(kind::DATA, 0, 0, t0), Verdict::Close);
        assert_eq!(g.glitches(), 8);
    }

    /// The 2024 CONTINUATION family: a block that never ends is cut after
    /// MAX_CONTINUATIONS frames, and one past the list size at once.
    #[test]
    fn continuation_floods_are_cut() {
        let (mut g, t0) = guard(u32::MAX, 0);
        assert_eq!(g.frame(kind::HEADERS, 0, 100, t0), Verdict::Fine);
        for _ in 0..MAX_CONTINUATIONS {
            assert_eq!(g.frame(kind::CONTINUATION, 0, 100, t0), Verdict::Fine);
        }
        assert_eq!(g.frame(kind::CONTINUATION, 0, 100, t0), Verdict::Close);
        let (mut g, t0) = guard(u32::MAX, 0);
        assert_eq!(g.frame(kind::HEADERS, 0, 60 * 1024, t0), Verdict::Fine);
        assert_eq!(g.frame(kind::CONTINUATION, 0, 8 * 1024, t0), Verdict::Close);
        let (mut g, t0) = guard(u32::MAX, 0);
        assert_eq!(g.frame(kind::HEADERS, 0, 65 * 1024, t0), Verdict::Close);
        // A new block starts the count again.
        let (mut g, t0) = guard(u32::MAX, 0);
        for _ in 0..3 {
            assert_eq!(g.frame(kind::HEADERS, 0, 10, t0), Verdict::Fine);
            for _ in 0..MAX_CONTINUATIONS {
                assert_eq!(g.frame(kind::CONTINUATION, 0, 10, t0), Verdict::Fine);
            }
        }
    }
}
