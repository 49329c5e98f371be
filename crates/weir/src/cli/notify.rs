//! systemd's readiness protocol (`sd_notify`), by hand: one datagram to `$NOTIFY_SOCKET`. A
//! dependency (`sd-notify`) would do the same in the same few lines.

use std::os::unix::net::UnixDatagram;

/// Sends `state` (`READY=1`, `RELOADING=1`, `STOPPING=1`) when run under systemd with
/// `Type=notify`; does nothing otherwise.
pub fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let Ok(socket) = UnixDatagram::unbound() else {
        return;
    };
    let msg = format!("{state}\nMAINPID={}", std::process::id());
    let bytes = path.as_encoded_bytes();
    let sent = if let Some(name) = bytes.strip_prefix(b"@") {
        // An abstract socket address (systemd's usual choice).
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(name)
            .and_then(|a| socket.send_to_addr(msg.as_bytes(), &a))
    } else {
        socket.send_to(msg.as_bytes(), &path)
    };
    if let Err(e) = sent {
        tracing::debug!(error = %e, "sd_notify failed");
    }
}
