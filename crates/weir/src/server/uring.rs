//! An io_uring transport for plain HTTP/1.1 client connections: issue 35 §6's experiment,
//! measured against weir's own epoll path in the same binary (`bench/uring.sh`). Compiled only
//! with `cargo build --features uring`, and used only when the worker starts with
//! `WEIR_URING=1`; the default build has none of it. The figures, and why it stays out of the
//! default build, are in `bench/README.md` ("io_uring").
//!
//! Hand-written on the `io-uring` crate rather than `tokio-uring`, `monoio` or `compio`: those
//! bring their own runtime or an owned-buffer I/O model, while the experiment has to keep
//! weir's worker (tokio timers, upstream sockets, the pipeline) and change only how client
//! bytes move, behind `ClientIo` (the `Downstream` seam's transport).
//!
//! The shape, one ring per worker (`SINGLE_ISSUER`, `COOP_TASKRUN`: a completion does not
//! interrupt the worker while it runs; one that comes while it sleeps still wakes it):
//! * The ring's descriptor sits in the worker's epoll (a tokio `AsyncFd`): when completions
//!   are posted, the driver task reaps them and wakes the connections they belong to.
//! * A connection's receive is armed when its task waits for input, and takes one provided
//!   buffer from the ring (the kernel picks it; no buffer is tied up per idle connection). The
//!   task copies the chunk into its read buffer and the buffer goes back. A connection holds at
//!   most one buffer, and while its task is busy (waiting on an origin, say) nothing is
//!   received for it: further bytes wait in its socket buffer, as on epoll. Multishot receives
//!   were tried first and dropped: the kernel fills buffers with everything the socket holds
//!   before a cancel can land, and one pipelining client emptied the ring (the attack review).
//!   When the ring runs out (`ENOBUFS`), the connections left without are queued and armed
//!   again as buffers come back: they wait, they do not retry in a loop.
//! * Sends are copied into the connection's send buffer and submitted; further writes queue
//!   behind the one in flight, up to [`SEND_MAX`] bytes each, then the writer waits.
//! * Submissions are batched: pushed to the queue as they come and submitted once per loop of
//!   the worker, before it sleeps (tokio's `on_thread_park`), or when the queue is full.
//! * A socket is closed only once no operation refers to it: the kernel resolves a
//!   descriptor when it runs a submission, so closing earlier could hand a queued send to the
//!   next socket given that number. A dropped connection's receive is cancelled; its sends
//!   still queued go on (the response to `Connection: close`, or one a slow reader is still
//!   taking) for as long as each completes within `timeouts.write` of the last, as a stalled
//!   write is bounded on epoll, and are cancelled after that.
//!
//! Not covered (the bar is keep-alive hello and hit CPU, issue 35 §6): accept stays on mio's
//! `accept4`; bodies are copied, not sent with `sendfile`; idle connections keep their task (no
//! parking), so idle memory is not comparable. Upgrades are tunnelled through the ring
//! (`AsyncRead`/`AsyncWrite` below).
//!
//! Measured (`bench/uring.sh`, kernel 6.18, 2026-11-27): CPU per request against weir on epoll,
//! hello / 1 KiB hit, 1.04× / 1.05× at -c100 and 0.97× / 1.03× at -c1000
//! (`bench/results/uring-20261127-1855.md`); the bar was ≤ 0.9×. User space does
//! 1.06–1.07× the instructions (two completions per request to reap, one copy out of the
//! provided buffer); system calls fall from 2 per request to about 0.1, but the kernel's work
//! per completion is about what the `recvfrom`/`sendto` pair cost (the bare floors in the same
//! run are 0.95× and 0.93× apart). The first form, with multishot receives, measured
//! 1.01× / 0.92–0.94× (`uring-20261127-1748.md`) but let one client empty the ring; without
//! `COOP_TASKRUN` the safe form cost 1.37–1.46× (`uring-20261127-1846.md`). Hence the feature
//! stays out of the default build.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, IntoRawFd, RawFd};
use std::sync::atomic::{AtomicU16, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::BytesMut;
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use tokio::io::unix::AsyncFd;
use tokio::time::Instant;

/// Submission queue entries per worker.
const ENTRIES: u32 = 4096;
/// Provided buffers per worker (a power of two; `WEIR_URING_BUFS` sets another, 1 to 32768)
/// and the size of each.
const BUFS: u16 = 2048;
const BUF_SIZE: usize = 4096;
/// How often running out of buffers is logged, at most.
const STARVED_LOG_EVERY: Duration = Duration::from_secs(10);
/// The buffer group id of the provided buffers.
const GROUP: u16 = 0;
/// Bytes in flight, and again queued behind them, per connection before a write waits (a
/// stalled client holds at most twice this in user space).
const SEND_MAX: usize = 64 * 1024;

const OP_RECV: u64 = 1;
const OP_SEND: u64 = 2;
const OP_CANCEL: u64 = 3;

fn user_data(slot: usize, op: u64) -> u64 {
    ((slot as u64) << 2) | op
}

/// Whether this process asked for the io_uring transport (`WEIR_URING=1`).
pub(crate) fn wanted() -> bool {
    std::env::var_os("WEIR_URING").is_some_and(|v| v == "1")
}

thread_local! {
    static DRIVER: RefCell<Option<Driver>> = const { RefCell::new(None) };
}

/// Whether this worker runs its plain HTTP/1.1 connections on io_uring.
pub(crate) fn active() -> bool {
    DRIVER.with(|d| d.borrow().is_some())
}

/// Sets up this worker's ring and spawns its driver task (inside the worker's `LocalSet`).
pub(crate) fn start() -> io::Result<()> {
    let ring: IoUring = IoUring::builder()
        .setup_single_issuer()
        .setup_coop_taskrun()
        .build(ENTRIES)?;
    let n = match std::env::var("WEIR_URING_BUFS") {
        Err(_) => BUFS,
        Ok(v) => match v.parse::<u16>() {
            Ok(n) if n.is_power_of_two() && n <= 32768 => n,
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("WEIR_URING_BUFS={v}: a power of two from 1 to 32768"),
                ))
            }
        },
    };
    let bufs = BufRing::new(n)?;
    // SAFETY: `bufs.entries` is a page-aligned mapping of `bufs.n` entries that lives as long as
    // the driver, which owns the ring: it is unmapped only after the ring is dropped (field
    // order in `Driver`).
    #[allow(unsafe_code)]
    unsafe {
        ring.submitter()
            .register_buf_ring_with_flags(bufs.entries as u64, bufs.n, GROUP, 0)?;
    }
    // SAFETY: the ring's descriptor stays open while the `AsyncFd` lives: the ring is owned by
    // the worker's thread-local driver, dropped at thread exit, and the `AsyncFd` by the driver
    // task, dropped with the worker's `LocalSet` before that.
    #[allow(unsafe_code)]
    let fd =
        unsafe { AsyncFd::register_with_interest(ring.as_raw_fd(), tokio::io::Interest::READABLE) }
            .map_err(|e| io::Error::other(e.to_string()))?;
    DRIVER.with(|d| {
        *d.borrow_mut() = Some(Driver {
            ring,
            bufs,
            socks: slab::Slab::new(),
            unsubmitted: false,
            unpublished: false,
            held: 0,
            starved_logged: None,
            wake: Vec::new(),
            starved: VecDeque::new(),
            lingering: Vec::new(),
        })
    });
    tokio::task::spawn_local(drive(fd));
    Ok(())
}

/// Submits what was queued since the last submission (the worker is about to sleep).
pub(crate) fn before_park() {
    DRIVER.with(|d| {
        if let Ok(mut d) = d.try_borrow_mut() {
            if let Some(d) = d.as_mut() {
                d.submit();
            }
        }
    });
}

/// Reaps completions whenever the ring's descriptor is readable, and cancels the sends of
/// dropped connections that stall past their write timeout.
async fn drive(fd: AsyncFd<RawFd>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            ready = fd.readable() => {
                let Ok(mut guard) = ready else {
                    tracing::error!("io_uring: the ring's descriptor failed; connections on it stall");
                    return;
                };
                reap();
                guard.clear_ready();
                // Completions posted between the reap and the clear raise no new edge.
                reap();
            }
            _ = tick.tick() => with(|d| d.expire(Instant::now())),
        }
    }
}

fn reap() {
    let mut wake = with(|d| {
        let mut wake = std::mem::take(&mut d.wake);
        d.reap(&mut wake);
        wake
    });
    wake.drain(..).for_each(Waker::wake);
    with(|d| d.wake = wake);
}

fn with<R>(f: impl FnOnce(&mut Driver) -> R) -> R {
    DRIVER.with(|d| {
        let mut d = d.borrow_mut();
        let Some(d) = d.as_mut() else {
            panic!("io_uring transport used on a worker without a ring")
        };
        f(d)
    })
}

/// The provided buffers: a page-aligned ring of entries the kernel takes buffers from, and the
/// buffers themselves, both anonymous mappings owned by the driver.
struct BufRing {
    entries: *mut types::BufRingEntry,
    mem: *mut u8,
    /// The tail as this side last wrote it (published to the kernel by [`BufRing::publish`]).
    tail: u16,
    /// How many buffers (a power of two).
    n: u16,
}

impl BufRing {
    fn new(n: u16) -> io::Result<BufRing> {
        let entries = map(usize::from(n) * std::mem::size_of::<types::BufRingEntry>())?;
        let mem = match map(usize::from(n) * BUF_SIZE) {
            Ok(m) => m,
            Err(e) => {
                unmap(
                    entries,
                    usize::from(n) * std::mem::size_of::<types::BufRingEntry>(),
                );
                return Err(e);
            }
        };
        let mut ring = BufRing {
            entries: entries.cast(),
            mem,
            tail: 0,
            n,
        };
        for bid in 0..n {
            ring.give(bid);
        }
        ring.publish();
        Ok(ring)
    }

    /// Puts buffer `bid` back (visible to the kernel at the next [`BufRing::publish`]).
    fn give(&mut self, bid: u16) {
        let at = usize::from(self.tail & (self.n - 1));
        // SAFETY: `at` < n, the number of entries mapped at `entries`; the kernel reads an
        // entry only once the tail is published past it, which happens after this write.
        #[allow(unsafe_code)]
        let entry = unsafe { &mut *self.entries.add(at) };
        entry.set_addr(self.mem as u64 + u64::from(bid) * BUF_SIZE as u64);
        entry.set_len(BUF_SIZE as u32);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    fn publish(&self) {
        // SAFETY: `entries` is the ring's page-aligned base, whose first entry's `resv` field is
        // the shared tail; it is a valid, aligned u16 the kernel only reads.
        #[allow(unsafe_code)]
        let tail = unsafe { &*types::BufRingEntry::tail(self.entries).cast::<AtomicU16>() };
        tail.store(self.tail, Ordering::Release);
    }

    /// The first `len` bytes of buffer `bid`, which a completion said the kernel filled.
    fn bytes(&self, bid: u16, len: usize) -> &[u8] {
        debug_assert!(bid < self.n && len <= BUF_SIZE);
        // SAFETY: buffer `bid` lies inside the mapping, `len` ≤ BUF_SIZE, and the kernel wrote
        // it before posting the completion that named it; it is not handed back to the kernel
        // (`give`) while this borrow lives.
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts(self.mem.add(usize::from(bid) * BUF_SIZE), len)
        }
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        unmap(
            self.entries.cast(),
            usize::from(self.n) * std::mem::size_of::<types::BufRingEntry>(),
        );
        unmap(self.mem, usize::from(self.n) * BUF_SIZE);
    }
}

fn map(len: usize) -> io::Result<*mut u8> {
    // SAFETY: an anonymous private mapping with no address hint touches no existing memory.
    #[allow(unsafe_code)]
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(p.cast())
}

fn unmap(p: *mut u8, len: usize) {
    // SAFETY: `p` and `len` are a mapping made by `map`, unmapped once (its owner's drop).
    #[allow(unsafe_code)]
    unsafe {
        libc::munmap(p.cast(), len);
    }
}

struct Driver {
    // Dropped before `bufs`: the kernel may use the buffers until the ring is gone.
    ring: IoUring,
    bufs: BufRing,
    socks: slab::Slab<Sock>,
    unsubmitted: bool,
    /// Buffers given back since the tail was last published.
    unpublished: bool,
    /// Buffers the kernel filled that are not back in the ring yet.
    held: usize,
    /// The wakers of the last reap (kept: no allocation per reap).
    wake: Vec<Waker>,
    /// Connections whose receive found the ring empty, to arm again as buffers come back.
    starved: VecDeque<usize>,
    /// When running out of buffers was last logged.
    starved_logged: Option<Instant>,
    /// Dropped connections with sends still going.
    lingering: Vec<usize>,
}

/// One connection's slot in the driver.
#[derive(Default)]
struct Sock {
    fd: RawFd,
    /// The chunk received and not yet read: (buffer id, length), `offset` of it read already.
    chunk: Option<(u16, u32)>,
    offset: usize,
    eof: bool,
    error: Option<i32>,
    recv_armed: bool,
    /// In `Driver::starved`.
    starved: bool,
    reader: Option<Waker>,
    writer: Option<Waker>,
    /// Operations the kernel may still run against `fd` (pushed, submitted or in flight).
    inflight: u32,
    /// The send in flight (`sending[sent..]` still to go) and what waits behind it.
    sending: Vec<u8>,
    sent: usize,
    in_send: bool,
    more: bool,
    queued: Vec<u8>,
    queued_more: bool,
    send_error: Option<i32>,
    /// Half-close once the sends have gone.
    shut_after_send: bool,
    dropped: bool,
    /// The longest a dropped connection's send may stall (`timeouts.write`), and when the
    /// current stall runs out.
    stall: Duration,
    deadline: Option<Instant>,
    /// Dropped, and its sends stalled past `deadline`: nothing more is sent.
    expired: bool,
}

impl Driver {
    /// Queues `sqe`; `false` if the ring refuses submissions (the caller fails the operation).
    fn push(&mut self, sqe: squeue::Entry) -> bool {
        for _ in 0..4 {
            // SAFETY: every pointer an entry carries (a send buffer) is owned by a slot that is
            // not freed while the operation is counted in its `inflight`.
            #[allow(unsafe_code)]
            let pushed = unsafe { self.ring.submission().push(&sqe) };
            if pushed.is_ok() {
                self.unsubmitted = true;
                return true;
            }
            if let Err(e) = self.ring.submit() {
                tracing::error!(error = %e, "io_uring: submit failed");
            }
        }
        false
    }

    fn submit(&mut self) {
        if std::mem::take(&mut self.unsubmitted) {
            if let Err(e) = self.ring.submit() {
                tracing::error!(error = %e, "io_uring: submit failed");
                self.unsubmitted = true;
            }
        }
    }

    /// Arms a one-shot receive into a provided buffer for `slot`, unless one is armed, the slot
    /// holds a chunk or waits for buffers.
    fn arm_recv(&mut self, slot: usize) {
        let s = &mut self.socks[slot];
        if s.recv_armed || s.starved || s.chunk.is_some() || s.eof || s.error.is_some() || s.dropped
        {
            return;
        }
        let sqe = opcode::Recv::new(types::Fd(s.fd), std::ptr::null_mut(), BUF_SIZE as u32)
            .buf_group(GROUP)
            .build()
            .flags(squeue::Flags::BUFFER_SELECT)
            .user_data(user_data(slot, OP_RECV));
        s.recv_armed = true;
        s.inflight += 1;
        if !self.push(sqe) {
            let s = &mut self.socks[slot];
            s.recv_armed = false;
            s.inflight -= 1;
            s.error = Some(libc::EBUSY);
        }
    }

    /// Cancels `slot`'s operation `op`; `false` if the ring refused.
    fn cancel(&mut self, slot: usize, op: u64) -> bool {
        self.socks[slot].inflight += 1;
        let sqe = opcode::AsyncCancel::new(user_data(slot, op))
            .build()
            .user_data(user_data(slot, OP_CANCEL));
        if self.push(sqe) {
            return true;
        }
        self.socks[slot].inflight -= 1;
        tracing::error!("io_uring: a cancel was refused; the socket stays open");
        false
    }

    /// Submits `sending[sent..]` of `slot`.
    fn send_rest(&mut self, slot: usize) {
        let s = &mut self.socks[slot];
        let rest = &s.sending[s.sent..];
        let mut flags = libc::MSG_NOSIGNAL;
        if s.more {
            flags |= libc::MSG_MORE;
        }
        let sqe = opcode::Send::new(types::Fd(s.fd), rest.as_ptr(), rest.len() as u32)
            .flags(flags)
            .build()
            .user_data(user_data(slot, OP_SEND));
        s.in_send = true;
        s.inflight += 1;
        if !self.push(sqe) {
            let s = &mut self.socks[slot];
            s.in_send = false;
            s.inflight -= 1;
            s.send_error = Some(libc::EBUSY);
            s.sending.clear();
            s.queued.clear();
        }
    }

    /// Takes the posted completions in batches (one sync of the queue's head per batch) and
    /// applies them; the wakers to call go to `wake`.
    fn reap(&mut self, wake: &mut Vec<Waker>) {
        let mut batch = [(0u64, 0i32, 0u32); 64];
        loop {
            let mut n = 0;
            for cqe in self.ring.completion() {
                batch[n] = (cqe.user_data(), cqe.result(), cqe.flags());
                n += 1;
                if n == batch.len() {
                    break;
                }
            }
            for &(data, res, flags) in &batch[..n] {
                self.complete(data, res, flags, wake);
            }
            if n < batch.len() {
                break;
            }
        }
        if std::mem::take(&mut self.unpublished) {
            self.bufs.publish();
        }
        self.feed_starved();
    }

    /// Gives buffer `bid` back to the ring (published at the end of the reap or read).
    fn give(&mut self, bid: u16) {
        self.bufs.give(bid);
        self.held -= 1;
        self.unpublished = true;
    }

    /// Arms the receives of starved connections again, as many as there are buffers back in
    /// the ring (`held` counts what the kernel filled; completions reaped so far are all in
    /// it, so a receive armed here finds a buffer unless a later one took it first, in which
    /// case it is queued again).
    fn feed_starved(&mut self) {
        let mut free = usize::from(self.bufs.n).saturating_sub(self.held);
        while free > 0 {
            let Some(slot) = self.starved.pop_front() else {
                return;
            };
            // An entry can outlive its connection, and the slot be reused: only a connection
            // still marked starved is armed (a fresh one is never marked).
            if let Some(s) = self.socks.get_mut(slot) {
                if s.starved && !s.dropped {
                    s.starved = false;
                    free -= 1;
                    self.arm_recv(slot);
                }
            }
        }
    }

    fn complete(&mut self, data: u64, res: i32, flags: u32, wake: &mut Vec<Waker>) {
        let slot = (data >> 2) as usize;
        let op = data & 3;
        let Some(s) = self.socks.get_mut(slot) else {
            return;
        };
        match op {
            OP_RECV => {
                s.recv_armed = false;
                s.inflight -= 1;
                if let Some(bid) = cqueue::buffer_select(flags) {
                    self.held += 1;
                    if res > 0 && !s.dropped && s.chunk.is_none() {
                        s.chunk = Some((bid, res as u32));
                        s.offset = 0;
                    } else {
                        self.give(bid);
                    }
                }
                let s = &mut self.socks[slot];
                if res == 0 {
                    s.eof = true;
                } else if res == -libc::ENOBUFS {
                    // The ring is empty: armed again when buffers come back; the reader waits.
                    if !s.dropped && !s.starved {
                        s.starved = true;
                        self.starved.push_back(slot);
                    }
                    let now = Instant::now();
                    if self
                        .starved_logged
                        .is_none_or(|t| now.duration_since(t) >= STARVED_LOG_EVERY)
                    {
                        self.starved_logged = Some(now);
                        tracing::warn!(
                            waiting = self.starved.len(),
                            buffers = self.bufs.n,
                            "io_uring: the receive buffers ran out; connections wait for one (WEIR_URING_BUFS)"
                        );
                    }
                    self.close_if_done(slot);
                    return;
                } else if res < 0 && res != -libc::ECANCELED {
                    s.error = Some(-res);
                }
                if let Some(w) = s.reader.take() {
                    wake.push(w);
                }
            }
            OP_SEND => {
                s.inflight -= 1;
                s.in_send = false;
                if res < 0 {
                    s.send_error = Some(-res);
                    s.sending.clear();
                    s.queued.clear();
                } else {
                    s.sent += res as usize;
                    if s.dropped && res > 0 {
                        // Progress: the stall starts again.
                        s.deadline = Some(Instant::now() + s.stall);
                    }
                    if s.expired {
                        s.sending.clear();
                        s.queued.clear();
                    }
                    if s.sent < s.sending.len() && res > 0 {
                        // A short send: the rest goes next.
                        self.send_rest(slot);
                        return;
                    }
                    let s = &mut self.socks[slot];
                    if s.sent < s.sending.len() {
                        s.send_error = Some(libc::EPIPE);
                        s.queued.clear();
                    }
                    s.sending.clear();
                    s.sent = 0;
                    if !s.queued.is_empty() {
                        std::mem::swap(&mut s.sending, &mut s.queued);
                        s.more = s.queued_more;
                        self.send_rest(slot);
                    } else if s.shut_after_send {
                        // SAFETY: `fd` is open: it is closed only when `inflight` is 0.
                        #[allow(unsafe_code)]
                        unsafe {
                            libc::shutdown(s.fd, libc::SHUT_WR);
                        }
                    }
                }
                let s = &mut self.socks[slot];
                if let Some(w) = s.writer.take() {
                    wake.push(w);
                }
            }
            _ => s.inflight -= 1,
        }
        self.close_if_done(slot);
    }

    /// Frees `slot` and closes its socket once it was dropped and nothing refers to it.
    fn close_if_done(&mut self, slot: usize) {
        let s = &self.socks[slot];
        if !s.dropped || s.inflight > 0 {
            return;
        }
        let s = self.socks.remove(slot);
        // SAFETY: the descriptor was owned by this slot (taken with `into_raw_fd`) and no
        // operation refers to it any longer; it is closed once.
        #[allow(unsafe_code)]
        unsafe {
            libc::close(s.fd);
        }
    }

    /// The connection's owner is gone: stop receiving, let its queued sends go on while they
    /// progress.
    fn release(&mut self, slot: usize) {
        let s = &mut self.socks[slot];
        s.dropped = true;
        s.reader = None;
        s.writer = None;
        let chunk = s.chunk.take();
        let armed = s.recv_armed;
        let sending = s.in_send;
        if sending {
            s.deadline = Some(Instant::now() + s.stall);
        }
        if let Some((bid, _)) = chunk {
            self.give(bid);
            self.bufs.publish();
            self.unpublished = false;
            self.feed_starved();
        }
        if armed {
            self.cancel(slot, OP_RECV);
        }
        if sending {
            self.lingering.push(slot);
        }
        self.close_if_done(slot);
    }

    /// Cancels the sends of dropped connections that stalled past their deadline.
    fn expire(&mut self, now: Instant) {
        let mut lingering = std::mem::take(&mut self.lingering);
        lingering.retain(|&slot| {
            let Some(s) = self.socks.get_mut(slot) else {
                return false;
            };
            if !s.dropped || !s.in_send || s.expired {
                return false;
            }
            if s.deadline.is_some_and(|d| d > now) {
                return true;
            }
            s.expired = true;
            self.cancel(slot, OP_SEND);
            false
        });
        self.lingering = lingering;
    }
}

/// A client socket served through this worker's ring.
#[derive(Debug)]
pub(crate) struct UringSock {
    slot: usize,
    fd: RawFd,
    /// Nothing was submitted for it yet: a read may still be a plain `recv` (a fresh
    /// connection usually has its request already, as on the epoll path).
    fresh: bool,
}

impl UringSock {
    /// Takes over an accepted socket (this worker must have a ring: [`active`]); `stall`: how
    /// long its sends may stall once the connection is gone (`timeouts.write`).
    pub(crate) fn new(stream: mio::net::TcpStream, stall: Duration) -> UringSock {
        let fd = stream.into_raw_fd();
        let slot = with(|d| {
            d.socks.insert(Sock {
                fd,
                stall,
                ..Sock::default()
            })
        });
        UringSock {
            slot,
            fd,
            fresh: true,
        }
    }

    /// One plain non-blocking `recv` while nothing was submitted for the socket: `Ok(None)`
    /// when there is nothing yet (reads go through the ring from then on).
    pub(crate) fn try_read_now(&mut self, buf: &mut BytesMut) -> io::Result<Option<usize>> {
        if !self.fresh {
            return Ok(None);
        }
        use bytes::BufMut;
        if buf.capacity() == buf.len() {
            buf.reserve(4096);
        }
        let spare = buf.chunk_mut();
        // SAFETY: `fd` is open (closed only after this socket is dropped); `recv` writes at most
        // `spare.len()` bytes into the spare capacity and reads none of it.
        #[allow(unsafe_code)]
        let n = unsafe {
            libc::recv(
                self.fd,
                spare.as_mut_ptr().cast(),
                spare.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock {
                self.fresh = false;
                return Ok(None);
            }
            return Err(e);
        }
        // SAFETY: `recv` initialised the first `n` bytes of the spare capacity.
        #[allow(unsafe_code)]
        unsafe {
            buf.advance_mut(n as usize)
        };
        Ok(Some(n as usize))
    }

    /// Whether received bytes (or the end) are waiting to be read.
    pub(crate) fn has_input(&self) -> bool {
        with(|d| {
            let s = &d.socks[self.slot];
            s.chunk.is_some() || s.eof || s.error.is_some()
        })
    }

    /// Ready once bytes, the end or an error wait to be read.
    pub(crate) fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.fresh = false;
        with(|d| {
            let s = &mut d.socks[self.slot];
            if s.chunk.is_some() || s.eof || s.error.is_some() {
                return Poll::Ready(Ok(()));
            }
            set_waker(&mut s.reader, cx);
            d.arm_recv(self.slot);
            Poll::Pending
        })
    }

    /// Copies up to `room` bytes of what was received to `out`; `None` when nothing waits
    /// (the receive is then armed and the waker kept).
    fn poll_take(
        &mut self,
        cx: &mut Context<'_>,
        room: usize,
        out: impl FnOnce(&[u8]),
    ) -> Poll<io::Result<usize>> {
        self.fresh = false;
        with(|d| {
            let s = &mut d.socks[self.slot];
            if let Some((bid, len)) = s.chunk {
                let bytes = &d.bufs.bytes(bid, len as usize)[s.offset..];
                let n = bytes.len().min(room);
                out(&bytes[..n]);
                s.offset += n;
                if s.offset == len as usize {
                    s.chunk = None;
                    d.give(bid);
                    d.bufs.publish();
                    d.unpublished = false;
                    d.feed_starved();
                }
                return Poll::Ready(Ok(n));
            }
            if let Some(e) = s.error.take() {
                return Poll::Ready(Err(io::Error::from_raw_os_error(e)));
            }
            if s.eof {
                return Poll::Ready(Ok(0));
            }
            set_waker(&mut s.reader, cx);
            d.arm_recv(self.slot);
            Poll::Pending
        })
    }

    /// Reads what was received into `buf` (the whole chunk, growing `buf` if needed).
    pub(crate) fn poll_read(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut BytesMut,
    ) -> Poll<io::Result<usize>> {
        if self.fresh {
            match self.try_read_now(buf) {
                Ok(Some(n)) => return Poll::Ready(Ok(n)),
                Ok(None) => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        self.poll_take(cx, usize::MAX, |b| buf.extend_from_slice(b))
    }

    /// Queues `bufs` for sending (copied; up to [`SEND_MAX`] bytes in flight and as many
    /// behind); `more`: hold them for what follows (`MSG_MORE`, the response before a
    /// half-close). `WouldBlock` when the queue is full.
    pub(crate) fn send(&mut self, bufs: &[IoSlice<'_>], more: bool) -> io::Result<usize> {
        with(|d| {
            let s = &mut d.socks[self.slot];
            if let Some(e) = s.send_error {
                return Err(io::Error::from_raw_os_error(e));
            }
            let (into, in_send) = if s.in_send {
                s.queued_more = more;
                (&mut s.queued, true)
            } else {
                s.more = more;
                (&mut s.sending, false)
            };
            let room = SEND_MAX.saturating_sub(into.len());
            if room == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let mut n = 0;
            for b in bufs {
                let take = b.len().min(room - n);
                into.extend_from_slice(&b[..take]);
                n += take;
                if n == room {
                    break;
                }
            }
            if !in_send && n > 0 {
                d.send_rest(self.slot);
            }
            Ok(n)
        })
    }

    /// Ready once a write would take bytes again (or the sends failed); `all`: once every
    /// queued byte has gone.
    fn poll_sent(&mut self, cx: &mut Context<'_>, all: bool) -> Poll<io::Result<()>> {
        with(|d| {
            let s = &mut d.socks[self.slot];
            if let Some(e) = s.send_error {
                return Poll::Ready(Err(io::Error::from_raw_os_error(e)));
            }
            if !s.in_send || (!all && s.queued.len() < SEND_MAX) {
                return Poll::Ready(Ok(()));
            }
            set_waker(&mut s.writer, cx);
            Poll::Pending
        })
    }

    /// Ready once a write would take bytes again (or the sends failed).
    pub(crate) fn poll_writable(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_sent(cx, false)
    }

    /// Half-closes the write side once what was queued has gone.
    pub(crate) fn shutdown_write(&mut self) {
        with(|d| {
            let s = &mut d.socks[self.slot];
            if s.in_send {
                s.shut_after_send = true;
            } else {
                // SAFETY: `fd` is open while this socket lives.
                #[allow(unsafe_code)]
                unsafe {
                    libc::shutdown(s.fd, libc::SHUT_WR);
                }
            }
        })
    }
}

/// For tunnels (`ClientIo::tunnel`, an upgraded connection relayed to its upstream).
impl tokio::io::AsyncRead for UringSock {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let room = buf.remaining();
        self.get_mut()
            .poll_take(cx, room, |b| buf.put_slice(b))
            .map_ok(|_| ())
    }
}

impl tokio::io::AsyncWrite for UringSock {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        loop {
            match me.send(&[IoSlice::new(data)], false) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::task::ready!(me.poll_sent(cx, false))?;
                }
                other => return Poll::Ready(other),
            }
        }
    }

    fn poll_flush(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_sent(cx, true)
    }

    fn poll_shutdown(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        std::task::ready!(me.poll_sent(cx, true))?;
        me.shutdown_write();
        Poll::Ready(Ok(()))
    }
}

impl Drop for UringSock {
    fn drop(&mut self) {
        // The ring lives in a thread-local: gone only at the thread's exit, after the
        // worker's sockets (they are dropped with its `LocalSet`).
        let _ = DRIVER.try_with(|d| {
            if let Ok(mut d) = d.try_borrow_mut() {
                if let Some(d) = d.as_mut() {
                    d.release(self.slot);
                    return;
                }
            }
            tracing::error!("io_uring: a socket outlived its ring or was dropped inside it; its descriptor leaks");
        });
    }
}

fn set_waker(slot: &mut Option<Waker>, cx: &Context<'_>) {
    match slot {
        Some(w) if w.will_wake(cx.waker()) => {}
        _ => *slot = Some(cx.waker().clone()),
    }
}
