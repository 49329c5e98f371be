//! A compiled upstream pool and the health state its servers share across workers.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arc_swap::ArcSwap;

pub use super::address::resolve;
use super::address::{parse_server, unix_path};
use super::balance::hash::{HashKey, Ring};
use super::balance::Policy;
use crate::config::{model, CompileError};

/// A pool of servers with its policies.
#[derive(Debug)]
pub struct Upstream {
    pub name: String,
    pub servers: Vec<Server>,
    pub weights: Vec<u32>,
    pub backup: Vec<bool>,
    pub policy: Policy,
    /// The hash ring, for hash policies.
    pub ring: Option<Arc<Ring>>,
    pub max_idle: usize,
    pub idle_timeout: Duration,
    /// Reuse a connection that answered HEAD (`keepalive.reuse_after_head`).
    pub reuse_after_head: bool,
    pub connect_timeout: Duration,
    pub response_header_timeout: Duration,
    pub idle_read_timeout: Duration,
    /// Longest pause while writing a request body (`timeouts.send`).
    pub send_timeout: Duration,
    pub total_timeout: Option<Duration>,
    pub retry: RetryPolicy,
    pub passive: PassivePolicy,
    pub active: Option<ActivePolicy>,
    pub resolve_every: Duration,
    /// TLS to the servers that use it (`Server::tls_name`).
    pub tls: Option<super::tls::UpstreamTls>,
    /// Speak HTTP/2 to the servers (`protocol: h2`).
    pub h2: bool,
    /// Its connections (`http2`).
    pub http2: super::h2_client::Policy,
    /// Speak FastCGI to the servers (`protocol: fastcgi`): its scripts.
    pub fastcgi: Option<Arc<super::fastcgi::config::FastCgi>>,
    /// Outlier ejection, when configured.
    pub outlier: Option<super::outlier::OutlierPolicy>,
    /// Caps on connections, pending requests, requests and retries (all workers).
    pub limits: super::limits::Limits,
}

/// One server.
#[derive(Debug)]
pub struct Server {
    /// As written in the config (without `http://`): used in logs and for the hash ring.
    pub name: String,
    pub host: String,
    pub port: u16,
    /// The address connected to; re-resolved periodically for DNS names. Shared with the
    /// configs before and after a reload (`runtime/registry.rs`), as is `health`.
    pub addr: Arc<ArcSwap<SocketAddr>>,
    pub health: Arc<Health>,
    /// Spoken to over TLS, asking for (and verifying) this name.
    pub tls_name: Option<rustls::pki_types::ServerName<'static>>,
    /// A unix-domain socket (`unix:/run/app.sock`): connected to instead of `addr`.
    pub unix: Option<std::sync::Arc<std::path::Path>>,
}

impl Server {
    /// The authority sent when the client gave none (an HTTP/1.0 request without Host, health
    /// checks, HTTP/2's `:authority`): `host:port`, or `localhost` for a unix socket.
    pub fn authority(&self) -> String {
        match self.unix {
            Some(_) => "localhost".to_string(),
            None => format!("{}:{}", self.host, self.port),
        }
    }

    /// The address the access log reports (`None` for a unix socket: logged as `-`).
    pub fn log_addr(&self) -> Option<SocketAddr> {
        match self.unix {
            Some(_) => None,
            None => Some(**self.addr.load()),
        }
    }
}

/// The state of one server that outlives a config: its health and resolved address.
#[derive(Debug, Clone)]
pub struct ServerState {
    pub health: Arc<Health>,
    pub addr: Arc<ArcSwap<SocketAddr>>,
}

/// Where compiling an upstream finds its servers' state by name (`runtime::Registry`), so a
/// reloaded config finds the same health.
pub trait SharedServers {
    /// The state of `server` (`host:port`) of `upstream`, its address set to `addr`.
    fn server(&self, upstream: &str, server: &str, addr: SocketAddr) -> ServerState;

    /// The live counts under `upstream`'s caps (`limits.rs`).
    fn limit_counts(&self, upstream: &str) -> super::limits::Counts;
}

/// When to try another server.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    pub attempts: u32,
    /// Connect failures, timeouts, resets (`Error::retryable`).
    pub on: crate::error::RetryOn,
    pub on_status: Vec<u16>,
    /// Retries as a fraction of requests.
    pub budget: f64,
    /// Exponential backoff with full jitter: base and cap.
    pub backoff: Duration,
    pub max_backoff: Duration,
}

impl RetryPolicy {
    /// How long to wait before retry `n` (1-based): uniformly random up to
    /// min(`max_backoff`, `backoff` × 2^(n-1)) ("full jitter": retries of many requests that
    /// failed together spread out instead of arriving together).
    pub fn backoff(&self, n: u32) -> Duration {
        let ceiling = self
            .backoff
            .saturating_mul(1u32 << n.saturating_sub(1).min(16))
            .min(self.max_backoff);
        let nanos = ceiling.as_nanos() as u64;
        if nanos == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos(fastrand::u64(0..=nanos))
    }
}

/// Passive health thresholds (milliseconds).
#[derive(Debug, Clone)]
pub struct PassivePolicy {
    pub max_fails: u32,
    pub window_ms: u64,
    pub down_ms: u64,
}

/// Active health check settings.
#[derive(Debug, Clone)]
pub struct ActivePolicy {
    /// The path of an HTTP check (empty for a connect check).
    pub path: String,
    /// A connect check (`active_health.tcp`).
    pub tcp: bool,
    /// A gRPC check (`active_health.grpc`): the service asked about.
    pub grpc_service: Option<String>,
    pub interval: Duration,
    pub timeout: Duration,
    pub expect_status: Option<u16>,
    pub rise: u32,
    pub fall: u32,
}

/// Health of one server, shared by all workers and the health thread.
#[derive(Debug, Default)]
pub struct Health {
    /// Passive: down until this time (ms on the process clock).
    down_until_ms: AtomicU64,
    fails: AtomicU32,
    window_start_ms: AtomicU64,
    /// [`ACTIVE_DOWN`] once `fall` active checks failed in a row (cleared after `rise`
    /// passed), [`DRAINED`] while an operator drains the server (`POST /upstreams/drain`).
    /// One word, so that `is_up` stays one load for both.
    flags: AtomicU8,
    /// Failed attempts since start, for `/metrics` (a shared atomic: failures are rare).
    failures_total: AtomicU64,
    /// Connections closed because bytes followed a complete response (`proxy/pool.rs`).
    desync_total: AtomicU64,
    /// Outlier ejection's counters (`proxy/outlier.rs`).
    pub outlier: super::outlier::Outlier,
}

/// Milliseconds since the process started (monotonic; read on every proxied request, hence
/// [`Mono`](crate::clock::Mono) rather than `Instant`).
pub fn now_ms() -> u64 {
    ms_at(crate::clock::Mono::now())
}

/// [`now_ms`] for an instant already read (one clock read serves a request's picks).
pub fn ms_at(at: crate::clock::Mono) -> u64 {
    static START: OnceLock<crate::clock::Mono> = OnceLock::new();
    let start = *START.get_or_init(crate::clock::Mono::now);
    at.nanos_since(start) / 1_000_000
}

const ACTIVE_DOWN: u8 = 1;
const DRAINED: u8 = 2;

impl Health {
    pub fn is_up(&self, now_ms: u64) -> bool {
        self.flags.load(Ordering::Relaxed) == 0
            && now_ms >= self.down_until_ms.load(Ordering::Relaxed)
    }

    /// Drains the server (no new requests; those in flight finish) or takes it back.
    /// Returns whether that changed anything.
    pub fn set_drained(&self, drained: bool) -> bool {
        let before = if drained {
            self.flags.fetch_or(DRAINED, Ordering::Relaxed)
        } else {
            self.flags.fetch_and(!DRAINED, Ordering::Relaxed)
        };
        (before & DRAINED != 0) != drained
    }

    pub fn drained(&self) -> bool {
        self.flags.load(Ordering::Relaxed) & DRAINED != 0
    }

    /// Counts a failed attempt for `/metrics`.
    pub fn count_failure(&self) {
        self.failures_total.fetch_add(1, Ordering::Relaxed);
    }

    /// Failed attempts since start.
    pub fn failures(&self) -> u64 {
        self.failures_total.load(Ordering::Relaxed)
    }

    /// Counts a connection dropped for bytes after a complete response.
    pub fn count_desync(&self) {
        self.desync_total.fetch_add(1, Ordering::Relaxed);
    }

    /// Connections dropped for bytes after a complete response, since start.
    pub fn desyncs(&self) -> u64 {
        self.desync_total.load(Ordering::Relaxed)
    }

    /// Marks the server down until `until_ms` (or later, if it already is).
    pub fn down_until(&self, until_ms: u64) {
        self.down_until_ms.fetch_max(until_ms, Ordering::Relaxed);
    }

    /// Ends a passive mark-down at once.
    pub fn clear_passive_down(&self) {
        self.down_until_ms.store(0, Ordering::Relaxed);
    }

    /// Counts a failure; returns true when it marks the server down.
    pub fn record_failure(&self, p: &PassivePolicy, now_ms: u64) -> bool {
        if p.max_fails == 0 {
            return false;
        }
        let start = self.window_start_ms.load(Ordering::Relaxed);
        if now_ms.saturating_sub(start) > p.window_ms {
            self.window_start_ms.store(now_ms, Ordering::Relaxed);
            self.fails.store(0, Ordering::Relaxed);
        }
        let fails = self.fails.fetch_add(1, Ordering::Relaxed) + 1;
        if fails >= p.max_fails {
            self.fails.store(0, Ordering::Relaxed);
            self.down_until_ms
                .store(now_ms + p.down_ms, Ordering::Relaxed);
            return true;
        }
        false
    }

    /// Sets the active-check verdict; returns true if it changed.
    pub fn set_active_up(&self, up: bool) -> bool {
        let before = if up {
            self.flags.fetch_and(!ACTIVE_DOWN, Ordering::Relaxed)
        } else {
            self.flags.fetch_or(ACTIVE_DOWN, Ordering::Relaxed)
        };
        (before & ACTIVE_DOWN == 0) != up
    }

    pub fn active_up(&self) -> bool {
        self.flags.load(Ordering::Relaxed) & ACTIVE_DOWN == 0
    }
}

impl Upstream {
    pub(crate) fn compile(
        name: &str,
        u: model::Upstream,
        path: &str,
        shared: &dyn SharedServers,
        base: &crate::config::BaseDir,
    ) -> Result<Upstream, CompileError> {
        if u.servers.is_empty() {
            return Err((
                format!("{path}.servers"),
                "an upstream needs at least one server".into(),
            ));
        }
        let any_https = u.servers.iter().any(|s| {
            let a = match s {
                model::UpstreamServer::Short(a) => a,
                model::UpstreamServer::Long(l) => &l.address,
            };
            a.trim().starts_with("https://")
        });
        let h2 = match u.protocol.as_str() {
            "http/1.1" | "http1" | "fastcgi" => false,
            "h2" | "http2" => true,
            other => {
                return Err((
                    format!("{path}.protocol"),
                    format!("unknown protocol {other:?} (http/1.1, h2 or fastcgi)"),
                ))
            }
        };
        let fastcgi = super::fastcgi::config::compile_for(&u, path, base, any_https)?;
        let tls = match (&u.tls, any_https) {
            (Some(t), _) => Some(super::tls::compile(
                t,
                name,
                &format!("{path}.tls"),
                base,
                h2,
            )?),
            (None, true) => Some(super::tls::compile(
                &Default::default(),
                name,
                &format!("{path}.tls"),
                base,
                h2,
            )?),
            (None, false) => None,
        };
        let mut servers = Vec::new();
        let (mut weights, mut backup) = (Vec::new(), Vec::new());
        for (i, s) in u.servers.into_iter().enumerate() {
            let key = format!("{path}.servers[{i}]");
            let (address, weight, is_backup) = match s {
                model::UpstreamServer::Short(a) => (a, 1, false),
                model::UpstreamServer::Long(l) => (l.address, l.weight, l.backup),
            };
            if weight == 0 || weight > 1000 {
                return Err((
                    format!("{key}.weight"),
                    "weight must be between 1 and 1000".into(),
                ));
            }
            if let Some(path) = address.trim().strip_prefix("unix:") {
                let path = unix_path(path, tls.is_some()).map_err(|m| (key.clone(), m))?;
                let server_name = format!("unix:{}", path.display());
                // Unix sockets have no address: the shared state keeps a placeholder.
                let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
                let state = shared.server(name, &server_name, unspecified);
                servers.push(Server {
                    name: server_name,
                    host: "localhost".into(),
                    port: 0,
                    addr: state.addr,
                    health: state.health,
                    tls_name: None,
                    unix: Some(path.into()),
                });
                weights.push(weight);
                backup.push(is_backup);
                continue;
            }
            let (host, port, https) = parse_server(&address).map_err(|m| (key.clone(), m))?;
            let tls_name = match &tls {
                Some(t) if https || u.tls.is_some() => {
                    Some(t.name_for(&host).map_err(|m| (key.clone(), m))?)
                }
                _ => None,
            };
            let addr = resolve(&host, port).map_err(|m| (key.clone(), m))?;
            let server_name = format!("{host}:{port}");
            let state = shared.server(name, &server_name, addr);
            servers.push(Server {
                name: server_name,
                host,
                port,
                addr: state.addr,
                health: state.health,
                tls_name,
                unix: None,
            });
            weights.push(weight);
            backup.push(is_backup);
        }
        let policy_key = |default: HashKey| -> Result<HashKey, CompileError> {
            match &u.hash_key {
                None => Ok(default),
                Some(k) => HashKey::parse(k).map_err(|m| (format!("{path}.hash_key"), m)),
            }
        };
        let policy = match u.policy.as_str() {
            "round_robin" => Policy::RoundRobin,
            "random" => Policy::Random,
            "least_conn" => Policy::LeastConn,
            "p2c" | "power_of_two" => Policy::PowerOfTwo,
            "ip_hash" => Policy::Hash(HashKey::ClientIp),
            "header_hash" | "cookie_hash" if u.hash_key.is_none() => {
                return Err((format!("{path}.hash_key"), format!("{} needs hash_key: header:NAME or cookie:NAME", u.policy)))
            }
            "header_hash" | "cookie_hash" | "consistent_hash" => Policy::Hash(policy_key(HashKey::Uri)?),
            other => {
                return Err((
                    format!("{path}.policy"),
                    format!("unknown policy {other:?} (round_robin, random, least_conn, p2c, ip_hash, header_hash, cookie_hash, consistent_hash)"),
                ))
            }
        };
        let ring = matches!(policy, Policy::Hash(_)).then(|| {
            let named: Vec<(&str, u32)> = servers
                .iter()
                .zip(&weights)
                .map(|(s, w)| (s.name.as_str(), *w))
                .collect();
            Arc::new(Ring::new(&named, crate::ring::BALANCER_POINTS))
        });
        let mut retry = RetryPolicy {
            attempts: u.retries.attempts,
            on: Default::default(),
            on_status: Vec::new(),
            budget: u.retries.budget,
            backoff: u.retries.backoff.0,
            max_backoff: u.retries.max_backoff.0.max(u.retries.backoff.0),
        };
        for (i, cond) in u.retries.on.iter().enumerate() {
            match cond.as_str() {
                "connect" => retry.on.connect = true,
                "timeout" => retry.on.timeout = true,
                "reset" => retry.on.reset = true,
                s => match s.parse::<u16>() {
                    Ok(code @ 500..=599) => retry.on_status.push(code),
                    _ => {
                        return Err((
                            format!("{path}.retries.on[{i}]"),
                            format!("{s:?} is not a retry condition (connect, timeout, reset, or a 5xx status)"),
                        ))
                    }
                },
            }
        }
        if !(0.0..=10.0).contains(&retry.budget) {
            return Err((
                format!("{path}.retries.budget"),
                "must be between 0 and 10".into(),
            ));
        }
        let active = match u.active_health {
            None => None,
            Some(a) => {
                if let Some(g) = &a.grpc {
                    if a.path.is_some() || a.tcp {
                        return Err((
                            format!("{path}.active_health"),
                            "give one of `path` (an HTTP check), `tcp: true` (a connect check) or `grpc` (a gRPC check)".into(),
                        ));
                    }
                    if !h2 {
                        return Err((
                            format!("{path}.active_health.grpc"),
                            "a gRPC check speaks HTTP/2: the upstream needs `protocol: h2`".into(),
                        ));
                    }
                    if g.service.bytes().any(|b| !b.is_ascii_graphic()) {
                        return Err((
                            format!("{path}.active_health.grpc.service"),
                            "a service name is printable ASCII without spaces".into(),
                        ));
                    }
                }
                let check_path = match (&a.path, a.tcp) {
                    _ if a.grpc.is_some() => String::new(),
                    (Some(p), false) if p.starts_with('/') => p.clone(),
                    (Some(_), false) => {
                        return Err((
                            format!("{path}.active_health.path"),
                            "must start with /".into(),
                        ))
                    }
                    (None, true) => String::new(),
                    (Some(_), true) => return Err((
                        format!("{path}.active_health"),
                        "give `path` (an HTTP check) or `tcp: true` (a connect check), not both"
                            .into(),
                    )),
                    (None, false) => {
                        return Err((
                            format!("{path}.active_health.path"),
                            "the path requested (or `tcp: true` for a connect check)".into(),
                        ))
                    }
                };
                if a.tcp && h2 {
                    return Err((
                        format!("{path}.active_health.tcp"),
                        "an HTTP/2 upstream is checked over HTTP/2: give `path`".into(),
                    ));
                }
                if a.rise == 0 || a.fall == 0 || a.interval.0.is_zero() {
                    return Err((
                        format!("{path}.active_health"),
                        "rise, fall and interval must be positive".into(),
                    ));
                }
                Some(ActivePolicy {
                    path: check_path,
                    tcp: a.tcp,
                    grpc_service: a.grpc.map(|g| g.service),
                    interval: a.interval.0,
                    timeout: a.timeout.0,
                    expect_status: a.expect_status,
                    rise: a.rise,
                    fall: a.fall,
                })
            }
        };
        let t = &u.timeouts;
        Ok(Upstream {
            name: name.to_string(),
            servers,
            weights,
            backup,
            policy,
            ring,
            max_idle: u.keepalive.max_idle,
            idle_timeout: u.keepalive.idle_timeout.0,
            reuse_after_head: u.keepalive.reuse_after_head,
            connect_timeout: nonzero(t.connect.0, Duration::from_secs(5)),
            response_header_timeout: nonzero(t.response_header.0, Duration::from_secs(60)),
            idle_read_timeout: nonzero(t.idle.0, Duration::from_secs(60)),
            send_timeout: nonzero(t.send.0, Duration::from_secs(60)),
            total_timeout: (!t.total.0.is_zero()).then_some(t.total.0),
            retry,
            passive: PassivePolicy {
                max_fails: u.passive_health.max_fails,
                window_ms: u.passive_health.window.0.as_millis() as u64,
                down_ms: u.passive_health.down_for.0.as_millis() as u64,
            },
            active,
            resolve_every: u.resolve_every.0,
            tls,
            h2,
            http2: super::h2_client::Policy::compile(&u.http2, u.keepalive.idle_timeout.0, path)?,
            fastcgi,
            outlier: u
                .outlier_detection
                .as_ref()
                .map(super::outlier::OutlierPolicy::compile),
            limits: super::limits::Limits::compile_with(&u.limits, shared.limit_counts(name)),
        })
    }

    /// Records one attempt's outcome on server `i` for outlier ejection (when configured);
    /// ejects it when it crossed a threshold and the pool can spare it.
    pub fn record_outcome(&self, i: usize, outcome: super::outlier::Outcome, now_ms: u64) {
        let Some(p) = &self.outlier else { return };
        let health = &self.servers[i].health;
        if !health.outlier.record(p, outcome, now_ms) {
            return;
        }
        let ejected = self
            .servers
            .iter()
            .filter(|s| s.health.outlier.is_ejected(now_ms))
            .count();
        let allowed = (self.servers.len() * p.max_percent as usize / 100).max(1);
        let others_up = self
            .servers
            .iter()
            .enumerate()
            .any(|(j, s)| j != i && s.health.is_up(now_ms));
        if ejected >= allowed || !others_up {
            return;
        }
        let ms = health.outlier.eject(p, now_ms);
        health.down_until(now_ms + ms);
        tracing::warn!(upstream = %self.name, server = %self.servers[i].name, ejected_for_ms = ms, ?outcome, "server ejected (outlier detection)");
    }

    /// Whether server `i` is up now.
    pub fn is_up(&self, i: usize, now_ms: u64) -> bool {
        self.servers[i].health.is_up(now_ms)
    }

    /// Counts a passive failure of server `i`; returns true when it marks the server down.
    ///
    /// Passive failures never take down the last server that is up (primaries and backups
    /// together), as nginx never marks down the only server of a group: with one flaky origin,
    /// clients keep getting its answers (or its 502s) rather than 503s for `down_for`. Only
    /// active health checks, which probe on purpose, can leave a group with nothing up. When
    /// two workers mark the last two servers down at once, the later one sees nothing else up
    /// and takes its mark back.
    pub fn record_passive_failure(&self, i: usize, now_ms: u64) -> bool {
        let others_up = |now| {
            self.servers
                .iter()
                .enumerate()
                .any(|(j, s)| j != i && s.health.is_up(now))
        };
        if !others_up(now_ms) {
            return false;
        }
        let health = &self.servers[i].health;
        if !health.record_failure(&self.passive, now_ms) {
            return false;
        }
        if !others_up(now_ms) {
            health.clear_passive_down();
            return false;
        }
        true
    }
}

fn nonzero(d: Duration, default: Duration) -> Duration {
    if d.is_zero() {
        default
    } else {
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passive_health_window() {
        let h = Health::default();
        let p = PassivePolicy {
            max_fails: 2,
            window_ms: 1000,
            down_ms: 5000,
        };
        assert!(!h.record_failure(&p, 100));
        assert!(
            h.record_failure(&p, 200),
            "second failure in the window marks down"
        );
        assert!(!h.is_up(300));
        assert!(h.is_up(5300));
        assert!(!h.record_failure(&p, 6000));
        assert!(!h.record_failure(&p, 7500), "old failure left the window");
    }
}

#[cfg(test)]
mod backoff_tests {
    use super::*;

    #[test]
    fn backoff_is_exponential_with_full_jitter_and_capped() {
        let p = RetryPolicy {
            attempts: 5,
            on: Default::default(),
            on_status: Vec::new(),
            budget: 0.2,
            backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(60),
        };
        for (n, ceiling) in [(1, 10), (2, 20), (3, 40), (4, 60), (9, 60)] {
            let samples: Vec<Duration> = (0..2000).map(|_| p.backoff(n)).collect();
            let max = samples.iter().max().unwrap();
            let mean = samples.iter().sum::<Duration>() / samples.len() as u32;
            assert!(*max <= Duration::from_millis(ceiling), "retry {n}: {max:?}");
            assert!(
                *max > Duration::from_millis(ceiling) * 9 / 10,
                "retry {n}: jitter reaches the ceiling"
            );
            let half = Duration::from_millis(ceiling) / 2;
            assert!(
                mean > half * 9 / 10 && mean < half * 11 / 10,
                "retry {n}: mean {mean:?}"
            );
        }
        let none = RetryPolicy {
            backoff: Duration::ZERO,
            ..p
        };
        assert_eq!(none.backoff(3), Duration::ZERO);
    }
}
