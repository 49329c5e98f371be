//! Caps on a whole upstream, across workers (Envoy's circuit-breaker thresholds, same defaults):
//! connections open to its servers (1024), requests waiting for a new connection (1024),
//! requests in flight (1024) and retries in flight (3). A request that would pass one gets 503
//! at once, with the cap named in the log, instead of piling onto an origin that is already
//! slow: the overload stays at the gateway.
//!
//! Each count is a shared atomic taken and given back by a guard; the counts live in an `Arc`
//! so that a pooled connection, which can outlive the config that opened it, gives its slot
//! back to the same count.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::config::model;

/// Which cap a request met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    Connections,
    Pending,
    Requests,
    Retries,
}

impl Cap {
    pub fn as_str(self) -> &'static str {
        match self {
            Cap::Connections => "max_connections",
            Cap::Pending => "max_pending",
            Cap::Requests => "max_requests",
            Cap::Retries => "max_retries",
        }
    }
}

/// The live counts under an upstream's caps, kept by the registry across reloads: a reload
/// must not forget the connections and requests still open (a TCP listener's connections live
/// long), or each reload would let another full cap through.
pub type Counts = Arc<[AtomicU32; 4]>;

/// The caps and the live counts of one upstream.
#[derive(Debug)]
pub struct Limits {
    max: [u32; 4],
    counts: Counts,
}

/// A slot held under one cap: given back when dropped.
#[derive(Debug)]
pub struct Slot {
    counts: Arc<[AtomicU32; 4]>,
    cap: usize,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.counts[self.cap].fetch_sub(1, Ordering::Relaxed);
    }
}

impl Limits {
    pub fn compile(l: &model::UpstreamLimits) -> Limits {
        Limits::compile_with(l, Arc::new(Default::default()))
    }

    /// The caps of `l` over `counts` (the same upstream's counts before a reload).
    pub fn compile_with(l: &model::UpstreamLimits, counts: Counts) -> Limits {
        Limits {
            max: [
                l.max_connections,
                l.max_pending,
                l.max_requests,
                l.max_retries,
            ],
            counts,
        }
    }

    fn index(cap: Cap) -> usize {
        match cap {
            Cap::Connections => 0,
            Cap::Pending => 1,
            Cap::Requests => 2,
            Cap::Retries => 3,
        }
    }

    /// Takes a slot under `cap`, or says the cap is reached.
    pub fn take(&self, cap: Cap) -> Result<Slot, Cap> {
        let i = Limits::index(cap);
        let n = self.counts[i].fetch_add(1, Ordering::Relaxed);
        if n >= self.max[i] {
            self.counts[i].fetch_sub(1, Ordering::Relaxed);
            return Err(cap);
        }
        Ok(Slot {
            counts: self.counts.clone(),
            cap: i,
        })
    }

    /// The count under `cap` now.
    pub fn count(&self, cap: Cap) -> u32 {
        self.counts[Limits::index(cap)].load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_capped_and_given_back() {
        let l = Limits::compile(&model::UpstreamLimits {
            max_connections: 2,
            max_pending: 1,
            max_requests: 1,
            max_retries: 0,
        });
        let a = l.take(Cap::Connections).unwrap();
        let _b = l.take(Cap::Connections).unwrap();
        assert_eq!(l.take(Cap::Connections).unwrap_err(), Cap::Connections);
        drop(a);
        assert!(l.take(Cap::Connections).is_ok());
        assert_eq!(l.take(Cap::Retries).unwrap_err(), Cap::Retries);
        assert_eq!(l.count(Cap::Retries), 0);
    }
}
