//! The `filters` keys: named definitions at the top level, lists on listeners and routes, and
//! each filter's settings; the table of filters (`filter_table!`), which makes [`FilterSpec`].
//! Defaults follow the anchors (nginx `limit_req`/`limit_conn`, Easegress's circuit breaker,
//! Envoy's thresholds) and are documented in docs/config.md.

use std::collections::BTreeMap;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::model::HeaderOps;
use super::units::Dur;

/// A route's or listener's filter: the name of a top-level definition, or one written inline.
#[derive(Debug)]
pub enum FilterRef {
    Name(String),
    Inline(Box<FilterSpec>),
}

impl<'de> Deserialize<'de> for FilterRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = FilterRef;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("the name of a filter under `filters:`, or a filter written inline")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<FilterRef, E> {
                Ok(FilterRef::Name(v.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<FilterRef, A::Error> {
                // Not `untagged`: an error inside the inline filter keeps its key and line.
                FilterSpec::from_map(map).map(|s| FilterRef::Inline(Box::new(s)))
            }
        }
        d.deserialize_any(V)
    }
}

/// How a filter's settings become the filter, given a context `C`. The `filters` module
/// implements it for every settings type of the table (`filters/registry.rs`); the config
/// knows no filter, [`FilterSpec::build`] only dispatches to these.
pub trait Build<C> {
    type Output;
    fn build(self, cx: C) -> Self::Output;
}

/// Makes [`FilterSpec`] from the table of filters: each line a YAML key, the variant it
/// deserializes to and the variant's settings type.
macro_rules! filter_table {
    ($($key:literal => $variant:ident($settings:ty),)*) => {
        /// One filter: exactly one key of [`FilterSpec::KEYS`], with that filter's settings
        /// (serde's externally tagged form, `rate_limit: {rate: 10}`).
        #[derive(Debug)]
        pub enum FilterSpec {
            $($variant($settings),)*
        }

        impl FilterSpec {
            /// The filters' keys, in the table's order.
            pub const KEYS: &'static [&'static str] = &[$($key),*];

            /// This filter's key (the segment of key paths that leads to its settings).
            pub fn key(&self) -> &'static str {
                match self {
                    $(FilterSpec::$variant(_) => $key,)*
                }
            }

            /// Builds the filter: its settings type's [`Build`] implementation.
            pub fn build<C, O>(self, cx: C) -> O
            where
                $($settings: Build<C, Output = O>,)*
            {
                match self {
                    $(FilterSpec::$variant(s) => s.build(cx),)*
                }
            }

            /// The settings of filter `key`, the map's next value (`None`: no filter has
            /// that key).
            fn settings<'de, A: MapAccess<'de>>(
                key: &str,
                map: &mut A,
            ) -> Result<Option<FilterSpec>, A::Error> {
                Ok(Some(match key {
                    $($key => FilterSpec::$variant(map.next_value()?),)*
                    _ => return Ok(None),
                }))
            }
        }
    };
}

// The table of filters. Adding one is a line here: see `filters/registry.rs` for the rest.
filter_table! {
    "rate_limit" => RateLimit(RateLimit),
    "concurrency" => Concurrency(Concurrency),
    "ip" => Ip(IpRules),
    "circuit_breaker" => CircuitBreaker(CircuitBreaker),
    "split" => Split(Split),
    "canary" => Canary(Canary),
    "headers" => Headers(Headers),
    "no_store" => NoStore(NoStoreRule),
    "sticky" => Sticky(StickyRule),
    "mirror" => Mirror(MirrorRule),
    "replace" => Replace(ReplaceRule),
    "cors" => Cors(CorsRule),
    "basic_auth" => BasicAuth(super::model_auth::BasicAuth),
    "api_key" => ApiKey(super::model_auth::ApiKey),
    "jwt" => Jwt(super::model_auth::Jwt),
    "forward_auth" => ForwardAuth(super::model_auth::ForwardAuth),
    "compress" => Compress(CompressRule),
    "shape" => Shape(super::model_shield::Shape),
}

impl FilterSpec {
    /// A filter from its mapping: exactly one key of the table, its settings the value.
    /// Errors inside the settings keep their key path and line (the value is read with
    /// `next_value`, which `serde_path_to_error` follows). Not serde's derive for enums:
    /// serde_yaml_ng reads an enum from a YAML tag (`!rate_limit {...}`), not from a mapping
    /// of one key, and serde's own mapping-as-enum ignores a second key.
    fn from_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<FilterSpec, A::Error> {
        let exactly_one = |given: &str| {
            de::Error::custom(format_args!(
                "a filter is exactly one of {} ({given})",
                FilterSpec::KEYS.join(", ")
            ))
        };
        let Some(key) = map.next_key::<String>()? else {
            return Err(exactly_one("none given"));
        };
        let Some(spec) = FilterSpec::settings(&key, &mut map)? else {
            return Err(de::Error::unknown_field(&key, FilterSpec::KEYS));
        };
        match map.next_key::<String>()? {
            None => Ok(spec),
            Some(other) => Err(exactly_one(&format!("given: {key} and {other}"))),
        }
    }
}

impl<'de> Deserialize<'de> for FilterSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = FilterSpec;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                let keys = FilterSpec::KEYS.join(", ");
                write!(f, "a filter: a mapping with one key of {keys}")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<FilterSpec, A::Error> {
                FilterSpec::from_map(map)
            }
        }
        d.deserialize_map(V)
    }
}

/// gzip, brotli and zstd for chosen content types.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompressRule {
    /// Content types compressed (`text/*` for every text type).
    #[serde(default = "compressible_types")]
    pub types: Vec<String>,
    /// Responses shorter than this stay as they are.
    #[serde(default = "min_length")]
    pub min_length: super::units::Size,
    #[serde(default = "gzip_level")]
    pub gzip_level: u32,
    #[serde(default = "br_level")]
    pub br_level: u32,
    #[serde(default = "zstd_level")]
    pub zstd_level: i32,
    /// Serve `file.br`, `file.zst`, `file.gz` beside a static file (nginx `gzip_static`).
    #[serde(default = "yes")]
    pub precompressed: bool,
}

fn compressible_types() -> Vec<String> {
    [
        "text/*",
        "application/json",
        "application/javascript",
        "application/xml",
        "application/xhtml+xml",
        "application/rss+xml",
        "image/svg+xml",
    ]
    .map(String::from)
    .to_vec()
}
fn min_length() -> super::units::Size {
    super::units::Size(256)
}
fn gzip_level() -> u32 {
    6
}
fn br_level() -> u32 {
    5
}
fn zstd_level() -> i32 {
    3
}
fn yes() -> bool {
    true
}

/// Cross-origin resource sharing.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CorsRule {
    /// `scheme://host[:port]`, `scheme://*.domain`, `~regex`, or `*`.
    pub origins: Vec<String>,
    #[serde(default = "cors_methods")]
    pub methods: Vec<String>,
    /// Request fields a preflight may ask for (`*`: any).
    #[serde(default)]
    pub headers: Vec<String>,
    /// Response fields scripts may read.
    #[serde(default)]
    pub expose: Vec<String>,
    #[serde(default)]
    pub credentials: bool,
    /// How long a browser may keep a preflight's answer.
    #[serde(default = "zero")]
    pub max_age: Dur,
    /// Allow Private Network Access preflights.
    #[serde(default)]
    pub private_network: bool,
}

fn cors_methods() -> Vec<String> {
    vec!["GET".into(), "HEAD".into(), "POST".into()]
}
fn zero() -> Dur {
    Dur(std::time::Duration::ZERO)
}

/// A string replaced in response bodies (nginx `sub_filter`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplaceRule {
    pub from: String,
    #[serde(default)]
    pub to: String,
    /// Content types whose bodies are changed.
    #[serde(default = "html")]
    pub types: Vec<String>,
}

fn html() -> Vec<String> {
    vec!["text/html".into()]
}

/// A copy of requests to a shadow upstream.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MirrorRule {
    pub upstream: String,
    /// Percent of requests copied.
    #[serde(default = "hundred_f")]
    pub percent: f64,
    /// Bodies up to this size are copied; larger requests are not mirrored.
    #[serde(default = "mirror_body")]
    pub max_body: super::units::Size,
    /// Copies on their way at once; more are skipped.
    #[serde(default = "mirror_in_flight")]
    pub max_in_flight: usize,
}

fn mirror_body() -> super::units::Size {
    super::units::Size(64 * 1024)
}
fn mirror_in_flight() -> usize {
    128
}

/// Session persistence by a signed cookie naming the server.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StickyRule {
    #[serde(default = "sticky_cookie")]
    pub cookie: String,
    /// The environment variable holding the HMAC secret (32 characters or more).
    pub secret_env: Option<String>,
    /// A file holding it.
    pub secret_file: Option<String>,
    #[serde(default = "one_hour")]
    pub max_age: Dur,
    /// Add `Secure` (send the cookie over HTTPS only).
    #[serde(default)]
    pub secure: bool,
}

fn sticky_cookie() -> String {
    "weir_sticky".into()
}
fn one_hour() -> Dur {
    Dur(std::time::Duration::from_secs(3600))
}

/// Upstream responses kept out of the cache.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoStoreRule {
    #[serde(default)]
    pub statuses: Vec<u16>,
    /// Field names: a response carrying one is not stored.
    #[serde(default)]
    pub response_fields: Vec<String>,
}

/// GCRA rate limit per key (nginx `limit_req`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    /// Requests admitted per `per`.
    pub rate: u32,
    #[serde(default = "one_second")]
    pub per: Dur,
    /// Requests admitted at once beyond the rate.
    #[serde(default)]
    pub burst: u32,
    /// Requests beyond the burst that wait for their turn instead of a 429 (nginx's delayed
    /// `burst`); 0: none wait.
    #[serde(default)]
    pub queue: u32,
    /// What a request is counted by: a variable template (`$remote_addr`, `$http_x_api_key`,
    /// `$cookie_session`, `$route`, ...). An empty rendered key is counted as one key.
    #[serde(default = "remote_addr")]
    pub key: String,
    /// Count IPv4 clients by network of this prefix length (with `key: $remote_addr`).
    pub ipv4_prefix: Option<u8>,
    pub ipv6_prefix: Option<u8>,
    #[serde(default = "status_429")]
    pub status: u16,
    /// Keys remembered; the least recently limited are forgotten first.
    #[serde(default = "max_keys")]
    pub max_keys: usize,
    /// Send RateLimit-Policy and RateLimit on every response (429s always carry them).
    #[serde(default = "yes")]
    pub headers: bool,
    /// Across a cluster: `members` divides the quota by the live member count (no network
    /// hop; each node admits its share); `redis` counts every node's requests in Redis
    /// (`cluster.redis`).
    pub cluster: Option<ClusterLimit>,
}

/// How a rate limit applies across a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClusterLimit {
    Members,
    Redis,
}

/// In-flight requests per key (nginx `limit_conn`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Concurrency {
    pub max: u32,
    #[serde(default = "remote_addr")]
    pub key: String,
    #[serde(default = "status_503")]
    pub status: u16,
    #[serde(default = "max_keys")]
    pub max_keys: usize,
}

/// Client address rules: deny wins, then allow (when any allow rule is given, others are
/// denied).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IpRules {
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default)]
    pub deny: Vec<String>,
    /// Files of addresses/CIDRs, one per line (`#` comments), read at load and on reload.
    pub allow_file: Option<String>,
    pub deny_file: Option<String>,
    #[serde(default = "status_403")]
    pub status: u16,
}

/// Easegress's circuit breaker.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CircuitBreaker {
    /// `count` (the last `window_size` calls) or `time` (the last `window_size` seconds).
    #[serde(default = "count")]
    pub window: String,
    #[serde(default = "hundred")]
    pub window_size: u32,
    /// Percent of failed calls that opens the breaker.
    #[serde(default = "fifty")]
    pub failure_rate: f64,
    /// Percent of slow calls that opens the breaker.
    #[serde(default = "hundred_f")]
    pub slow_call_rate: f64,
    /// A call at least this long is slow.
    #[serde(default = "one_minute")]
    pub slow_call: Dur,
    /// Calls in the window before the rates are judged.
    #[serde(default = "ten")]
    pub min_calls: u32,
    /// Calls let through while half-open.
    #[serde(default = "ten")]
    pub half_open_calls: u32,
    /// Time open before trying again.
    #[serde(default = "one_minute")]
    pub wait: Dur,
    /// Statuses counted as failures (weir's own 502/503/504 for an upstream that failed always
    /// are).
    #[serde(default = "failure_codes")]
    pub failure_codes: Vec<u16>,
    #[serde(default = "status_503")]
    pub status: u16,
    /// An upstream that gets the route's requests while the breaker is open, instead of the
    /// `status` answer (Easegress's fallback; needs a proxy action).
    #[serde(default)]
    pub fallback: Option<String>,
}

/// Weighted choice between upstreams.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Split {
    /// Upstream name → weight.
    pub upstreams: BTreeMap<String, u32>,
}

/// A candidate pool for some requests: a share of them, and those matching a header or cookie.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Canary {
    pub upstream: String,
    /// Percent of requests (0-100) sent to the candidate.
    #[serde(default)]
    pub percent: f64,
    /// Requests with one of these field values go to the candidate.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Requests with one of these cookie values go to the candidate.
    #[serde(default)]
    pub cookies: BTreeMap<String, String>,
    /// Requests whose verified token (a `jwt` filter before this one) has one of these claim
    /// values go to the candidate (a claim holding a list matches any member).
    #[serde(default)]
    pub claims: BTreeMap<String, String>,
}

/// Header edits as a filter, on any route.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Headers {
    #[serde(default)]
    pub request: HeaderOps,
    #[serde(default)]
    pub response: HeaderOps,
}

fn one_second() -> Dur {
    Dur(std::time::Duration::from_secs(1))
}
fn one_minute() -> Dur {
    Dur(std::time::Duration::from_secs(60))
}
fn remote_addr() -> String {
    "$remote_addr".into()
}
fn status_429() -> u16 {
    429
}
fn status_503() -> u16 {
    503
}
fn status_403() -> u16 {
    403
}
fn max_keys() -> usize {
    100_000
}

fn count() -> String {
    "count".into()
}
fn hundred() -> u32 {
    100
}
fn hundred_f() -> f64 {
    100.0
}
fn fifty() -> f64 {
    50.0
}
fn ten() -> u32 {
    10
}
fn failure_codes() -> Vec<u16> {
    vec![500, 502, 503, 504]
}
