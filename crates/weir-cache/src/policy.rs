//! RFC 9111 as pure functions: may this response be stored, for how long is it fresh, how old is
//! it now, and what may be done with it for this request.
//!
//! `CDN-Cache-Control` (RFC 9213), when the response has it, replaces `Cache-Control` for
//! everything here: it is addressed to caches like weir. Route rules from the config (TTL by
//! status, `ignore_origin`) override the origin as nuster's `cache-rule ... ttl` and nginx's
//! `proxy_cache_valid` do.
//!
//! Table tests (storability, freshness, age, verdicts, POST reuse) are in `policy/tests.rs`.

use weir_http::{Header, Method};

use crate::directives::Directives;

/// Statuses whose caching rules weir implements (for `must-understand`): the heuristically
/// cacheable ones plus the redirects a cache may store with explicit freshness. Not 206.
pub const UNDERSTOOD_STATUSES: &[u16] = &[
    200, 203, 204, 300, 301, 302, 303, 307, 308, 404, 405, 410, 414, 451, 501,
];

/// Statuses a cache may store without explicit freshness (RFC 9110 §15.1, "heuristically
/// cacheable").
pub const HEURISTIC_STATUSES: &[u16] =
    &[200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501];

/// Longest heuristic freshness (a tenth of the time since Last-Modified, at most a day).
const HEURISTIC_MAX: u64 = 86_400;

/// Storage rules of a cached route, from the config.
#[derive(Debug, Clone, Default)]
pub struct StoreRules {
    /// Freshness by status, overriding the origin when `ignore_origin` or when the origin says
    /// nothing; `u64::MAX` = forever.
    pub ttl_by_status: Vec<(u16, u64)>,
    /// Ignore the origin's Cache-Control, Expires and heuristics entirely (nuster `ttl 0` style).
    pub ignore_origin: bool,
    /// Store responses carrying Set-Cookie (off: they are never shared).
    pub share_set_cookie: bool,
}

/// Why a response is not stored. Logged and reported in `Cache-Status` as `detail`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoStore {
    Method,
    RequestNoStore,
    ResponseNoStore,
    Private,
    Authorization,
    SetCookie,
    VaryStar,
    /// Neither explicit freshness, nor a heuristically cacheable status, nor a rule.
    NoFreshness,
    TooLarge,
    Incomplete,
    /// A 206: weir stores complete responses only (RFC 9111 §3.4).
    Partial,
    /// `must-understand` on a status whose caching rules weir does not implement.
    NotUnderstood,
    /// A filter of the route kept it out of the store (its before-store phase).
    Filter,
    /// The zone's budget for responses being captured is spent: not stored this time.
    Busy,
}

impl NoStore {
    pub fn as_str(&self) -> &'static str {
        match self {
            NoStore::Method => "method",
            NoStore::RequestNoStore => "request-no-store",
            NoStore::ResponseNoStore => "no-store",
            NoStore::Private => "private",
            NoStore::Authorization => "authorization",
            NoStore::SetCookie => "set-cookie",
            NoStore::VaryStar => "vary-star",
            NoStore::NoFreshness => "no-freshness",
            NoStore::TooLarge => "too-large",
            NoStore::Incomplete => "incomplete",
            NoStore::Partial => "partial",
            NoStore::NotUnderstood => "must-understand",
            NoStore::Filter => "filter",
            NoStore::Busy => "capture-budget",
        }
    }
}

/// What the store needs to know about an accepted response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Storable {
    /// Freshness lifetime in seconds (`u64::MAX` = forever).
    pub lifetime: u64,
    /// Directives that keep mattering after storage.
    pub must_revalidate: bool,
    pub no_cache: bool,
    pub stale_while_revalidate: u64,
    pub stale_if_error: u64,
}

/// All values of a header.
pub fn values<'a>(headers: &'a [Header], name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
    headers
        .iter()
        .filter(move |h| h.name.eq_ignore_ascii_case(name.as_bytes()))
        .map(|h| &h.value[..])
}

fn first<'a>(headers: &'a [Header], name: &'a str) -> Option<&'a [u8]> {
    values(headers, name).next()
}

/// Parses an HTTP date header into Unix seconds (any of the three forms of RFC 9110 §5.6.7;
/// anything else, including wrong-case names, is invalid).
pub fn http_date(v: Option<&[u8]>) -> Option<u64> {
    weir_http::conditional::parse_date(v?)
}

/// The directives of a response for a shared cache: CDN-Cache-Control wins when present.
/// A `CDN-Cache-Control` that is not a valid RFC 8941 Dictionary (or has a member of the wrong
/// type) is ignored as a whole (RFC 9213 §2.1).
pub fn response_directives(headers: &[Header]) -> Directives {
    if first(headers, "cdn-cache-control").is_some() {
        if let Some(d) = Directives::parse_structured(values(headers, "cdn-cache-control")) {
            return d;
        }
    }
    Directives::parse(values(headers, "cache-control"))
}

/// RFC 9111 §3: whether (and how long) a shared cache may store this response.
pub fn storable(
    method: &Method,
    req_headers: &[Header],
    status: u16,
    resp_headers: &[Header],
    rules: &StoreRules,
    now: u64,
) -> Result<Storable, NoStore> {
    // A partial response is never stored as if complete, whatever the rules say (RFC 9111 §3.4):
    // weir strips Range upstream, so a 206 here is an origin answering a plain GET with a part.
    // A route that slices stores parts as parts: [`storable_part`].
    if status == 206 && matches!(method, Method::Get | Method::Head) {
        return Err(NoStore::Partial);
    }
    storable_any(method, req_headers, status, resp_headers, rules, now)
}

/// [`storable`] for a 206 answering a range weir asked for (RFC 9111 §3.4): stored as the part
/// it is, with one satisfied `Content-Range`, under the same rules as a complete response.
pub fn storable_part(
    method: &Method,
    req_headers: &[Header],
    resp_headers: &[Header],
    rules: &StoreRules,
    now: u64,
) -> Result<Storable, NoStore> {
    if first(resp_headers, "content-range")
        .and_then(crate::extent::content_range)
        .is_none()
    {
        return Err(NoStore::Partial);
    }
    storable_any(method, req_headers, 206, resp_headers, rules, now)
}

fn storable_any(
    method: &Method,
    req_headers: &[Header],
    status: u16,
    resp_headers: &[Header],
    rules: &StoreRules,
    now: u64,
) -> Result<Storable, NoStore> {
    if !matches!(method, Method::Get | Method::Head) {
        return Err(NoStore::Method);
    }
    let req = Directives::parse(values(req_headers, "cache-control"));
    if req.no_store {
        return Err(NoStore::RequestNoStore);
    }
    if values(resp_headers, "vary").any(|v| v.split(|b| *b == b',').any(|t| t.trim_ascii() == b"*"))
    {
        return Err(NoStore::VaryStar);
    }
    // Set-Cookie2 (RFC 2965, obsolete) still sets cookies in the clients that read it.
    if !rules.share_set_cookie
        && (first(resp_headers, "set-cookie").is_some()
            || first(resp_headers, "set-cookie2").is_some())
    {
        return Err(NoStore::SetCookie);
    }
    let rule_ttl = rules
        .ttl_by_status
        .iter()
        .find(|(s, _)| *s == status)
        .map(|(_, t)| *t);
    if rules.ignore_origin {
        return rule_ttl
            .map(|lifetime| Storable {
                lifetime,
                must_revalidate: false,
                no_cache: false,
                stale_while_revalidate: 0,
                stale_if_error: 0,
            })
            .ok_or(NoStore::NoFreshness);
    }
    let d = response_directives(resp_headers);
    // must-understand: store only a status whose rules weir implements, and then no-store,
    // which the origin sends alongside for caches that do not understand, is ignored.
    if d.must_understand && !UNDERSTOOD_STATUSES.contains(&status) {
        return Err(NoStore::NotUnderstood);
    }
    if d.no_store && !d.must_understand {
        return Err(NoStore::ResponseNoStore);
    }
    if d.private {
        return Err(NoStore::Private);
    }
    if first(req_headers, "authorization").is_some()
        && !(d.public || d.s_maxage.is_some() || d.must_revalidate)
    {
        return Err(NoStore::Authorization);
    }
    // A no-cache response with a validator is worth storing even without freshness: every use
    // revalidates it, and a 304 saves the body (RFC 9111 §5.2.2.4).
    let validator =
        first(resp_headers, "etag").is_some() || first(resp_headers, "last-modified").is_some();
    // The origin's explicit freshness first; then a configured ttl, which wins over the
    // heuristic as nginx's `proxy_cache_valid` does (a `ttl: {"200": 1h}` once lost to a
    // tenth of the Last-Modified age); then the heuristic.
    let lifetime = match explicit_lifetime(&d, resp_headers, now) {
        Some(l) => Some(l),
        None if rule_ttl.is_some() => rule_ttl,
        None => match heuristic_lifetime(status, &d, resp_headers, now) {
            Some(l) => Some(l),
            None if d.no_cache && validator => Some(0),
            None => None,
        },
    }
    .ok_or(NoStore::NoFreshness)?;
    Ok(Storable {
        lifetime,
        must_revalidate: d.must_revalidate || d.proxy_revalidate || d.s_maxage.is_some(),
        no_cache: d.no_cache,
        stale_while_revalidate: d.stale_while_revalidate.unwrap_or(0),
        stale_if_error: d.stale_if_error.unwrap_or(0),
    })
}

/// RFC 9110 §9.3.3: whether a POST's response may be stored for later GETs of the request URI.
/// It must be a 200 or 203 with explicit freshness (`max-age`, `s-maxage` or `Expires`) and a
/// `Content-Location` naming the request's own URI: `path_and_query` as a path-absolute
/// reference, or an `http://` URL of the same `authority`. The caller still applies
/// [`storable`] as for a GET.
pub fn post_response_reusable(
    path_and_query: &[u8],
    authority: &[u8],
    status: u16,
    resp_headers: &[Header],
) -> bool {
    if !matches!(status, 200 | 203) {
        return false;
    }
    let d = response_directives(resp_headers);
    let explicit =
        d.max_age.is_some() || d.s_maxage.is_some() || first(resp_headers, "expires").is_some();
    let Some(location) = first(resp_headers, "content-location").map(<[u8]>::trim_ascii) else {
        return false;
    };
    let same_uri = if location.starts_with(b"/") {
        location == path_and_query
    } else if let Some(rest) = location.strip_prefix(b"http://") {
        let end = rest.iter().position(|b| *b == b'/').unwrap_or(rest.len());
        rest[..end].eq_ignore_ascii_case(authority) && &rest[end..] == path_and_query
    } else {
        false
    };
    explicit && same_uri
}

/// RFC 9111 §4.2.1: s-maxage, max-age, Expires − Date, then the heuristic (§4.2.2) for
/// heuristically cacheable statuses. `None`: no freshness information at all.
pub fn freshness_lifetime(
    status: u16,
    d: &Directives,
    headers: &[Header],
    now: u64,
) -> Option<u64> {
    explicit_lifetime(d, headers, now).or_else(|| heuristic_lifetime(status, d, headers, now))
}

/// RFC 9111 §4.2.1's explicit freshness: s-maxage, max-age, Expires − Date.
pub fn explicit_lifetime(d: &Directives, headers: &[Header], now: u64) -> Option<u64> {
    if let Some(s) = d.s_maxage {
        return Some(s);
    }
    if let Some(m) = d.max_age {
        return Some(m);
    }
    let date = http_date(first(headers, "date")).unwrap_or(now);
    if let Some(expires) = first(headers, "expires") {
        // An invalid Expires (e.g. "0") means already expired.
        return Some(
            http_date(Some(expires))
                .map(|e| e.saturating_sub(date))
                .unwrap_or(0),
        );
    }
    None
}

/// RFC 9111 §4.2.2: a tenth of the time since Last-Modified (at most a day), for heuristically
/// cacheable statuses and `public` responses.
pub fn heuristic_lifetime(
    status: u16,
    d: &Directives,
    headers: &[Header],
    now: u64,
) -> Option<u64> {
    let date = http_date(first(headers, "date")).unwrap_or(now);
    if HEURISTIC_STATUSES.contains(&status) || d.public {
        if let Some(lm) = http_date(first(headers, "last-modified")) {
            return Some((date.saturating_sub(lm) / 10).min(HEURISTIC_MAX));
        }
    }
    None
}

/// The largest delta-seconds value kept (RFC 9111 §1.2.2): 2^31.
pub const MAX_DELTA: u64 = 1 << 31;

/// The age inputs recorded when a response is received (RFC 9111 §4.2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AgeClock {
    pub request_time: u64,
    pub response_time: u64,
    pub date: u64,
    pub age_value: u64,
}

impl AgeClock {
    pub fn new(request_time: u64, response_time: u64, headers: &[Header]) -> AgeClock {
        let date = http_date(first(headers, "date")).unwrap_or(response_time);
        // RFC 9111 §5.1: of a list (`Age: 7200, 0`, or several lines) the first member counts;
        // an invalid value is ignored. §1.2.2: a delta-seconds too large saturates at 2^31
        // (`Age: 18446744073709551615` once wrapped the sum below, and a stale response was
        // served fresh with `Age: 0`).
        let age_value = first(headers, "age")
            .and_then(|v| v.split(|b| *b == b',').next())
            .map(<[u8]>::trim_ascii)
            .filter(|v| !v.is_empty() && v.iter().all(u8::is_ascii_digit))
            .and_then(|v| std::str::from_utf8(v).ok())
            .map(|s| s.parse::<u64>().map_or(MAX_DELTA, |n| n.min(MAX_DELTA)))
            .unwrap_or(0);
        AgeClock {
            request_time,
            response_time,
            date,
            age_value,
        }
    }

    /// current_age = corrected_initial_age + resident_time.
    pub fn current_age(&self, now: u64) -> u64 {
        let apparent_age = self.response_time.saturating_sub(self.date);
        let response_delay = self.response_time.saturating_sub(self.request_time);
        let corrected_age_value = self.age_value.saturating_add(response_delay);
        let corrected_initial_age = apparent_age.max(corrected_age_value);
        corrected_initial_age.saturating_add(now.saturating_sub(self.response_time))
    }
}

/// What may be done with a stored response for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// Serve it.
    Fresh,
    /// Stale, but the request's `max-stale` allows serving it as is.
    StaleAllowed,
    /// Stale within `stale-while-revalidate`: serve it and revalidate in the background.
    StaleWhileRevalidate,
    /// Must be validated with the origin first; `if_error` says whether it may still be served
    /// if the origin cannot be reached (`stale-if-error`).
    Revalidate { if_error: bool },
}

impl Freshness {
    pub fn as_str(&self) -> &'static str {
        match self {
            Freshness::Fresh => "fresh",
            Freshness::StaleAllowed => "stale-allowed",
            Freshness::StaleWhileRevalidate => "stale-while-revalidate",
            Freshness::Revalidate { .. } => "revalidate",
        }
    }
}

/// The verdict for a stored response (`age` now, its `Storable` facts, soft-purged or not) and
/// the request's directives.
pub fn evaluate(s: &Storable, age: u64, invalidated: bool, req: &Directives) -> Freshness {
    let lifetime = if invalidated { 0 } else { s.lifetime };
    let stale_by = age.saturating_sub(lifetime);
    let if_error = s.stale_if_error > 0 && age < lifetime.saturating_add(s.stale_if_error);
    if req.no_cache || s.no_cache {
        return Freshness::Revalidate { if_error };
    }
    let min_fresh = req.min_fresh.unwrap_or(0);
    let within_req_max_age = req.max_age.is_none_or(|m| age <= m);
    if lifetime == u64::MAX || (age.saturating_add(min_fresh) < lifetime && within_req_max_age) {
        return Freshness::Fresh;
    }
    if s.must_revalidate {
        return Freshness::Revalidate { if_error: false };
    }
    if age >= lifetime {
        match req.max_stale {
            Some(None) => return Freshness::StaleAllowed,
            Some(Some(n)) if stale_by <= n => return Freshness::StaleAllowed,
            _ => {}
        }
        if stale_by < s.stale_while_revalidate && !invalidated {
            return Freshness::StaleWhileRevalidate;
        }
    }
    Freshness::Revalidate { if_error }
}

#[cfg(test)]
pub(crate) mod tests;
