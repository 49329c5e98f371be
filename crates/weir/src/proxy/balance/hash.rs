//! Consistent hashing, keyed by URI, client IP, a header or a cookie, on weir's one ring
//! (`crate::ring`, shared with the cluster's placement of cache keys).
//!
//! Each server owns `160 × weight` points on a 64-bit ring, placed by hashing its name (as written
//! in the config) with the point number, so the ring depends only on the server list, never on
//! order or on which worker built it. A key goes to the first point at or after its hash; if that
//! server is not a candidate (down), the walk continues clockwise. Removing one of N servers
//! therefore remaps only the keys that landed on its points, about 1/N of all keys.

use std::sync::Arc;

use super::{Balancer, PickCtx};
pub use crate::ring::{stable_hash as hash64, Ring};

/// What a hash policy hashes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashKey {
    /// Path and query.
    Uri,
    /// The client's IP address.
    ClientIp,
    /// A request header's value (lowercase name).
    Header(String),
    /// A cookie's value.
    Cookie(String),
}

impl HashKey {
    /// Parses `uri`, `ip`, `header:NAME` or `cookie:NAME`.
    pub fn parse(s: &str) -> Result<HashKey, String> {
        match s.split_once(':') {
            None if s == "uri" => Ok(HashKey::Uri),
            None if s == "ip" => Ok(HashKey::ClientIp),
            Some(("header", name)) if !name.is_empty() => {
                Ok(HashKey::Header(name.to_ascii_lowercase()))
            }
            Some(("cookie", name)) if !name.is_empty() => Ok(HashKey::Cookie(name.to_string())),
            _ => Err(format!(
                "{s:?} is not a hash key (uri, ip, header:NAME or cookie:NAME)"
            )),
        }
    }

    /// The hash of this key for a request. A missing header or cookie hashes as empty, so such
    /// requests still stick together.
    pub fn hash(&self, ctx: &PickCtx<'_>) -> u64 {
        match self {
            HashKey::Uri => hash64(&ctx.request.target),
            HashKey::ClientIp => match ctx.client_ip {
                std::net::IpAddr::V4(a) => hash64(&a.octets()),
                std::net::IpAddr::V6(a) => hash64(&a.octets()),
            },
            HashKey::Header(name) => hash64(ctx.request.header(name).unwrap_or(b"")),
            HashKey::Cookie(name) => hash64(ctx.request.cookie(name).unwrap_or(b"")),
        }
    }
}

/// The balancer for every hash policy.
#[derive(Debug)]
pub struct Consistent {
    key: HashKey,
    ring: Arc<Ring>,
}

impl Consistent {
    pub fn new(key: HashKey, ring: Arc<Ring>) -> Consistent {
        Consistent { key, ring }
    }
}

impl Balancer for Consistent {
    fn pick(&mut self, ctx: &PickCtx<'_>, candidates: &[usize], _: &[u32], _: &[u32]) -> usize {
        let h = self.key.hash(ctx);
        self.ring
            .lookup(h, |i| candidates.contains(&i))
            .unwrap_or(candidates[0])
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::request;
    use super::*;

    fn ring_of(names: &[String]) -> Ring {
        let list: Vec<(&str, u32)> = names.iter().map(|s| (s.as_str(), 1)).collect();
        Ring::new(&list, crate::ring::BALANCER_POINTS)
    }

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("10.0.0.{i}:80")).collect()
    }

    #[test]
    fn removing_one_of_n_remaps_about_one_nth() {
        for n in [3usize, 5, 10] {
            let all = names(n);
            let full = ring_of(&all);
            // Remove the last server: build the ring of the others.
            let fewer = ring_of(&all[..n - 1]);
            let keys = 20_000;
            let mut moved = 0;
            let mut on_removed = 0;
            for k in 0..keys {
                let h = hash64(format!("/item/{k}").as_bytes());
                let before = full.lookup(h, |_| true).unwrap();
                let after = fewer.lookup(h, |_| true).unwrap();
                if before == n - 1 {
                    on_removed += 1;
                }
                if before != after {
                    moved += 1;
                    assert_eq!(before, n - 1, "only keys of the removed server move");
                }
            }
            assert_eq!(moved, on_removed);
            let share = moved as f64 / keys as f64;
            let ideal = 1.0 / n as f64;
            assert!(
                share < ideal * 1.35 && share > ideal * 0.65,
                "n={n}: moved {share:.3}, ideal {ideal:.3}"
            );
        }
    }

    #[test]
    fn skipping_a_down_server_matches_removing_it() {
        let all = names(4);
        let ring = ring_of(&all);
        for k in 0..2000 {
            let h = hash64(format!("k{k}").as_bytes());
            let first = ring.lookup(h, |_| true).unwrap();
            let without_2 = ring.lookup(h, |i| i != 2).unwrap();
            if first != 2 {
                assert_eq!(first, without_2);
            }
        }
    }

    #[test]
    fn keys_from_requests() {
        let req = request("/a?b", "X-User: alice\r\nCookie: theme=dark; sid=42\r\n");
        let ctx = PickCtx {
            client_ip: "10.1.2.3".parse().unwrap(),
            request: &req,
        };
        assert_eq!(HashKey::parse("uri").unwrap().hash(&ctx), hash64(b"/a?b"));
        assert_eq!(
            HashKey::parse("header:X-User").unwrap().hash(&ctx),
            hash64(b"alice")
        );
        assert_eq!(
            HashKey::parse("cookie:sid").unwrap().hash(&ctx),
            hash64(b"42")
        );
        assert_eq!(
            HashKey::parse("ip").unwrap().hash(&ctx),
            hash64(&[10, 1, 2, 3])
        );
        assert!(HashKey::parse("header:").is_err());
        assert!(HashKey::parse("body").is_err());
    }

    #[test]
    fn weights_scale_the_share() {
        let ring = Ring::new(&[("a:1", 3), ("b:1", 1)], crate::ring::BALANCER_POINTS);
        let mut counts = [0; 2];
        for k in 0..40_000 {
            counts[ring
                .lookup(hash64(format!("{k}").as_bytes()), |_| true)
                .unwrap()] += 1;
        }
        let share = counts[0] as f64 / 40_000.0;
        assert!((0.68..0.82).contains(&share), "{counts:?}");
    }
}
