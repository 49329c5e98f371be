//! A server as written in an upstream (`host:port`, `http(s)://host[:port]`, `[v6]:port`,
//! `unix:/path`): parsed, and its name resolved.

use std::net::{SocketAddr, ToSocketAddrs};

/// The socket path of a `unix:PATH` server: absolute (weir may run from any directory), and
/// not with TLS (the upstream's `tls:` would apply to every server).
pub(super) fn unix_path(path: &str, tls: bool) -> Result<std::path::PathBuf, String> {
    if tls {
        return Err("a unix socket server cannot be in an upstream that speaks TLS (`tls:` or https:// servers)".into());
    }
    let p = std::path::Path::new(path);
    if !p.is_absolute() {
        return Err(format!(
            "unix:{path}: give the socket's absolute path (unix:/run/app.sock)"
        ));
    }
    Ok(p.to_path_buf())
}

/// `host:port`, `http://host[:port][/]`, `https://host[:port][/]`, `[v6]:port`; the third
/// value says `https://`.
pub(super) fn parse_server(s: &str) -> Result<(String, u16, bool), String> {
    let s = s.trim();
    let (rest, default_port, https) = if let Some(r) = s.strip_prefix("http://") {
        (r.trim_end_matches('/'), Some(80), false)
    } else if let Some(r) = s.strip_prefix("https://") {
        (r.trim_end_matches('/'), Some(443), true)
    } else {
        (s, None, false)
    };
    if rest.contains('/') {
        return Err(format!("{s:?}: a server is host:port, without a path"));
    }
    let (host, port) = match rest.rsplit_once(':') {
        // A bare IPv6 address without brackets has no port.
        Some(_) if rest.matches(':').count() > 1 && !rest.starts_with('[') => {
            (rest.to_string(), None)
        }
        Some((h, p)) => (h.to_string(), Some(p)),
        None => (rest.to_string(), None),
    };
    let port = match (port, default_port) {
        (Some(p), _) => p
            .parse::<u16>()
            .map_err(|_| format!("invalid port in {s:?}"))?,
        (None, Some(d)) => d,
        (None, None) => return Err(format!("{s:?} needs a port (host:port)")),
    };
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    if host.is_empty() {
        return Err(format!("{s:?} has no host"));
    }
    Ok((host, port, https))
}

/// Resolves `host:port` to its first address.
pub fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host} resolved to no address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_forms() {
        let cases: &[(&str, (&str, u16, bool))] = &[
            ("127.0.0.1:9000", ("127.0.0.1", 9000, false)),
            ("http://origin.test", ("origin.test", 80, false)),
            ("http://origin.test:8080/", ("origin.test", 8080, false)),
            ("https://origin.test", ("origin.test", 443, true)),
            ("https://origin.test:8443", ("origin.test", 8443, true)),
            ("[::1]:80", ("::1", 80, false)),
        ];
        for (text, (host, port, https)) in cases {
            assert_eq!(
                parse_server(text).unwrap(),
                (host.to_string(), *port, *https),
                "{text}"
            );
        }
        assert!(parse_server("origin.test").is_err());
        assert!(parse_server("http://x/path").is_err());
    }
}
