//! Listening sockets handed from a running weir to its replacement over a unix socket, for
//! binary upgrades without refused connections (HAProxy's `-x`, Pingora's upgrade).
//!
//! The old process sends one message: a text header naming each socket's address (`host:port`,
//! or `unix:/path` for a unix listener), and the
//! sockets themselves as `SCM_RIGHTS` ancillary data. The new process listens on the very same
//! sockets (they are shared, not re-bound), so a connection waiting in an accept queue during the
//! switch is accepted by whichever process gets to it first. Hand-written (about 100 lines of
//! `sendmsg`/`recvmsg`) rather than a dependency: the crates that do this either pull in a whole
//! process-restart framework or an old `nix`.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use super::listener::{Endpoint, ListenSocket};

/// Most sockets one message carries (the kernel's SCM_MAX_FD is 253).
pub const MAX_SOCKETS: usize = 250;
const MAGIC: &str = "weir-listeners v1";

/// Sends `sockets` over `stream`.
pub fn send(stream: &UnixStream, sockets: &[(Endpoint, RawFd)]) -> io::Result<()> {
    if sockets.len() > MAX_SOCKETS {
        return Err(io::Error::other(format!(
            "{} listening sockets: at most {MAX_SOCKETS} can be handed over",
            sockets.len()
        )));
    }
    let mut header = String::from(MAGIC);
    for (addr, _) in sockets {
        header.push('\n');
        header.push_str(&addr.line());
    }
    let fds: Vec<RawFd> = sockets.iter().map(|(_, fd)| *fd).collect();
    let payload = header.as_bytes();
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr() as *mut libc::c_void,
        iov_len: payload.len(),
    };
    let fd_bytes = std::mem::size_of_val(fds.as_slice());
    // SAFETY: CMSG_SPACE only computes a size from its argument.
    #[allow(unsafe_code)]
    let space = unsafe { libc::CMSG_SPACE(fd_bytes as u32) } as usize;
    let mut control = vec![0u8; space.max(1)];
    // SAFETY: msghdr is a plain C struct for which all-zero is a valid value.
    #[allow(unsafe_code)]
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = space as _;
        // SAFETY: `control` is CMSG_SPACE(fd_bytes) long and msg_control/msg_controllen describe
        // it, so CMSG_FIRSTHDR returns a pointer inside it with room for a header followed by
        // `fd_bytes` bytes of data, which is what is written.
        #[allow(unsafe_code)]
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as _;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr() as *const u8,
                libc::CMSG_DATA(cmsg),
                fd_bytes,
            );
        }
    }
    // SAFETY: `msg` points at `iov` and `control`, both alive for the call; the descriptors in
    // it are open (the caller holds them).
    #[allow(unsafe_code)]
    let n = unsafe { libc::sendmsg(stream.as_raw_fd(), &msg, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != payload.len() {
        return Err(io::Error::other("short write handing over the sockets"));
    }
    Ok(())
}

/// Receives the sockets sent by [`send`].
pub fn receive(stream: &UnixStream) -> io::Result<Vec<(Endpoint, ListenSocket)>> {
    let mut payload = vec![0u8; 64 * 1024];
    let mut iov = libc::iovec {
        iov_base: payload.as_mut_ptr() as *mut libc::c_void,
        iov_len: payload.len(),
    };
    let fd_bytes = MAX_SOCKETS * std::mem::size_of::<RawFd>();
    // SAFETY: as in `send`.
    #[allow(unsafe_code)]
    let space = unsafe { libc::CMSG_SPACE(fd_bytes as u32) } as usize;
    let mut control = vec![0u8; space];
    // SAFETY: as in `send`.
    #[allow(unsafe_code)]
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = space as _;
    // SAFETY: `msg` describes `payload` and `control`, both alive and writable for the call;
    // MSG_CMSG_CLOEXEC marks the received descriptors close-on-exec.
    #[allow(unsafe_code)]
    let n = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut fds = Vec::new();
    // SAFETY: after a successful recvmsg, msg_control/msg_controllen describe the control data
    // the kernel wrote; CMSG_FIRSTHDR/CMSG_NXTHDR walk only within it, and SCM_RIGHTS data is an
    // array of descriptors now owned by this process (each wrapped once, below).
    #[allow(unsafe_code)]
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg);
                let len = (*cmsg).cmsg_len as usize - (data as usize - cmsg as usize);
                for i in 0..len / std::mem::size_of::<RawFd>() {
                    let fd = std::ptr::read_unaligned((data as *const RawFd).add(i));
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::other("too many sockets handed over"));
    }
    let text = String::from_utf8_lossy(&payload[..n as usize]).into_owned();
    let mut lines = text.lines();
    if lines.next() != Some(MAGIC) {
        return Err(io::Error::other(
            "the running weir does not speak this version's hand-over (upgrade it by a restart)",
        ));
    }
    // A unix listener's path comes as `unix:/path` (an older weir never sends one).
    let addrs: Vec<Endpoint> = lines
        .map(|l| Endpoint::from_line(l).map_err(io::Error::other))
        .collect::<Result<_, _>>()?;
    if addrs.len() != fds.len() {
        return Err(io::Error::other(format!(
            "{} addresses but {} sockets handed over",
            addrs.len(),
            fds.len()
        )));
    }
    addrs
        .into_iter()
        .zip(fds)
        .map(|(addr, fd)| {
            let socket = match addr {
                Endpoint::Tcp(_) => ListenSocket::Tcp(fd.into()),
                Endpoint::Unix(..) => ListenSocket::Unix(fd.into()),
                Endpoint::Udp(_) => ListenSocket::Udp(fd.into()),
            };
            match &socket {
                ListenSocket::Tcp(s) => s.set_nonblocking(true)?,
                ListenSocket::Unix(s) => s.set_nonblocking(true)?,
                ListenSocket::Udp(s) => s.set_nonblocking(true)?,
            }
            Ok((addr, socket))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_sockets_cross_a_unix_socket_and_still_accept() {
        let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let dir = std::env::temp_dir().join(format!("weir-handoff-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("u.sock");
        let _ = std::fs::remove_file(&path);
        let u = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let q = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let (x, y) = UnixStream::pair().unwrap();
        let sent = [
            (Endpoint::Tcp(a.local_addr().unwrap()), a.as_raw_fd()),
            (Endpoint::Tcp(b.local_addr().unwrap()), b.as_raw_fd()),
            (Endpoint::Unix(path.clone(), Some((7, 42))), u.as_raw_fd()),
            (Endpoint::Udp(q.local_addr().unwrap()), q.as_raw_fd()),
        ];
        send(&x, &sent).unwrap();
        let got = receive(&y).unwrap();
        assert_eq!(got.len(), 4);
        for ((addr, l), (want, _)) in got.iter().zip(&sent) {
            assert_eq!(addr, want);
            match (l, want) {
                (ListenSocket::Tcp(l), Endpoint::Tcp(want)) => {
                    assert_eq!(l.local_addr().unwrap(), *want);
                    let _c = std::net::TcpStream::connect(want).unwrap();
                    l.set_nonblocking(false).unwrap();
                    assert!(l.accept().is_ok(), "the received socket accepts");
                }
                (ListenSocket::Unix(l), Endpoint::Unix(want, _)) => {
                    let _c = UnixStream::connect(want).unwrap();
                    l.set_nonblocking(false).unwrap();
                    assert!(l.accept().is_ok(), "the received unix socket accepts");
                }
                (ListenSocket::Udp(l), Endpoint::Udp(want)) => {
                    let c = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
                    c.send_to(b"quic", want).unwrap();
                    l.set_nonblocking(false).unwrap();
                    let mut buf = [0u8; 8];
                    assert_eq!(
                        l.recv(&mut buf).unwrap(),
                        4,
                        "the received UDP socket reads"
                    );
                }
                _ => panic!("{addr} came back as the wrong kind of socket"),
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
