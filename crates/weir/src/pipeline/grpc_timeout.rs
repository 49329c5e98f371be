//! `grpc-timeout` (gRPC over HTTP/2): the time the client gives a call, as 1 to 8 digits and a
//! unit (`H`, `M`, `S`, `m`, `u`, `n`). It bounds the upstream exchange of a proxied gRPC call,
//! capped by the upstream's own `timeouts.total` (issue 55 §3): a call past its deadline before
//! the response head ends in 504, which a gRPC client reads as `DEADLINE_EXCEEDED`
//! (`grpc_refusal.rs`), and one past it mid-response has its stream cut, instead of holding an
//! upstream stream for an answer nobody waits for. A malformed value bounds nothing here; the
//! upstream answers it as it does (grpc-go refuses it: `INTERNAL`).
//!
//! The expiry is the client's limit, not the server's failure ([`ErrorKind::CallDeadline`]):
//! the first version counted it against the server, and six calls with `grpc-timeout: 1n`
//! marked a healthy one down (the outside review). Only gRPC calls (a POST with a gRPC content
//! type) are looked at: the header on any other request is the client's business.
//!
//! [`ErrorKind::CallDeadline`]: crate::error::ErrorKind::CallDeadline

use std::time::Duration;

use tokio::time::Instant;
use weir_http::RequestHead;

/// The call's deadline, when `head` (a gRPC call: the caller asked `is_grpc`) has a valid
/// `grpc-timeout` that ends before `total` (the upstream's own deadline): then the call's
/// expiry is the client's.
pub(crate) fn deadline(head: &RequestHead, total: Option<Instant>) -> Option<Instant> {
    let call = Instant::now() + parse(head.header("grpc-timeout")?)?;
    match total {
        Some(t) if t <= call => None,
        _ => Some(call),
    }
}

fn parse(v: &[u8]) -> Option<Duration> {
    let (&unit, digits) = v.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits
        .iter()
        .fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    Some(match unit {
        b'H' => Duration::from_secs(n.saturating_mul(3600)),
        b'M' => Duration::from_secs(n.saturating_mul(60)),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_as_grpc_writes_them() {
        assert_eq!(parse(b"200m"), Some(Duration::from_millis(200)));
        assert_eq!(parse(b"1S"), Some(Duration::from_secs(1)));
        assert_eq!(parse(b"2H"), Some(Duration::from_secs(7200)));
        assert_eq!(parse(b"99999999n"), Some(Duration::from_nanos(99_999_999)));
        for bad in [
            &b""[..],
            b"m",
            b"123456789m",
            b"10x",
            b"-1S",
            b"1.5S",
            b" 1S",
        ] {
            assert_eq!(parse(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
