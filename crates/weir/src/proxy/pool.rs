//! Idle upstream connections, per worker and server (thread-per-core: no locks). Most recently
//! used first, so a small working set of warm connections serves the load and the rest age out.
//!
//! A connection is reused only when nothing is waiting to be read on it: bytes after a complete
//! response (past its Content-Length, a body after a HEAD, 204 or 304) would be read as the
//! next request's response, and on a cached route stored and served to everyone (response
//! desync; nginx 1.22 has it). So [`Pool::put`] refuses a connection with bytes left in its
//! buffer, and [`Pool::take`] refuses one the worker's reactor has seen readable while it sat
//! idle: an idle connection stays registered, and stray bytes, a FIN or a reset mark it
//! (issue 55 §1). That costs no system call; asking the kernel (`recv` with `MSG_PEEK`) on
//! every reuse was a fifth of a proxied request's system calls (5 → 4 per request,
//! `bench/proxy_floor.sh`).
//!
//! What readiness cannot see is bytes that reached the socket after the reactor last polled
//! (under load, at most one scheduler pass: tokio polls it every 61 tasks). Where they are
//! likely, the kernel is still asked, once:
//! - after a response that must have no body (204, 304, an answer to HEAD): a body sent anyway
//!   is the classic desync, and it comes right behind the head;
//! - when the reactor's readiness is set but may be stale (the last read filled the buffer, so
//!   tokio could not tell the socket was drained), to tell stray bytes from nothing.
//!
//! Bytes that arrive after the next request was sent cannot be told from its answer by any
//! check (HTTP/1.1 has no request ids); nginx and HAProxy trust readiness alone.
//!
//! The trade, measured by the outside review (an origin that answers `Content-Length: 4` and
//! writes a second response D µs later, 4 victim clients beside the attacker, 3 s runs): the
//! stray bytes that had arrived before the next request went out, which a peek catches, got
//! through 60–267 times under load (8–11 with the peek) and 3,486 times with pipelined pairs
//! at D = 0 (707); those that arrive after the request went out, which nothing catches, got
//! through about 7,100 times in both. Sequential requests with idle gaps were caught either
//! way, and bodies after 204 and 304 (the probe) and HEAD (never reused) as before.
//! Either way the connection is closed and counted (`weir_upstream_desync_total`); EOF (the
//! upstream closed while idle) is not a desync.

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
    /// Ask the kernel at reuse, not only the reactor (after a response that must have no body).
    probe: bool,
}

/// What the kernel says of an idle socket: `true` when it is reusable (nothing to read), and
/// stray bytes on a plain socket counted on `health`.
fn nothing_waiting(socket: &super::tls::Socket, health: &Health) -> bool {
    let mut probe = [std::mem::MaybeUninit::<u8>::uninit(); 1];
    // On the socket itself: over TLS, any bytes (a close_notify) also mean "not reusable", and
    // none leave rustls' state untouched. The socket is non-blocking.
    match socket2::SockRef::from(&socket.fd()).peek(&mut probe) {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => true,
        // Stray bytes: a desync. EOF or an error: closed while idle.
        Ok(n) if n > 0 && socket.is_plain() => {
            health.count_desync();
            false
        }
        _ => false,
    }
}

/// One server's HTTP/2 connections, and those being made.
type H2Conns = (
    Vec<std::rc::Rc<super::h2_client::H2Conn>>,
    std::rc::Rc<super::h2_client::Opening>,
);

/// The idle connections of one worker for one upstream.
#[derive(Debug)]
pub struct Pool {
    per_server: Vec<VecDeque<Idle>>,
    /// The HTTP/2 connections to each server (`protocol: h2`), shared by the worker's
    /// requests (`h2_client/`).
    h2: Vec<H2Conns>,
    max_idle: usize,
    idle_timeout: Duration,
}

impl Pool {
    pub fn new(servers: usize, max_idle: usize, idle_timeout: Duration) -> Pool {
        Pool {
            per_server: (0..servers).map(|_| VecDeque::new()).collect(),
            h2: (0..servers).map(|_| Default::default()).collect(),
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
            let Some(socket) = super::tls::socket(&idle.conn.stream) else {
                continue;
            };
            // The reactor's word first (no system call); the kernel's when the reactor has
            // seen something (stray bytes or a stale mark?) or the response asks for it.
            if (idle.probe || socket.read_event_seen()) && !nothing_waiting(socket, health) {
                continue;
            }
            return Some(idle.conn);
        }
        None
    }

    /// The HTTP/2 connections to `server`.
    pub(crate) fn h2_conns(&mut self, server: usize) -> &mut H2Conns {
        &mut self.h2[server]
    }

    /// Closes every idle connection and takes no more (the upstream left the config).
    pub fn retire(&mut self) {
        self.per_server.iter_mut().for_each(VecDeque::clear);
        for (conns, _) in &mut self.h2 {
            // Going away: streams in flight finish, then the connections close.
            for c in conns.drain(..) {
                c.retire();
            }
        }
        self.max_idle = 0;
    }

    /// Returns a connection for reuse (dropped if the pool is full or reuse is off, and dropped
    /// and counted on `health` if bytes followed the response). `bodiless`: the response must
    /// have had no body (204, 304, an answer to HEAD), so the kernel is asked at reuse.
    ///
    /// Idle from now, read here: the queue stays in age order, which [`Pool::take`] relies on
    /// to drop everything below an expired connection. An instant read earlier (the response
    /// head's) saved a clock read but put a connection whose body outlasted the idle timeout
    /// at the back already expired, and the next take emptied the queue (the attack review).
    pub fn put(&mut self, server: usize, mut conn: UpstreamConn, health: &Health, bodiless: bool) {
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
            probe: bodiless,
        });
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::io::Write;

    use tokio::io::AsyncReadExt;
    use tokio_util::either::Either;

    use super::*;

    const INJECTED: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nINJECTED";

    /// A connection to a local origin that has answered one response, read the way the proxy
    /// reads it (a short read: tokio's readiness is cleared), its buffer emptied.
    async fn answered() -> (UpstreamConn, std::net::TcpStream) {
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
        (conn, origin)
    }

    /// One turn of the worker's reactor: a timer makes the current-thread runtime park in
    /// `epoll_wait`, which reports what reached the sockets before it.
    async fn reactor_turn() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }

    /// Stray bytes that reach an idle connection are seen by the reactor, and the connection
    /// is not reused (issue 55 §1: readiness, not a system call per reuse).
    #[tokio::test]
    async fn stray_bytes_the_reactor_has_seen_are_caught() {
        let (conn, mut origin) = answered().await;
        let health = Health::default();
        let mut pool = Pool::new(1, 4, Duration::from_secs(60));
        pool.put(0, conn, &health, false);
        origin.write_all(INJECTED).unwrap();
        reactor_turn().await;
        assert!(pool.take(0, &health, crate::clock::Mono::now()).is_none());
        assert_eq!(health.desyncs(), 1);
    }

    /// An origin that closes an idle connection: seen by the reactor, dropped, not a desync.
    #[tokio::test]
    async fn a_close_while_idle_is_seen_and_not_a_desync() {
        let (conn, origin) = answered().await;
        let health = Health::default();
        let mut pool = Pool::new(1, 4, Duration::from_secs(60));
        pool.put(0, conn, &health, false);
        drop(origin);
        reactor_turn().await;
        assert!(pool.take(0, &health, crate::clock::Mono::now()).is_none());
        assert_eq!(health.desyncs(), 0);
    }

    /// After a response that must have no body, the kernel is asked at reuse: bytes the reactor
    /// has not seen yet (no await between them and the reuse) are caught too.
    #[tokio::test]
    async fn after_a_bodiless_response_unseen_bytes_are_caught() {
        let (conn, mut origin) = answered().await;
        let health = Health::default();
        let mut pool = Pool::new(1, 4, Duration::from_secs(60));
        pool.put(0, conn, &health, true);
        // No await from here on: the reactor cannot learn of these bytes.
        origin.write_all(INJECTED).unwrap();
        assert!(pool.take(0, &health, crate::clock::Mono::now()).is_none());
        assert_eq!(health.desyncs(), 1);
    }

    /// The reuse of a connection after an ordinary response asks no one but the reactor: bytes
    /// that reached the socket since its last poll go unseen (the window `pool.rs`'s doc states;
    /// this test fails if a system call per reuse comes back).
    #[tokio::test]
    async fn an_ordinary_reuse_makes_no_system_call() {
        let (conn, mut origin) = answered().await;
        let health = Health::default();
        let mut pool = Pool::new(1, 4, Duration::from_secs(60));
        pool.put(0, conn, &health, false);
        origin.write_all(INJECTED).unwrap();
        assert!(pool.take(0, &health, crate::clock::Mono::now()).is_some());
        assert_eq!(health.desyncs(), 0);
    }

    /// A readiness mark the last read could not clear (it filled the buffer, so tokio cannot
    /// know the socket was drained) is checked with the kernel, not trusted: the clean
    /// connection is reused.
    #[tokio::test]
    async fn a_stale_readiness_mark_is_checked_not_trusted() {
        let (mut conn, mut origin) = answered().await;
        origin.write_all(b"ab").unwrap();
        reactor_turn().await;
        let mut exact = [0u8; 2];
        assert_eq!(conn.stream.read(&mut exact).await.unwrap(), 2);
        let socket = super::super::tls::socket(&conn.stream).unwrap();
        assert!(socket.read_event_seen(), "the mark stays after a full read");
        let health = Health::default();
        let mut pool = Pool::new(1, 4, Duration::from_secs(60));
        pool.put(0, conn, &health, false);
        assert!(pool.take(0, &health, crate::clock::Mono::now()).is_some());
        assert_eq!(health.desyncs(), 0);
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
        pool.put(0, conn, &health, false);
        conn = pool
            .take(0, &health, crate::clock::Mono::now())
            .expect("clean: reused");
        conn.buf.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
        pool.put(0, conn, &health, false);
        assert!(pool.take(0, &health, crate::clock::Mono::now()).is_none());
        assert_eq!(health.desyncs(), 1);
    }
}
