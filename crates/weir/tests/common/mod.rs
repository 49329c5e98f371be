//! Test harness: start weir in-process on 127.0.0.1:0 and talk raw bytes to it.
#![allow(dead_code, clippy::unwrap_used)]

pub mod bind9;
pub mod cachekit;
pub mod etcd;
pub mod grpcgo;
pub mod h2origin;
pub mod h2raw;
pub mod h3;
pub mod h3raw;
pub mod inproc;
pub mod jaeger;
pub mod kube;
pub mod member;
pub mod origin;
pub mod parked;
pub mod pebble;
pub mod phpfpm;
pub mod process;
pub mod redis;
pub mod smallfs;
pub mod tlskit;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use weir::server::ServerHandle;

/// A server running in this process; stopped when dropped.
pub struct TestServer {
    pub handle: Option<ServerHandle>,
    pub addr: SocketAddr,
}

impl TestServer {
    pub fn connect(&self) -> TcpStream {
        connect(self.addr)
    }

    pub fn stop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.shutdown();
            h.join();
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts a server from a full YAML config (its first listener should use port 0).
pub fn start_config(yaml: &str) -> TestServer {
    let cfg = weir::runtime::load_str(yaml, Path::new("."), |v| std::env::var(v).ok()).unwrap();
    let handle = weir::server::start(cfg).unwrap();
    let addr = handle.local_addrs()[0];
    TestServer {
        handle: Some(handle),
        addr,
    }
}

/// The error a config fails to load with, as text (relative files resolve against `.`).
pub fn config_error(yaml: &str) -> String {
    weir::runtime::load_str(yaml, Path::new("."), |_| None)
        .unwrap_err()
        .to_string()
}

/// Starts one worker on 127.0.0.1:0 with `extra` top-level YAML and the given routes YAML
/// (a list, indented by 6 spaces under `routes:`).
pub fn start(extra: &str, routes: &str) -> TestServer {
    start_config(&format!(
        "workers: 1\n{extra}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n{routes}\n"
    ))
}

/// The routes most tests use.
pub const BASIC_ROUTES: &str = r#"
      - match: { path: /hello }
        respond: { body: "Hello, World\n" }
      - match: { path: /json }
        respond: { headers: { content-type: application/json }, body: '{"message":"Hello, World!"}' }
      - match: { path_prefix: /echo }
        echo: {}
      - match: { path: /only-get, methods: [GET] }
        respond: { body: "got\n" }
"#;

pub fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// A parsed response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Reads one response from a stream (Content-Length or chunked framing; no body for HEAD when
/// `head` is true or for 1xx/204/304).
pub fn read_response_to(s: &mut impl Read, head: bool) -> Response {
    let mut raw = Vec::new();
    let mut byte = [0u8; 1];
    while !raw.ends_with(b"\r\n\r\n") {
        // A signal (a child process of the test ending) may interrupt the read: read again.
        let n = loop {
            match s.read(&mut byte) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                r => break r.unwrap(),
            }
        };
        assert!(
            n == 1,
            "connection closed before a complete head; got {:?}",
            String::from_utf8_lossy(&raw)
        );
        raw.push(byte[0]);
    }
    let text = String::from_utf8(raw).unwrap();
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap();
    assert!(
        status_line.starts_with("HTTP/1.1 "),
        "bad status line {status_line:?}"
    );
    let status: u16 = status_line[9..12].parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (n, v) = l.split_once(':').unwrap();
            (n.to_string(), v.trim().to_string())
        })
        .collect();
    let mut resp = Response {
        status,
        headers,
        body: Vec::new(),
    };
    if head || status < 200 || status == 204 || status == 304 {
        return resp;
    }
    if let Some(len) = resp.header("content-length") {
        let mut body = vec![0; len.parse().unwrap()];
        s.read_exact(&mut body).unwrap();
        resp.body = body;
    } else if resp.header("transfer-encoding") == Some("chunked") {
        loop {
            let size = read_line(s);
            let n = usize::from_str_radix(size.trim(), 16).unwrap();
            let mut chunk = vec![0; n + 2];
            s.read_exact(&mut chunk).unwrap();
            assert_eq!(&chunk[n..], b"\r\n", "chunk not followed by CRLF");
            if n == 0 {
                break;
            }
            resp.body.extend_from_slice(&chunk[..n]);
        }
    } else {
        s.read_to_end(&mut resp.body).unwrap();
    }
    resp
}

fn read_line(s: &mut impl Read) -> String {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        s.read_exact(&mut byte).unwrap();
        line.push(byte[0]);
    }
    String::from_utf8(line).unwrap()
}

pub fn read_response(s: &mut TcpStream) -> Response {
    read_response_to(s, false)
}

/// Sends raw bytes and reads one response.
pub fn roundtrip(s: &mut TcpStream, raw: &[u8]) -> Response {
    s.write_all(raw).unwrap();
    read_response(s)
}

/// Waits until `ok()` (checked every 10 ms), failing after `within`; how long it took.
pub fn until(what: &str, within: Duration, mut ok: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !ok() {
        assert!(
            start.elapsed() < within,
            "timed out after {within:?}: {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    start.elapsed()
}

/// Waits until `ok(&probe())` (probed every 10 ms), failing after `within` with the last value
/// probed; that value.
pub fn until_value<T: std::fmt::Debug>(
    what: &str,
    within: Duration,
    mut probe: impl FnMut() -> T,
    ok: impl Fn(&T) -> bool,
) -> T {
    let start = Instant::now();
    loop {
        let v = probe();
        if ok(&v) {
            return v;
        }
        assert!(
            start.elapsed() < within,
            "timed out after {within:?}: {what}; last {v:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// [`until`] inside a runtime: checks `ok()` every 10 ms without blocking the runtime's thread.
pub async fn until_async(what: &str, within: Duration, mut ok: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !ok() {
        assert!(
            start.elapsed() < within,
            "timed out after {within:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    start.elapsed()
}

/// Requests per second of `path` answered 200 while `clients` threads (spread over `addrs`)
/// ask it for `window`, a connection per request (a refusal may close its connection).
pub fn admitted_rate(addrs: &[SocketAddr], clients: usize, path: &str, window: Duration) -> f64 {
    let admitted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let started = Instant::now();
    let threads: Vec<_> = addrs
        .iter()
        .cycle()
        .take(clients)
        .map(|addr| {
            let (addr, admitted, path) = (*addr, admitted.clone(), path.to_string());
            std::thread::spawn(move || {
                while started.elapsed() < window {
                    if get(addr, &path).status == 200 {
                        admitted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    admitted.load(std::sync::atomic::Ordering::Relaxed) as f64 / window.as_secs_f64()
}

/// `n` GETs of `path` at once, each on its own connection; their answers.
pub fn concurrent_gets(addr: SocketAddr, path: &str, n: usize) -> Vec<Response> {
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let path = path.to_string();
            std::thread::spawn(move || get(addr, &path))
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// A GET with Host on a fresh connection (`localhost`: the admin API answers it too).
pub fn get(addr: SocketAddr, path: &str) -> Response {
    let mut s = connect(addr);
    roundtrip(
        &mut s,
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes(),
    )
}

/// True if the peer closed (EOF or reset) within `within`.
pub fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 64];
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            // Read timeout: still open.
            Err(_) => return false,
        }
    }
    false
}

/// Asserts the server closed the connection.
pub fn assert_closed(s: &mut TcpStream) {
    assert!(
        closed_within(s, Duration::from_secs(3)),
        "connection should have been closed"
    );
}

/// Misses `GET {path}?k=i` for every i in `keys`, spread over `clients` keep-alive connections
/// on their own threads; each response body must be `body_len` bytes.
pub fn churn(
    addr: SocketAddr,
    clients: usize,
    path: &'static str,
    keys: std::ops::Range<usize>,
    body_len: usize,
) {
    let threads: Vec<_> = (0..clients)
        .map(|t| {
            let keys = keys.clone();
            std::thread::spawn(move || {
                let mut s = connect(addr);
                for i in (keys.start + t..keys.end).step_by(clients) {
                    s.write_all(
                        format!("GET {path}?k={i} HTTP/1.1\r\nHost: churn.test\r\n\r\n").as_bytes(),
                    )
                    .unwrap();
                    assert_eq!(read_response(&mut s).body.len(), body_len);
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
}

/// A `/proc/PID/status` field (`VmRSS:`, `VmHWM:`) in bytes.
pub fn proc_status_bytes(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 1024
}

/// A current-thread runtime and an h2c (prior knowledge) client of `addr` made on it, its
/// connection driven by a task of that runtime (run while the caller blocks on it).
#[allow(dead_code)]
pub fn h2c_client(
    addr: SocketAddr,
) -> (
    tokio::runtime::Runtime,
    h2::client::SendRequest<bytes::Bytes>,
) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (client, conn) = h2::client::handshake(tcp).await.unwrap();
        tokio::spawn(async move {
            let _ = conn.await;
        });
        client
    });
    (rt, client)
}
