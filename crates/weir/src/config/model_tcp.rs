//! A listener that forwards TCP connections (nginx `stream`, HAProxy `mode tcp`, Traefik's TCP
//! routers), as written in the config file. Re-exported from `model.rs`.

use serde::Deserialize;

use super::model::OneOrMany;
use super::units::Dur;

/// `tcp:` on a listener: every connection is relayed, bytes both ways, to a server of an
/// upstream. With the listener's `tls:` weir terminates TLS first; without it, `routes` may
/// pick the upstream by the TLS server name the client asks for, without terminating.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TcpProxy {
    /// The upstream of connections no route takes (and of all, without routes).
    pub upstream: Option<String>,
    /// Routes by TLS server name (SNI), tried in order.
    #[serde(default)]
    pub routes: Vec<TcpRoute>,
    /// Send the client's address to the upstream server first: `v1` (text) or `v2` (binary
    /// PROXY protocol header), as HAProxy's `send-proxy`.
    pub send_proxy: Option<String>,
    /// Close a connection when neither side sent a byte for this long (nginx `proxy_timeout`).
    #[serde(default = "default_idle_timeout")]
    pub idle_timeout: Dur,
}

/// One route of a TCP listener.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TcpRoute {
    /// A name for logs (else the upstream's).
    pub name: Option<String>,
    /// Server names: exact (`db.example`) or wildcard (`*.example`); one string or a list.
    #[serde(default)]
    pub sni: OneOrMany,
    /// Where its connections go.
    pub upstream: String,
}

fn default_idle_timeout() -> Dur {
    Dur(std::time::Duration::from_secs(600))
}
