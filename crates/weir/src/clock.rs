//! The request clock: a reading of `CLOCK_MONOTONIC` in nanoseconds, the clock `Instant` reads.
//!
//! Why not `Instant`: a request reads the clock twice (at its start and in the log phase) and
//! subtracts. `Instant::now` wraps the vDSO call in a `Timespec` built with checks, and
//! `Instant - Instant` goes through `Timespec::sub_timespec`, about 70 instructions of
//! normalisation; together about 140 instructions per request of a hello's 5,800 (callgrind,
//! 2026-11-27). Nanoseconds in a `u64` subtract in one instruction and last 584 years.

use std::time::Duration;

/// A monotonic instant, in nanoseconds since an unspecified start (boot, on Linux).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Mono(u64);

impl Mono {
    /// Now.
    #[inline]
    pub fn now() -> Mono {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        #[allow(unsafe_code)]
        // SAFETY: `ts` is a valid, writable `timespec`; CLOCK_MONOTONIC exists on every Linux,
        // so the call cannot fail (and `ts` stays zero if it somehow did).
        unsafe {
            libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts)
        };
        Mono(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
    }

    /// Time from `earlier` to this instant; zero if `earlier` is later.
    #[inline]
    pub fn since(self, earlier: Mono) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// Nanoseconds from `earlier` to this instant; zero if `earlier` is later.
    #[inline]
    pub fn nanos_since(self, earlier: Mono) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

#[cfg(test)]
mod tests {
    use super::Mono;
    use std::time::{Duration, Instant};

    #[test]
    fn it_moves_with_instant() {
        let (m0, i0) = (Mono::now(), Instant::now());
        std::thread::sleep(Duration::from_millis(20));
        let (m1, i1) = (Mono::now(), Instant::now());
        let (ours, std) = (m1.since(m0), i1 - i0);
        assert!(ours >= Duration::from_millis(20), "{ours:?}");
        let diff = ours.abs_diff(std);
        assert!(diff < Duration::from_millis(5), "{ours:?} against {std:?}");
        assert_eq!(m0.since(m1), Duration::ZERO);
        assert_eq!(m1.nanos_since(m0), ours.as_nanos() as u64);
    }
}
