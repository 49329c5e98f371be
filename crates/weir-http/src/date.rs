//! The `Date` header line, rendered at most once per second per thread (hyper's `common/date.rs`
//! habit): a response pays a clock read and a 37-byte copy, not a date formatting.

use std::cell::RefCell;
use std::time::{SystemTime, UNIX_EPOCH};

/// `Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n`
pub const DATE_LINE_LEN: usize = 37;

struct Cached {
    /// The second the line is for: `[from, until)`. Compared as `SystemTime`s, so that a
    /// response within the second costs a clock read and a comparison (converting each reading
    /// to a Unix time was about 40 instructions more, callgrind 2026-11-27).
    from: SystemTime,
    until: SystemTime,
    line: [u8; DATE_LINE_LEN],
}

thread_local! {
    static CACHED: RefCell<Cached> = const {
        RefCell::new(Cached { from: UNIX_EPOCH, until: UNIX_EPOCH, line: [0; DATE_LINE_LEN] })
    };
}

/// Calls `f` with the current `Date: ...\r\n` line.
pub fn with_date_line<R>(f: impl FnOnce(&[u8]) -> R) -> R {
    // (A clock set before 1970 says 1970: `httpdate` cannot render earlier times.)
    let now = SystemTime::now().max(UNIX_EPOCH);
    CACHED.with(|c| {
        let mut c = c.borrow_mut();
        // (`from` too: the wall clock can be set back.)
        if now >= c.until || now < c.from {
            let secs = now
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            c.from = UNIX_EPOCH + std::time::Duration::from_secs(secs);
            c.until = c.from + std::time::Duration::from_secs(1);
            let text = httpdate::fmt_http_date(now);
            let mut line = [0u8; DATE_LINE_LEN];
            line[..6].copy_from_slice(b"Date: ");
            line[6..35].copy_from_slice(&text.as_bytes()[..29]);
            line[35..].copy_from_slice(b"\r\n");
            c.line = line;
        }
        f(&c.line)
    })
}

/// Calendar date and time of a Unix time, UTC (Howard Hinnant's days-to-civil).
pub fn civil(secs: u64) -> (i64, u32, u32, u32, u32, u32) {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (
        y,
        m,
        d,
        (rem / 3600) as u32,
        (rem / 60 % 60) as u32,
        (rem % 60) as u32,
    )
}

/// `2026-11-22T17:38:23.123Z` (RFC 3339, UTC, milliseconds), without allocating: the JSON
/// access log writes one per line.
pub fn rfc3339(secs: u64, millis: u32) -> [u8; 24] {
    let (y, mo, d, h, mi, s) = civil(secs);
    let mut out = *b"0000-00-00T00:00:00.000Z";
    let mut put = |at: usize, v: u32, width: usize| {
        let mut v = v;
        for i in (at..at + width).rev() {
            out[i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
    };
    put(0, y.clamp(0, 9999) as u32, 4);
    put(5, mo, 2);
    put(8, d, 2);
    put(11, h, 2);
    put(14, mi, 2);
    put(17, s, 2);
    put(20, millis.min(999), 3);
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc3339_crosses_leap_years() {
        assert_eq!(&super::rfc3339(951_782_400, 7), b"2000-02-29T00:00:00.007Z");
        assert_eq!(&super::rfc3339(0, 0), b"1970-01-01T00:00:00.000Z");
        assert_eq!(
            &super::rfc3339(1_795_369_103, 123),
            b"2026-11-22T17:38:23.123Z"
        );
    }

    #[test]
    fn renders_imf_fixdate() {
        super::with_date_line(|l| {
            let s = std::str::from_utf8(l).unwrap();
            assert!(s.starts_with("Date: ") && s.ends_with(" GMT\r\n"), "{s}");
            assert!(httpdate::parse_http_date(&s[6..35]).is_ok());
        });
    }
}
