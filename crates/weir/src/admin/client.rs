//! The admin API from the other side: the request another weir sends to it (a cluster purge,
//! `admin/purge.rs`) or the command line does (`weir reload`, `status`: `cli/control.rs`),
//! and the reading of its answer. One request per connection (`Connection: close`, the answer
//! read to its end), which is all either needs.

use std::net::SocketAddr;

/// The request: `METHOD TARGET` to `addr`, with the bearer token and `extra` field lines.
pub fn request(
    method: &str,
    target: &str,
    addr: SocketAddr,
    token: Option<&str>,
    extra: &str,
) -> String {
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    format!(
        "{method} {target} HTTP/1.1\r\nHost: {addr}\r\n{auth}{extra}Content-Length: 0\r\nConnection: close\r\n\r\n"
    )
}

/// The status and body of a whole answer.
pub fn answer(bytes: &[u8]) -> Option<(u16, String)> {
    let text = String::from_utf8_lossy(bytes);
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|s| s.parse().ok())?;
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Some((status, body.to_string()))
}
