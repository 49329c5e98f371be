//! Weighted random choice.

use super::{Balancer, PickCtx};

#[derive(Debug)]
pub struct WeightedRandom {
    rng: fastrand::Rng,
}

impl WeightedRandom {
    pub fn new() -> WeightedRandom {
        WeightedRandom {
            rng: fastrand::Rng::new(),
        }
    }
}

/// Picks by weight with `rng`.
pub(super) fn weighted(rng: &mut fastrand::Rng, candidates: &[usize], weights: &[u32]) -> usize {
    weighted_except(rng, candidates, weights, None)
}

/// Picks by weight among `candidates` other than `except`.
pub(super) fn weighted_except(
    rng: &mut fastrand::Rng,
    candidates: &[usize],
    weights: &[u32],
    except: Option<usize>,
) -> usize {
    let eligible = || {
        candidates
            .iter()
            .copied()
            .filter(move |&i| Some(i) != except)
    };
    let total: u64 = eligible().map(|i| u64::from(weights[i])).sum();
    let mut x = rng.u64(0..total.max(1));
    for i in eligible() {
        let w = u64::from(weights[i]);
        if x < w {
            return i;
        }
        x -= w;
    }
    candidates[candidates.len() - 1]
}

impl Balancer for WeightedRandom {
    fn pick(&mut self, _: &PickCtx<'_>, candidates: &[usize], weights: &[u32], _: &[u32]) -> usize {
        weighted(&mut self.rng, candidates, weights)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::distribution;
    use super::*;

    #[test]
    fn follows_weights() {
        let mut b = WeightedRandom {
            rng: fastrand::Rng::with_seed(7),
        };
        let d = distribution(&mut b, &[3, 1], 40_000);
        assert!((29_000..31_000).contains(&d[0]), "{d:?}");
    }
}
