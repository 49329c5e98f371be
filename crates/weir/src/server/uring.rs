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
//! The shape, one ring per worker (`SINGLE_ISSUER`):
//! * The ring's descriptor sits in the worker's epoll (a tokio `AsyncFd`): when completions
//!   are posted, the driver task reaps them and wakes the connections they belong to.
//! * Each connection has one multishot receive into a ring of provided buffers: one submission
//!   for its life, no `recv` per request. Received chunks wait on the connection's slot until
//!   its task copies them into its read buffer; the buffers then go back to the ring. A
//!   connection holding [`MAX_CHUNKS`] chunks has its receive cancelled until it reads them, so
//!   one client cannot take every buffer (epoll's equivalent is the socket buffer filling).
//!   When many connections together do (`ENOBUFS`), the ones left without are queued and their
//!   receives armed again as buffers come back: they wait, they do not retry in a loop.
//! * Sends are copied into the connection's send buffer and submitted; further writes queue
//!   behind the one in flight, up to [`SEND_MAX`] bytes, then the writer waits.
//! * Submissions are batched: pushed to the queue as they come and submitted once per loop of
//!   the worker, before it sleeps (tokio's `on_thread_park`), or when the queue is full.
//! * A socket is closed only once no operation refers to it: the kernel resolves a
//!   descriptor when it runs a submission, so closing earlier could hand a queued send to the
//!   next socket given that number. A dropped connection's receive is cancelled; a send still
//!   in flight is let finish (the response to `Connection: close`) for up to [`SEND_GRACE`].
//!
//! Not covered (the bar is keep-alive hello and hit CPU, issue 35 §6): accept stays on mio's
//! `accept4`; upgrades (the tunnel) are refused; bodies are copied, not sent with `sendfile`;
//! idle connections keep their task (no parking), so idle memory is not comparable.
//!
//! Measured (`bench/uring.sh` → `bench/results/uring-20261127-1748.md`, 2026-11-27, kernel
//! 6.18): about 0.08 system calls per request instead of 2, yet CPU per request is 1.01× epoll's
//! at -c100 (hello and a 1 KiB hit) and 0.92× / 0.94× at -c1000, against the bar of
//! ≤ 0.9× at both; user-space instructions are 1.06× (two completions per request to reap).
//! The kernel's own work per completion stays: the bare floors in the same run are 0.96× and
//! 0.93× apart. Hence the feature stays out of the default build.

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
/// Provided buffers per worker (a power of two) and the size of each.
const BUFS: u16 = 2048;
const BUF_SIZE: usize = 4096;
/// The buffer group id of the provided buffers.
const GROUP: u16 = 0;
/// Received chunks a connection may hold before its receive is paused (16 KiB: 512
/// connections fill the ring; more wait their turn, see `Driver::starved`).
const MAX_CHUNKS: usize = 4;
/// Bytes a connection may have queued for sending before a write waits.
const SEND_MAX: usize = 256 * 1024;
/// How long a dropped connection's last send may take before it is cancelled.
const SEND_GRACE: Duration = Duration::from_secs(10);

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
    let bufs = BufRing::new()?;
    // SAFETY: `bufs.entries` is a page-aligned mapping of `BUFS` entries that lives as long as
    // the driver, which owns the ring: it is unmapped only after the ring is dropped (field
    // order in `Driver`).
    #[allow(unsafe_code)]
    unsafe {
        ring.submitter()
            .register_buf_ring_with_flags(bufs.entries as u64, BUFS, GROUP, 0)?;
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
            returned: 0,
            wake: Vec::new(),
            starved: VecDeque::new(),
            lingering: VecDeque::new(),
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

/// Reaps completions whenever the ring's descriptor is readable, and cancels the last sends of
/// dropped connections that outstay [`SEND_GRACE`].
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
}

impl BufRing {
    fn new() -> io::Result<BufRing> {
        let entries = map(usize::from(BUFS) * std::mem::size_of::<types::BufRingEntry>())?;
        let mem = match map(usize::from(BUFS) * BUF_SIZE) {
            Ok(m) => m,
            Err(e) => {
                unmap(
                    entries,
                    usize::from(BUFS) * std::mem::size_of::<types::BufRingEntry>(),
                );
                return Err(e);
            }
        };
        let mut ring = BufRing {
            entries: entries.cast(),
            mem,
            tail: 0,
        };
        for bid in 0..BUFS {
            ring.give(bid);
        }
        ring.publish();
        Ok(ring)
    }

    /// Puts buffer `bid` back (visible to the kernel at the next [`BufRing::publish`]).
    fn give(&mut self, bid: u16) {
        let at = usize::from(self.tail & (BUFS - 1));
        // SAFETY: `at` < BUFS, the number of entries mapped at `entries`; the kernel reads an
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
        debug_assert!(bid < BUFS && len <= BUF_SIZE);
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
            usize::from(BUFS) * std::mem::size_of::<types::BufRingEntry>(),
        );
        unmap(self.mem, usize::from(BUFS) * BUF_SIZE);
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
    /// Buffers given back since starved connections were last fed.
    returned: usize,
    /// The wakers of the last reap (kept: no allocation per reap).
    wake: Vec<Waker>,
    /// Connections whose receive ended for want of buffers, to arm again as buffers return.
    starved: VecDeque<usize>,
    /// Dropped connections whose last send is still in flight, and when it is given up.
    lingering: VecDeque<(usize, Instant)>,
}

/// One connection's slot in the driver.
#[derive(Default)]
struct Sock {
    fd: RawFd,
    /// Received chunks not yet read: (buffer id, length).
    chunks: VecDeque<(u16, u32)>,
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
    /// Dropped, and its last sends outstayed [`SEND_GRACE`]: nothing more is sent.
    expired: bool,
}

impl Driver {
    fn push(&mut self, sqe: squeue::Entry) {
        loop {
            // SAFETY: every pointer an entry carries (a send buffer) is owned by a slot that is
            // not freed while the operation is counted in its `inflight`.
            #[allow(unsafe_code)]
            let pushed = unsafe { self.ring.submission().push(&sqe) };
            if pushed.is_ok() {
                self.unsubmitted = true;
                return;
            }
            if let Err(e) = self.ring.submit() {
                tracing::error!(error = %e, "io_uring: submit failed");
            }
        }
    }

    fn submit(&mut self) {
        if std::mem::take(&mut self.unsubmitted) {
            if let Err(e) = self.ring.submit() {
                tracing::error!(error = %e, "io_uring: submit failed");
                self.unsubmitted = true;
            }
        }
    }

    fn arm_recv(&mut self, slot: usize) {
        let s = &mut self.socks[slot];
        if s.recv_armed || s.starved || s.eof || s.error.is_some() || s.dropped {
            return;
        }
        s.recv_armed = true;
        s.inflight += 1;
        let sqe = opcode::RecvMulti::new(types::Fd(s.fd), GROUP)
            .build()
            .user_data(user_data(slot, OP_RECV));
        self.push(sqe);
    }

    fn cancel_recv(&mut self, slot: usize) {
        self.socks[slot].inflight += 1;
        let sqe = opcode::AsyncCancel::new(user_data(slot, OP_RECV))
            .build()
            .user_data(user_data(slot, OP_CANCEL));
        self.push(sqe);
    }

    /// Submits `sending[sent..]` of `slot`.
    fn send_rest(&mut self, slot: usize) {
        let s = &mut self.socks[slot];
        let rest = &s.sending[s.sent..];
        let mut flags = libc::MSG_NOSIGNAL;
        if s.more {
            flags |= libc::MSG_MORE;
        }
        s.in_send = true;
        s.inflight += 1;
        let sqe = opcode::Send::new(types::Fd(s.fd), rest.as_ptr(), rest.len() as u32)
            .flags(flags)
            .build()
            .user_data(user_data(slot, OP_SEND));
        self.push(sqe);
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

    /// Arms the receives of starved connections again, one per buffer returned since the last
    /// call (a connection left without again goes back in the queue).
    fn feed_starved(&mut self) {
        let mut n = std::mem::take(&mut self.returned);
        while n > 0 {
            let Some(slot) = self.starved.pop_front() else {
                return;
            };
            if let Some(s) = self.socks.get_mut(slot) {
                s.starved = false;
                n -= 1;
                self.arm_recv(slot);
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
                if res > 0 {
                    if let Some(bid) = cqueue::buffer_select(flags) {
                        if s.dropped {
                            self.bufs.give(bid);
                            self.unpublished = true;
                            self.returned += 1;
                        } else {
                            s.chunks.push_back((bid, res as u32));
                        }
                    }
                } else if res == 0 {
                    s.eof = true;
                } else if res == -libc::ENOBUFS {
                    // No buffer left: armed again when some come back, the reader waits.
                    if !s.dropped && !s.starved {
                        s.starved = true;
                        self.starved.push_back(slot);
                    }
                } else if res != -libc::ECANCELED {
                    s.error = Some(-res);
                }
                let ended = !cqueue::more(flags);
                if ended {
                    s.recv_armed = false;
                    s.inflight -= 1;
                }
                if res != -libc::ENOBUFS {
                    if let Some(w) = s.reader.take() {
                        wake.push(w);
                    }
                }
                if !ended && s.chunks.len() >= MAX_CHUNKS {
                    self.cancel_recv(slot);
                }
            }
            OP_SEND => {
                s.inflight -= 1;
                s.in_send = false;
                if res < 0 {
                    s.send_error = Some(-res);
                    s.queued.clear();
                } else {
                    s.sent += res as usize;
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

    /// The connection's owner is gone: stop receiving, let its last send finish.
    fn release(&mut self, slot: usize) {
        let s = &mut self.socks[slot];
        s.dropped = true;
        s.reader = None;
        s.writer = None;
        let chunks = std::mem::take(&mut s.chunks);
        let armed = s.recv_armed;
        let sending = s.in_send;
        if !chunks.is_empty() {
            self.returned += chunks.len();
            chunks.into_iter().for_each(|(bid, _)| self.bufs.give(bid));
            self.bufs.publish();
            self.feed_starved();
        }
        if armed {
            self.cancel_recv(slot);
        }
        if sending {
            self.lingering
                .push_back((slot, Instant::now() + SEND_GRACE));
        }
        self.close_if_done(slot);
    }

    /// Cancels the sends of dropped connections that outstayed their grace.
    fn expire(&mut self, now: Instant) {
        while let Some(&(slot, at)) = self.lingering.front() {
            if at > now {
                break;
            }
            self.lingering.pop_front();
            let Some(s) = self.socks.get_mut(slot) else {
                continue;
            };
            if s.dropped && s.in_send {
                s.expired = true;
                s.inflight += 1;
                let sqe = opcode::AsyncCancel::new(user_data(slot, OP_SEND))
                    .build()
                    .user_data(user_data(slot, OP_CANCEL));
                self.push(sqe);
            }
        }
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
    /// Takes over an accepted socket (this worker must have a ring: [`active`]).
    pub(crate) fn new(stream: mio::net::TcpStream) -> UringSock {
        let fd = stream.into_raw_fd();
        let slot = with(|d| {
            d.socks.insert(Sock {
                fd,
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
            !s.chunks.is_empty() || s.eof || s.error.is_some()
        })
    }

    /// Ready once bytes, the end or an error wait to be read.
    pub(crate) fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.fresh = false;
        with(|d| {
            let s = &mut d.socks[self.slot];
            if !s.chunks.is_empty() || s.eof || s.error.is_some() {
                return Poll::Ready(Ok(()));
            }
            set_waker(&mut s.reader, cx);
            d.arm_recv(self.slot);
            Poll::Pending
        })
    }

    /// Copies what was received into `buf` (all of it: at most [`MAX_CHUNKS`] buffers).
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
        with(|d| {
            let Driver {
                socks,
                bufs,
                returned,
                ..
            } = &mut *d;
            let s = &mut socks[self.slot];
            if !s.chunks.is_empty() {
                let mut n = 0;
                while let Some((bid, len)) = s.chunks.pop_front() {
                    buf.extend_from_slice(bufs.bytes(bid, len as usize));
                    n += len as usize;
                    bufs.give(bid);
                    *returned += 1;
                }
                bufs.publish();
                if !d.starved.is_empty() {
                    d.feed_starved();
                }
                // Paused for holding too many chunks: receive again.
                d.arm_recv(self.slot);
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

    /// Queues `bufs` for sending (copied; up to [`SEND_MAX`] bytes waiting); `more`: hold them
    /// for what follows (`MSG_MORE`, the response before a half-close). `WouldBlock` when the
    /// queue is full.
    pub(crate) fn send(&mut self, bufs: &[IoSlice<'_>], more: bool) -> io::Result<usize> {
        self.fresh = false;
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

    /// Ready once a write would take bytes again (or the sends failed).
    pub(crate) fn poll_writable(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        with(|d| {
            let s = &mut d.socks[self.slot];
            if let Some(e) = s.send_error {
                return Poll::Ready(Err(io::Error::from_raw_os_error(e)));
            }
            if !s.in_send || s.queued.len() < SEND_MAX {
                return Poll::Ready(Ok(()));
            }
            set_waker(&mut s.writer, cx);
            Poll::Pending
        })
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

impl Drop for UringSock {
    fn drop(&mut self) {
        // A worker tearing down drops its ring (thread-local) possibly before its sockets.
        let _ = DRIVER.try_with(|d| {
            if let Ok(mut d) = d.try_borrow_mut() {
                if let Some(d) = d.as_mut() {
                    d.release(self.slot);
                    return;
                }
            }
            // SAFETY: no ring is left to refer to the descriptor; it is closed once.
            #[allow(unsafe_code)]
            unsafe {
                libc::close(self.fd);
            }
        });
    }
}

fn set_waker(slot: &mut Option<Waker>, cx: &Context<'_>) {
    match slot {
        Some(w) if w.will_wake(cx.waker()) => {}
        _ => *slot = Some(cx.waker().clone()),
    }
}
