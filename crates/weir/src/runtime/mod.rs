//! The running form of a config. [`compile`] turns a parsed [`config::Source`] into an immutable
//! [`RuntimeConfig`]: resolved addresses, route tables, precomputed header values, and the
//! upstreams and cache zones it uses, whose live state (stores, health) comes from a
//! [`Registry`] by name. The server publishes the current `RuntimeConfig` through an `ArcSwap`;
//! each request runs on the one that was current when it began, so a reload never changes a
//! request halfway (`server/worker.rs`).
//!
//! Why a module apart from `config/`: the config is text and a model, and knows nothing of
//! routes, proxies or caches; this module is where those meet. `config/` imports none of them,
//! so it stays a leaf.

pub mod admin_settings;
mod compile;
mod listen_address;
mod listener_tls;
mod published;
pub mod registry;
mod worker;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::config::{self, ConfigError};
use crate::routes::RouteTable;
pub use published::Published;
pub use registry::Registry;
pub(crate) use worker::WorkerRuntime;

/// The compiled, validated configuration.
#[derive(Debug)]
pub struct RuntimeConfig {
    /// Number of worker threads (resolved from `auto`).
    pub workers: usize,
    /// `Server` header value, if one is sent.
    pub server_header: Option<Bytes>,
    /// `Server: <value>\r\n`, or empty: the line replies made by weir carry.
    pub server_line: Bytes,
    pub limits: Limits,
    pub timeouts: Timeouts,
    pub listeners: Vec<ListenerConfig>,
    /// Upstream pools, indexed by `ProxyRoute::upstream`.
    pub upstreams: Vec<Arc<crate::proxy::upstream::Upstream>>,
    /// Cache zones, indexed by `CacheRoute::zone`.
    pub cache_zones: Vec<Arc<crate::cache::CacheZone>>,
    /// The certificate state of each listener's `acme:` section.
    pub acme: Vec<Arc<crate::tls::acme::AcmeCerts>>,
    /// The certificate files listeners serve, with the listener's key (`listeners[0]`).
    pub certificates: Vec<(String, crate::tls::FileCert)>,
    /// Key-value stores (for /metrics).
    pub kv_stores: Vec<Arc<crate::kv::KvStore>>,
    /// Where the zones and server health came from; a reload compiles against the same one.
    pub registry: Arc<Registry>,
    /// Access logs, indexed by `Route::access_log`.
    pub access_logs: Vec<Arc<crate::access_log::AccessLog>>,
    /// Per-request counters for `/metrics` (`metrics: true`, the default).
    pub metrics: bool,
    pub request_id: crate::filters::request_id::RequestIdSettings,
    /// W3C Trace Context, when `tracing` is configured.
    pub tracing: Option<crate::trace::context::TraceSettings>,
    pub log: LogSettings,
    /// HTTP/2 limits (validated: window and frame sizes within RFC 9113's ranges).
    pub http2: crate::config::model::Http2,
    /// HTTP/3 limits (checked: `tls/quic.rs`).
    pub http3: crate::config::model_http3::Http3,
    /// Who may use the admin API, when there is an admin listener.
    pub admin: Option<admin_settings::AdminSettings>,
    /// Every filter compiled (named ones once), for /metrics and the admin API.
    pub filters: Vec<crate::filters::compile::Compiled>,
    /// One bare proxy route per upstream (no filters, no forwarding fields, the request's own
    /// Host): what filters' subrequests go through (`pipeline/subrequest.rs`).
    pub subrequests: Vec<crate::proxy::route::ProxyRoute>,
    /// The DoS shield's limits (`None`: no `shield:` section, nothing counted).
    pub shield: Option<Arc<crate::shield::Shield>>,
    /// `cluster:`: this node among others (`None`: a single node).
    pub cluster: Option<Arc<crate::cluster::Cluster>>,
    /// Per cache zone (same index): its placement across the cluster, when sharded.
    pub zone_shards: Vec<Option<Arc<crate::cluster::shard::Shard>>>,
    /// `reload.watch`: the debounce of the config directories' watch (`None`: not watched).
    pub watch: Option<Duration>,
    /// `pid_file`, resolved against the config's directory.
    pub pid_file: Option<std::path::PathBuf>,
    /// `providers.kubernetes` (`None`: no cluster is read).
    pub kubernetes: Option<crate::config::kubernetes::Settings>,
}

/// The error log's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSettings {
    /// A `tracing` filter (`info`, `info,weir::proxy=debug`), validated.
    pub level: String,
    pub json: bool,
}

impl LogSettings {
    pub(crate) fn compile(l: &config::model::Log) -> Result<LogSettings, config::CompileError> {
        let level = l.level.trim();
        config::log_filter(level).map_err(|e| ("log.level".to_string(), e))?;
        let json = match l.format.as_str() {
            "text" => false,
            "json" => true,
            other => return Err(("log.format".into(), format!("{other:?}: use text or json"))),
        };
        Ok(LogSettings {
            level: level.to_string(),
            json,
        })
    }
}

/// Compiled limits.
#[derive(Debug, Clone)]
pub struct Limits {
    pub head: weir_http::Limits,
    pub max_body_bytes: u64,
    /// The largest of `max_body_bytes` and every route's own: what a connection may read
    /// before the route is known.
    pub body_ceiling: u64,
    pub max_connections: usize,
    pub max_requests_per_connection: u64,
    pub backlog: u32,
}

/// Compiled timeouts.
#[derive(Debug, Clone)]
pub struct Timeouts {
    pub header: Duration,
    pub body: Duration,
    pub keepalive: Duration,
    pub write: Duration,
    pub shutdown: Duration,
}

/// What identifies a listener across reloads: its address, whether it is the admin one, and
/// its rank among listeners with the same two (several `127.0.0.1:0` listeners are distinct).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ListenerId {
    pub address: SocketAddr,
    pub admin: bool,
    pub nth: usize,
    /// A unix listener's path, hashed (0: a TCP listener); its `address` is [`UNIX_PEER`].
    pub unix: u64,
}

/// The stand-in address of a unix listener and of its clients, which have no IP address:
/// `0.0.0.0:0`, which no TCP peer can have. Logs and `$remote_addr` write it `unix:`, as nginx
/// does (`vars::format_ip`).
pub const UNIX_PEER: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 0);

/// A unix listener's socket file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnixListen {
    pub path: std::path::PathBuf,
    /// Permissions given to the socket file after binding (`unix_mode`); `None`: what the
    /// umask leaves of 0777.
    pub mode: Option<u32>,
}

/// One listening socket and its routes.
#[derive(Debug)]
pub struct ListenerConfig {
    pub id: ListenerId,
    /// The TCP address ([`UNIX_PEER`] on a unix listener).
    pub address: SocketAddr,
    /// Listening on a unix socket instead (`address: unix:/path`).
    pub unix: Option<Arc<UnixListen>>,
    /// TCP_DEFER_ACCEPT on the listening socket, in seconds (0: off). The kernel holds a silent
    /// connection exactly this long when it is 2^n - 1 ([`defer_secs`]); weir then gives it
    /// `timeouts.header` minus this, so a client that sends nothing is closed at
    /// `timeouts.header` after connecting.
    pub defer_secs: u32,
    /// The admin listener (serves purges and stats, no user routes).
    pub admin: bool,
    pub routes: Arc<RouteTable>,
    /// The access log of requests no route matched (routes carry their own).
    pub access_log: Option<usize>,
    /// TLS termination (`None`: plain TCP).
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Certificates obtained at the handshake for names no certificate serves yet.
    pub on_demand: Option<Arc<crate::tls::on_demand::Gate>>,
    /// HTTP/2 with prior knowledge on a plain listener.
    pub h2c: bool,
    /// HTTP/3 over QUIC on the same port (`quic: true`).
    pub quic: Option<Arc<QuicListen>>,
    /// PROXY protocol required, from these sources only.
    pub proxy_protocol: Option<Arc<crate::shield::nets::Nets>>,
    /// Relays TCP connections to an upstream instead of serving HTTP (`crate::tcp`).
    pub tcp: Option<Arc<crate::tcp::TcpConfig>>,
    /// Pages for errors no route answered (404, 405); routes hold theirs.
    pub error_pages: Option<Arc<crate::actions::error_pages::ErrorPages>>,
    /// Where the address was given, for errors: the key path and the config line.
    pub key: String,
    pub line: Option<usize>,
}

/// A listener's HTTP/3 (`quic: true`): its QUIC server config and what its TCP responses
/// advertise.
#[derive(Debug)]
pub struct QuicListen {
    pub server: quinn::ServerConfig,
    /// `Alt-Svc: h3=":PORT"; ma=86400\r\n`; empty on port 0 (the port is chosen at bind).
    pub alt_svc: Bytes,
}

impl QuicListen {
    /// The `Alt-Svc` value alone (for HTTP/2's fields); `None` on port 0.
    pub(crate) fn alt_svc_value(&self) -> Option<&[u8]> {
        self.alt_svc
            .strip_prefix(b"Alt-Svc: ")?
            .strip_suffix(b"\r\n")
    }
}

/// The TCP_DEFER_ACCEPT value for a header timeout: the largest 2^n - 1 seconds within half of
/// it (at least 1). Linux rounds the value up to 2^n - 1 (its SYN-ACK retransmission schedule:
/// 10 holds a silent connection 15 s, measured), so these values are held exactly.
pub fn defer_secs(header: Duration) -> u32 {
    let half = header.as_secs_f64() / 2.0;
    let mut v = 1u32;
    while f64::from(v * 2 + 1) <= half && v < 1023 {
        v = v * 2 + 1;
    }
    v
}

impl RuntimeConfig {
    /// The index of listener `id` in this config, if it has it.
    #[inline]
    pub fn listener_index(&self, id: &ListenerId) -> Option<usize> {
        self.listeners.iter().position(|l| l.id == *id)
    }
}

impl ListenerConfig {
    /// The address as the config wrote it: `host:port` or `unix:/path`.
    pub fn shown(&self) -> String {
        match &self.unix {
            Some(u) => format!("unix:{}", u.path.display()),
            None => self.address.to_string(),
        }
    }

    /// `line 9: listeners[0].address` (or the key alone when the line is unknown).
    pub fn origin(&self) -> String {
        match self.line {
            Some(l) => format!("line {l}: {}", self.key),
            None => self.key.clone(),
        }
    }
}

/// Compiles a parsed config against `registry`.
pub fn compile(
    source: config::Source,
    registry: &Arc<Registry>,
) -> Result<RuntimeConfig, ConfigError> {
    let config::Source {
        file,
        base,
        locator,
        secrets,
        ..
    } = source;
    let mut cfg =
        compile::compile(file, &base, registry).map_err(|e| secrets.redact(locator.error(e)))?;
    for l in &mut cfg.listeners {
        l.line = locator.locate(&l.key).1;
    }
    Ok(cfg)
}

/// Parses and compiles config text against a new registry (see [`compile_str`] to reuse one).
pub fn load_str(
    text: &str,
    base: &Path,
    env: impl Fn(&str) -> Option<String>,
) -> Result<RuntimeConfig, ConfigError> {
    compile_str(text, base, env, &Arc::new(Registry::default()))
}

/// Parses and compiles config text against `registry`.
pub fn compile_str(
    text: &str,
    base: &Path,
    env: impl Fn(&str) -> Option<String>,
    registry: &Arc<Registry>,
) -> Result<RuntimeConfig, ConfigError> {
    compile(config::load_str(text, base, env)?, registry)
}

/// Reads, parses and compiles a config file against `registry`.
pub fn load_file(path: &Path, registry: &Arc<Registry>) -> Result<RuntimeConfig, ConfigError> {
    let source = config::load_file(path)?;
    compile(source, registry).map_err(|mut e| {
        e.file.get_or_insert_with(|| path.display().to_string());
        e
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<RuntimeConfig, ConfigError> {
        load_str(text, Path::new("."), |_| None)
    }

    #[test]
    fn defer_values_are_ones_linux_holds_exactly_and_fit_half_the_header_timeout() {
        let d = |secs: f64| defer_secs(Duration::from_secs_f64(secs));
        assert_eq!(d(0.5), 1, "at least 1");
        assert_eq!(d(2.0), 1);
        assert_eq!(
            d(10.0),
            3,
            "the default header timeout: held 3 s, then 7 s in weir"
        );
        assert_eq!(d(14.0), 7);
        assert_eq!(d(60.0), 15);
    }

    #[test]
    fn embedded_default_compiles() {
        let c = load(config::DEFAULT_CONFIG).unwrap();
        assert_eq!(c.listeners[0].address.to_string(), "127.0.0.1:8080");
    }

    #[test]
    fn compile_errors_name_path_and_line() {
        let e = load("listeners:\n  - address: 127.0.0.1:0\n    routes:\n      - match:\n          path_regex: '('\n        echo: {}\n")
            .unwrap_err();
        assert_eq!(e.line, Some(5), "{e}");
        assert_eq!(
            e.path.as_deref(),
            Some("listeners[0].routes[0].match.path_regex")
        );
        let e =
            load("listeners:\n  - address: 127.0.0.1:0\n    routes:\n      - match: {path: /}\n")
                .unwrap_err();
        assert!(e.message.contains("exactly one action"), "{e}");
        assert_eq!(e.line, Some(4));
        let e = load("listeners:\n  - address: nowhere\n").unwrap_err();
        assert_eq!(e.path.as_deref(), Some("listeners[0].address"));
        let e = load("workers: 0\nlisteners: []\n").unwrap_err();
        assert!(e.to_string().contains("workers"), "{e}");
    }

    #[test]
    fn a_recompile_finds_the_same_zone_and_health_and_forgets_removed_names() {
        let reg = Arc::new(Registry::default());
        let text = |zone: &str, size: &str| {
            format!("cache_zones: {{ {zone}: {{ max_size: {size} }} }}\nupstreams: {{ o: {{ servers: ['127.0.0.1:9', '127.0.0.1:10'] }} }}\nlisteners: []\n")
        };
        let a = compile_str(&text("z", "1m"), Path::new("."), |_| None, &reg).unwrap();
        let b = compile_str(&text("z", "1m"), Path::new("."), |_| None, &reg).unwrap();
        assert!(Arc::ptr_eq(&a.cache_zones[0], &b.cache_zones[0]));
        assert!(Arc::ptr_eq(
            &a.upstreams[0].servers[1].health,
            &b.upstreams[0].servers[1].health
        ));
        let resized = compile_str(&text("z", "2m"), Path::new("."), |_| None, &reg).unwrap();
        assert!(!Arc::ptr_eq(&a.cache_zones[0], &resized.cache_zones[0]));
        let renamed = compile_str(&text("y", "1m"), Path::new("."), |_| None, &reg).unwrap();
        reg.retain(&renamed);
        assert_eq!(reg.len(), (1, 2));
    }
}
