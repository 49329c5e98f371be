//! Idle upstream connections, per worker and server (thread-per-core: no locks). Most recently
//! used first, so a small working set of warm connections serves the load and the rest age out.
//! A connection the upstream closed while idle is usually noticed for free: tokio has already
//! seen the readable/hang-up event, and `try_read` reports EOF without waiting.

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

/// An upstream connection, its read buffer, and its lazily-moved timer (see
/// [`UpstreamConn::read_by`]).
#[derive(Debug)]
pub struct UpstreamConn {
    pub stream: TcpStream,
    pub buf: BytesMut,
    /// The request being written, kept for the next one (no allocation per request).
    pub out: BytesMut,
    timer: Option<Pin<Box<Sleep>>>,
}

impl UpstreamConn {
    pub fn new(stream: TcpStream) -> UpstreamConn {
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
    max_idle: usize,
    idle_timeout: Duration,
}

impl Pool {
    pub fn new(servers: usize, max_idle: usize, idle_timeout: Duration) -> Pool {
        Pool {
            per_server: (0..servers).map(|_| VecDeque::new()).collect(),
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
            match idle.conn.stream.try_read(&mut probe) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Some(idle.conn),
                // EOF, stray bytes or an error: not reusable.
                _ => continue,
            }
        }
        None
    }

    /// Closes every idle connection and takes no more (the upstream left the config).
    pub fn retire(&mut self) {
        self.per_server.iter_mut().for_each(VecDeque::clear);
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
