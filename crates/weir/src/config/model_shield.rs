//! The DoS shield's part of the config file (`shield:` at the top level, `proxy_protocol:` on a
//! listener, the `shape` filter): per-client limits in Tempesta FW's "frang" set. Re-exported
//! from `model.rs`. Every limit is off (0) unless written; `docs/config.md` lists them with
//! Tempesta's defaults for reference.

use serde::Deserialize;

use super::units::{Dur, Size};

/// Per-client limits, one table of clients per process.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Shield {
    /// Most clients remembered at once (the table's bound; the oldest idle ones are evicted).
    #[serde(default = "default_clients")]
    pub clients: usize,
    /// Addresses or CIDRs that bypass every limit (monitoring, your own proxies).
    #[serde(default)]
    pub allow: Vec<String>,
    /// What a violation does: `block` (the client is blocked for `block_for`), `reply` (429,
    /// the connection kept) or `close` (the connection closed without a reply).
    #[serde(default = "default_action")]
    pub action: String,
    /// How long a blocked client stays blocked.
    #[serde(default = "default_block")]
    pub block_for: Dur,
    #[serde(default)]
    pub connections: ConnLimits,
    #[serde(default)]
    pub requests: RequestLimits,
    /// Reads a request head or body may take (Tempesta's chunk counts): dribbling clients.
    #[serde(default)]
    pub reads: ReadLimits,
    /// Responses with these statuses, counted per client: password guessing, scanners.
    pub outcomes: Option<Outcomes>,
    /// HTTP/2 protocol anomalies per connection (HAProxy's glitches): GOAWAY at 75%, close at
    /// 100%.
    #[serde(default)]
    pub http2_glitches: u32,
    /// IPv6 clients are counted by their network of this many bits (a /64 is one subscriber:
    /// rotating addresses within it escapes nothing).
    #[serde(default = "default_ipv6_prefix")]
    pub ipv6_prefix: u8,
}

fn default_ipv6_prefix() -> u8 {
    64
}

fn default_clients() -> usize {
    65_536
}

fn default_action() -> String {
    "block".into()
}

fn default_block() -> Dur {
    Dur(std::time::Duration::from_secs(10))
}

/// Connection limits per client (0: no limit).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConnLimits {
    /// Connections open at once.
    pub concurrent: u32,
    /// New connections per second.
    pub rate: u32,
    /// New connections per 1/8 s.
    pub burst: u32,
    /// TLS handshakes begun per second.
    pub tls_rate: u32,
    /// TLS handshakes per second that fail or never complete.
    pub tls_incomplete: u32,
}

/// Request limits per client across its connections (0: no limit).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RequestLimits {
    /// Requests per second.
    pub rate: u32,
    /// Requests per 1/8 s.
    pub burst: u32,
}

/// Reads per request head and body (0: no limit).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReadLimits {
    pub head: u32,
    pub body: u32,
}

/// N responses with one of `statuses` within `within` blocks the client.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outcomes {
    pub statuses: Vec<u16>,
    pub count: u32,
    pub within: Dur,
}

/// `proxy_protocol:` on a listener: the PROXY protocol (v1 or v2) is required from these
/// sources, and the address it carries is the client's; any other source is refused.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyProtocol {
    /// Addresses or CIDRs of the load balancers allowed to speak it.
    pub trusted: Vec<String>,
}

/// The `shape` filter: what a request may look like (0 or empty: no limit).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Shape {
    /// Header fields (431 beyond).
    pub max_headers: usize,
    /// One field's name and value (431 beyond).
    pub max_header_bytes: Size,
    /// The request target (414 beyond).
    pub max_uri_bytes: Size,
    /// The body, declared or read (413 beyond).
    pub max_body_bytes: Size,
    /// Methods allowed (405 with `Allow` otherwise).
    pub methods: Vec<String>,
    /// Media types a request body may have (415 otherwise; a body without one too).
    pub content_types: Vec<String>,
    /// Refuse `X-HTTP-Method-Override`, `X-HTTP-Method` and `X-Method-Override` (400).
    pub refuse_method_override: bool,
    /// Host, `:authority` and an absolute target must agree, and the Host must be there (400).
    pub strict_host: bool,
    /// Also block the client (the shield's `block_for`) on a violation.
    pub block: bool,
}
