//! Who may use the admin API: the checks every admin request passes before any endpoint runs.
//!
//! The admin API is meant for the operator's tools and browser, and a browser is what makes it
//! reachable by others: a page the operator has open can send simple cross-site requests
//! (`POST /purge?all=1`, `POST /reload`), and DNS rebinding lets a page of any name read the
//! answers. So, like Prometheus' and Consul's checks:
//! - the Host must be a loopback name (`localhost`, `127.0.0.0/8`, `::1`), the admin listener's
//!   own address (any IP literal when it is bound to all addresses: a rebinding attack needs a
//!   name), or a name in `admin.allowed_hosts`; else 403;
//! - an unsafe method (anything but GET, HEAD, OPTIONS) that carries an `Origin` other than the
//!   request's own (or `Sec-Fetch-Site: cross-site`/`same-site`) is refused: 403;
//! - with `admin.token_file` or `admin.token_env`, every request but `GET /health` needs
//!   `Authorization: Bearer <token>` (compared in constant time); else 401;
//! - every endpoint has its methods: anything else is 405 with `Allow` (RFC 9110 §15.5.6).

use std::net::IpAddr;

use weir_http::{Method, RequestHead};

use super::AdminReply;
pub use crate::runtime::admin_settings::AdminSettings;

/// The refusal for `req` under `settings`, if it is refused.
pub fn refuse(settings: &AdminSettings, req: &RequestHead) -> Option<AdminReply> {
    if let Some(host) = req.host() {
        if !host_allowed(settings, host) {
            return Some(refusal(403, "Host not allowed for the admin API", b""));
        }
    }
    let safe = matches!(req.method, Method::Get | Method::Head | Method::Options);
    if !safe && cross_site(req) {
        return Some(refusal(403, "cross-site request refused", b""));
    }
    let allow = allowed_methods(req.path());
    if let Some(allow) = allow {
        if !method_in(&req.method, allow) {
            let line = format!("Allow: {}\r\n", allow.join(", "));
            return Some(refusal(405, "method not allowed", line.as_bytes()));
        }
    }
    if let Some(token) = settings.token() {
        let exempt = req.path() == b"/health" && safe;
        if !exempt && !bearer_matches(req, token) {
            return Some(refusal(
                401,
                "a bearer token is required",
                b"WWW-Authenticate: Bearer realm=\"weir admin\"\r\n",
            ));
        }
    }
    None
}

fn host_allowed(settings: &AdminSettings, host: &[u8]) -> bool {
    if host.eq_ignore_ascii_case(b"localhost") {
        return true;
    }
    let literal = host.strip_prefix(b"[").and_then(|h| h.strip_suffix(b"]"));
    let ip = std::str::from_utf8(literal.unwrap_or(host))
        .ok()
        .and_then(|t| t.parse::<IpAddr>().ok());
    if let Some(ip) = ip {
        let bound = settings.address.ip();
        return ip.is_loopback() || bound.is_unspecified() || ip == bound;
    }
    settings
        .allowed_hosts()
        .iter()
        .any(|h| h.eq_ignore_ascii_case(host))
}

/// The methods each endpoint takes; `None`: no such endpoint (404 from the API).
pub fn allowed_methods(path: &[u8]) -> Option<&'static [&'static str]> {
    Some(match path {
        b"/" | b"/metrics" | b"/openapi.json" | b"/health" | b"/ready" | b"/status" | b"/stats"
        | b"/breakers" | b"/cluster" | b"/shield" | b"/dashboard.json" => &["GET", "HEAD"],
        b"/upstreams/drain" | b"/upstreams/enable" => &["POST"],
        b"/shield/unblock" => &["POST"],
        b"/purge" => &["POST", "PURGE"],
        b"/reload" => &["POST"],
        _ => return None,
    })
}

fn method_in(m: &Method, allow: &[&str]) -> bool {
    allow.iter().any(|a| a.as_bytes() == m.as_str().as_bytes())
}

/// An `Origin` that is not the request's own, or a fetch the browser calls cross-site.
fn cross_site(req: &RequestHead) -> bool {
    if let Some(site) = req.header("sec-fetch-site") {
        if site.eq_ignore_ascii_case(b"cross-site") || site.eq_ignore_ascii_case(b"same-site") {
            return true;
        }
    }
    let Some(origin) = req.header("origin") else {
        return false;
    };
    // `scheme://host[:port]`; "null" (a sandboxed or opaque origin) is never the admin's own.
    let authority = origin
        .strip_prefix(b"http://")
        .or_else(|| origin.strip_prefix(b"https://"));
    match (authority, req.authority()) {
        (Some(a), Some(own)) => !a.eq_ignore_ascii_case(own),
        _ => true,
    }
}

/// `Authorization: Bearer <token>`, compared in time independent of where they differ.
fn bearer_matches(req: &RequestHead, token: &str) -> bool {
    let Some(v) = req.header("authorization") else {
        return false;
    };
    let given = match v.get(..7) {
        Some(scheme) if scheme.eq_ignore_ascii_case(b"bearer ") => v[7..].trim_ascii(),
        _ => return false,
    };
    let want = token.as_bytes();
    let mut diff = given.len() ^ want.len();
    for (i, w) in want.iter().enumerate() {
        diff |= usize::from(given.get(i).copied().unwrap_or(0) ^ w);
    }
    diff == 0
}

fn refusal(status: u16, why: &str, lines: &[u8]) -> AdminReply {
    AdminReply {
        status,
        content_type: b"application/json",
        body: serde_json::json!({ "error": why }).to_string(),
        lines: lines.to_vec(),
    }
}
