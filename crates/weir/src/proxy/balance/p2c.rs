//! Power of two choices: two servers drawn at random by weight, the less loaded one wins. Nearly
//! as good as least-connections and needs no full scan.

use super::random::{weighted, weighted_except};
use super::{Balancer, PickCtx};

#[derive(Debug)]
pub struct PowerOfTwo {
    rng: fastrand::Rng,
}

impl PowerOfTwo {
    pub fn new() -> PowerOfTwo {
        PowerOfTwo {
            rng: fastrand::Rng::new(),
        }
    }
}

impl Balancer for PowerOfTwo {
    fn pick(
        &mut self,
        _: &PickCtx<'_>,
        candidates: &[usize],
        weights: &[u32],
        active: &[u32],
    ) -> usize {
        if candidates.len() == 1 {
            return candidates[0];
        }
        let a = weighted(&mut self.rng, candidates, weights);
        let b = weighted_except(&mut self.rng, candidates, weights, Some(a));
        let load = |i: usize| u64::from(active[i]) * 1000 / u64::from(weights[i].max(1));
        if load(b) < load(a) {
            b
        } else {
            a
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn avoids_the_loaded_server() {
        let mut b = PowerOfTwo::new();
        let req = super::super::test_support::request("/", "");
        let ctx = super::super::test_support::ctx(&req);
        // With two servers both are always drawn, so the idle one always wins.
        for _ in 0..50 {
            assert_eq!(b.pick(&ctx, &[0, 1], &[1, 1], &[10, 0]), 1);
        }
        let d = super::super::test_support::distribution(&mut b, &[1, 1, 1], 3000);
        assert!(d.iter().all(|c| *c > 800), "{d:?}");
    }
}
