//! Connections to a FastCGI application: opened (TCP or a unix socket, within the connect
//! timeout), kept idle per worker and server (`FCGI_KEEP_CONN`), and the exchange's buffers,
//! reused per worker.

use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::time::Duration;

use bytes::BytesMut;

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
