//! The compiled `proxy` action: which upstream, how the path and Host change, and the route's
//! filters (header edits each way, forwarding fields, `Via`: see `filters/`).

use std::collections::HashMap;

use bytes::{Bytes, BytesMut};
use ipnet::IpNet;
use weir_http::RequestHead;

use crate::config::{check_header_value, model, CompileError};
use crate::filters::forwarded::Forwarded;
use crate::filters::header_edit::{HeaderEdit, HeaderEdits};
use crate::filters::via::Via;
use crate::filters::{Chain, Filter};
use std::sync::Arc;

/// How the upstream request's Host is chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostMode {
    /// The client's Host.
    Preserve,
    /// The chosen server's `host:port`.
    Upstream,
    /// A fixed value.
    Fixed(Bytes),
}

/// A compiled `proxy` action.
#[derive(Debug)]
pub struct ProxyRoute {
    /// Index into the config's upstreams.
    pub upstream: usize,
    pub upstream_name: String,
    pub host: HostMode,
    strip_prefix: Option<Bytes>,
    add_prefix: Option<Bytes>,
    regex: Option<(regex::bytes::Regex, String)>,
    /// Header edits, forwarding fields and `Via` (`filters/`), in that order.
    pub filters: Chain,
    /// The route's cache stage, if any.
    pub cache: Option<crate::cache::CacheRoute>,
    /// `forwarded.trusted_proxies`: peers whose `X-Forwarded-For` names the client.
    pub trusted: Vec<IpNet>,
    /// `upgrade`: whether protocol upgrades are relayed.
    pub upgrade: bool,
    /// `stream_idle`: a gRPC call's wait for bytes either way (`pipeline/forward.rs`).
    pub stream_idle: std::time::Duration,
}

impl ProxyRoute {
    /// The client's address under the trusted-proxy rules of `forwarded`: the peer, or, when
    /// the peer is a trusted proxy, the right-most address of `X-Forwarded-For` that is not one
    /// (a client cannot name itself past an untrusted hop). Used for PURGE's `purge_from`.
    pub fn client_ip(&self, peer: std::net::IpAddr, head: &RequestHead) -> std::net::IpAddr {
        let trusted = |ip: &std::net::IpAddr| self.trusted.iter().any(|n| n.contains(ip));
        if !trusted(&peer) {
            return peer;
        }
        let mut client = peer;
        let lists = head
            .headers()
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case(b"x-forwarded-for"))
            .collect::<Vec<_>>();
        for h in lists.iter().rev() {
            for part in h.value.rsplit(|b| *b == b',') {
                let text = std::str::from_utf8(part).unwrap_or("").trim();
                let Ok(ip) = text.parse::<std::net::IpAddr>() else {
                    // Garbage from a trusted hop: stop at the last address known good.
                    return client;
                };
                client = ip;
                if !trusted(&ip) {
                    return ip;
                }
            }
        }
        client
    }

    /// Compiles a `proxy` action; `before` are the route's filters (its listener's and its
    /// own), which run before the proxy's own (forwarding fields, header edits, `Via`).
    pub(crate) fn compile(
        p: model::Proxy,
        path: &str,
        upstreams: &HashMap<String, usize>,
        before: Vec<Arc<dyn Filter>>,
        route: (&str, Option<&regex::bytes::Regex>),
    ) -> Result<ProxyRoute, CompileError> {
        let upstream = *upstreams.get(&p.upstream).ok_or_else(|| {
            let mut known: Vec<&String> = upstreams.keys().collect();
            known.sort();
            (
                format!("{path}.upstream"),
                format!("no upstream named {:?} (defined: {known:?})", p.upstream),
            )
        })?;
        let host = match p.host.as_str() {
            "preserve" => HostMode::Preserve,
            "upstream" => HostMode::Upstream,
            v => {
                check_header_value(v).map_err(|m| (format!("{path}.host"), m))?;
                HostMode::Fixed(Bytes::from(v.to_string()))
            }
        };
        let prefix = |key: &str, v: Option<String>| -> Result<Option<Bytes>, CompileError> {
            match v {
                Some(p) if !p.starts_with('/') => {
                    Err((format!("{path}.{key}"), "must start with /".into()))
                }
                other => Ok(other.map(Bytes::from)),
            }
        };
        let regex = match p.regex_replace {
            None => None,
            Some(r) => Some((
                regex::bytes::Regex::new(&r.pattern).map_err(|e| {
                    (
                        format!("{path}.regex_replace.pattern"),
                        format!("invalid regex: {e}"),
                    )
                })?,
                r.replacement,
            )),
        };
        let mut trusted = Vec::new();
        for (i, c) in p.forwarded.trusted_proxies.iter().enumerate() {
            let net = c
                .parse::<IpNet>()
                .or_else(|_| c.parse::<std::net::IpAddr>().map(IpNet::from))
                .map_err(|_| {
                    (
                        format!("{path}.forwarded.trusted_proxies[{i}]"),
                        format!("{c:?} is not an address or CIDR"),
                    )
                })?;
            trusted.push(net);
        }
        if p.stream_idle.0.is_zero() {
            return Err((
                format!("{path}.stream_idle"),
                "longer than 0 (5m: a gRPC stream quiet both ways for five minutes ends)".into(),
            ));
        }
        Ok(ProxyRoute {
            upgrade: p.upgrade,
            stream_idle: p.stream_idle.0,
            trusted: trusted.clone(),
            upstream,
            upstream_name: p.upstream,
            host,
            strip_prefix: prefix("strip_prefix", p.strip_prefix)?,
            add_prefix: prefix("add_prefix", p.add_prefix)?,
            regex,
            filters: {
                let mut filters: Vec<Arc<dyn Filter>> = before;
                if p.forwarded.x_forwarded || p.forwarded.forwarded {
                    filters.push(Arc::new(Forwarded {
                        x_forwarded: p.forwarded.x_forwarded,
                        forwarded: p.forwarded.forwarded,
                        trusted,
                    }));
                }
                let edit = HeaderEdit {
                    request: HeaderEdits::compile(
                        p.request_headers,
                        &format!("{path}.request_headers"),
                    )?,
                    response: HeaderEdits::compile(
                        p.response_headers,
                        &format!("{path}.response_headers"),
                    )?,
                    route: route.0.to_string(),
                    regex: route.1.cloned(),
                };
                if !edit.request.is_empty() || !edit.response.is_empty() {
                    filters.push(Arc::new(edit));
                }
                if p.via {
                    filters.push(Arc::new(Via));
                }
                Chain::new(filters)
            },
            cache: None,
        })
    }

    /// The request target sent upstream: origin-form path (rewritten) and query.
    pub fn upstream_target(&self, req: &RequestHead, out: &mut BytesMut) {
        if &req.target[..] == b"*" {
            // `OPTIONS *` (asterisk-form) is about the server, not a path: it goes as it came.
            out.extend_from_slice(b"*");
            return;
        }
        let mut path: &[u8] = req.path();
        if let Some(p) = &self.strip_prefix {
            if let Some(rest) = path.strip_prefix(&p[..]) {
                path = rest;
            }
        }
        // Written in place; only a regex rewrite needs the path on its own first.
        let start = out.len();
        if let Some(p) = &self.add_prefix {
            out.extend_from_slice(p.strip_suffix(b"/").unwrap_or(p));
            if !path.starts_with(b"/") {
                out.extend_from_slice(b"/");
            }
        } else if !path.starts_with(b"/") {
            out.extend_from_slice(b"/");
        }
        out.extend_from_slice(path);
        if let Some((re, rep)) = &self.regex {
            let rewritten = re.replace(&out[start..], rep.as_bytes()).into_owned();
            out.truncate(start);
            out.extend_from_slice(&rewritten);
        }
        match req.query() {
            Some(q) if self.filters.has(crate::filters::Phases::DROPS_ARG) => {
                // Parameters a filter keeps from the upstream (an API key): the rest, in order.
                let mut sep = b'?';
                for pair in q.split(|b| *b == b'&') {
                    let name = &pair[..pair.iter().position(|b| *b == b'=').unwrap_or(pair.len())];
                    if !pair.is_empty() && !self.filters.drops_arg(name) {
                        out.extend_from_slice(&[sep]);
                        out.extend_from_slice(pair);
                        sep = b'&';
                    }
                }
            }
            Some(q) => {
                out.extend_from_slice(b"?");
                out.extend_from_slice(q);
            }
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(yaml: &str) -> ProxyRoute {
        let p: model::Proxy = serde_yaml::from_str(yaml).unwrap();
        let ups = HashMap::from([("u".to_string(), 0usize)]);
        ProxyRoute::compile(p, "r", &ups, Vec::new(), ("r", None)).unwrap()
    }

    fn target(r: &ProxyRoute, path: &str) -> String {
        let mut b = BytesMut::from(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
        let req = weir_http::parse_request(&mut b, &Default::default())
            .unwrap()
            .unwrap();
        let mut out = BytesMut::new();
        r.upstream_target(&req, &mut out);
        String::from_utf8(out.to_vec()).unwrap()
    }

    #[test]
    fn rewrites() {
        assert_eq!(target(&route("upstream: u"), "/a/b?x=1"), "/a/b?x=1");
        let r = route("{upstream: u, strip_prefix: /pipeline}");
        assert_eq!(target(&r, "/pipeline/x?q"), "/x?q");
        assert_eq!(target(&r, "/pipeline"), "/");
        let r = route("{upstream: u, strip_prefix: /api, add_prefix: /v2/}");
        assert_eq!(target(&r, "/api/users"), "/v2/users");
        let r =
            route("{upstream: u, regex_replace: {pattern: '^/old/(.*)$', replacement: '/new/$1'}}");
        assert_eq!(target(&r, "/old/page?z"), "/new/page?z");
    }

    #[test]
    fn errors_name_keys() {
        let p: model::Proxy = serde_yaml::from_str("upstream: nope").unwrap();
        let e = ProxyRoute::compile(p, "r", &HashMap::new(), Vec::new(), ("r", None)).unwrap_err();
        assert_eq!(e.0, "r.upstream");
        let p: model::Proxy =
            serde_yaml::from_str("{upstream: u, forwarded: {trusted_proxies: [bogus]}}").unwrap();
        let e = ProxyRoute::compile(
            p,
            "r",
            &HashMap::from([("u".to_string(), 0)]),
            Vec::new(),
            ("r", None),
        )
        .unwrap_err();
        assert_eq!(e.0, "r.forwarded.trusted_proxies[0]");
    }
}
