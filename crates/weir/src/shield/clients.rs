//! The table of clients: one per process (in the registry, so it outlives reloads), shared by
//! every worker, in 64 mutex-guarded shards keyed by the keyed hash of the client's address
//! (`keyed.rs`: clients choose their addresses, so the hash must not be predictable).
//!
//! Bounded: each shard holds at most `clients / 64` entries. A full shard evicts its oldest
//! quarter by last activity, among clients with no connection open and not blocked first (a
//! flood of new addresses then pushes out other idle clients, not the connected ones), then
//! among all. Size and evictions are in /metrics. Eviction is batched (one `select_nth` per
//! quarter of a shard), so a churn of a million addresses costs O(1) per new address.
//!
//! Times are milliseconds on the caller's clock, so the table tests drive a manual one.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

use super::keyed::{Map, Sharded};
use super::window::Window;
use super::Limit;

const SHARDS: usize = 64;

/// What the shield knows of one client.
#[derive(Debug, Clone)]
pub struct Entry {
    pub ip: IpAddr,
    /// Last activity (ms).
    pub last: u64,
    /// Blocked until then (ms); 0: not blocked.
    pub blocked_until: u64,
    /// Why it was blocked last.
    pub why: Limit,
    /// Connections open now.
    pub conns: u32,
    pub new_conns: Window,
    pub requests: Window,
    pub handshakes: Window,
    pub incomplete: Window,
    /// Responses counted by `outcomes`: since when (ms) and how many.
    pub outcome_since: u64,
    pub outcome_count: u32,
}

impl Entry {
    fn new(ip: IpAddr, now: u64) -> Entry {
        Entry {
            ip,
            last: now,
            blocked_until: 0,
            why: Limit::Blocked,
            conns: 0,
            new_conns: Window::default(),
            requests: Window::default(),
            handshakes: Window::default(),
            incomplete: Window::default(),
            outcome_since: 0,
            outcome_count: 0,
        }
    }

    pub fn blocked(&self, now: u64) -> bool {
        self.blocked_until > now
    }
}

/// The bounded client table.
#[derive(Debug)]
pub struct Clients {
    map: Sharded<Entry>,
    per_shard: AtomicUsize,
    len: AtomicUsize,
    pub evicted: AtomicU64,
}

impl Clients {
    pub fn new(max: usize) -> Clients {
        let c = Clients {
            map: Sharded::new(SHARDS),
            per_shard: AtomicUsize::new(1),
            len: AtomicUsize::new(0),
            evicted: AtomicU64::new(0),
        };
        c.set_max(max);
        c
    }

    /// Changes the bound (a reload); a smaller one is reached as shards fill.
    pub fn set_max(&self, max: usize) {
        self.per_shard.store((max / SHARDS).max(1), Relaxed);
    }

    /// The bound: at most this many clients are remembered.
    pub fn max(&self) -> usize {
        self.per_shard.load(Relaxed) * SHARDS
    }

    /// Clients remembered now.
    pub fn len(&self) -> usize {
        self.len.load(Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The keyed hash of an address.
    #[inline]
    pub fn key(&self, ip: IpAddr) -> u64 {
        match ip {
            IpAddr::V4(a) => self.map.mix(u64::from(u32::from(a))),
            IpAddr::V6(a) => match a.to_ipv4_mapped() {
                Some(v4) => self.map.mix(u64::from(u32::from(v4))),
                None => self.map.hash(&a.octets()),
            },
        }
    }

    /// Runs `f` on the client's entry, creating it (and making room) if absent.
    #[inline]
    pub fn with<R>(&self, key: u64, ip: IpAddr, now: u64, f: impl FnOnce(&mut Entry) -> R) -> R {
        let mut shard = self.map.shard(key);
        if let Some(e) = shard.get_mut(&key) {
            e.last = now;
            return f(e);
        }
        if shard.len() >= self.per_shard.load(Relaxed) {
            self.evict(&mut shard, now);
        }
        self.len.fetch_add(1, Relaxed);
        f(shard.entry(key).or_insert_with(|| Entry::new(ip, now)))
    }

    /// Runs `f` on the client's entry if it is remembered.
    pub fn existing<R>(&self, key: u64, f: impl FnOnce(&mut Entry) -> R) -> Option<R> {
        self.map.shard(key).get_mut(&key).map(f)
    }

    /// Makes room in a full shard (see the module doc).
    #[cold]
    fn evict(&self, shard: &mut Map<Entry>, now: u64) {
        let before = shard.len();
        let idle = |e: &Entry| e.conns == 0 && !e.blocked(now);
        let mut ages: Vec<u64> = shard.values().filter(|e| idle(e)).map(|e| e.last).collect();
        let all = ages.len() < before / 4;
        if all {
            ages = shard.values().map(|e| e.last).collect();
        }
        let cut = (before / 4).clamp(1, ages.len().max(1));
        if !ages.is_empty() {
            let (_, nth, _) = ages.select_nth_unstable(cut - 1);
            let nth = *nth;
            let mut left = cut;
            shard.retain(|_, e| {
                let go = left > 0 && e.last <= nth && (all || idle(e));
                left -= usize::from(go);
                !go
            });
        }
        let gone = before - shard.len();
        self.len.fetch_sub(gone, Relaxed);
        self.evicted.fetch_add(gone as u64, Relaxed);
    }

    /// Every blocked client: address, milliseconds left, why.
    pub fn blocked(&self, now: u64) -> Vec<(IpAddr, u64, Limit)> {
        let mut out = Vec::new();
        for i in 0..SHARDS {
            let shard = self.map.shard((i as u64) << 32);
            out.extend(
                shard
                    .values()
                    .filter(|e| e.blocked(now))
                    .map(|e| (e.ip, e.blocked_until - now, e.why)),
            );
        }
        out.sort();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_million_addresses_stay_within_the_bound() {
        let t = Clients::new(4096);
        let mut peak = 0;
        for n in 0..1_000_000u32 {
            let ip = IpAddr::from(n.to_be_bytes());
            t.with(t.key(ip), ip, u64::from(n), |e| e.conns = 0);
            peak = peak.max(t.len());
        }
        assert!(peak <= t.max(), "peak {peak} over {}", t.max());
        assert!(t.len() > t.max() / 2, "the table stays useful: {}", t.len());
        assert_eq!(
            t.evicted.load(Relaxed) as usize + t.len(),
            1_000_000,
            "every address counted once, evicted or kept"
        );
    }

    #[test]
    fn connected_and_blocked_clients_outlive_idle_ones() {
        let kept = IpAddr::from([10, 0, 0, 1]);
        let blocked = IpAddr::from([10, 0, 0, 2]);
        let t2 = Clients::new(128 * 64);
        for (ip, f) in [
            (
                kept,
                Box::new(|e: &mut Entry| e.conns = 1) as Box<dyn Fn(&mut Entry)>,
            ),
            (
                blocked,
                Box::new(|e: &mut Entry| e.blocked_until = 1_000_000),
            ),
        ] {
            t2.with(t2.key(ip), ip, 0, f);
        }
        // 128 per shard; 20,000 new idle addresses churn through.
        for n in 0..20_000u32 {
            let ip = IpAddr::from((0x0b00_0000 + n).to_be_bytes());
            t2.with(t2.key(ip), ip, 1 + u64::from(n), |_| {});
        }
        assert!(t2.existing(t2.key(kept), |e| e.conns).is_some());
        assert_eq!(t2.blocked(2).len(), 1);
        assert_eq!(t2.blocked(2)[0].0, blocked);
    }
}
