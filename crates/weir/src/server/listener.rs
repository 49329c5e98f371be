//! Listening sockets: one per listener per worker, all bound with SO_REUSEPORT so the kernel
//! spreads new connections across workers without a shared accept lock.
//!
//! TCP_NODELAY is set on the listening socket: Linux copies it to every accepted socket, which
//! saves one `setsockopt` per connection on the connection-per-request path.

use std::io;
use std::net::SocketAddr;

use socket2::{Domain, Protocol, Socket, Type};

/// Binds a non-blocking listening socket.
pub fn bind(addr: SocketAddr, backlog: u32) -> io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nodelay(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(backlog.min(i32::MAX as u32) as i32)?;
    Ok(socket.into())
}
