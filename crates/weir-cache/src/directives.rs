//! Cache-Control directives (RFC 9111 §5.2), parsed leniently the way caches must: unknown
//! directives are ignored, a malformed delta-seconds makes the directive count as its most
//! conservative reading (`max-age=abc` is treated as stale, i.e. 0).

/// The directives weir acts on, from requests and responses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Directives {
    pub max_age: Option<u64>,
    pub s_maxage: Option<u64>,
    pub no_store: bool,
    /// `no-cache` without field names: revalidate before every use.
    pub no_cache: bool,
    /// `no-cache="a, b"`, the qualified form (RFC 9111 §5.2.2.4): the response may be reused
    /// without revalidation, but never with the listed fields, which are not stored
    /// (lower-case names). weir takes this reading rather than treating it as unqualified
    /// (which the RFC also allows): the rest of the response stays cacheable, as the origin
    /// meant; the public cache test suite checks for it.
    pub no_cache_fields: Vec<Vec<u8>>,
    pub private: bool,
    pub public: bool,
    pub must_revalidate: bool,
    pub proxy_revalidate: bool,
    pub stale_while_revalidate: Option<u64>,
    pub stale_if_error: Option<u64>,
    /// Request: `max-stale` (`Some(None)` = any staleness).
    pub max_stale: Option<Option<u64>>,
    pub min_fresh: Option<u64>,
    pub only_if_cached: bool,
    /// `must-understand` (RFC 9111 §5.2.2.3).
    pub must_understand: bool,
}

impl Directives {
    /// Parses one or more field values (the caller passes every Cache-Control line).
    pub fn parse<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Directives {
        let mut d = Directives::default();
        for v in values {
            for item in split_items(v) {
                let (name, arg) = match item.iter().position(|b| *b == b'=') {
                    Some(i) => (&item[..i], Some(unquote(&item[i + 1..]))),
                    None => (item, None),
                };
                let secs = || arg.map(|a| parse_secs(a).unwrap_or(0));
                match name.to_ascii_lowercase().as_slice() {
                    b"max-age" => d.max_age = Some(secs().unwrap_or(0)),
                    b"s-maxage" => d.s_maxage = Some(secs().unwrap_or(0)),
                    b"no-store" => d.no_store = true,
                    b"no-cache" => match field_names(item.get(name.len() + 1..)) {
                        Some(fields) => d.no_cache_fields.extend(fields),
                        None => d.no_cache = true,
                    },
                    b"private" => d.private = true,
                    b"public" => d.public = true,
                    b"must-revalidate" => d.must_revalidate = true,
                    b"proxy-revalidate" => d.proxy_revalidate = true,
                    b"stale-while-revalidate" => d.stale_while_revalidate = secs(),
                    b"stale-if-error" => d.stale_if_error = secs(),
                    b"max-stale" => d.max_stale = Some(arg.and_then(parse_secs)),
                    b"min-fresh" => d.min_fresh = secs(),
                    b"only-if-cached" => d.only_if_cached = true,
                    b"must-understand" => d.must_understand = true,
                    _ => {}
                }
            }
        }
        d
    }
}

impl Directives {
    /// Reads `CDN-Cache-Control` (RFC 9213): an RFC 8941 Dictionary whose known members must have
    /// the right type (integers for the delta-seconds, booleans for the flags; `no-cache` and
    /// `private` may also list field names). `None` when the field does not parse or a member has
    /// the wrong type: the caller then ignores the whole field.
    pub fn parse_structured<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> Option<Directives> {
        use crate::structured::{parse_dictionary, Value};
        let mut d = Directives::default();
        for (key, value) in parse_dictionary(lines)? {
            let secs = |v: &Value| match v {
                Value::Integer(n) if *n >= 0 => Some((*n as u64).min(1 << 31)),
                _ => None,
            };
            let flag = |v: &Value| match v {
                Value::Boolean(b) => Some(*b),
                _ => None,
            };
            let flag_or_fields = |v: &Value| match v {
                Value::Boolean(b) => Some(*b),
                Value::String(_) | Value::InnerList => Some(true),
                _ => None,
            };
            match key.as_slice() {
                b"max-age" => d.max_age = Some(secs(&value)?),
                b"s-maxage" => d.s_maxage = Some(secs(&value)?),
                b"stale-while-revalidate" => d.stale_while_revalidate = Some(secs(&value)?),
                b"stale-if-error" => d.stale_if_error = Some(secs(&value)?),
                b"no-store" => d.no_store = flag(&value)?,
                b"public" => d.public = flag(&value)?,
                b"must-revalidate" => d.must_revalidate = flag(&value)?,
                b"proxy-revalidate" => d.proxy_revalidate = flag(&value)?,
                b"must-understand" => d.must_understand = flag(&value)?,
                b"no-cache" => d.no_cache = flag_or_fields(&value)?,
                b"private" => d.private = flag_or_fields(&value)?,
                _ => {}
            }
        }
        Some(d)
    }
}

/// The field names of a qualified directive's argument (`"a, b"`): a quoted string holding
/// a list of tokens and nothing else. `None` for no argument, an empty list, or anything
/// malformed (unquoted, single quotes, unterminated, text after the quote), which the caller
/// takes as the unqualified, stricter form: a field that could not be named must not be
/// reused (a review of issue 52 found `no-cache="x-user` served one client's X-User to the next).
fn field_names(arg: Option<&[u8]>) -> Option<Vec<Vec<u8>>> {
    let inner = arg?.trim_ascii().strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    let token = |b: &u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b);
    let mut names = Vec::new();
    for f in inner.split(|b| *b == b',') {
        let f = f.trim_ascii();
        if f.is_empty() {
            continue;
        }
        if !f.iter().all(token) {
            return None;
        }
        names.push(f.to_ascii_lowercase());
    }
    (!names.is_empty()).then_some(names)
}

/// Comma-separated items, commas inside quoted strings kept.
fn split_items(v: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let (mut start, mut quoted) = (0, false);
    for (i, b) in v.iter().enumerate() {
        match b {
            b'"' => quoted = !quoted,
            b',' if !quoted => {
                push_trimmed(&mut out, &v[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    push_trimmed(&mut out, &v[start..]);
    out
}

fn push_trimmed<'a>(out: &mut Vec<&'a [u8]>, s: &'a [u8]) {
    let s = s.trim_ascii();
    if !s.is_empty() {
        out.push(s);
    }
}

fn unquote(s: &[u8]) -> &[u8] {
    let s = s.trim_ascii();
    s.strip_prefix(b"\"")
        .and_then(|r| r.strip_suffix(b"\""))
        .unwrap_or(s)
}

/// delta-seconds; values beyond 2^31 are capped as RFC 9111 §1.2.2 says.
fn parse_secs(s: &[u8]) -> Option<u64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut n: u64 = 0;
    for d in s {
        n = (n * 10 + u64::from(d - b'0')).min(1 << 31);
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Directives {
        Directives::parse([s.as_bytes()])
    }

    #[test]
    fn parses_the_common_directives() {
        let d = p(
            "public, max-age=60, s-maxage=\"120\", stale-while-revalidate=30, stale-if-error=600",
        );
        assert!(d.public);
        assert_eq!((d.max_age, d.s_maxage), (Some(60), Some(120)));
        assert_eq!(
            (d.stale_while_revalidate, d.stale_if_error),
            (Some(30), Some(600))
        );
        let d = p("no-cache=\"set-cookie, X-A\", private, must-revalidate");
        assert!(!d.no_cache && d.private && d.must_revalidate);
        assert_eq!(d.no_cache_fields, [b"set-cookie".to_vec(), b"x-a".to_vec()]);
        assert!(p("no-cache").no_cache && p("no-cache=\"\"").no_cache);
        // Malformed lists are the unqualified form: nothing named is reused.
        for bad in [
            "max-age=60, no-cache=\"x-user",
            "no-cache=\"x-user\";",
            "no-cache='x-user'",
            "no-cache=x-token,x-user",
            "no-cache=\"x user\"",
        ] {
            let d = p(bad);
            assert!(d.no_cache && d.no_cache_fields.is_empty(), "{bad}: {d:?}");
        }
        let d = p("max-stale, min-fresh=5, only-if-cached, no-store");
        assert_eq!(d.max_stale, Some(None));
        assert_eq!(d.min_fresh, Some(5));
        assert!(d.only_if_cached && d.no_store);
        assert_eq!(p("max-age=abc").max_age, Some(0), "malformed means stale");
        assert_eq!(p("max-age=99999999999999").max_age, Some(1 << 31));
        assert_eq!(p("MAX-AGE=5, unknown=1").max_age, Some(5));
        let two = Directives::parse([&b"max-age=5"[..], b"no-store"]);
        assert!(two.no_store && two.max_age == Some(5));
    }

    #[test]
    fn cdn_cache_control_is_a_dictionary() {
        let sp = |s: &str| Directives::parse_structured([s.as_bytes()]);
        let d = sp("max-age=60, no-store=?0, private").unwrap();
        assert_eq!((d.max_age, d.no_store, d.private), (Some(60), false, true));
        assert_eq!(
            sp("no-cache=(\"set-cookie\")").map(|d| d.no_cache),
            Some(true)
        );
        for bad in [
            "max-age=\"60\"",
            "max-age=-1",
            "max-age=6.0",
            "no-store=1",
            "public=\"yes\"",
            "max-age=60,",
            "Max-Age=60",
            "max-age=60;;",
        ] {
            assert_eq!(sp(bad), None, "{bad}");
        }
        // Unknown members of any type are fine.
        assert_eq!(
            sp("x-ext=\"a\", max-age=5").map(|d| d.max_age),
            Some(Some(5))
        );
    }
}
