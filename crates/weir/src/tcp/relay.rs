//! Relaying a TCP connection's bytes both ways until both sides are done, keeping half-close:
//! a side that finishes sending (FIN, or TLS `close_notify`) has the other side's write half
//! shut down, and the other direction goes on until it finishes too. An error ends only its
//! own direction (its destination's write half is shut too): the other still delivers what
//! its side had sent, as a direct connection would (a server that answers and closes while
//! the client still uploads gets its answer through). `idle` with no byte moved either way
//! ends both.
//!
//! Between two plain sockets the bytes go through a pipe with `splice(2)`: socket → pipe →
//! socket, moved by the kernel, never copied into user space (HAProxy's `splice-auto`, nginx
//! `stream` copies through a buffer). Written here, not taken from a crate: tokio offers no
//! splice, and it is the hot path of a TCP listener (`bench/tcp.sh` measures it against both).
//! The pipes are kept per worker and reused once empty. When one side is TLS the bytes are
//! copied (`tokio::io::copy_bidirectional`).

use std::cell::{Cell, RefCell};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

use crate::client_socket::{ClientStream, Registered};
use tokio::time::Instant;

/// How a relay ended, and what it moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Relayed {
    /// Bytes from the client to the server.
    pub up: u64,
    /// Bytes from the server to the client.
    pub down: u64,
    pub end: End,
}

/// Why a relay ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum End {
    /// Both sides finished sending.
    #[default]
    Closed,
    /// Nothing moved for the idle timeout.
    Idle,
    /// A side failed (reset, or an error writing).
    Error,
}

/// Most bytes moved per `splice` (a pipe's default capacity).
const CHUNK: usize = 64 * 1024;
/// Empty pipes kept per worker for the next connections.
const KEEP_PIPES: usize = 64;

/// A pipe's two ends, non-blocking.
#[derive(Debug)]
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
}

thread_local! {
    static PIPES: RefCell<Vec<Pipe>> = const { RefCell::new(Vec::new()) };
}

impl Pipe {
    fn take() -> io::Result<Pipe> {
        if let Some(p) = PIPES.with_borrow_mut(|v| v.pop()) {
            return Ok(p);
        }
        let mut fds = [0 as RawFd; 2];
        #[allow(unsafe_code)]
        // SAFETY: `fds` is a valid array of two descriptors for pipe2 to fill.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded, so both are open descriptors owned by nobody else.
        #[allow(unsafe_code)]
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        Ok(Pipe { read, write })
    }

    /// Keeps an empty pipe for the next connection (a pipe with bytes left is closed).
    fn give_back(self) {
        PIPES.with_borrow_mut(|v| {
            if v.len() < KEEP_PIPES {
                v.push(self);
            }
        });
    }
}

#[allow(unsafe_code)]
fn splice(from: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
    // SAFETY: both descriptors are open for the call (borrowed from live sockets and pipes);
    // null offsets make the kernel use (and move) the descriptors' own positions.
    let n = unsafe {
        libc::splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Moves `from`'s bytes to `to` through `pipe` until `from` finishes sending, then shuts down
/// `to`'s write half. Counts bytes in `moved` and the time of the last in `last`. The pipe is
/// empty whenever this returns `Ok`.
async fn splice_way(
    from: &impl Registered,
    to: &impl Registered,
    pipe: &Pipe,
    moved: &Cell<u64>,
    last: &Cell<Instant>,
) -> io::Result<()> {
    let r = async {
        loop {
            let n = loop {
                from.readable().await?;
                match from.try_io(Interest::READABLE, || {
                    splice(from.as_raw_fd(), pipe.write.as_raw_fd(), CHUNK)
                }) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) => return Err(e),
                }
            };
            if n == 0 {
                return Ok(());
            }
            last.set(Instant::now());
            let mut left = n;
            while left > 0 {
                to.writable().await?;
                match to.try_io(Interest::WRITABLE, || {
                    splice(pipe.read.as_raw_fd(), to.as_raw_fd(), left)
                }) {
                    Ok(m) => {
                        left -= m;
                        moved.set(moved.get() + m as u64);
                        last.set(Instant::now());
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) => return Err(e),
                }
            }
        }
    }
    .await;
    // Half-close (or this direction failed): the other side reads EOF and may still answer.
    let _ = socket2::SockRef::from(to).shutdown(std::net::Shutdown::Write);
    r
}

/// Relays between two plain sockets with `splice`.
pub async fn splice_both(client: &ClientStream, server: &TcpStream, idle: Duration) -> Relayed {
    let (p1, p2) = match (Pipe::take(), Pipe::take()) {
        (Ok(a), Ok(b)) => (a, b),
        _ => {
            static NO_PIPE: crate::logs::Limited = crate::logs::Limited::new();
            if let Some(suppressed) = NO_PIPE.admit() {
                tracing::warn!(
                    suppressed,
                    "no pipe for splice (descriptor limit?): connection closed"
                );
            }
            return Relayed {
                end: End::Error,
                ..Relayed::default()
            };
        }
    };
    let (up, down) = (Cell::new(0), Cell::new(0));
    let last = Cell::new(Instant::now());
    // Each direction to its own end: an error in one must not throw away what the other
    // still has to deliver.
    let both = async {
        let (a, b) = tokio::join!(
            splice_way(client, server, &p1, &up, &last),
            splice_way(server, client, &p2, &down, &last)
        );
        a.and(b)
    };
    let end = watch_idle(both, &last, idle).await;
    if end == End::Closed {
        // Both directions ended after draining their pipe: empty, reusable. (A relay cut idle
        // or by an error may have left bytes in one.)
        p1.give_back();
        p2.give_back();
    }
    Relayed {
        up: up.get(),
        down: down.get(),
        end,
    }
}

/// Relays between any two streams (one of them TLS) by copying.
pub async fn copy_both<A, B>(client: &mut A, server: &mut B, idle: Duration) -> Relayed
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let last = Cell::new(Instant::now());
    let mut a = Watched {
        inner: client,
        read: 0,
        last: &last,
    };
    let mut b = Watched {
        inner: server,
        read: 0,
        last: &last,
    };
    let (mut ar, mut aw) = tokio::io::split(&mut a);
    let (mut br, mut bw) = tokio::io::split(&mut b);
    let both = async {
        let (x, y) = tokio::join!(copy_way(&mut ar, &mut bw), copy_way(&mut br, &mut aw));
        x.and(y)
    };
    let end = watch_idle(both, &last, idle).await;
    drop((ar, aw, br, bw));
    Relayed {
        up: a.read,
        down: b.read,
        end,
    }
}

/// Copies `from` to `to` until `from` finishes sending (or fails), then shuts `to`'s write
/// half (a TLS side sends its `close_notify`).
async fn copy_way<R, W>(from: &mut R, to: &mut W) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 16 * 1024];
    let r = async {
        loop {
            let n = from.read(&mut buf).await?;
            if n == 0 {
                return Ok(());
            }
            to.write_all(&buf[..n]).await?;
            to.flush().await?;
        }
    }
    .await;
    let _ = to.shutdown().await;
    r
}

/// Runs `relay` until it ends, or until nothing moved for `idle` (the last move in `last`).
async fn watch_idle<T>(
    relay: impl std::future::Future<Output = io::Result<T>>,
    last: &Cell<Instant>,
    idle: Duration,
) -> End {
    tokio::pin!(relay);
    loop {
        let deadline = last.get() + idle;
        tokio::select! {
            r = &mut relay => return if r.is_ok() { End::Closed } else { End::Error },
            _ = tokio::time::sleep_until(deadline) => {
                if last.get() + idle <= Instant::now() {
                    return End::Idle;
                }
            }
        }
    }
}

/// A stream whose reads are counted and timed (for [`copy_both`]).
struct Watched<'a, S> {
    inner: &'a mut S,
    read: u64,
    last: &'a Cell<Instant>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<'_, S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut *self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            self.read += n as u64;
            self.last.set(Instant::now());
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<'_, S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.inner).poll_shutdown(cx)
    }
}
