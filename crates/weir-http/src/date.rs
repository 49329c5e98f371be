//! The `Date` header line, rendered at most once per second per thread (hyper's `common/date.rs`
//! habit): a response pays a clock read and a 37-byte copy, not a date formatting.

use std::cell::RefCell;
use std::time::{SystemTime, UNIX_EPOCH};

/// `Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n`
pub const DATE_LINE_LEN: usize = 37;

struct Cached {
    secs: u64,
    line: [u8; DATE_LINE_LEN],
}

thread_local! {
    static CACHED: RefCell<Cached> = const { RefCell::new(Cached { secs: u64::MAX, line: [0; DATE_LINE_LEN] }) };
}

/// Calls `f` with the current `Date: ...\r\n` line.
pub fn with_date_line<R>(f: impl FnOnce(&[u8]) -> R) -> R {
    let now = SystemTime::now();
    let secs = now
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    CACHED.with(|c| {
        let mut c = c.borrow_mut();
        if c.secs != secs {
            let text = httpdate::fmt_http_date(now);
            let mut line = [0u8; DATE_LINE_LEN];
            line[..6].copy_from_slice(b"Date: ");
            line[6..35].copy_from_slice(&text.as_bytes()[..29]);
            line[35..].copy_from_slice(b"\r\n");
            c.line = line;
            c.secs = secs;
        }
        f(&c.line)
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn renders_imf_fixdate() {
        super::with_date_line(|l| {
            let s = std::str::from_utf8(l).unwrap();
            assert!(s.starts_with("Date: ") && s.ends_with(" GMT\r\n"), "{s}");
            assert!(httpdate::parse_http_date(&s[6..35]).is_ok());
        });
    }
}
