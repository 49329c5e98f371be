//! The DoS shield: per-client accounting and Tempesta FW's "frang" limits, in user space.
//!
//! ```text
//! accept ─→ blocked? ─→ concurrent / new-connection rate and burst ─→ (PROXY header) ─→ TLS rate
//!        └ closed here, before TLS and before anything is allocated for the connection
//! request ─→ blocked? ─→ request rate and burst ─→ shape (a filter) ─→ … ─→ outcome (401/403/404)
//! ```
//!
//! * [`clients::Clients`]: the bounded table of clients, one per process (in the registry, so a
//!   reload keeps it), keyed by the connection's peer address or, on a `proxy_protocol`
//!   listener, by the address the trusted load balancer's PROXY header carries
//!   ([`proxy_protocol`]). `X-Forwarded-For` is never a key: a client could name any address
//!   in it and have it blocked (what Tempesta's users ran into).
//! * [`window::Window`]: events per 1/8 s over the last second; only admitted events count, so
//!   a client refused for its rate is not kept refused by its own refused attempts.
//! * [`Shield`]: the compiled limits (`shield:` in the config) and what a violation does:
//!   `reply` (429, or the fitting 4xx), `close`, or `block` for `block_for`. A blocked client's
//!   new connections are closed in the accept loop (`server/worker.rs`) and its requests on
//!   open ones close them. Every action is counted per limit (`weir_shield_actions_total`), the
//!   admin API lists and unblocks clients, and the log lines about clients are gated
//!   (`logs::Limited`: a client controls their rate).
//! * The request shape (`shape` filter, `filters/shape.rs`) and the reads a head or body may
//!   take (`server/http1`) report their violations here; the HTTP/2 glitch counter lives in
//!   `server/h2/flood.rs`.
//!
//! Cost with no `shield:` configured: one `Option` test per connection and per request. With
//! one: a keyed hash and one shard lock per connection and per request (measured in the module
//! doc of `bench/ddos.sh`'s results).

pub mod clients;
pub mod keyed;
pub mod nets;
pub mod proxy_protocol;
pub mod window;

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use clients::{Clients, Entry};
use nets::Nets;
use window::Over;

use crate::config::{model, CompileError};

/// What a client passed (the `limit` label of `weir_shield_actions_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Limit {
    /// Blocked already (an earlier violation).
    Blocked,
    Connections,
    ConnectionRate,
    ConnectionBurst,
    TlsRate,
    TlsIncomplete,
    RequestRate,
    RequestBurst,
    HeadReads,
    BodyReads,
    Outcomes,
    Http2Glitches,
    Shape,
    /// A connection to a `proxy_protocol` listener from an untrusted source, or without a
    /// valid header.
    ProxyProtocol,
}

impl Limit {
    pub const ALL: [Limit; 14] = [
        Limit::Blocked,
        Limit::Connections,
        Limit::ConnectionRate,
        Limit::ConnectionBurst,
        Limit::TlsRate,
        Limit::TlsIncomplete,
        Limit::RequestRate,
        Limit::RequestBurst,
        Limit::HeadReads,
        Limit::BodyReads,
        Limit::Outcomes,
        Limit::Http2Glitches,
        Limit::Shape,
        Limit::ProxyProtocol,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Blocked => "blocked",
            Limit::Connections => "connections",
            Limit::ConnectionRate => "connection_rate",
            Limit::ConnectionBurst => "connection_burst",
            Limit::TlsRate => "tls_rate",
            Limit::TlsIncomplete => "tls_incomplete",
            Limit::RequestRate => "request_rate",
            Limit::RequestBurst => "request_burst",
            Limit::HeadReads => "head_reads",
            Limit::BodyReads => "body_reads",
            Limit::Outcomes => "outcomes",
            Limit::Http2Glitches => "http2_glitches",
            Limit::Shape => "shape",
            Limit::ProxyProtocol => "proxy_protocol",
        }
    }
}

/// What was done about a violation (the `action` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Answered (429 or the fitting 4xx); the connection may stay.
    Reply = 0,
    /// The connection was closed.
    Close = 1,
    /// The client was blocked (and the connection closed).
    Block = 2,
}

impl Action {
    pub const ALL: [Action; 3] = [Action::Reply, Action::Close, Action::Block];

    pub fn as_str(self) -> &'static str {
        match self {
            Action::Reply => "reply",
            Action::Close => "close",
            Action::Block => "block",
        }
    }
}

/// The shield's state that outlives a config: the client table and the action counters.
#[derive(Debug)]
pub struct ShieldState {
    pub clients: Clients,
    actions: [[AtomicU64; 3]; Limit::ALL.len()],
    epoch: Instant,
}

impl Default for ShieldState {
    fn default() -> Self {
        ShieldState {
            clients: Clients::new(65_536),
            actions: Default::default(),
            epoch: Instant::now(),
        }
    }
}

impl ShieldState {
    /// Milliseconds since the process started (never 0).
    #[inline]
    pub fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64 + 1
    }

    /// A connection tracked by [`Shield::connect`] closed.
    pub fn disconnect(&self, key: u64) {
        self.clients
            .existing(key, |e| e.conns = e.conns.saturating_sub(1));
    }

    /// Actions taken for `limit`.
    pub fn count(&self, limit: Limit, action: Action) -> u64 {
        self.actions[limit as usize][action as usize].load(Relaxed)
    }

    /// Unblocks `ip`; whether it was blocked.
    pub fn unblock(&self, ip: IpAddr) -> bool {
        let now = self.now();
        self.clients
            .existing(self.clients.key(ip), |e| {
                let was = e.blocked(now);
                e.blocked_until = 0;
                was
            })
            .unwrap_or(false)
    }

    /// Counts an action taken for `limit`.
    pub fn counted(&self, limit: Limit, action: Action) {
        self.actions[limit as usize][action as usize].fetch_add(1, Relaxed);
    }
}

/// The compiled `shield:` section.
#[derive(Debug)]
pub struct Shield {
    pub state: Arc<ShieldState>,
    allow: Nets,
    action: Action,
    block_ms: u64,
    concurrent: u32,
    conn_rate: u32,
    conn_burst: u32,
    tls_rate: u32,
    tls_incomplete: u32,
    req_rate: u32,
    req_burst: u32,
    /// Reads a request head or body may take (0: any).
    pub head_reads: u32,
    pub body_reads: u32,
    outcomes: Option<Outcomes>,
    /// HTTP/2 glitches a connection may make (0: no limit).
    pub http2_glitches: u32,
    /// IPv6 clients are counted by their network of this many bits (`ipv6_prefix`, 64 by
    /// default): a client rotating addresses within its /64 is one client.
    v6_prefix: u8,
}

#[derive(Debug)]
struct Outcomes {
    statuses: Vec<u16>,
    count: u32,
    within_ms: u64,
}

/// Why a request was refused, and what to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    pub limit: Limit,
    pub action: Action,
    /// Seconds until the client may try again (`Retry-After`).
    pub retry_after: u64,
}

impl Shield {
    pub(crate) fn compile(
        m: model::Shield,
        state: &Arc<ShieldState>,
    ) -> Result<Shield, CompileError> {
        let key = |k: &str| format!("shield.{k}");
        if m.clients < 64 {
            return Err((key("clients"), "must be at least 64".into()));
        }
        let action = match m.action.as_str() {
            "reply" => Action::Reply,
            "close" => Action::Close,
            "block" => Action::Block,
            other => {
                return Err((
                    key("action"),
                    format!("{other:?}: use block, reply or close"),
                ))
            }
        };
        let block_ms = m.block_for.0.as_millis() as u64;
        if action == Action::Block && block_ms == 0 {
            return Err((
                key("block_for"),
                "must be more than 0 with action: block".into(),
            ));
        }
        let small = |v: u32, k: &str| -> Result<u32, CompileError> {
            if v > u32::from(u16::MAX) {
                return Err((key(k), "must be at most 65535".into()));
            }
            Ok(v)
        };
        let c = &m.connections;
        let r = &m.requests;
        let outcomes = match m.outcomes {
            None => None,
            Some(o) => {
                if o.statuses.iter().any(|s| !(100..=599).contains(s)) || o.statuses.is_empty() {
                    return Err((
                        key("outcomes.statuses"),
                        "list statuses between 100 and 599".into(),
                    ));
                }
                if o.count == 0 || o.within.0.is_zero() {
                    return Err((
                        key("outcomes"),
                        "count and within must be more than 0".into(),
                    ));
                }
                Some(Outcomes {
                    statuses: o.statuses,
                    count: o.count,
                    within_ms: o.within.0.as_millis() as u64,
                })
            }
        };
        state.clients.set_max(m.clients);
        Ok(Shield {
            state: state.clone(),
            allow: nets::compile(&m.allow, "shield.allow")?,
            action,
            block_ms,
            concurrent: c.concurrent,
            conn_rate: small(c.rate, "connections.rate")?,
            conn_burst: small(c.burst, "connections.burst")?,
            tls_rate: small(c.tls_rate, "connections.tls_rate")?,
            tls_incomplete: small(c.tls_incomplete, "connections.tls_incomplete")?,
            req_rate: small(r.rate, "requests.rate")?,
            req_burst: small(r.burst, "requests.burst")?,
            head_reads: m.reads.head,
            body_reads: m.reads.body,
            outcomes,
            http2_glitches: m.http2_glitches,
            v6_prefix: match m.ipv6_prefix {
                p @ 1..=128 => p,
                _ => return Err((key("ipv6_prefix"), "must be between 1 and 128".into())),
            },
        })
    }

    /// The address the shield counts `ip` as: an IPv6 address's network of `ipv6_prefix`
    /// bits (IPv4, and IPv4-mapped IPv6, as they are).
    #[inline]
    pub fn client(&self, ip: IpAddr) -> IpAddr {
        match ip {
            IpAddr::V6(a) if self.v6_prefix < 128 && a.to_ipv4_mapped().is_none() => {
                let bits = u128::from(a) & (u128::MAX << (128 - u32::from(self.v6_prefix)));
                IpAddr::V6(bits.into())
            }
            other => other,
        }
    }

    /// Whether `ip` bypasses every limit: listed in `allow`, or no address at all. A unix
    /// socket's clients all come as `runtime::UNIX_PEER` (0.0.0.0, which no TCP peer can be):
    /// counted, they were one client, and one local process over its limit blocked every
    /// other (review of issue 54). The socket file's permissions decide who connects there
    /// (`docs/config.md`).
    #[inline]
    pub fn allowed(&self, ip: IpAddr) -> bool {
        ip.is_unspecified() || (!self.allow.is_empty() && self.allow.contains(ip))
    }

    /// A new connection from `ip`: `Ok(key)` to pass to [`ShieldState::disconnect`] when it
    /// closes (0: not tracked), or the limit it passed (the connection is to be closed).
    pub fn connect(&self, ip: IpAddr) -> Result<u64, Limit> {
        if self.allowed(ip) {
            return Ok(0);
        }
        let now = self.state.now();
        let ip = self.client(ip);
        let key = self.state.clients.key(ip);
        self.state.clients.with(key, ip, now, |e| {
            if e.blocked(now) {
                self.state.counted(Limit::Blocked, Action::Close);
                return Err(Limit::Blocked);
            }
            let over = if self.concurrent > 0 && e.conns >= self.concurrent {
                Some(Limit::Connections)
            } else {
                match e.new_conns.admit(now, self.conn_rate, self.conn_burst) {
                    Ok(()) => None,
                    Err(Over::Rate) => Some(Limit::ConnectionRate),
                    Err(Over::Burst) => Some(Limit::ConnectionBurst),
                }
            };
            match over {
                None => {
                    e.conns += 1;
                    Ok(key)
                }
                Some(limit) => {
                    self.punish(e, limit, now, Action::Close);
                    Err(limit)
                }
            }
        })
    }

    /// A TLS handshake begins: `Err` when the client passed its handshake rate.
    pub fn handshake(&self, ip: IpAddr) -> Result<(), Limit> {
        if self.tls_rate == 0 || self.allowed(ip) {
            return Ok(());
        }
        let now = self.state.now();
        let ip = self.client(ip);
        let key = self.state.clients.key(ip);
        self.state.clients.with(key, ip, now, |e| {
            if e.handshakes.admit(now, self.tls_rate, 0).is_err() {
                self.punish(e, Limit::TlsRate, now, Action::Close);
                return Err(Limit::TlsRate);
            }
            Ok(())
        })
    }

    /// A TLS handshake failed or timed out.
    pub fn handshake_failed(&self, ip: IpAddr) {
        if self.tls_incomplete == 0 || self.allowed(ip) {
            return;
        }
        let now = self.state.now();
        let ip = self.client(ip);
        let key = self.state.clients.key(ip);
        self.state.clients.with(key, ip, now, |e| {
            if e.incomplete.count(now) > self.tls_incomplete {
                self.punish(e, Limit::TlsIncomplete, now, Action::Close);
            }
        });
    }

    /// A request from `ip` begins: `Err` with what to do when it is refused.
    #[inline]
    pub fn request(&self, ip: IpAddr) -> Result<(), Refusal> {
        if self.allowed(ip) {
            return Ok(());
        }
        let now = self.state.now();
        let ip = self.client(ip);
        let key = self.state.clients.key(ip);
        self.state.clients.with(key, ip, now, |e| {
            if e.blocked(now) {
                self.state.counted(Limit::Blocked, Action::Close);
                return Err(Refusal {
                    limit: Limit::Blocked,
                    action: Action::Close,
                    retry_after: (e.blocked_until - now).div_ceil(1000),
                });
            }
            let limit = match e.requests.admit(now, self.req_rate, self.req_burst) {
                Ok(()) => return Ok(()),
                Err(Over::Rate) => Limit::RequestRate,
                Err(Over::Burst) => Limit::RequestBurst,
            };
            let action = self.punish(e, limit, now, Action::Reply);
            Err(Refusal {
                limit,
                action,
                retry_after: match action {
                    Action::Block => self.block_ms.div_ceil(1000),
                    _ => 1,
                },
            })
        })
    }

    /// A response with `status` was sent to `ip` (the `outcomes` limit).
    #[inline]
    pub fn outcome(&self, ip: IpAddr, status: u16) {
        let Some(o) = &self.outcomes else { return };
        if !o.statuses.contains(&status) || self.allowed(ip) {
            return;
        }
        let now = self.state.now();
        let ip = self.client(ip);
        let key = self.state.clients.key(ip);
        self.state.clients.with(key, ip, now, |e| {
            if now.saturating_sub(e.outcome_since) > o.within_ms {
                e.outcome_since = now;
                e.outcome_count = 0;
            }
            e.outcome_count += 1;
            if e.outcome_count >= o.count {
                e.outcome_count = 0;
                self.block(e, Limit::Outcomes, now);
            }
        });
    }

    /// A violation seen elsewhere (reads, HTTP/2 glitches, a shape): blocks the client when the
    /// action is `block` (or `block` is asked); returns what was done besides the caller's own
    /// answer.
    pub fn violation(&self, ip: IpAddr, limit: Limit, fallback: Action) -> Action {
        if self.allowed(ip) {
            return fallback;
        }
        let now = self.state.now();
        let ip = self.client(ip);
        let key = self.state.clients.key(ip);
        self.state
            .clients
            .with(key, ip, now, |e| self.punish(e, limit, now, fallback))
    }

    /// Blocks `ip` for `block_for` whatever the action (the `shape` filter's `block: true`).
    pub fn block_now(&self, ip: IpAddr, limit: Limit) {
        if self.allowed(ip) {
            return;
        }
        let now = self.state.now();
        let ip = self.client(ip);
        let key = self.state.clients.key(ip);
        self.state
            .clients
            .with(key, ip, now, |e| self.block(e, limit, now));
    }

    /// Applies the configured action (`fallback` instead of `reply` where nothing can be
    /// replied), counted and logged.
    fn punish(&self, e: &mut Entry, limit: Limit, now: u64, fallback: Action) -> Action {
        match self.action {
            Action::Block => {
                self.block(e, limit, now);
                Action::Block
            }
            Action::Close => {
                self.state.counted(limit, Action::Close);
                Action::Close
            }
            Action::Reply => {
                self.state.counted(limit, fallback);
                fallback
            }
        }
    }

    fn block(&self, e: &mut Entry, limit: Limit, now: u64) {
        static BLOCKED: crate::logs::Limited = crate::logs::Limited::new();
        let block_ms = self.block_ms.max(1000);
        e.blocked_until = now + block_ms;
        e.why = limit;
        self.state.counted(limit, Action::Block);
        if let Some(suppressed) = BLOCKED.admit() {
            tracing::warn!(
                client = %e.ip,
                limit = limit.as_str(),
                seconds = block_ms / 1000,
                suppressed,
                "client blocked"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shield(yaml: &str) -> Shield {
        let m: model::Shield = serde_yaml::from_str(yaml).unwrap();
        Shield::compile(m, &Arc::new(ShieldState::default())).unwrap()
    }

    #[test]
    fn concurrent_connections_are_released_on_close() {
        let s = shield("{connections: {concurrent: 2}}");
        let ip = IpAddr::from([192, 0, 2, 1]);
        let a = s.connect(ip).unwrap();
        let b = s.connect(ip).unwrap();
        assert_eq!(s.connect(ip), Err(Limit::Connections));
        s.state.disconnect(a);
        // Blocked by the violation (action: block by default).
        assert_eq!(s.connect(ip), Err(Limit::Blocked));
        assert!(s.state.unblock(ip));
        assert!(s.connect(ip).is_ok());
        s.state.disconnect(b);
        assert_eq!(s.state.count(Limit::Connections, Action::Block), 1);
        assert_eq!(s.state.count(Limit::Blocked, Action::Close), 1);
        // Another client is not affected.
        assert!(s.connect(IpAddr::from([192, 0, 2, 2])).is_ok());
    }

    #[test]
    fn reply_keeps_counting_only_admitted_requests() {
        let s = shield("{action: reply, requests: {rate: 3}}");
        let ip = IpAddr::from([192, 0, 2, 1]);
        for _ in 0..3 {
            assert!(s.request(ip).is_ok());
        }
        let r = s.request(ip).unwrap_err();
        assert_eq!((r.limit, r.action), (Limit::RequestRate, Action::Reply));
        assert_eq!(s.state.count(Limit::RequestRate, Action::Reply), 1);
    }

    #[test]
    fn the_allow_list_bypasses_everything() {
        let s = shield("{allow: [10.0.0.0/8], connections: {concurrent: 1}, requests: {rate: 1}}");
        let ip = IpAddr::from([10, 1, 2, 3]);
        for _ in 0..10 {
            assert_eq!(s.connect(ip), Ok(0));
            assert!(s.request(ip).is_ok());
        }
        assert!(s.state.clients.is_empty());
    }

    #[test]
    fn outcomes_block_after_n_within_the_window() {
        let s = shield("{outcomes: {statuses: [401, 403], count: 3, within: 10s}}");
        let ip = IpAddr::from([192, 0, 2, 9]);
        s.outcome(ip, 200);
        s.outcome(ip, 401);
        s.outcome(ip, 404);
        s.outcome(ip, 403);
        assert!(s.request(ip).is_ok());
        s.outcome(ip, 401);
        assert_eq!(s.request(ip).unwrap_err().limit, Limit::Blocked);
        assert_eq!(s.state.clients.blocked(s.state.now())[0].2, Limit::Outcomes);
    }

    #[test]
    fn bad_settings_name_their_key() {
        for (yaml, key) in [
            ("{action: drop}", "shield.action"),
            ("{clients: 3}", "shield.clients"),
            ("{block_for: 0s}", "shield.block_for"),
            ("{allow: [nope]}", "shield.allow[0]"),
            ("{requests: {rate: 70000}}", "shield.requests.rate"),
            (
                "{outcomes: {statuses: [42], count: 1, within: 1s}}",
                "shield.outcomes.statuses",
            ),
        ] {
            let m: model::Shield = serde_yaml::from_str(yaml).unwrap();
            let e = Shield::compile(m, &Arc::new(ShieldState::default())).unwrap_err();
            assert_eq!(e.0, key, "{yaml}: {e:?}");
        }
    }
}
