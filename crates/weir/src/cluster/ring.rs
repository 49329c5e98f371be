//! Where a cache key lives: consistent hashing over the live members, with Varnish's shard
//! director semantics. Each member has `replicas` points on a 64-bit ring (the hash of
//! `node/i`); a key belongs to the member of the first point at or after the key's hash. When
//! that member is down, the next distinct member along the ring is the alternate, so one node
//! leaving moves only its own keys, and each to a different survivor. A member that joined less
//! than `rampup` ago owns a growing fraction of its keys (the key's position within the point's
//! arc decides, so a key does not flap), the rest staying with the alternate.
//!
//! The hash is FNV-1a with a 64-bit finaliser, not the process's keyed SipHash: every node must
//! place a key the same way, across restarts and versions.

/// One member on the ring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Point {
    pub hash: u64,
    pub member: usize,
}

/// The ring over a set of members.
#[derive(Debug, Default)]
pub struct Ring {
    points: Vec<Point>,
    members: usize,
}

/// A stable 64-bit hash (FNV-1a, then splitmix64's finaliser for avalanche).
pub fn stable_hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

impl Ring {
    /// A ring over `names` (members are their indexes), `replicas` points each.
    pub fn new(names: &[&str], replicas: u32) -> Ring {
        let mut points = Vec::with_capacity(names.len() * replicas as usize);
        for (m, name) in names.iter().enumerate() {
            for i in 0..replicas.max(1) {
                points.push(Point {
                    hash: stable_hash(format!("{name}/{i}").as_bytes()),
                    member: m,
                });
            }
        }
        points.sort_by_key(|p| (p.hash, p.member));
        Ring {
            points,
            members: names.len(),
        }
    }

    /// The members in the order they own `key_hash`: the owner first, then each alternate.
    pub fn order(&self, key_hash: u64) -> impl Iterator<Item = usize> + '_ {
        let start = self.points.partition_point(|p| p.hash < key_hash);
        let n = self.points.len();
        let mut seen = Vec::with_capacity(self.members);
        (0..n)
            .map(move |i| self.points[(start + i) % n].member)
            .filter(move |m| {
                if seen.contains(m) {
                    false
                } else {
                    seen.push(*m);
                    true
                }
            })
    }

    /// The member `key_hash` goes to: the first in [`Ring::order`] that `usable` accepts,
    /// where a member still ramping up (`ramp(m)` below 1.0) takes the key only when the
    /// key's position falls in the ramped share.
    pub fn pick(
        &self,
        key_hash: u64,
        usable: impl Fn(usize) -> bool,
        ramp: impl Fn(usize) -> f64,
    ) -> Option<usize> {
        // The key's own position, independent of the ring point: a uniform fraction in [0, 1).
        let frac = (key_hash.rotate_left(32) >> 11) as f64 / (1u64 << 53) as f64;
        self.order(key_hash)
            .find(|m| usable(*m) && (frac < ramp(*m)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owners(ring: &Ring, keys: u64, usable: impl Fn(usize) -> bool + Copy) -> Vec<usize> {
        (0..keys)
            .map(|k| {
                ring.pick(stable_hash(&k.to_be_bytes()), usable, |_| 1.0)
                    .unwrap()
            })
            .collect()
    }

    #[test]
    fn keys_spread_evenly_and_a_leaver_moves_only_its_own() {
        let ring = Ring::new(&["a", "b", "c"], 67);
        let all = owners(&ring, 30_000, |_| true);
        for m in 0..3 {
            let share = all.iter().filter(|o| **o == m).count() as f64 / 30_000.0;
            assert!((0.25..0.42).contains(&share), "member {m}: {share}");
        }
        let without_b = owners(&ring, 30_000, |m| m != 1);
        for (before, after) in all.iter().zip(&without_b) {
            if *before != 1 {
                assert_eq!(before, after, "a key of a survivor stays");
            } else {
                assert_ne!(*after, 1);
            }
        }
        // b's keys go to both survivors, not one.
        let moved: Vec<_> = all
            .iter()
            .zip(&without_b)
            .filter(|(b, _)| **b == 1)
            .map(|(_, a)| *a)
            .collect();
        assert!(moved.contains(&0) && moved.contains(&2));
    }

    #[test]
    fn placement_is_the_same_on_every_node_and_rampup_is_gradual() {
        let a = Ring::new(&["a", "b", "c"], 67);
        let b = Ring::new(&["a", "b", "c"], 67);
        assert_eq!(owners(&a, 1000, |_| true), owners(&b, 1000, |_| true));
        let share = |ramp: f64| {
            (0..10_000u64)
                .filter(|k| {
                    a.pick(
                        stable_hash(&k.to_be_bytes()),
                        |_| true,
                        |m| if m == 2 { ramp } else { 1.0 },
                    ) == Some(2)
                })
                .count() as f64
                / 10_000.0
        };
        let (none, half, full) = (share(0.0), share(0.5), share(1.0));
        assert_eq!(none, 0.0);
        assert!((full * 0.4..full * 0.6).contains(&half), "{half} of {full}");
    }
}
