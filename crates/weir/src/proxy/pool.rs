//! Idle upstream connections, per worker and server (thread-per-core: no locks). Most recently
//! used first, so a small working set of warm connections serves the load and the rest age out.
//! A connection the upstream closed while idle is usually noticed for free: tokio has already
//! seen the readable/hang-up event, and `try_read` reports EOF without waiting.

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::AsyncReadExt;
use tokio::time::{Instant, Sleep};

use super::tls::UpStream;

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
}

impl UpstreamConn {
    pub fn new(stream: UpStream) -> UpstreamConn {
        UpstreamConn {
            stream,
            buf: BytesMut::with_capacity(16 * 1024),
            out: BytesMut::new(),
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
    since: Instant,
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

    /// A live idle connection to `server`, if any.
    pub fn take(&mut self, server: usize) -> Option<UpstreamConn> {
        let q = &mut self.per_server[server];
        while let Some(idle) = q.pop_back() {
            if idle.since.elapsed() > self.idle_timeout {
                // Everything older is further down the queue: drop it all.
                q.clear();
                return None;
            }
            let mut probe = [0u8; 1];
            // On the socket itself: over TLS, any bytes (a close_notify) also mean "not
            // reusable", and none leave rustls' state untouched.
            let Some(tcp) = super::tls::tcp(&idle.conn.stream) else {
                continue;
            };
            match tcp.try_read(&mut probe) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Some(idle.conn),
                // EOF, stray bytes or an error: not reusable.
                _ => continue,
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

    /// Returns a connection for reuse (dropped if the pool is full or reuse is off).
    pub fn put(&mut self, server: usize, mut conn: UpstreamConn) {
        if self.max_idle == 0 || !conn.buf.is_empty() {
            return;
        }
        let q = &mut self.per_server[server];
        if q.len() >= self.max_idle {
            q.pop_front();
        }
        conn.buf.clear();
        q.push_back(Idle {
            conn,
            since: Instant::now(),
        });
    }
}
