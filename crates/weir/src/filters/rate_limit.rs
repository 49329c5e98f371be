//! `rate_limit`: requests per key under the generic cell rate algorithm (GCRA), nginx
//! `limit_req` semantics with the headers of draft-ietf-httpapi-ratelimit-headers.
//!
//! Per key, one number: the theoretical arrival time (TAT) of the next request. With an
//! emission interval T = per / rate and a tolerance of `burst` × T, a request at time t is
//! admitted when TAT − t ≤ tolerance, and moves TAT to max(TAT, t) + T. A request beyond that
//! waits when the delay queue has room (`queue` × T more tolerance: nginx's delayed burst), and
//! is refused otherwise; a refused request does not move TAT (only accepted requests count).
//!
//! One limiter per process, not per worker: the table is shared by every worker behind 64
//! mutex-guarded shards (`keyed.rs`: a lookup holds one shard's lock for a hash probe), so a limit of 100 r/s
//! admits 100 r/s whatever the worker count. The table is bounded (`max_keys`): when a shard
//! is full, keys whose TAT has passed (they are back to a full burst, the same as absent) are
//! dropped, then the oldest. Its size is `weir_rate_limit_keys` in /metrics.
//!
//! Why by hand and not `governor`: governor's keyed limiter has no delay queue with a bound,
//! cannot report the remaining quota for RateLimit without a second check, and keeps keys
//! until `retain_recent` is called; the algorithm itself is 20 lines.
//!
//! Headers (draft -08, structured fields): `RateLimit-Policy: "name";q=10;w=1` (quota per
//! window in seconds) and `RateLimit: "name";r=4;t=1` (remaining, seconds until the quota is
//! whole again), and `Retry-After` on a 429.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use weir_http::Reply;

use super::compile::{Compiled, Kind};
use super::registry::{Build, Built, Cx};
use super::{Answer, Caps, Flow, Phases, Req, State};
use crate::config::{model, CompileError};
use crate::vars::{Template, Var};

const SHARDS: usize = 64;

/// A compiled rate limit.
#[derive(Debug)]
pub struct RateLimit {
    pub name: String,
    /// Emission interval and tolerances, in nanoseconds.
    interval: u64,
    burst_tol: u64,
    queue_tol: u64,
    key: Key,
    status: u16,
    headers: bool,
    /// `RateLimit-Policy: ...\r\n`, encoded once.
    policy_line: Bytes,
    pub table: Arc<Table>,
    /// `cluster: members`: the quota is divided by this cluster's live member count (with
    /// `cluster: redis`, only while Redis does not answer).
    divide: Option<Arc<crate::cluster::Cluster>>,
    /// `cluster: redis`: the counts shared through Redis (`rate_limit_redis.rs`).
    redis: Option<Arc<super::rate_limit_redis::Shared>>,
}

/// The GCRA parameters of one decision, in nanoseconds.
#[derive(Debug, Clone, Copy)]
struct Params {
    interval: u64,
    burst_tol: u64,
    queue_tol: u64,
}

/// What requests are counted by.
#[derive(Debug)]
enum Key {
    /// The client address, or its network.
    Client {
        v4: u8,
        v6: u8,
    },
    Template(Template),
}

/// The shared key → TAT table.
#[derive(Debug)]
pub struct Table {
    map: super::keyed::Sharded<u64>,
    per_shard: usize,
    /// Nanoseconds are counted from here.
    epoch: Instant,
    len: AtomicUsize,
    pub rejected: AtomicU64,
    pub delayed: AtomicU64,
}

/// A decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Admitted now; `remaining` more could be at once.
    Admit { remaining: u64, reset: u64 },
    /// Admitted after waiting this long.
    Delay { wait: u64, reset: u64 },
    /// Refused: the next request conforms in `retry` nanoseconds.
    Refuse { retry: u64, reset: u64 },
}

impl Table {
    pub fn new(max_keys: usize) -> Table {
        Table {
            map: super::keyed::Sharded::new(SHARDS),
            per_shard: max_keys.div_ceil(SHARDS).max(1),
            epoch: Instant::now(),
            len: AtomicUsize::new(0),
            rejected: AtomicU64::new(0),
            delayed: AtomicU64::new(0),
        }
    }

    /// Keys held now.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(super) fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// GCRA for `key` at `now` (nanoseconds since the table's epoch).
    fn check(&self, key: &[u8], now: u64, l: &RateLimit) -> Verdict {
        self.check_hashed(self.map.hash(key), now, l.params())
    }

    /// [`Table::check`] for a key already hashed.
    fn check_hashed(&self, h: u64, now: u64, l: Params) -> Verdict {
        let mut map = self.map.shard(h);
        let slot = map.get_mut(&h);
        let tat = slot.as_deref().copied().unwrap_or(now).max(now);
        let ahead = tat - now;
        let new_tat = tat + l.interval;
        // `t` of the RateLimit field: with quota left, the seconds until it is whole again;
        // with none, the seconds until the next request is allowed (what Retry-After says).
        let full = new_tat - now;
        let next = full.saturating_sub(l.burst_tol);
        let verdict = if ahead <= l.burst_tol {
            let remaining = (l.burst_tol - ahead) / l.interval;
            Verdict::Admit {
                remaining,
                reset: if remaining == 0 { next } else { full },
            }
        } else if ahead <= l.queue_tol {
            Verdict::Delay {
                wait: ahead - l.burst_tol,
                reset: next,
            }
        } else {
            return Verdict::Refuse {
                retry: ahead - l.burst_tol,
                reset: ahead - l.burst_tol,
            };
        };
        match slot {
            Some(v) => *v = new_tat,
            None => {
                if map.len() >= self.per_shard {
                    self.evict(&mut map, now);
                }
                map.insert(h, new_tat);
                self.len.fetch_add(1, Ordering::Relaxed);
            }
        }
        verdict
    }

    /// The TAT of the key hashed `h` (0 when absent).
    pub(super) fn tat(&self, h: u64) -> u64 {
        self.map.shard(h).get(&h).copied().unwrap_or(0)
    }

    /// Sets the TAT of the key hashed `h` (the cluster's, from Redis); `now` as for
    /// [`Table::check`].
    pub(super) fn set_tat(&self, h: u64, tat: u64, now: u64) {
        let mut map = self.map.shard(h);
        match map.get_mut(&h) {
            Some(v) => *v = tat,
            None => {
                if map.len() >= self.per_shard {
                    self.evict(&mut map, now);
                }
                map.insert(h, tat);
                self.len.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Makes room in a full shard: keys back to a whole burst go first, then the oldest
    /// tenth.
    #[cold]
    fn evict(&self, map: &mut super::keyed::Map<u64>, now: u64) {
        let before = map.len();
        map.retain(|_, tat| *tat > now);
        if map.len() >= self.per_shard {
            let mut tats: Vec<u64> = map.values().copied().collect();
            let cut = (tats.len() / 10).max(1);
            let (_, nth, _) = tats.select_nth_unstable(cut - 1);
            let nth = *nth;
            map.retain(|_, tat| *tat > nth);
        }
        self.len.fetch_sub(before - map.len(), Ordering::Relaxed);
    }
}

/// A rate limit, its table kept across reloads under a key of its name and the settings that
/// shape the state (a reload that changes them starts afresh): counted here, divided by the
/// cluster's members, or counted in Redis.
impl Build<&Cx<'_>> for model::RateLimit {
    type Output = Built;

    fn build(self, cx: &Cx<'_>) -> Built {
        use crate::config::model::ClusterLimit;
        let (name, path) = (cx.name, cx.path);
        let max_keys = self.max_keys;
        let mode = self.cluster;
        let cluster = match (mode, cx.cluster) {
            (None, _) => None,
            (Some(_), Some(c)) => Some(c.clone()),
            (Some(_), None) => {
                return Err((
                    format!("{path}.cluster"),
                    "needs a `cluster:` section (the node's name and etcd)".into(),
                ))
            }
        };
        let key = format!("rate_limit/{name}/{max_keys}");
        let (limit, key) = if let (Some(ClusterLimit::Redis), Some(c)) = (mode, cluster.clone()) {
            let Some(url) = c.redis.clone() else {
                return Err((
                    format!("{path}.cluster"),
                    "`redis` needs `cluster.redis` (Redis's host:port)".into(),
                ));
            };
            let l = RateLimit::compile(name, self, path, None)?;
            let key = format!("{key}/redis/{url}/{}/{:?}", l.interval(), c.redis_sync);
            let make = || {
                let settings = (url.as_str(), c.redis_sync, c.prefix.as_str());
                super::rate_limit_redis::Shared::new(
                    name,
                    settings,
                    l.interval(),
                    max_keys,
                    &c.state,
                )
                .map(Arc::new)
                .map_err(|e| ("cluster.redis".to_string(), e))
            };
            let shared = match cx.state {
                Some(reg) => reg.try_get_or(&key, make)?,
                None => make()?,
            };
            (l.counted_in(shared, c), key)
        } else {
            let table = cx.kept(&key, || Arc::new(Table::new(max_keys)));
            let l = RateLimit::compile(name, self, path, table)?;
            (l.divided_by(cluster), key)
        };
        let f = Arc::new(limit);
        Ok(Compiled {
            filter: f.clone(),
            kind: Kind::RateLimit(f),
            state_key: Some(key),
        })
    }
}

impl RateLimit {
    pub(crate) fn compile(
        name: &str,
        r: model::RateLimit,
        path: &str,
        table: Option<Arc<Table>>,
    ) -> Result<RateLimit, CompileError> {
        if r.rate == 0 {
            return Err((format!("{path}.rate"), "must be at least 1".into()));
        }
        if r.per.0.is_zero() {
            return Err((format!("{path}.per"), "must be longer than 0".into()));
        }
        if !(400..=599).contains(&r.status) {
            return Err((format!("{path}.status"), "must be 400-599".into()));
        }
        let interval = (r.per.0.as_nanos() / u128::from(r.rate)).max(1) as u64;
        let key = match r.key.trim() {
            "$remote_addr" => Key::Client {
                v4: r.ipv4_prefix.unwrap_or(32).min(32),
                v6: r.ipv6_prefix.unwrap_or(128).min(128),
            },
            k => {
                if r.ipv4_prefix.is_some() || r.ipv6_prefix.is_some() {
                    return Err((
                        format!("{path}.ipv4_prefix"),
                        "prefixes apply to `key: $remote_addr` only".into(),
                    ));
                }
                let t = Template::parse(k).map_err(|m| (format!("{path}.key"), m))?;
                if t.uses(&Var::Capture(1)) || t.captures() > 0 {
                    return Err((format!("{path}.key"), "$1-$9 are not keys".into()));
                }
                Key::Template(t)
            }
        };
        // The quota per window of whole seconds: `rate` per `per` when `per` is whole seconds,
        // else scaled to one second.
        let (quota, window) = if r.per.0.subsec_nanos() == 0 {
            (u64::from(r.rate), r.per.0.as_secs())
        } else {
            ((1_000_000_000 / interval).max(1), 1)
        };
        let policy_line = Bytes::from(format!(
            "RateLimit-Policy: \"{name}\";q={quota};w={window}\r\n"
        ));
        Ok(RateLimit {
            name: name.to_string(),
            interval,
            burst_tol: interval * u64::from(r.burst),
            queue_tol: interval * (u64::from(r.burst) + u64::from(r.queue)),
            key,
            status: r.status,
            headers: r.headers,
            policy_line,
            table: table.unwrap_or_else(|| Arc::new(Table::new(r.max_keys))),
            divide: None,
            redis: None,
        })
    }

    /// Divides the quota by `cluster`'s live members (`cluster: members`).
    pub(crate) fn divided_by(mut self, cluster: Option<Arc<crate::cluster::Cluster>>) -> Self {
        self.divide = cluster;
        self
    }

    /// Counts across the cluster in Redis (`cluster: redis`): decides on `shared`'s table, and
    /// divides the quota by `cluster`'s live members while Redis does not answer.
    pub(crate) fn counted_in(
        mut self,
        shared: Arc<super::rate_limit_redis::Shared>,
        cluster: Arc<crate::cluster::Cluster>,
    ) -> Self {
        self.table = shared.table.clone();
        self.redis = Some(shared);
        self.divide = Some(cluster);
        self
    }

    /// The emission interval, in nanoseconds.
    pub(crate) fn interval(&self) -> u64 {
        self.interval
    }

    /// This decision's parameters: the configured ones, or with `cluster: members` each
    /// interval multiplied by the live member count (a quota of 300 r/s over 3 members is
    /// 100 r/s each; the burst stays a count of requests per node).
    #[inline]
    fn params(&self) -> Params {
        let n = match &self.divide {
            Some(c) if self.redis.as_ref().is_none_or(|r| !r.healthy()) => c.live_count() as u64,
            _ => 1,
        };
        Params {
            interval: self.interval * n,
            burst_tol: self.burst_tol * n,
            queue_tol: self.queue_tol * n,
        }
    }

    /// Decides for the request's key now.
    pub fn check(&self, req: &Req<'_>) -> Verdict {
        let now = self.table.now();
        if let Some(shared) = &self.redis {
            return self.check_counted(shared, req, now);
        }
        match &self.key {
            Key::Client { v4, v6 } => match req.client.ip {
                // An IPv4 client (or network) is hashed by a keyed multiply, a third of
                // SipHash's cost: a client cannot choose many IPv4 addresses, and the table is
                // bounded either way. IPv6 addresses, which a client can vary at will within its
                // prefix, keep SipHash.
                std::net::IpAddr::V4(a) if *v4 <= 32 => {
                    let mask = u32::MAX.checked_shl(32 - u32::from(*v4)).unwrap_or(0);
                    let h = self.table.map.mix(u64::from(u32::from(a) & mask));
                    self.table.check_hashed(h, now, self.params())
                }
                ip => {
                    let (bytes, len) = network(ip, *v4, *v6);
                    self.table.check(&bytes[..len], now, self)
                }
            },
            Key::Template(t) => {
                let mut key = Vec::with_capacity(64);
                t.render(&req.env(), &mut key);
                self.table.check(&key, now, self)
            }
        }
    }

    /// [`RateLimit::check`] with `cluster: redis`: the key as text (Redis holds it by name),
    /// the decision noted for the next sync.
    #[cold]
    fn check_counted(
        &self,
        shared: &Arc<super::rate_limit_redis::Shared>,
        req: &Req<'_>,
        now: u64,
    ) -> Verdict {
        let mut key = Vec::with_capacity(64);
        match &self.key {
            Key::Client { v4, v6 } => {
                let (bytes, len) = network(req.client.ip, *v4, *v6);
                let ip = match len {
                    5 => IpAddr::from(<[u8; 4]>::try_from(&bytes[1..5]).unwrap_or_default()),
                    _ => IpAddr::from(<[u8; 16]>::try_from(&bytes[1..17]).unwrap_or_default()),
                };
                key.extend_from_slice(ip.to_string().as_bytes());
            }
            Key::Template(t) => t.render(&req.env(), &mut key),
        }
        let h = self.table.map.hash(&key);
        let verdict = self.table.check_hashed(h, now, self.params());
        shared.note(&key, h, !matches!(verdict, Verdict::Refuse { .. }), now);
        verdict
    }

    /// `RateLimit: "name";r=N;t=S\r\n`.
    fn put_state(&self, remaining: u64, reset: u64, out: &mut BytesMut) {
        out.extend_from_slice(b"RateLimit: \"");
        out.extend_from_slice(self.name.as_bytes());
        out.extend_from_slice(b"\";r=");
        out.extend_from_slice(itoa::Buffer::new().format(remaining).as_bytes());
        out.extend_from_slice(b";t=");
        let t = if remaining == 0 {
            // As Retry-After: at least 1 when nothing is left.
            ceil_secs(reset).max(1)
        } else {
            ceil_secs(reset)
        };
        out.extend_from_slice(itoa::Buffer::new().format(t).as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

fn ceil_secs(nanos: u64) -> u64 {
    nanos.div_ceil(1_000_000_000)
}

/// The client's address, or its network, as key bytes.
fn network(ip: IpAddr, v4: u8, v6: u8) -> ([u8; 17], usize) {
    let mut out = [0u8; 17];
    match ip {
        IpAddr::V4(a) => {
            let bits = u32::from(a) & (u32::MAX.checked_shl(32 - u32::from(v4)).unwrap_or(0));
            out[0] = 4;
            out[1..5].copy_from_slice(&bits.to_be_bytes());
            (out, 5)
        }
        IpAddr::V6(a) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(v6)).unwrap_or(0);
            out[0] = 6;
            out[1..17].copy_from_slice(&(u128::from(a) & mask).to_be_bytes());
            (out, 17)
        }
    }
}

/// What an admitted request remembers for its response's headers.
#[derive(Debug)]
struct Remaining(u64, u64);

impl super::Filter for RateLimit {
    fn phases(&self) -> Phases {
        match self.headers {
            true => Phases::REQUEST | Phases::RESPONSE,
            false => Phases::REQUEST,
        }
    }

    fn caps(&self) -> Caps {
        match self.headers {
            true => Caps::STATE,
            false => Caps::NONE,
        }
    }

    fn request(&self, req: &Req<'_>, state: &mut State, _: &mut Option<usize>) -> Flow {
        if req.client.member {
            // A cluster member's peer fill: its client was counted where it asked.
            return Flow::Continue;
        }
        match self.check(req) {
            Verdict::Admit { remaining, reset } => {
                if self.headers {
                    *state = Some(Box::new(Remaining(remaining, reset)));
                }
                Flow::Continue
            }
            Verdict::Delay { wait, reset } => {
                self.table.delayed.fetch_add(1, Ordering::Relaxed);
                if self.headers {
                    *state = Some(Box::new(Remaining(0, reset)));
                }
                Flow::Wait(Box::pin(async move {
                    tokio::time::sleep(Duration::from_nanos(wait)).await;
                    Flow::Continue
                }))
            }
            Verdict::Refuse { retry, reset } => {
                self.table.rejected.fetch_add(1, Ordering::Relaxed);
                let mut lines = BytesMut::new();
                self.put_state(0, reset, &mut lines);
                let field = |n: &'static str, v: &[u8]| {
                    (Bytes::from_static(n.as_bytes()), Bytes::copy_from_slice(v))
                };
                let policy = self
                    .policy_line
                    .strip_prefix(b"RateLimit-Policy: ")
                    .unwrap_or(b"");
                let state = lines.strip_prefix(b"RateLimit: ").unwrap_or(b"");
                Flow::Respond(Answer {
                    status: self.status,
                    fields: vec![
                        field("RateLimit-Policy", policy.trim_ascii_end()),
                        field("RateLimit", state.trim_ascii_end()),
                        field(
                            "Retry-After",
                            itoa::Buffer::new()
                                .format(ceil_secs(retry).max(1))
                                .as_bytes(),
                        ),
                    ],
                    body: Bytes::from_static(b"Too Many Requests\n"),
                })
            }
        }
    }

    fn response<'a>(&'a self, reply: &mut Reply<'a>, state: &mut State, lines: &mut BytesMut) {
        // A 429 made by this filter carries its fields already (no state was kept for it).
        if let Some(Remaining(r, t)) = state.as_ref().and_then(|s| s.downcast_ref()) {
            reply.add_lines(&self.policy_line);
            self.put_state(*r, *t, lines);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(rate: u32, burst: u32, queue: u32) -> RateLimit {
        let yaml = format!("{{rate: {rate}, burst: {burst}, queue: {queue}}}");
        let m: model::RateLimit = serde_yaml::from_str(&yaml).unwrap();
        RateLimit::compile("t", m, "f", None).unwrap()
    }

    /// GCRA by table, on a manual clock: (time in ms, verdict kind).
    #[test]
    fn gcra_table() {
        let l = limit(10, 2, 1); // T = 100 ms, burst 2, queue 1
        let at = |ms: u64| l.table.check(b"k", ms * 1_000_000, &l);
        let kind = |v: Verdict| match v {
            Verdict::Admit { remaining, .. } => format!("admit {remaining}"),
            Verdict::Delay { wait, .. } => format!("delay {}ms", wait / 1_000_000),
            Verdict::Refuse { retry, .. } => format!("refuse {}ms", retry / 1_000_000),
        };
        let table = [
            (1000, "admit 2"),
            (1000, "admit 1"),
            (1000, "admit 0"),
            (1000, "delay 100ms"),
            (1000, "refuse 200ms"),
            (1000, "refuse 200ms"), // refusals do not count
            (1250, "admit 0"),      // 150 ms ahead: within the burst again
            (1300, "admit 0"),
            (1300, "delay 100ms"),
            (1300, "refuse 200ms"),
            (2000, "admit 2"),
        ];
        for (ms, want) in table {
            assert_eq!(kind(at(ms)), want, "at {ms} ms");
        }
    }

    #[test]
    fn the_table_is_bounded() {
        let m: model::RateLimit =
            serde_yaml::from_str("{rate: 1, per: 1h, max_keys: 640}").unwrap();
        let l = RateLimit::compile("t", m, "f", None).unwrap();
        for i in 0..10_000u32 {
            l.table.check(&i.to_be_bytes(), 0, &l);
        }
        assert!(l.table.len() <= 640, "{}", l.table.len());
        assert!(l.table.len() > 64);
    }

    #[test]
    fn networks() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            network(ip("10.1.2.3"), 24, 128),
            network(ip("10.1.2.200"), 24, 128)
        );
        assert_ne!(
            network(ip("10.1.2.3"), 32, 128),
            network(ip("10.1.2.4"), 32, 128)
        );
        assert_eq!(
            network(ip("2001:db8::1"), 32, 64),
            network(ip("2001:db8::2"), 32, 64)
        );
        assert_eq!(network(ip("1.2.3.4"), 0, 0).1, 5);
    }
}
