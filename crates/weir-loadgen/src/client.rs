//! One connection's loop. Closed loop: send (a pipelined batch of) requests, read the responses,
//! repeat. Open loop: each connection owns a schedule of intended send times at its share of the
//! rate; a request sent late is timed from when it *should* have been sent, so a stalled server
//! shows up as latency instead of silently lowering the load (coordinated omission, as wrk2).
//!
//! Errors are classified like wrk's: connect, read (the server closed or failed mid-response),
//! write, timeout (no response within `timeout`), and status (non-2xx/3xx, counted but still a
//! response). After any error but status the connection is reopened.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::{timeout_at, Instant};
use weir_http::{BodyDecoder, BodyEvent};

use crate::options::{Options, Stop};
use crate::transport::{connect, Stream, Tls};

/// Error counts, by class.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Errors {
    pub connect: u64,
    pub read: u64,
    pub write: u64,
    pub timeout: u64,
    pub status: u64,
}

impl Errors {
    pub fn add(&mut self, o: &Errors) {
        self.connect += o.connect;
        self.read += o.read;
        self.write += o.write;
        self.timeout += o.timeout;
        self.status += o.status;
    }

    pub fn total(&self) -> u64 {
        self.connect + self.read + self.write + self.timeout + self.status
    }
}

/// What one thread measured.
#[derive(Debug)]
pub struct Stats {
    /// Latency in microseconds, every response.
    pub latency: Histogram<u64>,
    pub responses: u64,
    /// Every byte read, heads included (wrk's "Transfer").
    pub bytes: u64,
    /// Body bytes only (hey's "Size/request").
    pub body_bytes: u64,
    pub errors: Errors,
    pub statuses: BTreeMap<u16, u64>,
    /// Responses completed per 100 ms interval since the start.
    pub per_tick: Vec<u64>,
    /// TLS handshakes completed, and how many of them resumed a session.
    pub handshakes: u64,
    pub resumed: u64,
}

impl Stats {
    pub fn new() -> Stats {
        Stats {
            // 1 µs to 100 s at 3 significant digits.
            latency: Histogram::new_with_bounds(1, 100_000_000, 3)
                .unwrap_or_else(|_| Histogram::new(3).unwrap_or_else(|_| unreachable!())),
            responses: 0,
            bytes: 0,
            body_bytes: 0,
            errors: Errors::default(),
            statuses: BTreeMap::new(),
            per_tick: Vec::new(),
            handshakes: 0,
            resumed: 0,
        }
    }

    pub(crate) fn record(&mut self, start: Instant, sent: Instant, status: u16) {
        let now = Instant::now();
        let us = now.saturating_duration_since(sent).as_micros().max(1) as u64;
        let _ = self.latency.record(us.min(100_000_000));
        self.responses += 1;
        *self.statuses.entry(status).or_insert(0) += 1;
        if !(200..400).contains(&status) {
            self.errors.status += 1;
        }
        let tick = (now.saturating_duration_since(start).as_millis() / 100) as usize;
        if self.per_tick.len() <= tick {
            self.per_tick.resize(tick + 1, 0);
        }
        self.per_tick[tick] += 1;
    }
}

impl Default for Stats {
    fn default() -> Self {
        Stats::new()
    }
}

/// Shared by every connection of a run: when to stop.
#[derive(Debug)]
pub struct Control {
    pub start: Instant,
    deadline: Option<Instant>,
    /// Requests left to issue (`-n`); unused with a duration.
    remaining: AtomicI64,
    /// Some connection of the run has connected.
    connected: AtomicBool,
    /// Why the run stopped early: nothing could connect (the OS error).
    aborted: std::sync::OnceLock<String>,
}

impl Control {
    pub fn new(stop: Stop) -> Control {
        let start = Instant::now();
        match stop {
            Stop::After(d) => Control {
                start,
                deadline: Some(start + d),
                remaining: AtomicI64::new(i64::MAX),
                connected: AtomicBool::new(false),
                aborted: std::sync::OnceLock::new(),
            },
            Stop::Requests(n) => Control {
                start,
                deadline: None,
                remaining: AtomicI64::new(n as i64),
                connected: AtomicBool::new(false),
                aborted: std::sync::OnceLock::new(),
            },
        }
    }

    /// Takes the right to send one more request.
    pub(crate) fn take(&self) -> bool {
        if let Some(d) = self.deadline {
            return Instant::now() < d;
        }
        self.remaining.fetch_sub(1, Ordering::Relaxed) > 0
    }

    pub(crate) fn over(&self) -> bool {
        if self.aborted.get().is_some() {
            return true;
        }
        match self.deadline {
            Some(d) => Instant::now() >= d,
            None => self.remaining.load(Ordering::Relaxed) <= 0,
        }
    }

    /// Why the run was abandoned, if it was: no connection could be made.
    pub fn aborted(&self) -> Option<&str> {
        self.aborted.get().map(String::as_str)
    }

    /// A connect failed. Before any connection of the run succeeded, that ends the run with the
    /// error (a wrong port must not spin or print an all-zero report); afterwards it is counted,
    /// and in a `-n` run it uses up one request, so that a server gone for good ends the run.
    pub(crate) fn connect_failed(&self, why: String) {
        if !self.connected.load(Ordering::Relaxed) {
            let _ = self.aborted.set(why);
        } else if self.deadline.is_none() {
            self.remaining.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// A connection was made.
    pub(crate) fn connected(&self) {
        self.connected.store(true, Ordering::Relaxed);
    }

    /// When in-flight requests stop mattering (the end of a timed run).
    pub(crate) fn hard_end(&self) -> Option<Instant> {
        self.deadline
    }
}

/// Opens a connection (TLS included), counting it; `None` after a failure was counted and
/// backed off from.
pub(crate) async fn open(
    opts: &Options,
    tls: Option<&Tls>,
    ctl: &Control,
    stats: &RefCell<Stats>,
) -> Option<Stream> {
    match timeout_at(Instant::now() + opts.timeout, connect(opts, tls)).await {
        Ok(Ok(s)) => {
            ctl.connected();
            if let tokio_util::either::Either::Right(t) = &s {
                let mut st = stats.borrow_mut();
                st.handshakes += 1;
                if t.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
                    st.resumed += 1;
                }
            }
            Some(s)
        }
        failed => {
            let why = match failed {
                Ok(Err(e)) => e.to_string(),
                _ => format!("no answer within {:?}", opts.timeout),
            };
            stats.borrow_mut().errors.connect += 1;
            ctl.connect_failed(format!("cannot connect to {}: {why}", opts.target.addr));
            // Back off a little so a refused port does not spin.
            tokio::time::sleep(Duration::from_millis(10)).await;
            None
        }
    }
}

/// Runs one connection until the run is over.
pub async fn connection(
    opts: Rc<Options>,
    request: Bytes,
    ctl: Arc<Control>,
    stats: Rc<RefCell<Stats>>,
    index: usize,
    tls: Option<Tls>,
) {
    let head_request = opts.method.eq_ignore_ascii_case("HEAD");
    // Open loop: this connection's share of the rate, staggered across connections.
    let interval = opts
        .rate
        .map(|r| Duration::from_secs_f64(opts.connections as f64 / r.max(1e-6)));
    let mut intended =
        interval.map(|i| ctl.start + i.mul_f64(index as f64 / opts.connections.max(1) as f64));
    let depth = if interval.is_some() {
        1
    } else {
        opts.pipeline.max(1)
    };
    let mut buf = BytesMut::with_capacity(16 * 1024);
    while !ctl.over() {
        let Some(mut stream) = open(&opts, tls.as_ref(), &ctl, &stats).await else {
            continue;
        };
        buf.clear();
        let mut sent: VecDeque<Instant> = VecDeque::with_capacity(depth);
        'conn: loop {
            // Issue a batch.
            let mut batch = Vec::with_capacity(request.len() * depth);
            while sent.len() < depth && ctl.take() {
                let when = match (&mut intended, interval) {
                    (Some(t), Some(i)) => {
                        let due = *t;
                        *t += i;
                        if Instant::now() < due {
                            // Idle until the send time: the timer wakes us up to a millisecond
                            // late, which is the timer's, not the server's, so time from the
                            // actual send. A request that is due while the connection is still
                            // busy (the server is slow) is timed from when it was due.
                            tokio::time::sleep_until(due).await;
                            Instant::now()
                        } else {
                            due
                        }
                    }
                    _ => Instant::now(),
                };
                batch.extend_from_slice(&request);
                sent.push_back(when);
                if opts.close {
                    break;
                }
            }
            if sent.is_empty() {
                return;
            }
            if stream.write_all(&batch).await.is_err() {
                stats.borrow_mut().errors.write += sent.len() as u64;
                break 'conn;
            }
            // Read every response of the batch.
            while let Some(&t0) = sent.front() {
                let mut deadline = Instant::now().max(t0) + opts.timeout;
                if let Some(end) = ctl.hard_end() {
                    deadline = deadline.min(end + opts.timeout);
                }
                match read_response(&mut stream, &mut buf, head_request, deadline).await {
                    Ok((status, keep_alive, n, body)) => {
                        sent.pop_front();
                        let mut s = stats.borrow_mut();
                        s.bytes += n as u64;
                        s.body_bytes += body;
                        s.record(ctl.start, t0, status);
                        drop(s);
                        if opts.close || !keep_alive {
                            break 'conn;
                        }
                    }
                    Err(ReadError::Timeout) => {
                        if ctl.hard_end().is_some_and(|e| Instant::now() >= e) {
                            // The run ended with requests in flight: not the server's fault.
                            return;
                        }
                        stats.borrow_mut().errors.timeout += 1;
                        break 'conn;
                    }
                    Err(ReadError::Failed) => {
                        stats.borrow_mut().errors.read += 1;
                        break 'conn;
                    }
                }
            }
        }
    }
}

enum ReadError {
    Timeout,
    Failed,
}

/// Reads one response: (status, reusable, bytes it took, body bytes).
async fn read_response(
    s: &mut Stream,
    buf: &mut BytesMut,
    head_request: bool,
    deadline: Instant,
) -> Result<(u16, bool, usize, u64), ReadError> {
    let before = buf.len();
    let mut read_total = 0usize;
    let head = loop {
        match weir_http::parse_response(buf, 64 * 1024, head_request) {
            Ok(Some(h)) if (100..200).contains(&h.status) => continue,
            Ok(Some(h)) => break h,
            Ok(None) => {}
            Err(_) => return Err(ReadError::Failed),
        }
        read_total += fill(s, buf, deadline).await?;
    };
    let mut decoder = BodyDecoder::new(head.body);
    let mut body = 0u64;
    loop {
        match decoder.decode(buf) {
            Ok(BodyEvent::Data(d)) => body += d.len() as u64,
            Ok(BodyEvent::Done(_)) => break,
            Ok(BodyEvent::NeedMore) => match fill(s, buf, deadline).await {
                Ok(n) => read_total += n,
                // A close-delimited body ends at EOF.
                Err(ReadError::Failed) if decoder.on_eof().is_ok() => break,
                Err(e) => return Err(e),
            },
            Err(_) => return Err(ReadError::Failed),
        }
    }
    Ok((
        head.status,
        head.keep_alive,
        before + read_total - buf.len(),
        body,
    ))
}

async fn fill(s: &mut Stream, buf: &mut BytesMut, deadline: Instant) -> Result<usize, ReadError> {
    if buf.capacity() - buf.len() < 4096 {
        buf.reserve(16 * 1024);
    }
    match timeout_at(deadline, s.read_buf(buf)).await {
        Err(_) => Err(ReadError::Timeout),
        Ok(Ok(0)) | Ok(Err(_)) => Err(ReadError::Failed),
        Ok(Ok(n)) => Ok(n),
    }
}
