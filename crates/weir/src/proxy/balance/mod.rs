//! Load balancing: which server of an upstream gets the next request.
//!
//! Each policy is a [`Balancer`] in its own file. Balancers live per worker (thread-per-core), so
//! round-robin counters and connection counts need no atomics; like nginx without a shared zone,
//! each worker balances its own share of the traffic. Health is decided outside: a balancer
//! only ever sees the indices of servers that are up, primaries first and backups only when no
//! primary is up (see [`candidates`]).
//!
//! The hash policies (`ip_hash`, `header_hash`, `cookie_hash`, `consistent_hash`) are one
//! mechanism, a ketama-style ring (`crate::ring`, shared with the cluster), with different keys: removing one of N
//! servers moves only the keys that hashed to it, about 1/N of them.

pub mod hash;
mod least_conn;
mod p2c;
mod random;
mod round_robin;

use std::net::IpAddr;

use weir_http::RequestHead;

/// The policies a config can name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Policy {
    RoundRobin,
    Random,
    LeastConn,
    PowerOfTwo,
    /// Consistent hashing on a key.
    Hash(hash::HashKey),
}

impl Policy {
    /// The config spelling.
    pub fn as_str(&self) -> &'static str {
        match self {
            Policy::RoundRobin => "round_robin",
            Policy::Random => "random",
            Policy::LeastConn => "least_conn",
            Policy::PowerOfTwo => "p2c",
            Policy::Hash(_) => "hash",
        }
    }
}

/// What a balancer may look at for one request.
#[derive(Debug)]
pub struct PickCtx<'a> {
    pub client_ip: IpAddr,
    pub request: &'a RequestHead,
}

/// One load-balancing policy's per-worker state.
pub trait Balancer: std::fmt::Debug {
    /// Picks one of `candidates` (server indices, never empty). `weights[i]` is server i's
    /// weight, `active[i]` the requests this worker has in flight to it.
    fn pick(
        &mut self,
        ctx: &PickCtx<'_>,
        candidates: &[usize],
        weights: &[u32],
        active: &[u32],
    ) -> usize;
}

/// Builds the per-worker balancer for a policy. `ring` is the upstream's shared hash ring.
pub fn new_balancer(
    policy: &Policy,
    servers: usize,
    ring: Option<std::sync::Arc<hash::Ring>>,
) -> Box<dyn Balancer> {
    match policy {
        Policy::RoundRobin => Box::new(round_robin::SmoothWeighted::new(servers)),
        Policy::Random => Box::new(random::WeightedRandom::new()),
        Policy::LeastConn => Box::new(least_conn::LeastConn::new()),
        Policy::PowerOfTwo => Box::new(p2c::PowerOfTwo::new()),
        Policy::Hash(key) => Box::new(hash::Consistent::new(key.clone(), ring.unwrap_or_default())),
    }
}

/// The servers eligible now: the primaries that are up, or if none is, the backups that are up.
pub fn candidates(backup: &[bool], up: impl Fn(usize) -> bool, out: &mut Vec<usize>) {
    out.clear();
    out.extend((0..backup.len()).filter(|&i| !backup[i] && up(i)));
    if out.is_empty() {
        out.extend((0..backup.len()).filter(|&i| backup[i] && up(i)));
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use bytes::BytesMut;
    use weir_http::RequestHead;

    pub fn request(path: &str, extra: &str) -> RequestHead {
        let raw = format!("GET {path} HTTP/1.1\r\nHost: t\r\n{extra}\r\n");
        let mut b = BytesMut::from(raw.as_bytes());
        weir_http::parse_request(&mut b, &Default::default())
            .unwrap()
            .unwrap()
    }

    /// A pick context for `req` from 127.0.0.1.
    pub fn ctx(req: &RequestHead) -> super::PickCtx<'_> {
        super::PickCtx {
            client_ip: "127.0.0.1".parse().unwrap(),
            request: req,
        }
    }

    /// Counts picks per server over `n` requests.
    pub fn distribution(b: &mut dyn super::Balancer, weights: &[u32], n: usize) -> Vec<usize> {
        let req = request("/", "");
        let ctx = ctx(&req);
        let cands: Vec<usize> = (0..weights.len()).collect();
        let active = vec![0; weights.len()];
        let mut counts = vec![0; weights.len()];
        for _ in 0..n {
            counts[b.pick(&ctx, &cands, weights, &active)] += 1;
        }
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backups_only_when_no_primary_is_up() {
        let backup = [false, false, true];
        let mut out = Vec::new();
        candidates(&backup, |_| true, &mut out);
        assert_eq!(out, vec![0, 1]);
        candidates(&backup, |i| i == 2, &mut out);
        assert_eq!(out, vec![2]);
        candidates(&backup, |_| false, &mut out);
        assert!(out.is_empty());
    }
}

/// The candidate list for an upstream now.
pub(crate) fn up_candidates(
    up: &super::upstream::Upstream,
    tried: &[usize],
    out: &mut Vec<usize>,
    now: crate::clock::Mono,
) {
    let now = super::upstream::ms_at(now);
    candidates(&up.backup, |i| up.is_up(i, now) && !tried.contains(&i), out);
    if out.is_empty() && !tried.is_empty() {
        // Every server was tried once: allow another go at those still up.
        candidates(&up.backup, |i| up.is_up(i, now), out);
    }
}
