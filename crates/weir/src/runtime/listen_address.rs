//! Where listeners listen, from the config: `host:port` resolved, `unix:/path` checked, and the
//! identity a listener keeps across reloads.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use super::ListenerConfig;
use crate::config::{model, CompileError};

/// Whether two addresses would bind the same socket: same port (not 0), and the same IP or
/// either of them all addresses.
pub(super) fn same_socket(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() != 0
        && a.port() == b.port()
        && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

/// The id of a listener on `address` added after `before`.
pub(super) fn listener_id(
    before: &[ListenerConfig],
    address: SocketAddr,
    admin: bool,
    unix: Option<&super::UnixListen>,
) -> super::ListenerId {
    let unix = unix.map_or(0, |u| {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        u.path.hash(&mut h);
        h.finish() | 1
    });
    let nth = before
        .iter()
        .filter(|l| l.address == address && l.admin == admin && l.id.unix == unix)
        .count();
    super::ListenerId {
        address,
        admin,
        nth,
        unix,
    }
}

/// A unix listener's socket file (`address: unix:/path`, `unix_mode`), checked; `None` for a
/// TCP listener.
pub(super) fn unix_listen(
    l: &model::Listener,
    path: &str,
) -> Result<Option<Arc<super::UnixListen>>, CompileError> {
    let Some(file) = l.address.trim().strip_prefix("unix:") else {
        if l.unix_mode.is_some() {
            return Err((
                format!("{path}.unix_mode"),
                "only a unix listener (`address: unix:/path`) has a file mode".into(),
            ));
        }
        return Ok(None);
    };
    let key = format!("{path}.address");
    if !file.starts_with('/') {
        return Err((
            key,
            format!("{file:?}: a unix socket's path must be absolute"),
        ));
    }
    if file.chars().any(char::is_control) {
        return Err((
            key,
            format!("{file:?}: control characters in a socket's path"),
        ));
    }
    // sun_path holds 108 bytes with the terminating NUL.
    if file.len() > 107 {
        return Err((
            key,
            format!("{file:?}: a unix socket's path is at most 107 bytes"),
        ));
    }
    if l.defer_accept == Some(true) {
        return Err((
            format!("{path}.defer_accept"),
            "TCP_DEFER_ACCEPT is for TCP listeners, not unix sockets".into(),
        ));
    }
    let mode = match &l.unix_mode {
        None => None,
        Some(m) => match u32::from_str_radix(m.trim(), 8) {
            Ok(v) if v <= 0o777 => Some(v),
            _ => {
                return Err((
                    format!("{path}.unix_mode"),
                    format!("{m:?} is not a file mode in octal (\"0660\")"),
                ))
            }
        },
    };
    Ok(Some(Arc::new(super::UnixListen {
        path: file.into(),
        mode,
    })))
}

/// `host:port`, `[v6]:port`, `:port` (all IPv4 interfaces) or `name:port` (resolved now).
pub(super) fn resolve(addr: &str) -> Result<SocketAddr, String> {
    let addr = addr.trim();
    if let Ok(a) = addr.parse::<SocketAddr>() {
        return Ok(a);
    }
    if let Some(port) = addr.strip_prefix(':') {
        let port: u16 = port
            .parse()
            .map_err(|_| format!("invalid port in {addr:?}"))?;
        return Ok(SocketAddr::from(([0, 0, 0, 0], port)));
    }
    if !addr.contains(':') {
        return Err(format!("{addr:?} is not host:port"));
    }
    addr.to_socket_addrs()
        .map_err(|e| format!("cannot resolve {addr:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("{addr:?} resolved to no address"))
}
