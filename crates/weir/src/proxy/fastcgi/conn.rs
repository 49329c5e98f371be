//! Connections to a FastCGI application: opened (TCP or a unix socket, within the connect
//! timeout), kept idle per worker and server (`FCGI_KEEP_CONN`), a request written on one and
//! its records read back, and the exchange's buffers, reused per worker.

use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::AsyncReadExt;
use tokio::time::Instant;

use super::record;
use crate::error::{Error, ErrorKind};

use crate::proxy::tls::Socket;

/// Idle FastCGI connections of one upstream on one worker, per server.
pub type Idle = Rc<RefCell<Vec<Vec<Socket>>>>;

/// Where a FastCGI server is: what a connection to it needs, owned by the exchange's task.
#[derive(Debug)]
pub struct Target {
    pub addr: std::sync::Arc<arc_swap::ArcSwap<std::net::SocketAddr>>,
    pub unix: Option<std::sync::Arc<std::path::Path>>,
    pub within: Duration,
}

impl Target {
    pub async fn connect(&self) -> io::Result<Socket> {
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

/// An idle connection to `server`; `probe`: checked first to be open and quiet (a `MSG_PEEK`,
/// one system call). Without the probe, the caller sends only what it may send again on a new
/// connection when this one turns out closed (a child php-fpm recycled: `pm.max_requests`).
/// A connection is kept only after a whole response with nothing past it, so one that is
/// open is in step.
pub fn take_idle_as(idle: &Idle, server: usize, probe: bool) -> Option<Socket> {
    let mut idle = idle.borrow_mut();
    let list = idle.get_mut(server)?;
    while let Some(s) = list.pop() {
        if !probe {
            return Some(s);
        }
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

pub fn put_idle(idle: &Idle, server: usize, sock: Socket, max: usize) {
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
pub fn take_buf(cap: usize) -> BytesMut {
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
pub fn give_buf(mut b: BytesMut) {
    if b.capacity() <= 64 * 1024 {
        b.clear();
        SPARE.with_borrow_mut(|s| {
            if s.len() < 8 {
                s.push(b);
            }
        });
    }
}

/// Writes `out` on an idle connection to `server` (`probe`d first, or not), else a new one
/// (once more on a new one when the idle one fails the write: the application closed it
/// meanwhile). The connection, and whether it was a kept one. A kept connection whose
/// application stops reading is a 504, never a second send: it may be running the request
/// (the attack review of 2026-11-30 saw a POST run twice).
pub async fn send(
    per_worker: &crate::proxy::per_worker::WorkerUpstream,
    up: &crate::proxy::upstream::Upstream,
    server: usize,
    out: &[u8],
    probe: bool,
) -> Result<(Socket, bool), Error> {
    if let Some(mut sock) = take_idle_as(&per_worker.fastcgi_idle, server, probe) {
        match crate::proxy::exchange::send_paced(&mut sock, out, up.send_timeout).await {
            Ok(()) => return Ok((sock, true)),
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                return Err(Error::with(
                    ErrorKind::ResponseTimeout,
                    format!("write: {e}"),
                ))
            }
            Err(_) => {}
        }
    }
    connect_and_send(up, server, out).await.map(|s| (s, false))
}

/// A new connection to `server`, `out` written on it.
pub async fn connect_and_send(
    up: &crate::proxy::upstream::Upstream,
    server: usize,
    out: &[u8],
) -> Result<Socket, Error> {
    let s = &up.servers[server];
    let to = Target {
        addr: s.addr.clone(),
        unix: s.unix.clone(),
        within: up.connect_timeout,
    };
    let mut sock = to.connect().await.map_err(|e| match e.kind() {
        std::io::ErrorKind::TimedOut => Error::new(ErrorKind::ConnectTimeout),
        _ => Error::with(ErrorKind::Connect, e),
    })?;
    // The request (its body read whole first, within the route's limit) written with each
    // pause bounded by the upstream's `timeouts.send`: an application that stops reading is
    // a 504, not a client held for good.
    match crate::proxy::exchange::send_paced(&mut sock, out, up.send_timeout).await {
        Ok(()) => Ok(sock),
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => Err(Error::with(
            ErrorKind::ResponseTimeout,
            format!("write: {e}"),
        )),
        Err(e) => Err(Error::with(ErrorKind::UpstreamReset, format!("write: {e}"))),
    }
}

/// Reads the next record into `rbuf` from `sock`, waiting until `deadline` for more bytes.
pub async fn next_record(
    sock: &mut Socket,
    rbuf: &mut BytesMut,
    deadline: Instant,
) -> Result<record::Record, Next> {
    loop {
        match record::next(rbuf) {
            Ok(Some(r)) => return Ok(r),
            Ok(None) => {}
            Err(e) => return Err(Next::Bad(e.0)),
        }
        match tokio::time::timeout_at(deadline, sock.read_buf(rbuf)).await {
            Err(_) => return Err(Next::Timeout),
            Ok(Ok(0)) => return Err(Next::Closed),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(Next::Io(e)),
        }
    }
}

/// Why no record came.
#[derive(Debug)]
pub enum Next {
    Timeout,
    Closed,
    Bad(&'static str),
    Io(std::io::Error),
}

impl Next {
    pub fn describe(&self) -> String {
        match self {
            Next::Timeout => "no record in time".into(),
            Next::Closed => {
                "the application closed the connection before its response ended".into()
            }
            Next::Bad(why) => format!("bad record: {why}"),
            Next::Io(e) => format!("read: {e}"),
        }
    }
}
