//! The `proxy` action's part of the config model (`model.rs`): the upstream, host, path
//! changes, header edits, forwarding fields, upgrades and a gRPC call's `stream_idle`.

use std::collections::BTreeMap;

use serde::Deserialize;

fn default_true() -> bool {
    true
}

/// Forward to an upstream.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Proxy {
    /// Name of an entry in `upstreams`.
    pub upstream: String,
    /// Host header sent upstream: `preserve` (default, the client's), `upstream` (the server's
    /// host:port) or a fixed value.
    #[serde(default = "default_host")]
    pub host: String,
    /// Prefix removed from the path.
    pub strip_prefix: Option<String>,
    /// Prefix added to the path (after stripping).
    pub add_prefix: Option<String>,
    /// Regex replacement on the path (after the prefixes).
    pub regex_replace: Option<RegexReplace>,
    #[serde(default)]
    pub request_headers: HeaderOps,
    #[serde(default)]
    pub response_headers: HeaderOps,
    #[serde(default)]
    pub forwarded: Forwarded,
    /// Add `Via: 1.1 weir` both ways.
    #[serde(default = "default_true")]
    pub via: bool,
    /// Relay protocol upgrades (WebSocket); `false`: `Upgrade` is dropped as the hop-by-hop
    /// field it is and the request goes as a plain one (nginx without `proxy_set_header
    /// Upgrade`).
    #[serde(default = "default_true")]
    pub upgrade: bool,
    /// How long a gRPC stream may stay quiet both ways before weir ends it; in place of the
    /// upstream's `response_header` and `idle` and the client's `timeouts.body`, which are
    /// for plain HTTP (a streaming call may be quiet for minutes).
    #[serde(default = "default_stream_idle")]
    pub stream_idle: super::units::Dur,
}

fn default_stream_idle() -> super::units::Dur {
    super::units::Dur(std::time::Duration::from_secs(300))
}

fn default_host() -> String {
    "preserve".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegexReplace {
    pub pattern: String,
    /// `$1`-style references to capture groups.
    pub replacement: String,
}

/// Header edits, applied remove → set → add.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeaderOps {
    #[serde(default)]
    pub set: BTreeMap<String, String>,
    #[serde(default)]
    pub add: BTreeMap<String, String>,
    #[serde(default)]
    pub remove: Vec<String>,
}

/// Client address headers.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Forwarded {
    /// X-Forwarded-For / -Proto / -Host.
    pub x_forwarded: bool,
    /// RFC 7239 `Forwarded`.
    pub forwarded: bool,
    /// Peers whose incoming X-Forwarded-For / Forwarded are kept and appended to; from anyone
    /// else they are replaced.
    pub trusted_proxies: Vec<String>,
}

impl Default for Forwarded {
    fn default() -> Self {
        Forwarded {
            x_forwarded: true,
            forwarded: false,
            trusted_proxies: Vec::new(),
        }
    }
}
