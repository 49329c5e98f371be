//! Idle upstream connections, per worker and server (thread-per-core: no locks). Most recently
//! used first, so a small working set of warm connections serves the load and the rest age out.
//! A connection the upstream closed while idle is usually noticed for free: tokio has already
//! seen the readable/hang-up event, and `try_read` reports EOF without waiting.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::net::TcpStream;

/// An upstream connection and its read buffer.
#[derive(Debug)]
pub struct UpstreamConn {
    pub stream: TcpStream,
    pub buf: BytesMut,
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
