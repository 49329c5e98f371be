//! The ring's side of each connection (`server/uring/mod.rs`): its slot, the submissions made
//! for it, what their completions change, and when its socket may be closed.

use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::task::Waker;
use std::time::Duration;

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use tokio::time::Instant;

use super::bufs::BufRing;
use super::consts::{user_data, BUF_SIZE, GROUP, OP_CANCEL, OP_RECV, OP_SEND, STARVED_LOG_EVERY};

pub(super) struct Driver {
    // Dropped before `bufs`: the kernel may use the buffers until the ring is gone.
    pub(super) ring: IoUring,
    pub(super) bufs: BufRing,
    pub(super) socks: slab::Slab<Sock>,
    pub(super) unsubmitted: bool,
    /// Buffers given back since the tail was last published.
    pub(super) unpublished: bool,
    /// Buffers the kernel filled that are not back in the ring yet.
    pub(super) held: usize,
    /// The wakers of the last reap (kept: no allocation per reap).
    pub(super) wake: Vec<Waker>,
    /// Connections whose receive found the ring empty, to arm again as buffers come back.
    pub(super) starved: VecDeque<usize>,
    /// When running out of buffers was last logged.
    pub(super) starved_logged: Option<Instant>,
    /// Dropped connections with sends still going.
    pub(super) lingering: Vec<usize>,
}

/// One connection's slot in the driver.
#[derive(Default)]
pub(super) struct Sock {
    pub(super) fd: RawFd,
    /// The chunk received and not yet read: (buffer id, length), `offset` of it read already.
    pub(super) chunk: Option<(u16, u32)>,
    pub(super) offset: usize,
    pub(super) eof: bool,
    pub(super) error: Option<i32>,
    pub(super) recv_armed: bool,
    /// In `Driver::starved`.
    pub(super) starved: bool,
    pub(super) reader: Option<Waker>,
    pub(super) writer: Option<Waker>,
    /// Operations the kernel may still run against `fd` (pushed, submitted or in flight).
    pub(super) inflight: u32,
    /// The send in flight (`sending[sent..]` still to go) and what waits behind it.
    pub(super) sending: Vec<u8>,
    pub(super) sent: usize,
    pub(super) in_send: bool,
    pub(super) more: bool,
    pub(super) queued: Vec<u8>,
    pub(super) queued_more: bool,
    pub(super) send_error: Option<i32>,
    /// Half-close once the sends have gone.
    pub(super) shut_after_send: bool,
    pub(super) dropped: bool,
    /// The longest a dropped connection's send may stall (`timeouts.write`), and when the
    /// current stall runs out.
    pub(super) stall: Duration,
    pub(super) deadline: Option<Instant>,
    /// Dropped, and its sends stalled past `deadline`: nothing more is sent.
    pub(super) expired: bool,
}

impl Driver {
    /// Queues `sqe`; `false` if the ring refuses submissions (the caller fails the operation).
    pub(super) fn push(&mut self, sqe: squeue::Entry) -> bool {
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

    pub(super) fn submit(&mut self) {
        if std::mem::take(&mut self.unsubmitted) {
            if let Err(e) = self.ring.submit() {
                tracing::error!(error = %e, "io_uring: submit failed");
                self.unsubmitted = true;
            }
        }
    }

    /// Arms a one-shot receive into a provided buffer for `slot`, unless one is armed, the slot
    /// holds a chunk or waits for buffers.
    pub(super) fn arm_recv(&mut self, slot: usize) {
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
    pub(super) fn cancel(&mut self, slot: usize, op: u64) -> bool {
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
    pub(super) fn send_rest(&mut self, slot: usize) {
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
    pub(super) fn reap(&mut self, wake: &mut Vec<Waker>) {
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
    pub(super) fn give(&mut self, bid: u16) {
        self.bufs.give(bid);
        self.held -= 1;
        self.unpublished = true;
    }

    /// Arms the receives of starved connections again, as many as there are buffers back in
    /// the ring (`held` counts what the kernel filled; completions reaped so far are all in
    /// it, so a receive armed here finds a buffer unless a later one took it first, in which
    /// case it is queued again).
    pub(super) fn feed_starved(&mut self) {
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

    pub(super) fn complete(&mut self, data: u64, res: i32, flags: u32, wake: &mut Vec<Waker>) {
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
    pub(super) fn close_if_done(&mut self, slot: usize) {
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
    pub(super) fn release(&mut self, slot: usize) {
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
    pub(super) fn expire(&mut self, now: Instant) {
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

thread_local! {
    /// This worker's ring, when it runs one.
    pub(super) static DRIVER: std::cell::RefCell<Option<Driver>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` on this worker's ring.
pub(super) fn with<R>(f: impl FnOnce(&mut Driver) -> R) -> R {
    DRIVER.with(|d| {
        let mut d = d.borrow_mut();
        let Some(d) = d.as_mut() else {
            panic!("io_uring transport used on a worker without a ring")
        };
        f(d)
    })
}
