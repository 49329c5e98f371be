//! Smooth weighted round robin (nginx's algorithm): with weights 5,1,1 the order is
//! a a b a c a a — spread out, never five a's in a row.

use super::{Balancer, PickCtx};

#[derive(Debug)]
pub struct SmoothWeighted {
    current: Vec<i64>,
}

impl SmoothWeighted {
    pub fn new(servers: usize) -> SmoothWeighted {
        SmoothWeighted {
            current: vec![0; servers],
        }
    }
}

impl Balancer for SmoothWeighted {
    fn pick(&mut self, _: &PickCtx<'_>, candidates: &[usize], weights: &[u32], _: &[u32]) -> usize {
        let mut total = 0i64;
        let mut best = candidates[0];
        for &i in candidates {
            let w = i64::from(weights[i]);
            self.current[i] += w;
            total += w;
            if self.current[i] > self.current[best] {
                best = i;
            }
        }
        self.current[best] -= total;
        best
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::distribution;
    use super::*;

    #[test]
    fn weights_are_exact_and_smooth() {
        let mut b = SmoothWeighted::new(3);
        assert_eq!(distribution(&mut b, &[5, 1, 1], 700), vec![500, 100, 100]);
        let mut b = SmoothWeighted::new(2);
        assert_eq!(distribution(&mut b, &[1, 1], 10), vec![5, 5]);
        // Smoothness: the heavy server never takes more than its share in a row.
        let mut b = SmoothWeighted::new(3);
        let req = super::super::test_support::request("/", "");
        let ctx = super::super::test_support::ctx(&req);
        let seq: Vec<usize> = (0..7)
            .map(|_| b.pick(&ctx, &[0, 1, 2], &[5, 1, 1], &[0; 3]))
            .collect();
        assert_eq!(seq, vec![0, 0, 1, 0, 2, 0, 0]);
    }
}
