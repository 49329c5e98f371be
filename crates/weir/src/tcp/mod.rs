//! TCP proxying: a listener with `tcp:` relays each connection, bytes both ways, to a server of
//! an upstream (nginx `stream`, HAProxy `mode tcp`, Traefik's TCP routers).
//!
//! * [`TcpConfig`] (this file): the listener's compiled `tcp:` section, and which upstream a
//!   connection goes to, by the TLS server name it asked for.
//! * [`sni`]: that name, read from the ClientHello without terminating TLS (passthrough).
//! * [`connect`]: a server of the upstream, by its balancing policy and health, with the
//!   upstream's connect timeout, retries, caps, and the PROXY protocol header when asked for.
//! * [`relay`]: the bytes: `splice(2)` through a pipe between two plain sockets (the payload
//!   never enters user space), a copy loop when one side is TLS; half-close is kept both ways.
//!
//!
//! The connection once accepted (and its PROXY header or TLS handshake read by `server/`) is
//! `pipeline/tcp.rs`: routing, the connect, the relay, the access log line and the counters,
//! as `pipeline/` does for a request.
//!
//! UDP (DNS-style request and answer) is not proxied: it does not fall out of this design.
//! Everything here hangs on a connection — one task per accepted socket, a connect to the
//! upstream, a relay with half-close, an access line at close. UDP has no accept and no close:
//! it needs a table of client flows keyed by source address with their own upstream sockets
//! and expiry, batched `recvmmsg`/`sendmmsg` to be worth running, and SO_REUSEPORT spreading
//! datagrams rather than connections (nginx `stream` `udp`, HAProxy has none). That is its own
//! subsystem, not a mode of this one.

pub mod connect;
pub mod relay;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use weir_http::RequestHead;

use crate::config::{model, CompileError};
use crate::proxy::balance::hash::HashKey;
use crate::proxy::balance::Policy;
use crate::proxy::upstream::Upstream;
use crate::routes::matcher::{any_host, host_patterns, HostPattern};

/// A listener's compiled `tcp:` section.
#[derive(Debug)]
pub struct TcpConfig {
    routes: Vec<TcpRoute>,
    /// Where connections no route takes go: name for logs, upstream index.
    default: Option<(String, usize)>,
    pub send_proxy: Option<ProxyVersion>,
    pub idle_timeout: Duration,
    /// What a balancer sees as "the request" (TCP has none; only `ip` hashing means anything).
    pub pick_head: RequestHead,
}

#[derive(Debug)]
struct TcpRoute {
    name: String,
    sni: Vec<HostPattern>,
    upstream: usize,
}

/// The PROXY protocol header sent to upstream servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyVersion {
    V1,
    V2,
}

impl TcpConfig {
    /// Compiles `t` at key path `path` (`listeners[i].tcp`); `tls`: the listener terminates TLS.
    pub fn compile(
        t: &model::TcpProxy,
        path: &str,
        upstream_index: &HashMap<String, usize>,
        upstreams: &[Arc<Upstream>],
    ) -> Result<TcpConfig, CompileError> {
        let find = |name: &str, key: String| -> Result<usize, CompileError> {
            let i = *upstream_index
                .get(name)
                .ok_or_else(|| (key.clone(), format!("no upstream named {name:?}")))?;
            let up = &upstreams[i];
            if up.h2 {
                return Err((
                    key,
                    format!("upstream {name:?} speaks HTTP/2 (`protocol: h2`); a TCP listener relays bytes to plain or TLS servers"),
                ));
            }
            if let Policy::Hash(k) = &up.policy {
                if *k != HashKey::ClientIp {
                    return Err((
                        key,
                        format!("upstream {name:?} hashes on a request field; a TCP connection has none (use `hash_key: ip` or another policy)"),
                    ));
                }
            }
            Ok(i)
        };
        let mut routes = Vec::with_capacity(t.routes.len());
        for (i, r) in t.routes.iter().enumerate() {
            let key = format!("{path}.routes[{i}]");
            let names = match &r.sni {
                model::OneOrMany::None => Vec::new(),
                model::OneOrMany::One(s) => vec![s.clone()],
                model::OneOrMany::Many(v) => v.clone(),
            };
            if names.is_empty() {
                return Err((
                    format!("{key}.sni"),
                    "name the server names this route takes (the listener's `upstream` takes the rest)".into(),
                ));
            }
            routes.push(TcpRoute {
                name: r.name.clone().unwrap_or_else(|| r.upstream.clone()),
                sni: host_patterns(names, &format!("{key}.sni"))?,
                upstream: find(&r.upstream, format!("{key}.upstream"))?,
            });
        }
        let default = match &t.upstream {
            Some(name) => Some((name.clone(), find(name, format!("{path}.upstream"))?)),
            None if routes.is_empty() => {
                return Err((
                    path.to_string(),
                    "give the `upstream` connections go to (or `routes` by server name)".into(),
                ))
            }
            None => None,
        };
        let send_proxy = match t.send_proxy.as_deref() {
            None => None,
            Some("v1") => Some(ProxyVersion::V1),
            Some("v2") => Some(ProxyVersion::V2),
            Some(other) => {
                return Err((
                    format!("{path}.send_proxy"),
                    format!("{other:?}: give v1 or v2"),
                ))
            }
        };
        if t.idle_timeout.0.is_zero() {
            return Err((
                format!("{path}.idle_timeout"),
                "must be more than 0s".into(),
            ));
        }
        let mut head = bytes::BytesMut::from(&b"GET / HTTP/1.1\r\nHost: tcp\r\n\r\n"[..]);
        let pick_head = weir_http::parse_request(&mut head, &weir_http::Limits::default())
            .ok()
            .flatten()
            .ok_or_else(|| {
                (
                    path.to_string(),
                    "internal: no placeholder request".to_string(),
                )
            })?;
        Ok(TcpConfig {
            routes,
            default,
            send_proxy,
            idle_timeout: t.idle_timeout.0,
            pick_head,
        })
    }

    /// Whether the server name decides where a connection goes (then it is read first).
    pub fn routes_by_name(&self) -> bool {
        !self.routes.is_empty()
    }

    /// The route name and upstream index for a connection that asked for `sni`; `None`: no
    /// route takes it and there is no default upstream.
    pub fn route(&self, sni: Option<&str>) -> Option<(&str, usize)> {
        if let Some(name) = sni {
            if let Some(r) = self
                .routes
                .iter()
                .find(|r| any_host(&r.sni, name.as_bytes()))
            {
                return Some((&r.name, r.upstream));
            }
        }
        self.default.as_ref().map(|(n, u)| (n.as_str(), *u))
    }
}
