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
    /// `http/1.1` (the default), `h2` (gRPC-style backends: prior knowledge over TCP, ALPN
    /// over TLS; trailers are relayed) or `fastcgi` (php-fpm and the like: give `fastcgi`).
    #[serde(default = "default_upstream_protocol")]
    pub protocol: String,
    /// For `protocol: h2`: the connections kept to each server, and their liveness.
    #[serde(default)]
    pub http2: Http2Client,
    /// For `protocol: fastcgi`: where the scripts are and how a path names one.
    pub fastcgi: Option<FastCgi>,
    /// Envoy's outlier ejection; off when absent.
    pub outlier_detection: Option<OutlierDetection>,
    /// Envoy's circuit-breaker thresholds for the whole upstream (all workers).
    #[serde(default)]
    pub limits: UpstreamLimits,
}

/// A FastCGI application's scripts (nginx's `fastcgi_param SCRIPT_FILENAME
/// $document_root$fastcgi_script_name`, `fastcgi_index`, `fastcgi_split_path_info`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FastCgi {
    /// The document root (relative to the config file's directory): `SCRIPT_FILENAME` is this
    /// and the script's path, `DOCUMENT_ROOT` this.
    pub root: String,
    /// The script for a path that ends in `/` (nginx `fastcgi_index`).
    #[serde(default = "default_fastcgi_index")]
    pub index: String,
    /// A regex with two captures splitting the path into the script's name and `PATH_INFO`
    /// (nginx `fastcgi_split_path_info`); the default `^(.+?\.php)(/.*)$`.
    pub split_path_info: Option<String>,
    /// Pass a request only when its script is a file under `root` (else 404), so that
    /// `/uploads/x.jpg/index.php` never runs an uploaded file: nginx's `try_files $uri =404`
    /// before PHP. On by default.
    #[serde(default = "default_true")]
    pub require_file: bool,
    /// The script run when the path names none that is a file (`/index.php`: a front
    /// controller, nginx's `try_files $uri $uri/ /index.php?$args`); `REQUEST_URI` stays what
    /// the client asked for. Without it, such a request is 404.
    pub fallback: Option<String>,
    /// A path ending in `/` whose directory holds no `index` script: `403` (the default:
    /// nginx's index module, reached by `try_files ... $uri/ ...`), or `fallback`: the
    /// `fallback` script runs (nginx's `try_files $uri /index.php?$args`, with no `$uri/`).
    #[serde(default = "default_fastcgi_directories")]
    pub directories: String,
    /// Keep connections to the application (`FCGI_KEEP_CONN`, nginx's `fastcgi_keep_conn on`),
    /// up to `keepalive.max_idle` per server and worker. Off by default: a kept connection
    /// holds one php-fpm child while idle, and php-fpm's pools are sized for one connection per
    /// request (Debian's has 5 children).
    #[serde(default)]
    pub keep_conn: bool,
    /// Pass `PATH_INFO` (empty when the path has none), as Debian's `fastcgi-php.conf` does;
    /// `false`: none, as nginx's bare `fastcgi.conf`.
    #[serde(default = "default_true")]
    pub path_info: bool,
    /// File name endings a script must have (php-fpm's `security.limit_extensions`): a path
    /// naming anything else names no script (the fallback runs, or 404).
    #[serde(default = "default_fastcgi_extensions")]
    pub extensions: Vec<String>,
    /// More CGI parameters, or values for the ones weir sets (`SERVER_NAME: example.com`).
    #[serde(default)]
    pub params: std::collections::BTreeMap<String, String>,
}

fn default_fastcgi_extensions() -> Vec<String> {
    vec![".php".into()]
}

fn default_fastcgi_directories() -> String {
    "403".into()
}

fn default_fastcgi_index() -> String {
    "index.php".into()
}

fn default_true() -> bool {
    true
}

/// Ejecting servers that fail in a row.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutlierDetection {
    /// 5xx responses in a row that eject (0: off).
    pub consecutive_5xx: u32,
    /// 502/503/504 or connection failures in a row that eject (0: off).
    pub consecutive_gateway_failure: u32,
    /// Ejection time, multiplied by the times the server was ejected.
    pub base_ejection_time: Dur,
    /// Servers ejected at once, in percent of the upstream's (one may always be).
    pub max_ejection_percent: u32,
}

impl Default for OutlierDetection {
    fn default() -> Self {
        OutlierDetection {
            consecutive_5xx: 5,
            consecutive_gateway_failure: 5,
            base_ejection_time: Dur(std::time::Duration::from_secs(30)),
            max_ejection_percent: 10,
        }
    }
}

/// Caps on the whole upstream (Envoy's circuit-breaker thresholds): beyond one, a request gets
/// 503 at once with the reason logged.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamLimits {
    /// Connections open to the upstream's servers (pooled and in use).
    pub max_connections: u32,
    /// Requests waiting for a connection.
    pub max_pending: u32,
    /// Requests in flight.
    pub max_requests: u32,
    /// Retries in flight.
    pub max_retries: u32,
}

impl Default for UpstreamLimits {
    fn default() -> Self {
        UpstreamLimits {
            max_connections: 1024,
            max_pending: 1024,
            max_requests: 1024,
            max_retries: 3,
        }
    }
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
    /// Reuse a connection that answered a HEAD. Off: an origin that sends bytes after a HEAD
    /// response (a body it should not have sent, late) would have them read as the next
    /// request's response; each HEAD then costs a new connection (3.7x the CPU of a reused
    /// one on a HEAD-only run). On for origins known to get HEAD right.
    pub reuse_after_head: bool,
}

impl Default for Keepalive {
    fn default() -> Self {
        Keepalive {
            max_idle: 128,
            idle_timeout: Dur(std::time::Duration::from_secs(60)),
            reuse_after_head: false,
        }
    }
}

/// HTTP/2 to the servers (`protocol: h2`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Http2Client {
    /// Most connections per worker and server: streams share them, a new one opens when each
    /// is at its stream limit.
    pub connections: usize,
    /// Most streams weir opens on one connection (the server's SETTINGS may allow fewer).
    pub max_streams: u32,
    /// A connection silent this long is sent a PING.
    pub ping_interval: Dur,
    /// A PING unanswered this long closes the connection (its streams get 502).
    pub ping_timeout: Dur,
}

impl Default for Http2Client {
    fn default() -> Self {
        use std::time::Duration;
        Http2Client {
            connections: 10,
            max_streams: 100,
            ping_interval: Dur(Duration::from_secs(30)),
            ping_timeout: Dur(Duration::from_secs(10)),
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
    /// Longest pause while writing a request body to the upstream (nginx's
    /// `proxy_send_timeout`; 504 beyond).
    pub send: Dur,
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
            send: Dur(Duration::from_secs(60)),
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

/// The service a gRPC health check asks about.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrpcCheck {
    /// The service's full name (`helloworld.Greeter`); empty: the server as a whole.
    #[serde(default)]
    pub service: String,
}

/// Periodic HTTP health checks.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActiveHealth {
    /// Path requested with GET (an HTTP check).
    pub path: Option<String>,
    /// A connect check instead: healthy when the server accepts a connection (and completes
    /// TLS, with `tls`) within `timeout`; for upstreams of TCP listeners.
    #[serde(default)]
    pub tcp: bool,
    /// A gRPC check instead (`grpc.health.v1.Health/Check`), for `protocol: h2` upstreams:
    /// healthy when the service answers `SERVING`.
    pub grpc: Option<GrpcCheck>,
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
