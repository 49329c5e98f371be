//! Conditional and range requests (RFC 9110 §13 and §14), one evaluator for every producer of a
//! stored or static representation: the static-file action and cache hits both call these, so
//! they cannot drift apart (before, the cache never answered 416 and ignored `If-Range`).

use crate::request::{Method, RequestHead};

/// What a representation offers to compare against.
#[derive(Debug, Clone, Copy, Default)]
pub struct Validators<'a> {
    /// The entity tag, with quotes (and `W/` when weak).
    pub etag: Option<&'a [u8]>,
    /// `Last-Modified` as sent (for `If-Range`'s exact match).
    pub last_modified_text: Option<&'a [u8]>,
    /// `Last-Modified` in Unix seconds, or for a cached response without one, its `Date`
    /// (RFC 9111 §4.3.2).
    pub modified: Option<u64>,
}

/// How to answer a `Range` request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeSpec {
    /// Send the whole representation (no range, a syntax we do not serve, several ranges, or a
    /// failed `If-Range`): allowed by RFC 9110 §14.2.
    Whole,
    /// One satisfiable range, inclusive positions: 206.
    Bytes(u64, u64),
    /// 416 with `Content-Range: bytes */size`.
    Unsatisfiable,
}

/// The verdict of a request's preconditions (RFC 9110 §13.2.2) on a representation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precondition {
    /// Go on (serve it, or evaluate the range).
    Pass,
    /// 412 Precondition Failed: `If-Match` or `If-Unmodified-Since` did not hold.
    Failed,
    /// 304 Not Modified (GET and HEAD only).
    NotModified,
}

/// RFC 9110 §13.2.2 steps 1–4, in one pass over the request's fields: `If-Match` (strong
/// comparison; `*` matches any current representation) else `If-Unmodified-Since`, then for
/// GET/HEAD `If-None-Match` (weak comparison) else `If-Modified-Since`. A date that does not
/// parse is ignored, as is a date condition when the representation has no modification time.
pub fn evaluate(req: &RequestHead, v: &Validators<'_>) -> Precondition {
    let (mut im, mut ius, mut inm, mut ims) = (None, None, None, None);
    for (name, value) in req.fields().iter() {
        let slot = match name.len() {
            8 if name.eq_ignore_ascii_case(b"if-match") => &mut im,
            13 if name.eq_ignore_ascii_case(b"if-none-match") => &mut inm,
            17 if name.eq_ignore_ascii_case(b"if-modified-since") => &mut ims,
            19 if name.eq_ignore_ascii_case(b"if-unmodified-since") => &mut ius,
            _ => continue,
        };
        slot.get_or_insert(value);
    }
    if let Some(list) = im {
        let matched = list.split(|b| *b == b',').map(<[u8]>::trim_ascii).any(|t| {
            t == b"*"
                || v.etag
                    .is_some_and(|e| !e.starts_with(b"W/") && !t.starts_with(b"W/") && t == e)
        });
        if !matched {
            return Precondition::Failed;
        }
    } else if let (Some(date), Some(m)) = (ius.and_then(parse_date), v.modified) {
        if m > date {
            return Precondition::Failed;
        }
    }
    if !matches!(req.method, Method::Get | Method::Head) {
        return Precondition::Pass;
    }
    let not_modified = if let Some(list) = inm {
        v.etag.is_some_and(|etag| {
            let stored = weak(etag);
            list.split(|b| *b == b',')
                .map(<[u8]>::trim_ascii)
                .any(|t| t == b"*" || weak(t) == stored)
        })
    } else if let (Some(date), Some(m)) = (ims.and_then(parse_date), v.modified) {
        m <= date
    } else {
        false
    };
    if not_modified {
        Precondition::NotModified
    } else {
        Precondition::Pass
    }
}

/// RFC 9110 §13.2.2 steps 3–4 for GET/HEAD: whether to answer 304 (see [`evaluate`]).
pub fn not_modified(req: &RequestHead, v: &Validators<'_>) -> bool {
    evaluate(req, v) == Precondition::NotModified
}

/// The range to serve for `req` over a representation of `size` bytes (GET only).
pub fn range(req: &RequestHead, size: u64, v: &Validators<'_>) -> RangeSpec {
    match req.header("range") {
        Some(r) if req.method == Method::Get && if_range_ok(req, v) => parse_range(r, size),
        _ => RangeSpec::Whole,
    }
}

/// `If-Range` matches only the strong ETag or the exact `Last-Modified` text (RFC 9110 §13.1.5).
fn if_range_ok(req: &RequestHead, v: &Validators<'_>) -> bool {
    let Some(cond) = req.header("if-range") else {
        return true;
    };
    let cond = cond.trim_ascii();
    if cond.starts_with(b"\"") {
        v.etag == Some(cond)
    } else if cond.starts_with(b"W/") {
        false
    } else {
        v.last_modified_text.map(<[u8]>::trim_ascii) == Some(cond)
    }
}

/// One `bytes=` range; anything not served as a single range is `Whole`.
pub fn parse_range(value: &[u8], size: u64) -> RangeSpec {
    let Some(spec) = value.trim_ascii().strip_prefix(b"bytes=") else {
        return RangeSpec::Whole;
    };
    if spec.contains(&b',') {
        return RangeSpec::Whole;
    }
    let Some(dash) = spec.iter().position(|b| *b == b'-') else {
        return RangeSpec::Whole;
    };
    let (a, b) = (spec[..dash].trim_ascii(), spec[dash + 1..].trim_ascii());
    match (a.is_empty(), b.is_empty()) {
        (true, true) => RangeSpec::Whole,
        (true, false) => match number(b) {
            Some(0) => RangeSpec::Unsatisfiable,
            Some(_) if size == 0 => RangeSpec::Unsatisfiable,
            Some(n) => RangeSpec::Bytes(size.saturating_sub(n), size - 1),
            None => RangeSpec::Whole,
        },
        (false, _) => {
            let Some(start) = number(a) else {
                return RangeSpec::Whole;
            };
            let end = if b.is_empty() {
                Some(u64::MAX)
            } else {
                number(b)
            };
            match end {
                None => RangeSpec::Whole,
                Some(end) if end < start => RangeSpec::Whole,
                Some(_) if start >= size => RangeSpec::Unsatisfiable,
                Some(end) => RangeSpec::Bytes(start, end.min(size - 1)),
            }
        }
    }
}

fn number(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 19 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// Weak comparison drops `W/` on both sides.
fn weak(t: &[u8]) -> &[u8] {
    let t = t.trim_ascii();
    t.strip_prefix(b"W/").unwrap_or(t)
}

/// An HTTP-date in any of the three forms of RFC 9110 §5.6.7, as Unix seconds.
pub fn parse_date(v: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(v).ok()?;
    let t = httpdate::parse_http_date(s.trim()).ok()?;
    t.duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;

    fn req(extra: &str) -> RequestHead {
        let mut b = BytesMut::from(format!("GET / HTTP/1.1\r\nHost: a\r\n{extra}\r\n").as_bytes());
        crate::parse_request(&mut b, &Default::default())
            .unwrap()
            .unwrap()
    }

    const LM: &[u8] = b"Mon, 01 Jan 2024 00:00:00 GMT";
    const LM_SECS: u64 = 1_704_067_200;

    fn v() -> Validators<'static> {
        Validators {
            etag: Some(b"\"v1\""),
            last_modified_text: Some(LM),
            modified: Some(LM_SECS),
        }
    }

    #[test]
    fn ranges() {
        use RangeSpec::*;
        for (spec, want) in [
            ("bytes=0-4", Bytes(0, 4)),
            ("bytes=5-", Bytes(5, 9)),
            ("bytes=-3", Bytes(7, 9)),
            ("bytes=-30", Bytes(0, 9)),
            ("bytes=8-100", Bytes(8, 9)),
            ("bytes=10-", Unsatisfiable),
            ("bytes=10-20", Unsatisfiable),
            ("bytes=-0", Unsatisfiable),
            ("bytes=0-1,3-4", Whole),
            ("bytes=5-2", Whole),
            ("items=0-1", Whole),
            ("bytes=x-1", Whole),
            ("bytes=-", Whole),
        ] {
            assert_eq!(parse_range(spec.as_bytes(), 10), want, "{spec}");
        }
        assert_eq!(parse_range(b"bytes=-5", 0), Unsatisfiable);
    }

    #[test]
    fn conditionals() {
        let cases: &[(&str, Validators<'static>, bool)] = &[
            ("If-None-Match: \"v1\"\r\n", v(), true),
            ("If-None-Match: W/\"v1\"\r\n", v(), true),
            ("If-None-Match: \"v0\", \"v1\"\r\n", v(), true),
            ("If-None-Match: *\r\n", v(), true),
            ("If-None-Match: \"v2\"\r\n", v(), false),
            // If-None-Match wins over a matching If-Modified-Since.
            (
                "If-None-Match: \"v2\"\r\nIf-Modified-Since: Mon, 01 Jan 2024 00:00:00 GMT\r\n",
                v(),
                false,
            ),
            (
                "If-Modified-Since: Mon, 01 Jan 2024 00:00:00 GMT\r\n",
                v(),
                true,
            ),
            (
                "If-Modified-Since: Sun, 31 Dec 2023 00:00:00 GMT\r\n",
                v(),
                false,
            ),
            ("If-Modified-Since: garbage\r\n", v(), false),
            // A cached response with only a Date compares against it.
            (
                "If-Modified-Since: Tue, 02 Jan 2024 00:00:00 GMT\r\n",
                Validators {
                    modified: Some(LM_SECS),
                    ..Default::default()
                },
                true,
            ),
            ("", v(), false),
        ];
        for (fields, validators, want) in cases {
            assert_eq!(not_modified(&req(fields), validators), *want, "{fields}");
        }
    }

    #[test]
    fn if_range() {
        let whole = |f: &str| range(&req(&format!("Range: bytes=0-1\r\n{f}")), 10, &v());
        assert_eq!(whole(""), RangeSpec::Bytes(0, 1));
        assert_eq!(whole("If-Range: \"v1\"\r\n"), RangeSpec::Bytes(0, 1));
        assert_eq!(whole("If-Range: W/\"v1\"\r\n"), RangeSpec::Whole);
        assert_eq!(whole("If-Range: \"v2\"\r\n"), RangeSpec::Whole);
        assert_eq!(
            whole("If-Range: Mon, 01 Jan 2024 00:00:00 GMT\r\n"),
            RangeSpec::Bytes(0, 1)
        );
        assert_eq!(
            whole("If-Range: Tue, 02 Jan 2024 00:00:00 GMT\r\n"),
            RangeSpec::Whole
        );
    }

    #[test]
    fn dates_in_all_three_forms() {
        for form in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(parse_date(form.as_bytes()), Some(784_111_777), "{form}");
        }
        for bad in [
            "sun, 06 Nov 1994 08:49:37 GMT",
            "Sun, 06 nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 gmt",
            "SUNDAY, 06-Nov-94 08:49:37 GMT",
            "Sun nov  6 08:49:37 1994",
            "0",
        ] {
            assert_eq!(parse_date(bad.as_bytes()), None, "{bad}");
        }
    }
}
