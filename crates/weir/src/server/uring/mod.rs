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

mod bufs;
mod consts;
mod driver;
mod sock;

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::task::Waker;
use std::time::Duration;

use io_uring::IoUring;
use tokio::io::unix::AsyncFd;
use tokio::time::Instant;

/// Submission queue entries per worker.
const ENTRIES: u32 = 4096;
/// Whether this process asked for the io_uring transport (`WEIR_URING=1`).
pub(crate) fn wanted() -> bool {
    std::env::var_os("WEIR_URING").is_some_and(|v| v == "1")
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

use bufs::BufRing;
use consts::{BUFS, GROUP};
use driver::{with, Driver, DRIVER};
pub(crate) use sock::UringSock;
