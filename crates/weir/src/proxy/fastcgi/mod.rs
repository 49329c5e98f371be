//! FastCGI to upstreams (`protocol: fastcgi`): php-fpm and other FastCGI responders, over TCP
//! or a unix socket, with `FCGI_KEEP_CONN` and the connections pooled per worker and server.
//!
//! Each request is bridged as HTTP/2 upstreams are (`h2_upstream.rs`): the upstream phase
//! writes an HTTP/1.1 request into an in-memory pipe, preceded by one line weir writes itself
//! (`weir-cgi PEER SCHEME TARGET`: what the request does not carry, and the client's request
//! target before a route rewrote it, nginx's `$request_uri`), and reads an HTTP/1.1 response
//! back, while a task ([`exchange`]) turns it into FastCGI records and the CGI response into
//! HTTP/1.1. Retries, the cache, passive health, the filters and the logs then work as for any
//! upstream; the response says `Connection: close`, so the pipe is never pooled (the FastCGI
//! connection under it is). The cost is an HTTP/1.1 encode and parse per message on each side of
//! the pipe, small next to running a PHP script.
//!
//! - [`params`]: the CGI environment (nginx's `fastcgi_params`, `fastcgi_split_path_info`), and
//!   which script a path names; with `require_file` (the default) a script that is not a file
//!   under the root is answered 404 without asking the application.
//! - [`record`]: the record layer. [`reply`]: the CGI response head.
//!
//! Failures: a connection refused or a script that dies (the connection closes before its
//! response) leave the pipe without a response: the upstream phase answers 502 with the reason
//! logged; an application slower than `timeouts.response_header` gets 504 from the same phase.
//! The application's stderr is logged, rate-limited.

pub mod config;
pub mod params;
pub mod record;
pub mod reply;

use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use weir_http::{parse_request, BodyDecoder, BodyEvent, Method, RequestHead};

use super::per_worker::WorkerUpstream;
use super::tls::Socket;
use super::upstream::Upstream;
use config::FastCgi;
use params::Peer;

/// Buffer of each direction of a request's pipe.
const PIPE: usize = 64 * 1024;
/// The first line of what the upstream phase writes into the pipe.
pub const PREAMBLE: &[u8] = b"weir-cgi ";

/// Idle FastCGI connections of one upstream on one worker, per server.
pub type Idle = Rc<RefCell<Vec<Vec<Socket>>>>;

/// Waits of one exchange.
#[derive(Debug, Clone, Copy)]
struct Waits {
    /// For the response's first record: a little past `timeouts.response_header`, which the
    /// upstream phase enforces (504) and then drops the pipe.
    first: Duration,
    /// Between records after that (`timeouts.idle`).
    idle: Duration,
    max_idle: usize,
}

/// Writes the line that starts a FastCGI request in the pipe: the client's address and scheme,
/// and the origin-form of its request target as received (normalised; no space or line break).
pub fn put_preamble(
    out: &mut BytesMut,
    peer: std::net::SocketAddr,
    https: bool,
    head: &RequestHead,
) {
    out.reserve(PREAMBLE.len() + 64 + head.path().len() + head.query().map_or(0, |q| q.len()));
    out.put_slice(PREAMBLE);
    match peer.ip() {
        // By hand (`fmt` cost ~2.9k instructions a request here, callgrind 2026-11-29).
        std::net::IpAddr::V4(a) if !a.is_unspecified() => {
            let mut buf = [0u8; 64];
            out.put_slice(crate::vars::format_ip(peer.ip(), &mut buf));
            out.put_u8(b':');
            let mut digits = [0u8; 20];
            out.put_slice(params::decimal(u64::from(peer.port()), &mut digits));
        }
        _ => {
            use std::fmt::Write;
            let _ = write!(out, "{peer}");
        }
    }
    out.put_slice(if https { b" https " } else { b" http " });
    out.put_slice(head.path());
    if let Some(q) = head.query() {
        out.put_u8(b'?');
        out.put_slice(q);
    }
    out.put_slice(b"\r\n");
}

/// Where a FastCGI server is: what a connection to it needs, owned by the exchange's task.
struct Target {
    addr: std::sync::Arc<arc_swap::ArcSwap<std::net::SocketAddr>>,
    unix: Option<std::sync::Arc<std::path::Path>>,
    within: Duration,
}

impl Target {
    async fn connect(&self) -> io::Result<Socket> {
        let open = async {
            Ok(match &self.unix {
                Some(path) => Socket::Unix(tokio::net::UnixStream::connect(&**path).await?),
                None => {
                    let s = tokio::net::TcpStream::connect(**self.addr.load()).await?;
                    s.set_nodelay(true)?;
                    Socket::Tcp(s)
                }
            })
        };
        tokio::time::timeout(self.within, open)
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))?
    }
}

/// A pipe to a FastCGI exchange with `server` of `up`. The application is asked only once
/// the request is whole, its body buffered (nginx's `fastcgi_request_buffering on`): a php-fpm
/// child is bound to a connection from its accept, so a body streamed as it came let slow
/// uploads hold every child (the review of issue 53: four trickled POSTs took a site down that
/// nginx kept serving). A connection that fails is the pipe's end without a response: 502.
pub async fn open(
    per_worker: &WorkerUpstream,
    up: &Upstream,
    server: usize,
) -> io::Result<DuplexStream> {
    let cfg = up
        .fastcgi
        .clone()
        .ok_or_else(|| io::Error::other("not a FastCGI upstream"))?;
    let idle = per_worker.fastcgi_idle.clone();
    let s = &up.servers[server];
    let target = Target {
        addr: s.addr.clone(),
        unix: s.unix.clone(),
        within: up.connect_timeout,
    };
    let waits = Waits {
        first: up.response_header_timeout + Duration::from_secs(1),
        idle: up.idle_read_timeout + Duration::from_secs(1),
        max_idle: if cfg.keep_conn { up.max_idle } else { 0 },
    };
    let (ours, theirs) = tokio::io::duplex(PIPE);
    tokio::task::spawn_local(async move {
        let conn = Conn {
            target: &target,
            idle: &idle,
            server,
        };
        match exchange(theirs, conn, &cfg, waits).await {
            Ok(Some(sock)) => put_idle(&idle, server, sock, waits.max_idle),
            Ok(None) => {}
            Err(e) => {
                static FAILED: crate::logs::Limited = crate::logs::Limited::new();
                if let Some(suppressed) = FAILED.admit() {
                    tracing::warn!(error = %e, suppressed, "FastCGI exchange failed");
                }
            }
        }
    });
    Ok(ours)
}

/// How an exchange gets its connection, once it needs one: an idle one, else a new one.
struct Conn<'a> {
    target: &'a Target,
    idle: &'a Idle,
    server: usize,
}

impl Conn<'_> {
    async fn get(&self) -> io::Result<Socket> {
        match take_idle(self.idle, self.server) {
            Some(s) => Ok(s),
            None => self.target.connect().await,
        }
    }
}

/// An idle connection to `server` that is still open and quiet.
fn take_idle(idle: &Idle, server: usize) -> Option<Socket> {
    let mut idle = idle.borrow_mut();
    let list = idle.get_mut(server)?;
    while let Some(s) = list.pop() {
        let mut probe = [std::mem::MaybeUninit::<u8>::uninit(); 1];
        // Nothing to read and no EOF (the socket is non-blocking): the application still
        // holds it open. Bytes or EOF: it is out of step or closed.
        if let Err(e) = socket2::SockRef::from(&s.fd()).peek(&mut probe) {
            if e.kind() == io::ErrorKind::WouldBlock {
                return Some(s);
            }
        }
    }
    None
}

fn put_idle(idle: &Idle, server: usize, sock: Socket, max: usize) {
    let mut idle = idle.borrow_mut();
    if idle.len() <= server {
        idle.resize_with(server + 1, Vec::new);
    }
    if idle[server].len() < max {
        idle[server].push(sock);
    }
}

thread_local! {
    /// This worker's spare exchange buffers: each exchange used to allocate four of 2-4 KiB,
    /// past malloc's per-thread cache (~240 instructions each, callgrind 2026-11-29).
    static SPARE: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
}

/// An empty buffer of at least `cap` bytes, a spare one when there is one.
fn take_buf(cap: usize) -> BytesMut {
    let spare = SPARE.with_borrow_mut(|s| s.pop());
    match spare {
        Some(mut b) => {
            b.reserve(cap);
            b
        }
        None => BytesMut::with_capacity(cap),
    }
}

/// Keeps `b` for a later exchange (a few, none past 64 KiB: a large upload's buffer is freed).
fn give_buf(mut b: BytesMut) {
    if b.capacity() <= 64 * 1024 {
        b.clear();
        SPARE.with_borrow_mut(|s| {
            if s.len() < 8 {
                s.push(b);
            }
        });
    }
}

/// Reads the preamble and the request head from the pipe; `None` when the pipe closed first.
async fn read_request(
    pipe: &mut DuplexStream,
    buf: &mut BytesMut,
) -> io::Result<Option<(Peer, RequestHead)>> {
    let bad = |m: &'static str| io::Error::new(io::ErrorKind::InvalidData, m);
    let peer = loop {
        if let Some(end) = memchr::memmem::find(buf, b"\r\n") {
            let line = buf.split_to(end + 2);
            let text = std::str::from_utf8(&line[..end]).map_err(|_| bad("preamble"))?;
            let rest = text
                .strip_prefix("weir-cgi ")
                .ok_or_else(|| bad("preamble"))?;
            let mut parts = rest.splitn(3, ' ');
            let (Some(addr), Some(scheme), Some(target)) =
                (parts.next(), parts.next(), parts.next())
            else {
                return Err(bad("preamble"));
            };
            break Peer {
                addr: addr.parse().map_err(|_| bad("preamble address"))?,
                https: scheme == "https",
                request_uri: bytes::Bytes::copy_from_slice(target.as_bytes()),
            };
        }
        if buf.len() > PIPE {
            return Err(bad("preamble too long"));
        }
        if pipe.read_buf(buf).await? == 0 {
            return Ok(None);
        }
    };
    let limits = super::h2_upstream::pipe_limits(PIPE);
    loop {
        if let Some(h) = parse_request(buf, &limits).map_err(io::Error::other)? {
            return Ok(Some((peer, h)));
        }
        if pipe.read_buf(buf).await? == 0 {
            return Ok(None);
        }
    }
}

/// The response for a script that is not there (no application asked).
async fn not_found(pipe: &mut DuplexStream) -> io::Result<()> {
    refuse(pipe, b"404 ", b"Not Found\n").await
}

/// A short answer weir gives itself, the application not asked.
async fn refuse(pipe: &mut DuplexStream, status: &[u8], body: &[u8]) -> io::Result<()> {
    let mut out = BytesMut::with_capacity(128);
    out.put_slice(b"HTTP/1.1 ");
    out.put_slice(status);
    out.put_slice(b"\r\ncontent-type: text/plain\r\ncontent-length: ");
    out.put_slice(body.len().to_string().as_bytes());
    out.put_slice(b"\r\nconnection: close\r\n\r\n");
    out.put_slice(body);
    pipe.write_all(&out).await?;
    pipe.shutdown().await
}

/// Whether `path` (percent-encoded, as received) is a directory under the root.
fn is_directory(cfg: &FastCgi, path: &[u8]) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Some(decoded) = params::decoded_path(path) else {
        return false;
    };
    let mut full = cfg.root_bytes.to_vec();
    full.extend_from_slice(&decoded);
    match std::fs::canonicalize(std::ffi::OsStr::from_bytes(&full)) {
        Ok(real) => real.starts_with(&cfg.root) && real.is_dir(),
        Err(_) => false,
    }
}

/// How long an answer of [`is_script`] is kept (nginx's `open_file_cache_valid` is 60 s; a
/// script added or removed is seen within this).
const SCRIPT_CACHE: Duration = Duration::from_secs(1);

/// Whether a file name was a script, and when that was found.
type Answers = std::collections::HashMap<Box<[u8]>, (bool, std::time::Instant)>;

thread_local! {
    /// This worker's recent answers of [`is_script`], by file name: a `realpath` walks every
    /// component of the path (a system call each), 5.5k instructions a request by callgrind.
    static SCRIPTS: RefCell<Answers> = RefCell::new(Answers::new());
    /// The look-up key of [`is_script`], built here (no allocation per request).
    static KEY: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Whether `filename` is a regular file inside the canonical `root` (symlinks followed),
/// answered again at most every [`SCRIPT_CACHE`].
fn is_script(cfg: &FastCgi, filename: &[u8]) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let now = std::time::Instant::now();
    // Keyed by root and name: another upstream's root (or a reloaded one) has its own answer.
    let key = KEY.with_borrow_mut(|key| {
        key.clear();
        key.extend_from_slice(&cfg.root_bytes);
        key.push(0);
        key.extend_from_slice(filename);
        SCRIPTS
            .with_borrow(|m| {
                m.get(&key[..])
                    .filter(|(_, at)| now.duration_since(*at) < SCRIPT_CACHE)
                    .map(|(yes, _)| *yes)
            })
            .ok_or_else(|| key.clone())
    });
    let key = match key {
        Ok(yes) => return yes,
        Err(key) => key,
    };
    let path = std::path::Path::new(std::ffi::OsStr::from_bytes(filename));
    let yes = match std::fs::canonicalize(path) {
        Ok(real) => real.starts_with(&cfg.root) && real.is_file(),
        Err(_) => false,
    };
    SCRIPTS.with_borrow_mut(|m| {
        // Bounded: a client naming random scripts cannot grow it past this.
        if m.len() >= 4096 {
            m.clear();
        }
        m.insert(key.into(), (yes, now));
    });
    yes
}

/// One request: from the pipe to the application and back. The connection, when it can be
/// reused.
async fn exchange(
    mut pipe: DuplexStream,
    conn: Conn<'_>,
    cfg: &FastCgi,
    waits: Waits,
) -> io::Result<Option<Socket>> {
    let mut buf = BytesMut::with_capacity(2048);
    let Some((peer, head)) = read_request(&mut pipe, &mut buf).await? else {
        return Ok(None);
    };
    // The script the path names, else the fallback (a front controller), else 404 without
    // asking the application.
    let named = params::script(cfg, head.path())
        .filter(|s| !cfg.require_file || is_script(cfg, &s.filename));
    // A directory without its index script is nginx's 403 ("directory index forbidden"), not
    // the front controller's, unless `directories: fallback` (no `$uri/` in nginx's
    // `try_files`: the index module is never reached).
    if named.is_none()
        && !cfg.directory_fallback
        && head.path().ends_with(b"/")
        && is_directory(cfg, head.path())
    {
        refuse(&mut pipe, b"403 ", b"Forbidden\n").await?;
        return Ok(None);
    }
    let script = match named {
        Some(s) => s,
        None => match params::fallback(cfg) {
            Some(s) if !cfg.require_file || is_script(cfg, &s.filename) => s,
            _ => {
                not_found(&mut pipe).await?;
                return Ok(None);
            }
        },
    };
    // The body whole (held to the route's `max_body_bytes` by the upstream phase that writes
    // it), before the application is asked; its length is CGI's CONTENT_LENGTH.
    let mut decoder = BodyDecoder::new(head.body);
    let body = if head.body == weir_http::BodyKind::Empty {
        Vec::new()
    } else {
        read_body(&mut pipe, &mut buf, &mut decoder).await?
    };
    let mut env = take_buf(2048);
    params::put(
        cfg,
        &head,
        &script,
        &peer,
        Some(body.len() as u64),
        &mut env,
    );
    let mut out = take_buf(env.len() + body.len() + 64);
    record::put_begin(&mut out, cfg.keep_conn);
    record::put_params_body(&mut out, &env);
    record::put_stream(&mut out, record::STDIN, &body);
    drop(body);
    give_buf(env);
    record::put(&mut out, record::STDIN, &[]);
    let mut sock = conn.get().await?;
    sock.write_all(&out).await?;
    sock.flush().await?;
    give_buf(out);
    let reusable = relay_response(&mut pipe, &mut sock, &head, waits).await?;
    Ok(reusable.then_some(sock))
}

/// A body of unknown length, read whole from the pipe.
async fn read_body(
    pipe: &mut DuplexStream,
    buf: &mut BytesMut,
    decoder: &mut BodyDecoder,
) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        match decoder.decode(buf).map_err(io::Error::other)? {
            BodyEvent::Data(d) => body.extend_from_slice(&d),
            BodyEvent::NeedMore => {
                if pipe.read_buf(buf).await? == 0 {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
            }
            BodyEvent::Done(_) => return Ok(body),
        }
    }
}

/// Reads the application's records and writes the HTTP/1.1 response into the pipe; whether
/// the connection can serve another request.
async fn relay_response(
    pipe: &mut DuplexStream,
    sock: &mut Socket,
    head: &RequestHead,
    waits: Waits,
) -> io::Result<bool> {
    let bodyless = head.method == Method::Head;
    let mut rbuf = take_buf(4096);
    let mut section = BytesMut::new();
    let mut out = take_buf(4096);
    // The status once the head is written; whether its body is chunked.
    let mut written: Option<bool> = None;
    let mut wait = waits.first;
    loop {
        let rec = loop {
            match record::next(&mut rbuf) {
                Ok(Some(r)) => break r,
                Ok(None) => {}
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e.0)),
            }
            // Read the application, and watch the pipe: the upstream phase drops it when its
            // client goes away (or it gave up), and the request is then abandoned (the
            // connection closes: php-fpm aborts the script at its next output).
            let read = tokio::time::timeout(wait, sock.read_buf(&mut rbuf));
            let mut probe = [0u8; 64];
            tokio::select! {
                got = read => match got {
                    Err(_) => return Err(io::Error::new(io::ErrorKind::TimedOut, "no response")),
                    Ok(Ok(0)) => {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the application closed the connection before its response ended",
                        ))
                    }
                    Ok(r) => r?,
                },
                gone = pipe.read(&mut probe) => {
                    if matches!(gone, Ok(0) | Err(_)) {
                        return Err(io::Error::new(
                            io::ErrorKind::BrokenPipe,
                            "the client went away: the request is abandoned",
                        ));
                    }
                    continue;
                }
            };
            wait = waits.idle;
        };
        match rec.kind {
            record::STDOUT => match written {
                None => {
                    section.extend_from_slice(&rec.content);
                    if let Some(end) = reply::head_end(&section) {
                        let status = reply::write_head(&section[..end], bodyless, &mut out)
                            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.0))?;
                        let chunked = !bodyless && !matches!(status, 204 | 304);
                        if chunked && section.len() > end {
                            weir_http::reply::put_chunk(&mut out, &section[end..]);
                        }
                        written = Some(chunked);
                        section = BytesMut::new();
                    } else if section.len() > reply::MAX_HEAD {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "a CGI header section past 64 KiB",
                        ));
                    }
                }
                Some(true) if !rec.content.is_empty() => {
                    weir_http::reply::put_chunk(&mut out, &rec.content)
                }
                Some(_) => {}
            },
            record::STDERR => {
                static STDERR: crate::logs::Limited = crate::logs::Limited::new();
                if let Some(suppressed) = STDERR.admit() {
                    let text = String::from_utf8_lossy(&rec.content[..rec.content.len().min(512)]);
                    tracing::warn!(message = %text.trim_end(), suppressed, "FastCGI stderr");
                }
            }
            record::END_REQUEST => {
                let Some(chunked) = written else {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "the application ended its response without a header section",
                    ));
                };
                if chunked {
                    out.put_slice(b"0\r\n\r\n");
                }
                pipe.write_all(&out).await?;
                pipe.shutdown().await?;
                let complete = record::end_status(&rec.content).is_some_and(|(_, p)| p == 0);
                let whole = rbuf.is_empty();
                drop(rec);
                give_buf(rbuf);
                give_buf(out);
                return Ok(complete && whole);
            }
            _ => {}
        }
        // What the application wrote goes on at once (its `flush()`, server-sent events), and
        // a client that went away is seen at the write.
        if !out.is_empty() {
            pipe.write_all(&out).await?;
            out.clear();
        }
    }
}
