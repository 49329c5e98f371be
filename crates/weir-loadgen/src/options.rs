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
    /// `Host` header value.
    pub host: String,
    /// Path and query.
    pub path: String,
}

impl Target {
    /// Parses `http://host[:port][/path]` (no TLS).
    pub fn parse(name: &str, url: &str) -> Result<Target, String> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| format!("{url:?}: only http:// URLs are supported"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if authority.is_empty() {
            return Err(format!("{url:?} has no host"));
        }
        let with_port = if authority
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.chars().all(|c| c.is_ascii_digit()) && !p.is_empty())
            && !authority.ends_with(']')
        {
            authority.to_string()
        } else {
            format!("{authority}:80")
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
}

impl Options {
    /// The encoded request, sent as is for every request.
    pub fn request_bytes(&self) -> Bytes {
        let mut r = format!(
            "{} {} HTTP/1.1\r\nHost: {}\r\n",
            self.method, self.target.path, self.target.host
        );
        let mut has_ua = false;
        for (n, v) in &self.headers {
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
        assert!(Target::parse("t", "https://x").is_err());
        assert!(Target::parse("t", "http:///x").is_err());
    }
}
