//! The cache tests' harness: a scripted origin and a caching weir in front of it.
#![allow(dead_code, clippy::unwrap_used)]

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::origin::{http_origin, Origin, SeenRequest};
use super::{read_response_to, Response, TestServer};

/// A programmable origin: `respond(path, request, n)` where n counts requests to that path.
pub struct Scripted {
    pub origin: Origin,
    pub seen: Arc<Mutex<Vec<SeenRequest>>>,
}

impl Scripted {
    pub fn requests(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
    pub fn last(&self) -> SeenRequest {
        let s = self.seen.lock().unwrap();
        let r = s.last().unwrap();
        SeenRequest {
            line: r.line.clone(),
            headers: r.headers.clone(),
            body: r.body.clone(),
        }
    }
}

pub fn scripted(
    respond: impl Fn(&SeenRequest, usize) -> String + Send + Sync + 'static,
) -> Scripted {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let count = Arc::new(AtomicUsize::new(0));
    let s2 = seen.clone();
    let origin = http_origin(move |req| {
        let n = count.fetch_add(1, Ordering::SeqCst) + 1;
        let out = respond(req, n);
        s2.lock().unwrap().push(SeenRequest {
            line: req.line.clone(),
            headers: req.headers.clone(),
            body: req.body.clone(),
        });
        out.into_bytes()
    });
    Scripted { origin, seen }
}

/// A response with extra header lines and a body.
pub fn resp(status: &str, headers: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

pub struct Cache {
    pub srv: TestServer,
    pub zone: Arc<weir::cache::CacheZone>,
    /// The zone's clock: tests move time with `clock.advance(secs)`.
    pub clock: Arc<weir_cache::ManualClock>,
    pub admin: std::net::SocketAddr,
}

pub fn cache(origin: &Origin, cache_opts: &str, zone_size: &str) -> Cache {
    let yaml = format!(
        "workers: 2\ncache_zones:\n  main: {{ max_size: {zone_size} }}\nadmin: {{ address: 127.0.0.1:0 }}\nupstreams:\n  o:\n    servers: ['{}']\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - proxy: {{ upstream: o }}\n        cache: {{ zone: main{cache_opts} }}\n",
        origin.addr
    );
    let clock = Arc::new(weir_cache::ManualClock::new());
    let registry = Arc::new(weir::runtime::Registry::with_clock(clock.clone()));
    let cfg =
        weir::runtime::compile_str(&yaml, std::path::Path::new("."), |_| None, &registry).unwrap();
    let zone = cfg.cache_zones[0].clone();
    let handle = weir::server::start(cfg).unwrap();
    let addr = handle.local_addrs()[0];
    let admin = handle.admin_addr().unwrap();
    Cache {
        srv: TestServer {
            handle: Some(handle),
            addr,
        },
        zone,
        clock,
        admin,
    }
}

pub fn req(c: &Cache, raw: &str) -> Response {
    let mut s = c.srv.connect();
    s.write_all(raw.as_bytes()).unwrap();
    read_response_to(&mut s, raw.starts_with("HEAD"))
}

pub fn get(c: &Cache, path: &str, extra: &str) -> Response {
    req(
        c,
        &format!("GET {path} HTTP/1.1\r\nHost: site.test\r\n{extra}\r\n"),
    )
}

pub fn status_of(r: &Response) -> String {
    r.header("cache-status").unwrap_or("").to_string()
}
