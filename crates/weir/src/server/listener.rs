//! Listening sockets: one per listener per worker, all bound with SO_REUSEPORT so the kernel
//! spreads new connections across workers without a shared accept lock.
//!
//! TCP_NODELAY is set on the listening socket: Linux copies it to every accepted socket, which
//! saves one `setsockopt` per connection on the connection-per-request path.
//!
//! TCP_DEFER_ACCEPT (nginx `listen ... deferred`, HAProxy `defer-accept`) has the kernel queue a
//! connection for `accept` only once its first bytes arrived, so the first read after accept
//! finds the request and the connection is usually served without ever being registered with
//! epoll (see `client_io.rs`). Clients that connect and stay silent are held by the kernel, not
//! by a worker.

use std::io;
use std::net::SocketAddr;

use socket2::{Domain, Protocol, Socket, Type};

/// Fails with `AddrInUse` when another socket listens on `addr`, whoever owns it.
///
/// SO_REUSEPORT, which the workers need, would otherwise let a second weir (or anything else that
/// sets it) bind the same address silently, and the kernel would then spread new connections
/// over both processes. A probe bound without SO_REUSEPORT fails if any socket holds the address;
/// SO_REUSEADDR keeps connections in TIME_WAIT from counting. The probe is closed at once: the
/// race with a process binding in between is the width of two system calls.
pub fn check_free(addr: SocketAddr) -> io::Result<()> {
    if addr.port() == 0 {
        return Ok(());
    }
    let probe = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    probe.set_reuse_address(true)?;
    if addr.is_ipv6() {
        probe.set_only_v6(true)?;
    }
    probe.bind(&addr.into())
}

/// Binds a non-blocking listening socket.
pub fn bind(addr: SocketAddr, backlog: u32, defer_secs: u32) -> io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nodelay(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_nonblocking(true)?;
    if defer_secs > 0 {
        set_defer_accept(&socket, defer_secs)?;
    }
    socket.bind(&addr.into())?;
    socket.listen(backlog.min(i32::MAX as u32) as i32)?;
    Ok(socket.into())
}

/// `setsockopt(IPPROTO_TCP, TCP_DEFER_ACCEPT)`, which socket2 does not wrap.
#[allow(unsafe_code)]
pub fn set_defer_accept(socket: &impl std::os::fd::AsRawFd, secs: u32) -> io::Result<()> {
    let secs = secs.min(i32::MAX as u32) as libc::c_int;
    // SAFETY: the fd is a valid socket borrowed from `socket` for the duration of the call; the
    // option value points to a live `c_int` and its exact size is passed, so the kernel reads
    // nothing out of bounds.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            (&secs as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
