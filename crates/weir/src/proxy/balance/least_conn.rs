//! Least connections: the server with the fewest requests in flight per unit of weight; ties are
//! broken at random so equal servers share the load.

use super::{Balancer, PickCtx};

#[derive(Debug)]
pub struct LeastConn {
    rng: fastrand::Rng,
}

impl LeastConn {
    pub fn new() -> LeastConn {
        LeastConn {
            rng: fastrand::Rng::new(),
        }
    }
}

impl Balancer for LeastConn {
    fn pick(
        &mut self,
        _: &PickCtx<'_>,
        candidates: &[usize],
        weights: &[u32],
        active: &[u32],
    ) -> usize {
        // Compare active_a / weight_a < active_b / weight_b without division.
        let load = |i: usize| (u64::from(active[i]), u64::from(weights[i].max(1)));
        let mut best = candidates[0];
        let mut ties = 1u32;
        for &i in &candidates[1..] {
            let ((a, wa), (b, wb)) = (load(i), load(best));
            if a * wb < b * wa {
                best = i;
                ties = 1;
            } else if a * wb == b * wa {
                ties += 1;
                if self.rng.u32(0..ties) == 0 {
                    best = i;
                }
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_least_loaded() {
        let mut b = LeastConn::new();
        let req = super::super::test_support::request("/", "");
        let ctx = super::super::test_support::ctx(&req);
        assert_eq!(b.pick(&ctx, &[0, 1, 2], &[1, 1, 1], &[5, 2, 9]), 1);
        // Weight 4 with 6 in flight (1.5 each) beats weight 1 with 2 in flight.
        assert_eq!(b.pick(&ctx, &[0, 1], &[1, 4], &[2, 6]), 1);
        let mut seen = [0; 2];
        for _ in 0..100 {
            seen[b.pick(&ctx, &[0, 1], &[1, 1], &[0, 0])] += 1;
        }
        assert!(seen[0] > 20 && seen[1] > 20, "ties are shared: {seen:?}");
    }
}
