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
//!
//! Unix listeners (`address: unix:/path`): one socket bound once and shared by the workers
//! (SO_REUSEPORT does not apply to unix sockets), its file replaced only when it is a socket
//! nobody answers on, given `unix_mode`, and removed at shutdown if it is still the file bound
//! ([`file_id`]). [`Endpoint`] names either kind in the binary upgrade's hand-over.

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

/// Binds a QUIC listener's UDP socket at `addr` (non-blocking, SO_REUSEPORT: one per worker,
/// the kernel spreading clients across them by their address).
///
/// Each worker runs its own QUIC endpoint on its socket; a client's packets reach the same
/// socket as long as its address and the number of sockets stay the same (a client that
/// migrates, or a binary upgrade that changes the worker count, may lose its connection and
/// reconnect).
pub fn bind_udp(addr: SocketAddr) -> io::Result<std::net::UdpSocket> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    socket.set_reuse_port(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

/// Fails with `AddrInUse` when a UDP socket holds `addr` (see [`check_free`]).
pub fn check_free_udp(addr: SocketAddr) -> io::Result<()> {
    let probe = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        probe.set_only_v6(true)?;
    }
    probe.bind(&addr.into())
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

/// Where a listening socket listens: a TCP address, or a unix socket's path with the identity
/// of its socket file (device, inode) when the sender knows it (the hand-over carries it, so
/// that the process taking over removes at shutdown that file and no other).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Tcp(SocketAddr),
    /// A QUIC listener's UDP socket (`quic: true`), at the TCP listener's address.
    Udp(SocketAddr),
    Unix(std::path::PathBuf, Option<(u64, u64)>),
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Tcp(a) => write!(f, "{a}"),
            Endpoint::Udp(a) => write!(f, "udp:{a}"),
            Endpoint::Unix(p, _) => write!(f, "unix:{}", p.display()),
        }
    }
}

impl Endpoint {
    /// The hand-over's line for it: `host:port`, or `unix:/path` then a tab and `DEV:INO`.
    pub fn line(&self) -> String {
        match self {
            Endpoint::Unix(_, Some((dev, ino))) => format!("{self}\t{dev}:{ino}"),
            _ => self.to_string(),
        }
    }

    /// Reads a line [`Endpoint::line`] wrote.
    pub fn from_line(s: &str) -> Result<Endpoint, String> {
        if let Some(rest) = s.strip_prefix("udp:") {
            return rest
                .parse()
                .map(Endpoint::Udp)
                .map_err(|_| format!("bad address {s:?}"));
        }
        match s.strip_prefix("unix:") {
            Some(rest) => {
                let (path, file) = match rest.split_once('\t') {
                    Some((path, id)) => {
                        let (dev, ino) = id
                            .split_once(':')
                            .and_then(|(d, i)| Some((d.parse().ok()?, i.parse().ok()?)))
                            .ok_or_else(|| format!("bad socket file id in {s:?}"))?;
                        (path, Some((dev, ino)))
                    }
                    None => (rest, None),
                };
                Ok(Endpoint::Unix(path.into(), file))
            }
            None => s
                .parse()
                .map(Endpoint::Tcp)
                .map_err(|_| format!("bad address {s:?}")),
        }
    }

    /// Whether both name the same address or path.
    pub fn same_place(&self, other: &Endpoint) -> bool {
        match (self, other) {
            (Endpoint::Tcp(a), Endpoint::Tcp(b)) | (Endpoint::Udp(a), Endpoint::Udp(b)) => a == b,
            (Endpoint::Unix(a, _), Endpoint::Unix(b, _)) => a == b,
            _ => false,
        }
    }
}

/// What is at a unix listener's path.
#[derive(Debug, PartialEq, Eq)]
pub enum Probe {
    /// Nothing.
    Free,
    /// A socket file nobody listens on (left by a process that is gone).
    Stale,
    /// A socket somebody listens on (connections may wait in its queue).
    Live,
}

/// Looks at `path` without blocking: a non-blocking connect says whether a listener is there
/// (a full accept queue answers EAGAIN, which is live too); only ECONNREFUSED is stale. A path
/// that is not a socket, or a socket of another kind, is an error: it is never replaced.
pub fn probe_unix(path: &std::path::Path) -> io::Result<Probe> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Probe::Free),
        Err(e) => return Err(e),
        Ok(m) if !m.file_type().is_socket() => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "the path exists and is not a socket",
            ))
        }
        Ok(_) => {}
    }
    let probe = Socket::new(Domain::UNIX, Type::STREAM, None)?;
    probe.set_nonblocking(true)?;
    match probe.connect(&socket2::SockAddr::unix(path)?) {
        Ok(()) => Ok(Probe::Live),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Probe::Live),
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Ok(Probe::Live),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => Ok(Probe::Stale),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("a socket that takes no stream connections is there: {e}"),
        )),
    }
}

/// A listening socket: TCP, a unix stream socket, or a QUIC listener's UDP socket.
#[derive(Debug)]
pub enum ListenSocket {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener),
    Udp(std::net::UdpSocket),
}

impl ListenSocket {
    pub fn try_clone(&self) -> io::Result<ListenSocket> {
        Ok(match self {
            ListenSocket::Tcp(s) => ListenSocket::Tcp(s.try_clone()?),
            ListenSocket::Unix(s) => ListenSocket::Unix(s.try_clone()?),
            ListenSocket::Udp(s) => ListenSocket::Udp(s.try_clone()?),
        })
    }
}

impl std::os::fd::AsRawFd for ListenSocket {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        match self {
            ListenSocket::Tcp(s) => s.as_raw_fd(),
            ListenSocket::Unix(s) => s.as_raw_fd(),
            ListenSocket::Udp(s) => s.as_raw_fd(),
        }
    }
}

/// Binds a non-blocking unix listening socket at `u.path`, as nginx and HAProxy do: a socket
/// file nobody listens on any more (left by a crash) is replaced; one somebody answers on is
/// `AddrInUse`; anything else at the path (a file, a directory) is never removed.
pub fn bind_unix(
    u: &crate::runtime::UnixListen,
    backlog: u32,
) -> io::Result<std::os::unix::net::UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    match probe_unix(&u.path)? {
        Probe::Free => {}
        Probe::Stale => std::fs::remove_file(&u.path)?,
        Probe::Live => {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                "a process is listening on this socket",
            ))
        }
    }
    let socket = Socket::new(Domain::UNIX, Type::STREAM, None)?;
    socket.set_nonblocking(true)?;
    socket.bind(&socket2::SockAddr::unix(&u.path)?)?;
    if let Some(mode) = u.mode {
        if let Err(e) = std::fs::set_permissions(&u.path, std::fs::Permissions::from_mode(mode)) {
            let _ = std::fs::remove_file(&u.path);
            return Err(e);
        }
    }
    socket.listen(backlog.min(i32::MAX as u32) as i32)?;
    Ok(socket.into())
}

/// The identity (device, inode) of the file at `path`, to recognise a socket file later.
pub fn file_id(path: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// Gives the socket file at `path` permissions `mode`, if it is still the file `id` names.
pub fn set_unix_mode(path: &std::path::Path, id: (u64, u64), mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    if file_id(path) != Some(id) {
        return;
    }
    if let Err(e) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)) {
        tracing::warn!(path = %path.display(), error = %e, "cannot change the socket file's mode");
    }
}

/// Removes a unix listener's socket file at shutdown if it is still the file this server bound
/// (`id`, from [`file_id`] after binding): one another process put there since is left alone.
pub fn unlink_unix(path: &std::path::Path, id: (u64, u64)) {
    if file_id(path) == Some(id) {
        if let Err(e) = std::fs::remove_file(path) {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove the socket file");
        }
    }
}
