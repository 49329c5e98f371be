//! Idle upstream connections, per worker and server (thread-per-core: no locks). Most recently
//! used first, so a small working set of warm connections serves the load and the rest age out.
//!
//! A connection is reused only when nothing is waiting to be read on it: bytes after a complete
//! response (past its Content-Length, a body after a HEAD, 204 or 304) would be read as the
//! next request's response, and on a cached route stored and served to everyone (response
//! desync; nginx 1.22 has it). So [`Pool::put`] refuses a connection with bytes left in its
//! buffer, and [`Pool::take`] asks the kernel (`recv` with `MSG_PEEK`, one system call per
//! reuse) rather than tokio's readiness: bytes that arrived after the worker last polled its
//! reactor are not in that readiness yet, and `try_read` trusted it and let 20-27 of 60
//! follow-ups read an injected response. Either way the connection is closed and counted
//! (`weir_upstream_desync_total`); EOF (the upstream closed while idle) is not a desync.

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::AsyncReadExt;
use tokio::time::{Instant, Sleep};

use super::tls::UpStream;
use super::upstream::Health;

/// An upstream connection, its read buffer, and its lazily-moved timer (see
/// [`UpstreamConn::read_by`]).
#[derive(Debug)]
pub struct UpstreamConn {
    /// Plain TCP or TLS (`proxy/tls.rs`).
    pub stream: UpStream,
    pub buf: BytesMut,
    /// The request being written, kept for the next one (no allocation per request).
    pub out: BytesMut,
    timer: Option<Pin<Box<Sleep>>>,
    /// Its place under the upstream's `max_connections`, given back when it closes.
    pub slot: Option<super::limits::Slot>,
}

impl UpstreamConn {
    pub fn new(stream: UpStream) -> UpstreamConn {
        UpstreamConn {
            stream,
            buf: BytesMut::with_capacity(16 * 1024),
            out: BytesMut::new(),
            slot: None,
            timer: None,
        }
    }

    /// Reads into `buf`, giving up at `deadline` (`Err(())`).
    ///
    /// The connection keeps one `Sleep` for its whole life and only moves it when it fires early
    /// or must fire sooner, so a response that arrives in time costs no timer-wheel operation.
    pub async fn read_by(&mut self, deadline: Instant) -> Result<std::io::Result<usize>, ()> {
        if self.buf.capacity() - self.buf.len() < 4096 {
            self.buf.reserve(16 * 1024);
        }
        let timer = match &mut self.timer {
            Some(t) => {
                if t.deadline() > deadline {
                    t.as_mut().reset(deadline);
                }
                t
            }
            None => self
                .timer
                .insert(Box::pin(tokio::time::sleep_until(deadline))),
        };
        loop {
            tokio::select! {
                biased;
                r = self.stream.read_buf(&mut self.buf) => return Ok(r),
                _ = timer.as_mut() => {
                    if Instant::now() >= deadline {
                        return Err(());
                    }
                    timer.as_mut().reset(deadline);
                }
            }
        }
    }
}

#[derive(Debug)]
struct Idle {
    conn: UpstreamConn,
    since: crate::clock::Mono,
}

/// The idle connections of one worker for one upstream.
#[derive(Debug)]
pub struct Pool {
    per_server: Vec<VecDeque<Idle>>,
    /// The shared HTTP/2 connection to each server (`protocol: h2`).
    h2: Vec<Option<h2::client::SendRequest<bytes::Bytes>>>,
    max_idle: usize,
    idle_timeout: Duration,
}

impl Pool {
    pub fn new(servers: usize, max_idle: usize, idle_timeout: Duration) -> Pool {
        Pool {
            per_server: (0..servers).map(|_| VecDeque::new()).collect(),
            h2: vec![None; servers],
            max_idle,
            idle_timeout,
        }
    }

    /// A live idle connection to `server` with nothing waiting to be read, if any, idle for at
    /// most the pool's timeout at `now`; those with stray bytes are dropped and counted on
    /// `health`.
    pub fn take(
        &mut self,
        server: usize,
        health: &Health,
        now: crate::clock::Mono,
    ) -> Option<UpstreamConn> {
        let q = &mut self.per_server[server];
        while let Some(idle) = q.pop_back() {
            if now.since(idle.since) > self.idle_timeout {
                // Everything older is further down the queue: drop it all.
                q.clear();
                return None;
            }
            let mut probe = [std::mem::MaybeUninit::<u8>::uninit(); 1];
            // On the socket itself: over TLS, any bytes (a close_notify) also mean "not
            // reusable", and none leave rustls' state untouched. The socket is non-blocking.
            let Some(socket) = super::tls::socket(&idle.conn.stream) else {
                continue;
            };
            match socket2::SockRef::from(&socket.fd()).peek(&mut probe) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Some(idle.conn),
                // Stray bytes: a desync. EOF or an error: closed while idle.
                Ok(n) if n > 0 && socket.is_plain() => {
                    health.count_desync();
                }
                _ => {}
            }
        }
        None
    }

    /// The HTTP/2 connection to `server`, if one was made.
    pub fn h2(&self, server: usize) -> Option<h2::client::SendRequest<bytes::Bytes>> {
        self.h2.get(server).cloned().flatten()
    }

    /// Keeps the HTTP/2 connection to `server`.
    pub fn set_h2(&mut self, server: usize, send: h2::client::SendRequest<bytes::Bytes>) {
        if let Some(slot) = self.h2.get_mut(server) {
            *slot = Some(send);
        }
    }

    /// Closes every idle connection and takes no more (the upstream left the config).
    pub fn retire(&mut self) {
        self.per_server.iter_mut().for_each(VecDeque::clear);
        self.h2.iter_mut().for_each(|s| *s = None);
        self.max_idle = 0;
    }

    /// Returns a connection for reuse (dropped if the pool is full or reuse is off, and dropped
    /// and counted on `health` if bytes followed the response).
    ///
    /// Idle from now, read here: the queue stays in age order, which [`Pool::take`] relies on
    /// to drop everything below an expired connection. An instant read earlier (the response
    /// head's) saved a clock read but put a connection whose body outlasted the idle timeout
    /// at the back already expired, and the next take emptied the queue (the attack review).
    pub fn put(&mut self, server: usize, mut conn: UpstreamConn, health: &Health) {
        if !conn.buf.is_empty() {
            health.count_desync();
            return;
        }
        if self.max_idle == 0 {
            return;
        }
        let q = &mut self.per_server[server];
        if q.len() >= self.max_idle {
            q.pop_front();
        }
        conn.buf.clear();
        q.push_back(Idle {
            conn,
            since: crate::clock::Mono::now(),
        });
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::io::Write;

    use tokio_util::either::Either;

    use super::*;

    /// Bytes that reach the socket after the response was read, while the worker has not polled
    /// its reactor since: tokio's readiness was cleared by the short read, so `try_read` said
    /// "nothing there" without asking the kernel, and the connection was reused (the desync).
    #[tokio::test]
    async fn stray_bytes_the_reactor_has_not_seen_are_caught() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = tokio::net::TcpStream::connect(l.local_addr().unwrap())
            .await
            .unwrap();
        let (mut origin, _) = l.accept().unwrap();
        origin.set_nodelay(true).unwrap();
        origin
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            .unwrap();
        let mut conn = UpstreamConn::new(Either::Left(super::super::tls::Socket::Tcp(c)));
        let deadline = Instant::now() + Duration::from_secs(5);
        assert!(conn.read_by(deadline).await.unwrap().unwrap() > 0);
        conn.buf.clear();
        let health = Health::default();
        let mut pool = Pool::new(1, 4, Duration::from_secs(60));
        pool.put(0, conn, &health);
        // No await from here on: the reactor cannot learn of these bytes.
        origin
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nINJECTED")
            .unwrap();
        assert!(
            pool.take(0, &health, crate::clock::Mono::now()).is_none(),
            "not reused"
        );
        assert_eq!(health.desyncs(), 1);
    }

    #[tokio::test]
    async fn a_clean_connection_is_reused_and_leftovers_are_refused() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = tokio::net::TcpStream::connect(l.local_addr().unwrap())
            .await
            .unwrap();
        let (_origin, _) = l.accept().unwrap();
        let health = Health::default();
        let mut pool = Pool::new(1, 4, Duration::from_secs(60));
        let mut conn = UpstreamConn::new(Either::Left(super::super::tls::Socket::Tcp(c)));
        pool.put(0, conn, &health);
        conn = pool
            .take(0, &health, crate::clock::Mono::now())
            .expect("clean: reused");
        conn.buf.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
        pool.put(0, conn, &health);
        assert!(pool.take(0, &health, crate::clock::Mono::now()).is_none());
        assert_eq!(health.desyncs(), 1);
    }
}
