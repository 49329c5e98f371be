//! weir's own HTTP/2 client for `protocol: h2` upstreams (issue 55 §2), on the sans-IO codec
//! of `weir-h2` (`weir_h2::client`), which weir's HTTP/2 server shares: the `h2` crate left
//! this path, as it left the server's (issue 54: its conversions, buffers and per-stream
//! futures were most of an HTTP/2 request's cost).
//!
//! - A small pool per worker and server ([`open`]): streams go to the connection with the
//!   fewest, up to the server's SETTINGS_MAX_CONCURRENT_STREAMS and `http2.max_streams`;
//!   past that a new connection, up to `http2.connections` (10); past those, the request
//!   waits for a stream to end (within `timeouts.connect`, then 503).
//! - GOAWAY: the connection takes no new stream; streams above the server's last one fail as
//!   unprocessed, and the caller sends them again on another connection (`h2_upstream.rs`);
//!   those below finish.
//! - Liveness: a connection from which nothing came for `http2.ping_interval` is sent a PING;
//!   without its acknowledgement within `http2.ping_timeout` it is closed, and its streams
//!   fail (502). One idle past `keepalive.idle_timeout` is closed with GOAWAY.
//! - Flow control both ways: each stream's receive window is given back as its client takes
//!   the body (so one slow client holds its own stream, not the connection's 8 MiB), and a
//!   request body waits on the server's windows, each wait bounded by `timeouts.send`.

pub(crate) mod check;
mod conn;
mod stream;

use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::time::Duration;

pub(crate) use conn::{Failure, H2Conn};
pub(crate) use stream::{ClientStream, Incoming, SendError};

use super::pool::Pool;
use super::upstream::Upstream;

/// The `http2` settings of an upstream.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    /// Most connections per worker and server.
    pub connections: usize,
    /// Most streams this side opens on one connection (the server's own limit may be lower).
    pub max_streams: u32,
    pub ping_interval: Duration,
    pub ping_timeout: Duration,
    /// `keepalive.idle_timeout`: a connection without streams this long is closed.
    pub idle_timeout: Duration,
}

impl Policy {
    /// The upstream's `http2` block; `path` names it in errors.
    pub fn compile(
        h: &crate::config::model::Http2Client,
        idle_timeout: Duration,
        path: &str,
    ) -> Result<Policy, (String, String)> {
        if h.connections == 0 {
            return Err((
                format!("{path}.http2.connections"),
                "must be at least 1".into(),
            ));
        }
        if h.max_streams == 0 {
            return Err((
                format!("{path}.http2.max_streams"),
                "must be at least 1".into(),
            ));
        }
        if h.ping_interval.0.is_zero() || h.ping_timeout.0.is_zero() {
            return Err((
                format!("{path}.http2.ping_interval"),
                "ping_interval and ping_timeout must be more than 0".into(),
            ));
        }
        Ok(Policy {
            connections: h.connections,
            max_streams: h.max_streams,
            ping_interval: h.ping_interval.0,
            ping_timeout: h.ping_timeout.0,
            idle_timeout,
        })
    }
}

/// A connection to `server` with room for a stream now: a pooled one (the one with the fewest
/// streams), else a new one, else the first to have a stream end.
pub(crate) async fn ready(
    pool: &RefCell<Pool>,
    up: &Upstream,
    server: usize,
) -> io::Result<Rc<H2Conn>> {
    let deadline = tokio::time::Instant::now() + up.connect_timeout;
    loop {
        let (best, count, all, opened) = {
            let mut p = pool.borrow_mut();
            let (conns, connecting) = p.h2_conns(server);
            // Connections that can take nothing again leave the pool (their streams finish).
            conns.retain(|c| !c.is_spent());
            let best = conns
                .iter()
                .filter(|c| c.has_room())
                .min_by_key(|c| c.active())
                .cloned();
            (
                best,
                conns.len() + connecting.count(),
                conns.clone(),
                connecting.clone(),
            )
        };
        if let Some(conn) = best {
            return Ok(conn);
        }
        if count < up.http2.connections {
            // Counted while it connects: a burst of requests opens no more than allowed.
            let _connecting = Connecting::start(&opened);
            let conn = Box::pin(connect(up, server)).await?;
            pool.borrow_mut().h2_conns(server).0.push(conn);
            continue;
        }
        // Every connection is full (or still connecting): wait for a stream to end on one of
        // them, or a connection to be made.
        let mut waits: Vec<_> = all.iter().map(|c| Box::pin(c.room.notified())).collect();
        waits.push(Box::pin(opened.done.notified()));
        let any = futures_util::future::select_all(waits);
        if tokio::time::timeout_at(deadline, any).await.is_err() {
            return Err(io::Error::new(io::ErrorKind::WouldBlock, FULL));
        }
    }
}

/// Why [`ready`] gave up (`io::ErrorKind::WouldBlock`): weir's own limit, not the server's
/// failure.
pub(crate) const FULL: &str =
    "every HTTP/2 connection to the server is at its stream limit (http2.connections)";

/// The connections being made to one server (per worker), and a wake-up when one is done.
#[derive(Debug, Default)]
pub(crate) struct Opening {
    count: std::cell::Cell<usize>,
    done: tokio::sync::Notify,
}

impl Opening {
    fn count(&self) -> usize {
        self.count.get()
    }
}

/// One connection being made: counted until dropped (made, failed or given up).
struct Connecting(Rc<Opening>);

impl Connecting {
    fn start(o: &Rc<Opening>) -> Connecting {
        o.count.set(o.count.get() + 1);
        Connecting(o.clone())
    }
}

impl Drop for Connecting {
    fn drop(&mut self) {
        self.0.count.set(self.0.count.get().saturating_sub(1));
        self.0.done.notify_waiters();
    }
}

/// A new connection to `server`, its SETTINGS received.
async fn connect(up: &Upstream, server: usize) -> io::Result<Rc<H2Conn>> {
    let s = &up.servers[server];
    let socket = super::socket::connect(s, up.tls.as_ref(), up.connect_timeout).await?;
    H2Conn::start(socket, &up.http2, up.connect_timeout).await
}
