//! Upstream pools as written in the config file: servers, balancing, connection reuse,
//! timeouts, retries, health checks, TLS and protocol. Re-exported from `model.rs`.

use serde::Deserialize;

use super::model_tls::UpstreamTls;
use super::units::Dur;

/// A pool of servers.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Upstream {
    /// `host:port`, `http://host:port`, or `{ address, weight, backup }`.
    pub servers: Vec<UpstreamServer>,
    /// round_robin (default), random, least_conn, p2c, ip_hash, header_hash, cookie_hash,
    /// consistent_hash.
    #[serde(default = "default_policy")]
    pub policy: String,
    /// For hash policies: `uri` (default for consistent_hash), `ip`, `header:NAME`, `cookie:NAME`.
    pub hash_key: Option<String>,
    /// Idle connections kept per worker and server.
    #[serde(default)]
    pub keepalive: Keepalive,
    #[serde(default)]
    pub timeouts: UpstreamTimeouts,
    #[serde(default)]
    pub retries: Retries,
    #[serde(default)]
    pub passive_health: PassiveHealth,
    /// Periodic HTTP checks; off when absent.
    pub active_health: Option<ActiveHealth>,
    /// How often DNS names are resolved again.
    #[serde(default = "default_resolve_every")]
    pub resolve_every: Dur,
    /// TLS to the servers (`https://` servers use it with defaults when absent).
    pub tls: Option<UpstreamTls>,
    /// `http/1.1` (the default) or `h2` (gRPC-style backends: prior knowledge over TCP, ALPN
    /// over TLS; trailers are relayed).
    #[serde(default = "default_upstream_protocol")]
    pub protocol: String,
}

fn default_upstream_protocol() -> String {
    "http/1.1".into()
}

fn default_policy() -> String {
    "round_robin".into()
}

fn default_resolve_every() -> Dur {
    Dur(std::time::Duration::from_secs(30))
}

/// One server, short or long form.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum UpstreamServer {
    Short(String),
    Long(UpstreamServerLong),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamServerLong {
    pub address: String,
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// Used only when no primary server is up.
    #[serde(default)]
    pub backup: bool,
}

fn default_weight() -> u32 {
    1
}

/// Upstream connection reuse.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Keepalive {
    /// Most idle connections kept per worker and server (0 disables reuse).
    pub max_idle: usize,
    /// Idle connections older than this are closed rather than reused.
    pub idle_timeout: Dur,
}

impl Default for Keepalive {
    fn default() -> Self {
        Keepalive {
            max_idle: 128,
            idle_timeout: Dur(std::time::Duration::from_secs(60)),
        }
    }
}

/// Upstream timeouts.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamTimeouts {
    /// TCP connect (504 beyond).
    pub connect: Dur,
    /// From the request sent to the response head received (504 beyond).
    pub response_header: Dur,
    /// Longest pause between reads of the response body (the client connection is aborted).
    pub idle: Dur,
    /// Whole exchange, 0 = no limit.
    pub total: Dur,
}

impl Default for UpstreamTimeouts {
    fn default() -> Self {
        use std::time::Duration;
        UpstreamTimeouts {
            connect: Dur(Duration::from_secs(5)),
            response_header: Dur(Duration::from_secs(60)),
            idle: Dur(Duration::from_secs(60)),
            total: Dur(Duration::ZERO),
        }
    }
}

/// Retrying on another server.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Retries {
    /// Tries after the first one (0 = never retry).
    pub attempts: u32,
    /// Conditions: `connect` (always safe), and for idempotent requests without a body also
    /// `timeout`, `reset`, `502`, `503`, `504`.
    pub on: Vec<String>,
    /// Retries allowed as a fraction of requests (per worker and upstream), plus 10 to start.
    pub budget: f64,
    /// Wait before retry n: a random time up to `backoff` × 2^(n-1), at most `max_backoff`
    /// (exponential backoff with full jitter, Envoy's defaults); `0s` retries at once.
    pub backoff: Dur,
    pub max_backoff: Dur,
}

impl Default for Retries {
    fn default() -> Self {
        Retries {
            attempts: 1,
            on: vec!["connect".into()],
            budget: 0.2,
            backoff: Dur(std::time::Duration::from_millis(25)),
            max_backoff: Dur(std::time::Duration::from_millis(250)),
        }
    }
}

/// Marking servers down from live traffic.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PassiveHealth {
    /// Failures (connect errors, timeouts, resets, malformed responses) within `window` that mark
    /// the server down; 0 disables.
    pub max_fails: u32,
    pub window: Dur,
    /// How long a server stays down.
    pub down_for: Dur,
}

impl Default for PassiveHealth {
    fn default() -> Self {
        use std::time::Duration;
        PassiveHealth {
            max_fails: 3,
            window: Dur(Duration::from_secs(10)),
            down_for: Dur(Duration::from_secs(10)),
        }
    }
}

/// Periodic HTTP health checks.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActiveHealth {
    /// Path requested with GET.
    pub path: String,
    #[serde(default = "default_check_interval")]
    pub interval: Dur,
    #[serde(default = "default_check_timeout")]
    pub timeout: Dur,
    /// Status that means healthy (default: any 2xx).
    pub expect_status: Option<u16>,
    /// Consecutive successes to come back up.
    #[serde(default = "default_rise")]
    pub rise: u32,
    /// Consecutive failures to go down.
    #[serde(default = "default_fall")]
    pub fall: u32,
}

fn default_check_interval() -> Dur {
    Dur(std::time::Duration::from_secs(5))
}
fn default_check_timeout() -> Dur {
    Dur(std::time::Duration::from_secs(2))
}
fn default_rise() -> u32 {
    2
}
fn default_fall() -> u32 {
    3
}
