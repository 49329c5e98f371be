//! The config file as written: serde structs that mirror the YAML one to one. Every struct denies
//! unknown fields, so a typo is an error naming the key path and line, never silently ignored.
//! Defaults live here, next to the field they belong to; `runtime/compile.rs` turns this into the
//! runtime form.
//!
//! Size: about 650 lines because it is the whole file format in one place (every key, its type
//! and default, with a doc line each); splitting it by section would scatter the reference. The
//! operator's keys (logs, request id, the health action) are in `model_ops.rs`, TLS and HTTP/2 in
//! `model_tls.rs`, upstream pools in `model_upstream.rs`, all re-exported here.

use std::collections::BTreeMap;

use serde::Deserialize;

pub use super::model_filters::{
    Canary, CircuitBreaker, ClusterLimit, CompressRule, Concurrency, CorsRule, FilterRef,
    FilterSpec, Headers, IpRules, MirrorRule, NoStoreRule, RateLimit, ReplaceRule, Split,
    StickyRule,
};
pub use super::model_limits::{EncodedSlashes, Limits, UnderscoresInHeaders};
pub use super::model_maps::{MapDef, MapRegex, RouteLimits};
pub use super::model_ops::{
    AccessLog, AccessLogSetting, HealthRoute, Log, Otlp, RequestId, Tracing,
};
pub use super::model_proxy::{Forwarded, HeaderOps, Proxy, RegexReplace};
pub use super::model_shield::{ProxyProtocol, Shape, Shield};
pub use super::model_sites::{Site, SiteTls};
pub use super::model_static::{CacheControlRule, Dotfiles, Expires, Static};
pub use super::model_tcp::{TcpProxy, TcpRoute};
pub use super::model_tls::{
    Acme, AcmeDns, Certificate, ClientAuth, ClientAuthMode, ClientCert, Http2, Ocsp, OnDemand,
    Rfc2136, Tls, UpstreamTls,
};
pub use super::model_upstream::{
    ActiveHealth, FastCgi, Http2Client, Keepalive, OutlierDetection, PassiveHealth, Retries,
    Upstream, UpstreamLimits, UpstreamServer, UpstreamServerLong, UpstreamTimeouts,
};
use super::units::{Dur, Size};

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct File {
    /// Worker threads: `auto` (one per CPU core) or a number.
    #[serde(default)]
    pub workers: Workers,
    /// Variables chosen by another value (nginx's `map`), in order: `vars/map.rs`.
    #[serde(default)]
    pub maps: Vec<MapDef>,
    /// Value of the `Server` response header; `off` or an empty string sends none.
    #[serde(default = "default_server_header")]
    pub server_header: String,
    /// Connection and message size limits.
    #[serde(default)]
    pub limits: Limits,
    /// Timeouts for each phase of a client connection.
    #[serde(default)]
    pub timeouts: Timeouts,
    /// Sockets to listen on, each with its own route table (none: a config whose listeners
    /// come from `providers` or etcd).
    #[serde(default)]
    pub listeners: Vec<Listener>,
    /// Named pools of upstream servers, used by `proxy` routes.
    #[serde(default)]
    pub upstreams: BTreeMap<String, Upstream>,
    /// Named cache stores, used by routes with a `cache` stage.
    #[serde(default)]
    pub cache_zones: BTreeMap<String, CacheZone>,
    /// Named key-value stores, used by `kv` routes.
    #[serde(default)]
    pub kv_stores: BTreeMap<String, KvStoreConfig>,
    /// Named filters, used by listeners and routes (which then share one, and its state).
    #[serde(default)]
    pub filters: BTreeMap<String, FilterSpec>,
    /// The admin listener: purges, stats, health, metrics, reload.
    pub admin: Option<Admin>,
    /// The error log: level (or `RUST_LOG`-style filter) and format.
    #[serde(default)]
    pub log: Log,
    /// The access log of every listener that does not set its own.
    pub access_log: Option<AccessLogSetting>,
    /// Count requests per route and status, and their durations, for `/metrics`.
    #[serde(default = "default_true")]
    pub metrics: bool,
    /// The request id: kept from trusted peers, generated otherwise, sent upstream, logged.
    #[serde(default)]
    pub request_id: RequestId,
    /// W3C Trace Context: continued from trusted peers or started, sent upstream, logged
    /// (`trace/`). Off when absent.
    #[serde(default)]
    pub tracing: Option<Tracing>,
    /// HTTP/2 limits (TLS listeners offering `h2`, and `h2c` listeners).
    #[serde(default)]
    pub http2: Http2,
    /// HTTP/3 and QUIC limits (listeners with `quic: true`).
    #[serde(default)]
    pub http3: super::model_http3::Http3,
    /// The DoS shield: per-client connection and request limits, blocking (off when absent).
    pub shield: Option<Shield>,
    /// Files and directories (every `*.yaml` / `*.yml` in name order) merged into this config
    /// (`config/assemble.rs`); relative to this file's directory.
    #[serde(default)]
    pub include: Vec<String>,
    /// Watching the config's files.
    #[serde(default)]
    pub reload: super::model_cluster::Reload,
    /// This node as a member of a cluster (etcd, Redis).
    pub cluster: Option<super::model_cluster::Cluster>,
    /// Config from elsewhere, served beside this file's: `kubernetes`.
    pub providers: Option<super::model_providers::Providers>,
    /// Where `weir run` writes its process id (`--pid-file` overrides); the verbs (`weir
    /// reload`, `stop`, `upgrade`, `status`) find the running weir by it.
    pub pid_file: Option<String>,
}

/// A cache store.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheZone {
    /// Hard limit on stored bytes (keys, heads and bodies).
    pub max_size: Size,
    /// Independent locks the store is split into.
    #[serde(default = "default_shards")]
    pub shards: usize,
    /// A disk tier behind the memory store.
    #[serde(default)]
    pub disk: Option<DiskTier>,
    /// Shard the zone across the cluster's live members.
    pub cluster: Option<super::model_cluster::ZoneCluster>,
}

/// `kv_stores.NAME`: a key-value store.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvStoreConfig {
    /// Bytes of keys and values held (a PUT beyond is refused with 507, nothing is evicted).
    pub max_size: Size,
    /// Largest value (413 beyond; default 1m).
    #[serde(default)]
    pub max_value_size: Option<Size>,
    /// How long a value lives when the PUT has no `X-TTL` (default: forever).
    #[serde(default)]
    pub default_ttl: Option<Dur>,
    /// Persist every change to a log in this directory.
    #[serde(default)]
    pub disk: Option<KvDisk>,
}

/// `kv_stores.NAME.disk`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvDisk {
    pub path: String,
    /// `fdatasync` before answering a change (group commit); default: written, not synced.
    #[serde(default)]
    pub sync: bool,
}

/// A `kv` route: which store.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvRoute {
    pub store: String,
}

/// `cache_zones.NAME.disk`: where and how much.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiskTier {
    /// A directory (created if missing; relative paths start at the config file's directory).
    pub path: String,
    /// Bytes of segments kept on disk.
    pub max_size: Size,
    /// Threads reading from disk.
    #[serde(default)]
    pub io_threads: Option<usize>,
    /// Bytes of stores waiting to be written before more are dropped (default 64m).
    #[serde(default)]
    pub write_queue: Option<Size>,
    /// Size of one segment file (default max_size/32, between 1m and 256m).
    #[serde(default)]
    pub segment_size: Option<Size>,
    /// Space to leave free on the file system (nginx's `min_free`); the oldest segments are
    /// evicted to keep it. Default 0: only a full disk (ENOSPC) evicts.
    #[serde(default)]
    pub min_free: Option<Size>,
}

fn default_shards() -> usize {
    16
}

/// The admin listener.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Admin {
    /// `host:port`; keep it on loopback or a management network.
    pub address: String,
    /// Host names (besides loopback names and IP literals) the admin API answers to; any other
    /// Host gets 403 (DNS rebinding).
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// A file holding the bearer token every request but `GET /health` must carry.
    #[serde(default)]
    pub token_file: Option<String>,
    /// The name of an environment variable holding that token (instead of `token_file`).
    #[serde(default)]
    pub token_env: Option<String>,
    /// Log admin requests in the access log (off: scrapes and dashboards would flood it).
    #[serde(default)]
    pub access_log: bool,
}

/// The cache stage of a `proxy` route.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cache {
    /// Name of an entry in `cache_zones`.
    pub zone: String,
    #[serde(default)]
    pub key: CacheKeyConfig,
    /// Freshness by status (`"200": 1d`, `"404": 1m`, `"200": forever`), used when the origin says
    /// nothing, or always with `ignore_origin`.
    #[serde(default)]
    pub ttl: BTreeMap<String, String>,
    /// Ignore the origin's Cache-Control, Expires and heuristics: only `ttl` decides.
    #[serde(default)]
    pub ignore_origin: bool,
    /// Requests that skip the cache.
    #[serde(default)]
    pub bypass: CacheBypass,
    /// Larger responses are passed through, not stored. Default: 8m, or one shard's share of
    /// the zone when that is smaller.
    #[serde(default)]
    pub max_object_size: Option<Size>,
    /// Keep large representations in slices of this size (nginx's `slice`): a range request
    /// fetches and stores only the slices it needs, and 206 answers are stored as parts.
    #[serde(default)]
    pub slice: Option<Size>,
    /// Store responses that set cookies (they are never shared otherwise).
    #[serde(default)]
    pub share_set_cookie: bool,
    /// Concurrent misses on one key wait this long for the first one's response.
    #[serde(default = "default_lock_timeout")]
    pub lock_timeout: Dur,
    /// After an uncacheable response, misses on that key go straight to the origin this long.
    #[serde(default = "default_hit_for_miss")]
    pub hit_for_miss: Dur,
    /// Add `X-Cache: HIT|MISS`.
    #[serde(default)]
    pub x_cache: bool,
    /// Store a POST's response for later GETs when it has explicit freshness and a
    /// Content-Location equal to the request's URI (RFC 9110 §9.3.3).
    #[serde(default)]
    pub store_post_responses: bool,
    /// Clients allowed to send PURGE: addresses or CIDRs. Unset: loopback only; `[]`: nobody.
    #[serde(default)]
    pub purge_from: Option<Vec<String>>,
    /// On a route with an authentication filter, objects are kept per consumer unless this
    /// says they are the same for every consumer.
    #[serde(default)]
    pub shared: bool,
}

fn default_lock_timeout() -> Dur {
    Dur(std::time::Duration::from_secs(5))
}
fn default_hit_for_miss() -> Dur {
    Dur(std::time::Duration::from_secs(10))
}

/// What goes into the cache key besides method class, scheme, host, path and query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheKeyConfig {
    #[serde(default)]
    pub headers: Vec<String>,
    #[serde(default)]
    pub cookies: Vec<String>,
    /// Keep only these query parameters.
    pub query_params: Option<Vec<String>>,
    #[serde(default)]
    pub sort_query: bool,
    /// Reduce Accept-Encoding to br/gzip/identity when the origin varies on it.
    #[serde(default = "default_true")]
    pub normalize_accept_encoding: bool,
    /// Variables whose values are part of the key: `$consumer` (who an authentication filter
    /// said the client is; the default on a route that authenticates, unless `shared`).
    #[serde(default)]
    pub vars: Vec<String>,
}

// Written out rather than derived: a derived Default would turn normalization off when `key` is
// omitted, unlike when it is given without `normalize_accept_encoding`.
impl Default for CacheKeyConfig {
    fn default() -> Self {
        CacheKeyConfig {
            headers: Vec::new(),
            cookies: Vec::new(),
            query_params: None,
            sort_query: false,
            normalize_accept_encoding: true,
            vars: Vec::new(),
        }
    }
}

/// Bypass conditions.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheBypass {
    /// Any of these cookies present.
    #[serde(default)]
    pub cookies: Vec<String>,
    /// Any of these request headers present.
    #[serde(default)]
    pub headers: Vec<String>,
    /// Requests with these methods (GET or HEAD; others never use the cache).
    #[serde(default)]
    pub methods: Vec<String>,
}

/// `auto` or a positive number.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Workers {
    #[default]
    Auto,
    Count(usize),
}

impl<'de> Deserialize<'de> for Workers {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(0) => Err(serde::de::Error::custom(
                "workers must be at least 1 (or auto)",
            )),
            Raw::N(n) => Ok(Workers::Count(n as usize)),
            Raw::S(s) if s == "auto" => Ok(Workers::Auto),
            Raw::S(s) => match s.parse::<usize>() {
                Ok(n) if n > 0 => Ok(Workers::Count(n)),
                _ => Err(serde::de::Error::custom(format!(
                    "workers must be `auto` or a positive number, not {s:?}"
                ))),
            },
        }
    }
}

fn default_server_header() -> String {
    "weir".into()
}

/// Timeouts of a client connection.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Timeouts {
    /// Time allowed to receive a whole request head once it has started (408 beyond: slowloris).
    pub header: Dur,
    /// Longest pause between two reads of a request body (408 beyond).
    pub body: Dur,
    /// How long an idle keep-alive connection is kept open.
    pub keepalive: Dur,
    /// Longest pause while writing a response before the connection is dropped.
    pub write: Dur,
    /// On SIGTERM/SIGINT: how long in-flight requests may take before connections are cut.
    pub shutdown: Dur,
}

impl Default for Timeouts {
    fn default() -> Self {
        use std::time::Duration;
        Timeouts {
            header: Dur(Duration::from_secs(10)),
            body: Dur(Duration::from_secs(30)),
            keepalive: Dur(Duration::from_secs(60)),
            write: Dur(Duration::from_secs(30)),
            shutdown: Dur(Duration::from_secs(10)),
        }
    }
}

/// One listening socket.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Listener {
    /// `host:port` to bind (port 0 picks a free port), or `unix:/absolute/path` for a unix
    /// socket.
    pub address: String,
    /// A unix listener's file permissions, in octal (`"0660"`); default: what the umask leaves.
    pub unix_mode: Option<String>,
    /// Let the kernel hand over connections only once their first bytes arrived
    /// (TCP_DEFER_ACCEPT); turn off for clients that connect and wait for the server to speak.
    /// Default: on, but off on `tcp:` listeners (SMTP, MySQL and such speak first).
    pub defer_accept: Option<bool>,
    /// Routes, tried in order; the first whose match applies answers.
    #[serde(default)]
    pub routes: Vec<Route>,
    /// Filters every route of this listener runs first.
    #[serde(default)]
    pub filters: Vec<FilterRef>,
    /// This listener's access log (else the top-level one); `off` for none.
    pub access_log: Option<AccessLogSetting>,
    /// Terminate TLS on this listener.
    pub tls: Option<Tls>,
    /// Accept HTTP/2 without TLS from clients that start with its preface (prior knowledge,
    /// `curl --http2-prior-knowledge`, `h2load`). `Upgrade: h2c` is never honoured.
    #[serde(default)]
    pub h2c: bool,
    /// Serve HTTP/3 over QUIC on the same port (UDP), with this listener's `tls:`
    /// certificates; its TCP responses advertise it (`Alt-Svc: h3=":PORT"`).
    #[serde(default)]
    pub quic: bool,
    /// Require the PROXY protocol (v1 or v2) from trusted load balancers; the address it
    /// carries is the client's (logs, filters, the shield).
    pub proxy_protocol: Option<ProxyProtocol>,
    /// Forward TCP connections to an upstream instead of serving HTTP (`model_tcp.rs`).
    pub tcp: Option<TcpProxy>,
    /// Files answering weir's own errors, by status (`404`) or class (`5xx`); its routes
    /// inherit them.
    #[serde(default)]
    pub error_pages: BTreeMap<String, String>,
    /// Sites (virtual hosts): host names with their routes, filters and certificates
    /// (`model_sites.rs`); instead of `routes`.
    #[serde(default)]
    pub sites: Vec<Site>,
}

/// A route: a match and exactly one action.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// A name for logs.
    pub name: Option<String>,
    /// Conditions; all given must hold. An absent `match` matches everything.
    #[serde(default, rename = "match")]
    pub matcher: Match,
    /// Answer from config (nginx `return`).
    pub respond: Option<Respond>,
    /// A redirect: `"https://$host$request_uri"`, or `{to: ..., status: 302}`.
    pub redirect: Option<Redirect>,
    /// Filters this route runs (after its listener's), in order: names or inline.
    #[serde(default)]
    pub filters: Vec<FilterRef>,
    /// Serve files from a directory.
    #[serde(rename = "static")]
    pub static_files: Option<Static>,
    /// Answer with the request itself.
    pub echo: Option<Echo>,
    /// A health check for a load balancer in front: 200 while weir is ready (every upstream,
    /// or those listed, has a server up) and not shutting down, else 503.
    pub health: Option<HealthRoute>,
    /// Forward to an upstream pool.
    pub proxy: Option<Proxy>,
    /// Cache the proxied responses (only with `proxy`).
    pub cache: Option<Cache>,
    /// A key-value store: PUT, GET, HEAD, DELETE on the path.
    pub kv: Option<KvRoute>,
    /// This route's access log (else its listener's); `off` for none (health checks, say).
    pub access_log: Option<AccessLogSetting>,
    /// Files answering this route's errors, by status or class (before its listener's).
    #[serde(default)]
    pub error_pages: BTreeMap<String, String>,
    /// Limits of this route's requests, over the top-level `limits` (nginx's
    /// `client_max_body_size` in a `location`); a site's apply to its routes that give none.
    pub limits: Option<RouteLimits>,
    /// Variables of this route, in order (nginx's `set $name value;`): `name: value`, the value
    /// with variables; the route's own values (its action and inline filters) may use them.
    #[serde(default)]
    pub set: serde_yaml::Mapping,
}

/// Route conditions.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Match {
    /// Host names: exact (`example.com`) or wildcard (`*.example.com`). One string or a list.
    #[serde(default)]
    pub host: OneOrMany,
    /// TLS server names (SNI) the client asked for, exact or `*.` wildcard; a connection
    /// without TLS or without SNI does not match.
    #[serde(default)]
    pub sni: OneOrMany,
    /// A regular expression over the verified client certificate's subject (printed as
    /// `CN=alice, O=Example`); a connection without a client certificate does not match.
    pub client_subject: Option<String>,
    /// Exact path.
    pub path: Option<String>,
    /// Path prefix.
    pub path_prefix: Option<String>,
    /// Regular expression over the path.
    pub path_regex: Option<String>,
    /// Allowed methods; others get 405 with `Allow`.
    #[serde(default)]
    pub methods: Vec<String>,
    /// Header name → exact value that must be present.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Query argument → value (`*`: any value, present), compared percent-decoded.
    #[serde(default)]
    pub query: BTreeMap<String, String>,
    /// Cookie → value (`*`: any value, present).
    #[serde(default)]
    pub cookies: BTreeMap<String, String>,
    /// Client addresses or networks (`10.0.0.0/8`, `2001:db8::/32`); the PROXY protocol's
    /// client when the listener takes one.
    #[serde(default)]
    pub client: Vec<String>,
    /// `http` or `https`: how the client connected.
    pub scheme: Option<String>,
    /// A value with variables → what it must be: `value`, `!value`, `~regex`, `!~regex`
    /// (nginx's `if ($var = value)` and friends as a route match).
    #[serde(default)]
    pub vars: BTreeMap<String, String>,
}

/// A string or a list of strings.
#[derive(Debug, Default, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    #[default]
    None,
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub fn is_empty(&self) -> bool {
        match self {
            OneOrMany::None => true,
            OneOrMany::One(_) => false,
            OneOrMany::Many(v) => v.is_empty(),
        }
    }

    pub fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::None => Vec::new(),
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }
    }
}

/// A response defined in config.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Respond {
    /// Status code (default 200), or a variable template that renders to one.
    #[serde(default = "default_status")]
    pub status: Status,
    /// Response headers; `content-type` defaults to `text/plain; charset=utf-8` when there is a body.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Inline body.
    pub body: Option<String>,
    /// Body read from a file at load time (relative to the config file's directory).
    pub body_file: Option<String>,
}

fn default_status() -> Status {
    Status::Code(200)
}

/// A status: a number, or a template of variables (`"$arg_code"`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Status {
    Code(u16),
    Template(String),
}

/// A redirect: the target alone (301), or with a status.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Redirect {
    To(String),
    Full(RedirectFull),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedirectFull {
    pub to: String,
    #[serde(default = "default_redirect")]
    pub status: u16,
}

fn default_redirect() -> u16 {
    301
}

fn default_true() -> bool {
    true
}

/// Echo the request back.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Echo {
    /// `text`, `json`, or `auto` (JSON when the request's Accept mentions application/json).
    #[serde(default)]
    pub format: EchoFormat,
}

/// Echo output format.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EchoFormat {
    #[default]
    Auto,
    Text,
    Json,
}
