//! Outlier ejection (Envoy's `outlier_detection`): a server that answers `consecutive_5xx`
//! 5xx responses in a row, or fails `consecutive_gateway_failure` times in a row at the gateway
//! level (502, 503, 504, connect errors, resets, timeouts), is ejected: taken out of the pool
//! for `base_ejection_time` × the times it was ejected. At most `max_ejection_percent` of the
//! upstream's servers are ejected at once (but one may always be), and never the last server
//! that is up. A server that stays healthy for a `base_ejection_time` after an ejection ends
//! has its multiplier decreased by one.
//!
//! Off unless `outlier_detection` is given: then every relayed response costs one relaxed
//! atomic store (resetting the server's counters), which is why it is not on by default.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::config::model;

/// The thresholds, compiled.
#[derive(Debug, Clone)]
pub struct OutlierPolicy {
    pub consecutive_5xx: u32,
    pub consecutive_gateway_failure: u32,
    pub base_ms: u64,
    pub max_percent: u32,
}

impl OutlierPolicy {
    pub fn compile(o: &model::OutlierDetection) -> OutlierPolicy {
        OutlierPolicy {
            consecutive_5xx: o.consecutive_5xx,
            consecutive_gateway_failure: o.consecutive_gateway_failure,
            base_ms: o.base_ejection_time.0.as_millis() as u64,
            max_percent: o.max_ejection_percent.min(100),
        }
    }
}

/// One server's outlier state, shared by the workers.
#[derive(Debug, Default)]
pub struct Outlier {
    run_5xx: AtomicU32,
    run_gateway: AtomicU32,
    /// Ejected until this time (ms on the process clock).
    pub until_ms: AtomicU64,
    times: AtomicU32,
    /// Ejections since start, for `/metrics`.
    pub ejections: AtomicU64,
}

/// What happened on one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A response below 500.
    Success,
    /// A 500 or other 5xx that is not a gateway failure.
    Error5xx,
    /// 502, 503, 504, or no response at all (connect error, reset, timeout).
    Gateway,
}

impl Outcome {
    pub fn of_status(status: u16) -> Outcome {
        match status {
            502..=504 => Outcome::Gateway,
            500..=599 => Outcome::Error5xx,
            _ => Outcome::Success,
        }
    }
}

impl Outlier {
    pub fn is_ejected(&self, now_ms: u64) -> bool {
        now_ms < self.until_ms.load(Ordering::Relaxed)
    }

    /// Records an outcome; returns the ejection time when it crosses a threshold (the caller
    /// decides whether the pool can spare the server: [`Outlier::eject`]).
    pub fn record(&self, p: &OutlierPolicy, outcome: Outcome, now_ms: u64) -> bool {
        match outcome {
            Outcome::Success => {
                if self.run_5xx.load(Ordering::Relaxed) != 0 {
                    self.run_5xx.store(0, Ordering::Relaxed);
                }
                if self.run_gateway.load(Ordering::Relaxed) != 0 {
                    self.run_gateway.store(0, Ordering::Relaxed);
                }
                let times = self.times.load(Ordering::Relaxed);
                let until = self.until_ms.load(Ordering::Relaxed);
                if times > 0 && now_ms >= until + p.base_ms {
                    // Healthy for a base period since the last ejection ended.
                    self.times.store(times - 1, Ordering::Relaxed);
                    self.until_ms
                        .store(now_ms.saturating_sub(p.base_ms), Ordering::Relaxed);
                }
                false
            }
            Outcome::Error5xx | Outcome::Gateway => {
                let n5 = self.run_5xx.fetch_add(1, Ordering::Relaxed) + 1;
                let ng = if outcome == Outcome::Gateway {
                    self.run_gateway.fetch_add(1, Ordering::Relaxed) + 1
                } else {
                    self.run_gateway.store(0, Ordering::Relaxed);
                    0
                };
                (p.consecutive_5xx > 0 && n5 >= p.consecutive_5xx)
                    || (p.consecutive_gateway_failure > 0 && ng >= p.consecutive_gateway_failure)
            }
        }
    }

    /// Ejects the server now; returns for how long (ms).
    pub fn eject(&self, p: &OutlierPolicy, now_ms: u64) -> u64 {
        let times = self.times.fetch_add(1, Ordering::Relaxed) + 1;
        let ms = p.base_ms.saturating_mul(u64::from(times));
        self.until_ms.store(now_ms + ms, Ordering::Relaxed);
        self.run_5xx.store(0, Ordering::Relaxed);
        self.run_gateway.store(0, Ordering::Relaxed);
        self.ejections.fetch_add(1, Ordering::Relaxed);
        ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_multiplier_and_recovery() {
        let p = OutlierPolicy {
            consecutive_5xx: 3,
            consecutive_gateway_failure: 2,
            base_ms: 1000,
            max_percent: 50,
        };
        let o = Outlier::default();
        assert!(!o.record(&p, Outcome::Error5xx, 0));
        assert!(!o.record(&p, Outcome::Error5xx, 0));
        assert!(
            !o.record(&p, Outcome::Success, 0),
            "a success resets the run"
        );
        assert!(!o.record(&p, Outcome::Error5xx, 0));
        assert!(!o.record(&p, Outcome::Gateway, 0));
        assert!(
            o.record(&p, Outcome::Gateway, 0),
            "two gateway failures in a row"
        );
        assert_eq!(o.eject(&p, 0), 1000);
        assert!(o.is_ejected(999) && !o.is_ejected(1000));
        o.record(&p, Outcome::Gateway, 1000);
        assert!(o.record(&p, Outcome::Gateway, 1000));
        assert_eq!(
            o.eject(&p, 1000),
            2000,
            "the second ejection lasts twice as long"
        );
        // Healthy for a base period after it ended: the multiplier goes down.
        o.record(&p, Outcome::Success, 3000 + 1000);
        o.record(&p, Outcome::Gateway, 4000);
        assert!(o.record(&p, Outcome::Gateway, 4000));
        assert_eq!(o.eject(&p, 4000), 2000);
    }
}
