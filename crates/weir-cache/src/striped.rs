//! A counter every worker thread bumps without sharing a cache line: one 64-byte stripe per
//! thread (threads beyond [`STRIPES`] share stripes round-robin), summed when read.
//!
//! Why: a cache hit bumped one `AtomicU64` in the zone's shared stats, a write to the same
//! cache line from every worker on every hit (bench/tools/atomics.py found it, issue 35 §5):
//! on a many-core machine that line bounces between cores at the hit rate. A stripe is still
//! bumped with an atomic add (two threads may share one), but only its own thread writes it in
//! the usual case, so the line stays in that core's cache.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Stripes per counter (one per worker on machines up to this many workers).
pub const STRIPES: usize = 64;

#[derive(Debug, Default)]
#[repr(align(64))]
struct Stripe(AtomicU64);

/// A striped counter: [`Striped::fetch_add`] on the calling thread's stripe, [`Striped::load`]
/// sums them.
#[derive(Debug)]
pub struct Striped(Box<[Stripe; STRIPES]>);

impl Default for Striped {
    fn default() -> Self {
        Striped(Box::new(std::array::from_fn(|_| Stripe::default())))
    }
}

static NEXT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's stripe, chosen on first use (`usize::MAX`: not yet).
    static MINE: Cell<usize> = const { Cell::new(usize::MAX) };
}

#[inline]
fn stripe() -> usize {
    MINE.with(|m| {
        let s = m.get();
        if s != usize::MAX {
            return s;
        }
        let s = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
        m.set(s);
        s
    })
}

impl Striped {
    /// Adds `n` on this thread's stripe.
    #[inline]
    pub fn fetch_add(&self, n: u64, order: Ordering) {
        self.0[stripe()].0.fetch_add(n, order);
    }

    /// The sum over the stripes (a recent value: stripes are read one after another).
    pub fn load(&self, order: Ordering) -> u64 {
        self.0
            .iter()
            .fold(0u64, |sum, s| sum.wrapping_add(s.0.load(order)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_add_to_one_total() {
        let c = std::sync::Arc::new(Striped::default());
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        c.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(c.load(Ordering::Relaxed), 8000);
    }
}
