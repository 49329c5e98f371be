//! In-process origins for proxy tests: a listener on 127.0.0.1:0 whose connections are handled by
//! a closure on their own threads, with a count of accepted connections.
#![allow(dead_code, clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// A running origin.
pub struct Origin {
    pub addr: SocketAddr,
    pub accepts: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    open: Arc<std::sync::Mutex<Vec<TcpStream>>>,
}

impl Origin {
    pub fn accepted(&self) -> usize {
        self.accepts.load(Ordering::SeqCst)
    }
}

impl Drop for Origin {
    /// Stops accepting and cuts every open connection: the origin is really gone.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        for c in self.open.lock().unwrap().drain(..) {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
        for _ in 0..200 {
            if TcpStream::connect(self.addr).is_err() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}

/// Starts an origin; `handle` gets each accepted connection.
pub fn origin(handle: impl Fn(TcpStream) + Send + Sync + 'static) -> Origin {
    origin_at("127.0.0.1:0", handle)
}

/// [`origin`] on `bind`.
pub fn origin_at(bind: &str, handle: impl Fn(TcpStream) + Send + Sync + 'static) -> Origin {
    let l = TcpListener::bind(bind).unwrap();
    let addr = l.local_addr().unwrap();
    let accepts = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let handle = Arc::new(handle);
    let open = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (a, s, o) = (accepts.clone(), stop.clone(), open.clone());
    std::thread::spawn(move || {
        for conn in l.incoming() {
            if s.load(Ordering::SeqCst) {
                break;
            }
            let Ok(conn) = conn else { continue };
            a.fetch_add(1, Ordering::SeqCst);
            let kept = conn.try_clone().ok();
            if let Some(c) = &kept {
                o.lock().unwrap().push(c.try_clone().unwrap());
            }
            let h = handle.clone();
            std::thread::spawn(move || {
                h(conn);
                // The clone kept for Drop must not keep the connection open after the handler.
                if let Some(c) = kept {
                    let _ = c.shutdown(std::net::Shutdown::Both);
                }
            });
        }
    });
    Origin {
        addr,
        accepts,
        stop,
        open,
    }
}

/// A request as an origin sees it.
#[derive(Debug, Default)]
pub struct SeenRequest {
    pub line: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl SeenRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Reads one request (Content-Length or chunked body); `None` at EOF.
pub fn read_request(r: &mut BufReader<TcpStream>) -> Option<SeenRequest> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut req = SeenRequest {
        line: line.trim_end().to_string(),
        ..Default::default()
    };
    loop {
        let mut h = String::new();
        r.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (n, v) = h.split_once(':')?;
        req.headers.push((n.to_string(), v.trim().to_string()));
    }
    if let Some(len) = req.header("content-length") {
        let mut body = vec![0; len.parse().ok()?];
        r.read_exact(&mut body).ok()?;
        req.body = body;
    } else if req
        .header("transfer-encoding")
        .is_some_and(|v| v.contains("chunked"))
    {
        loop {
            let mut size = String::new();
            r.read_line(&mut size).ok()?;
            let n = usize::from_str_radix(size.trim(), 16).ok()?;
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk).ok()?;
            if n == 0 {
                break;
            }
            req.body.extend_from_slice(&chunk[..n]);
        }
    }
    Some(req)
}

/// An origin answering every request on a keep-alive connection with `respond(&request)`.
pub fn http_origin(respond: impl Fn(&SeenRequest) -> Vec<u8> + Send + Sync + 'static) -> Origin {
    http_origin_at("127.0.0.1:0", respond)
}

/// [`http_origin`] on `bind`.
pub fn http_origin_at(
    bind: &str,
    respond: impl Fn(&SeenRequest) -> Vec<u8> + Send + Sync + 'static,
) -> Origin {
    origin_at(bind, move |conn| {
        let mut w = conn.try_clone().unwrap();
        let mut r = BufReader::new(conn);
        while let Some(req) = read_request(&mut r) {
            if w.write_all(&respond(&req)).is_err() {
                break;
            }
        }
    })
}

/// A 200 response with a body.
pub fn ok(body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: text/plain\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// An origin answering every request with `object <request line>`, cacheable for an hour, and
/// a count of the requests it answered.
pub fn counting_cacheable_origin() -> (Origin, Arc<AtomicUsize>) {
    let fetched = Arc::new(AtomicUsize::new(0));
    let f2 = fetched.clone();
    let origin = http_origin(move |req: &SeenRequest| {
        f2.fetch_add(1, Ordering::SeqCst);
        let body = format!("object {}", req.line);
        format!(
            "HTTP/1.1 200 OK\r\nCache-Control: max-age=3600\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    });
    (origin, fetched)
}
