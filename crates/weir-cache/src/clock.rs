//! The cache's clock, passed in rather than read: the policy functions take `now` as a number, and
//! whoever owns a zone owns a [`Clock`] that says what `now` is.
//!
//! Production uses [`SystemClock`]. [`ManualClock`] is the system clock plus an offset the owner
//! moves, so RFC 9111 scenarios (expiry, stale-while-revalidate, Age) run over real sockets
//! without sleeping. It lives here, not behind a test hook in the zone, so that no production
//! type carries a way to move time.

use std::fmt::Debug;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Unix seconds, as the cache sees them.
pub trait Clock: Send + Sync + Debug {
    fn now(&self) -> u64;
}

/// The system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> u64 {
        unix_now()
    }
}

/// The system clock shifted by an offset that [`ManualClock::advance`] moves.
#[derive(Debug, Default)]
pub struct ManualClock {
    offset: AtomicI64,
}

impl ManualClock {
    pub fn new() -> ManualClock {
        ManualClock::default()
    }

    /// Moves time by `secs` (negative moves it back, as a clock step would).
    pub fn advance(&self, secs: i64) {
        self.offset.fetch_add(secs, Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> u64 {
        (unix_now() as i64 + self.offset.load(Ordering::Relaxed)).max(0) as u64
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_both_ways_and_never_below_zero() {
        let c = ManualClock::new();
        let start = c.now();
        c.advance(50);
        assert!((start + 50..=start + 51).contains(&c.now()));
        c.advance(-70);
        assert!(c.now() + 21 >= start && c.now() < start);
        c.advance(-(i64::MAX / 2));
        assert_eq!(c.now(), 0);
        assert!(SystemClock.now() >= start);
    }
}
