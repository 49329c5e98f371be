//! What a bench run does.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use bytes::Bytes;

/// A URL to load.
#[derive(Debug, Clone)]
pub struct Target {
    /// Label in reports and charts.
    pub name: String,
    pub url: String,
    pub addr: SocketAddr,
    /// `Host` header value (`:authority` over HTTP/2).
    pub host: String,
    /// Path and query.
    pub path: String,
    /// `https://`: TLS, with `server_name` as SNI.
    pub tls: bool,
    /// The host without its port.
    pub server_name: String,
}

impl Target {
    /// Parses `http://host[:port][/path]` or `https://...`.
    pub fn parse(name: &str, url: &str) -> Result<Target, String> {
        let (rest, tls) = if let Some(r) = url.strip_prefix("http://") {
            (r, false)
        } else if let Some(r) = url.strip_prefix("https://") {
            (r, true)
        } else {
            return Err(format!("{url:?}: give an http:// or https:// URL"));
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if authority.is_empty() {
            return Err(format!("{url:?} has no host"));
        }
        let has_port = authority
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.chars().all(|c| c.is_ascii_digit()) && !p.is_empty())
            && !authority.ends_with(']');
        let with_port = if has_port {
            authority.to_string()
        } else {
            format!("{authority}:{}", if tls { 443 } else { 80 })
        };
        let server_name = match with_port.rsplit_once(':') {
            Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']').to_string(),
            None => authority.to_string(),
        };
        let addr = with_port
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve {authority}: {e}"))?
            .next()
            .ok_or_else(|| format!("{authority} resolved to no address"))?;
        Ok(Target {
            name: name.to_string(),
            url: url.to_string(),
            addr,
            host: authority.to_string(),
            path: path.to_string(),
            tls,
            server_name,
        })
    }
}

/// When a run stops.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Stop {
    After(Duration),
    Requests(u64),
}

/// A run's options.
#[derive(Debug, Clone)]
pub struct Options {
    pub target: Target,
    pub connections: usize,
    pub threads: usize,
    pub stop: Stop,
    /// Open loop: requests per second over all connections.
    pub rate: Option<f64>,
    pub method: String,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    /// Send `Connection: close` and reconnect for every request.
    pub close: bool,
    /// Requests in flight per connection (HTTP/1.1 pipelining).
    pub pipeline: usize,
    /// A request without a response this long is a timeout error.
    pub timeout: Duration,
    /// Speak HTTP/2: ALPN `h2` over TLS, prior knowledge (h2c) over TCP.
    pub h2: bool,
    /// Speak HTTP/3 over QUIC (`https://` only).
    pub h3: bool,
    /// Concurrent streams per HTTP/2 or HTTP/3 connection (h2load's `-m`).
    pub streams: usize,
    /// Resume TLS sessions on reconnects (tickets or ids); off: every connection makes a full
    /// handshake.
    pub tls_resume: bool,
}

impl Options {
    /// The request head as HTTP/2 and HTTP/3 send it (`uri` absolute): the method, the
    /// `-H` fields, and `user-agent: weir-bench` unless one was given.
    pub fn request_head(&self, uri: &str) -> Result<http::Request<()>, http::Error> {
        let mut req = http::Request::builder()
            .method(self.method.as_str())
            .uri(uri);
        let mut has_ua = false;
        for (n, v) in &self.headers {
            has_ua |= n.eq_ignore_ascii_case("user-agent");
            req = req.header(n.as_str(), v.as_str());
        }
        if !has_ua {
            req = req.header("user-agent", "weir-bench");
        }
        if !self.body.is_empty() {
            req = req.header("content-length", self.body.len());
        }
        req.body(())
    }

    /// The encoded request, sent as is for every request. A `-H 'Host: …'` replaces the
    /// URL's host, as in wrk and hey (sent twice, it was a 400).
    pub fn request_bytes(&self) -> Bytes {
        let host = self
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("host"))
            .map_or(self.target.host.as_str(), |(_, v)| v.as_str());
        let mut r = format!(
            "{} {} HTTP/1.1\r\nHost: {host}\r\n",
            self.method, self.target.path
        );
        let mut has_ua = false;
        for (n, v) in &self.headers {
            if n.eq_ignore_ascii_case("host") {
                continue;
            }
            has_ua |= n.eq_ignore_ascii_case("user-agent");
            r.push_str(&format!("{n}: {v}\r\n"));
        }
        if !has_ua {
            r.push_str("User-Agent: weir-bench\r\n");
        }
        if self.close {
            r.push_str("Connection: close\r\n");
        }
        if !self.body.is_empty() || matches!(self.method.as_str(), "POST" | "PUT" | "PATCH") {
            r.push_str(&format!("Content-Length: {}\r\n", self.body.len()));
        }
        r.push_str("\r\n");
        let mut b = r.into_bytes();
        b.extend_from_slice(&self.body);
        Bytes::from(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let t = Target::parse("t", "http://127.0.0.1:8080/hello?x=1").unwrap();
        assert_eq!(
            (t.addr.port(), t.host.as_str(), t.path.as_str()),
            (8080, "127.0.0.1:8080", "/hello?x=1")
        );
        let t = Target::parse("t", "http://127.0.0.1").unwrap();
        assert_eq!((t.addr.port(), t.path.as_str()), (80, "/"));
        let t = Target::parse("t", "https://localhost/x").unwrap();
        assert_eq!(
            (t.addr.port(), t.tls, t.server_name.as_str()),
            (443, true, "localhost")
        );
        let t = Target::parse("t", "https://127.0.0.1:8443").unwrap();
        assert_eq!((t.addr.port(), t.server_name.as_str()), (8443, "127.0.0.1"));
        assert!(Target::parse("t", "ftp://x").is_err());
        assert!(Target::parse("t", "http:///x").is_err());
    }

    #[test]
    fn a_host_field_replaces_the_url_s_host() {
        let o = Options {
            target: Target::parse("t", "http://127.0.0.1:8080/x").unwrap(),
            connections: 1,
            threads: 1,
            stop: Stop::Requests(1),
            rate: None,
            method: "GET".into(),
            headers: vec![
                ("Host".into(), "shop.test".into()),
                ("X-A".into(), "1".into()),
            ],
            body: Bytes::new(),
            close: false,
            pipeline: 1,
            timeout: Duration::from_secs(1),
            h2: false,
            h3: false,
            streams: 1,
            tls_resume: false,
        };
        let r = String::from_utf8(o.request_bytes().to_vec()).unwrap();
        assert_eq!(
            r,
            "GET /x HTTP/1.1\r\nHost: shop.test\r\nX-A: 1\r\nUser-Agent: weir-bench\r\n\r\n"
        );
    }
}
