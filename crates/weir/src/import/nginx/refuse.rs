//! What makes an imported location refuse rather than answer as it was not meant to (issue 52:
//! an import never widens): the directives weir does not run (handlers, access controls),
//! those it may list and leave (logging, buffering, hints), the refusing route itself, and
//! what `allow`/`deny` rules make of a route ([`access`]).

use serde_yaml::{Mapping, Value};

use super::http::Scope;
use super::{map, s, Ctx};

/// Why a location refuses rather than answer as it was not meant to (issue 52: an import never
/// widens). nginx's phases rank them: `internal` (404) is decided when the location is found,
/// access rules (403) before content, a content handler weir cannot run (503) last.
#[derive(Debug, Clone)]
pub(super) struct Refusal {
    pub(super) status: u16,
    pub(super) why: String,
}

impl Refusal {
    fn rank(&self) -> u8 {
        match self.status {
            404 => 0,
            403 => 1,
            _ => 2,
        }
    }

    /// Keeps whichever of `cur` and (`status`, `why`) nginx would answer first.
    pub(super) fn add(cur: &mut Option<Refusal>, status: u16, why: String) {
        let new = Refusal { status, why };
        if cur.as_ref().is_none_or(|c| new.rank() < c.rank()) {
            *cur = Some(new);
        }
    }
}

/// Content handlers weir does not run: a location holding one answers 503.
pub(super) fn handler(name: &str) -> bool {
    matches!(
        name,
        "fastcgi_pass"
            | "uwsgi_pass"
            | "scgi_pass"
            | "grpc_pass"
            | "memcached_pass"
            | "perl"
            | "js_content"
            | "content_by_lua"
            | "content_by_lua_block"
            | "content_by_lua_file"
            | "rewrite_by_lua"
            | "rewrite_by_lua_block"
            | "rewrite_by_lua_file"
            | "stub_status"
            | "empty_gif"
            | "mp4"
            | "flv"
            | "hls"
            | "dav_methods"
            | "image_filter"
            | "xslt_stylesheet"
            | "ssi"
            | "addition_types"
            | "random_index"
            | "echo"
            | "if"
    )
}

/// Access controls weir cannot translate: a location holding one answers 403.
pub(super) fn access_control(name: &str) -> bool {
    matches!(
        name,
        "auth_request"
            | "auth_jwt"
            | "secure_link"
            | "secure_link_md5"
            | "valid_referers"
            | "satisfy"
            | "access_by_lua"
            | "access_by_lua_block"
            | "access_by_lua_file"
            | "auth_pam"
            | "auth_ldap"
            | "ssl_verify_client"
            | "geo"
    )
}

/// Directives whose absence changes neither who is answered nor with what content (logging,
/// buffering, timeouts, caching hints, compression tuning): listed, and the location kept.
/// Anything else weir does not translate makes the location refuse.
pub(super) fn harmless(name: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "proxy_",
        "gzip_",
        "brotli",
        "open_file_cache",
        "ssl_",
        "autoindex_",
        "limit_conn",
        "limit_rate",
        "client_",
        "lingering_",
        "keepalive",
        "log_",
        "access_log",
        "error_log",
        "charset",
        "source_charset",
        "override_charset",
        "output_buffers",
        "postpone_output",
        "sendfile",
        "fastcgi_",
        "uwsgi_",
        "scgi_",
        "grpc_",
        "chunked_transfer_encoding",
        "send_",
        "resolver",
        "aio",
        "directio",
        "tcp_no",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p))
        || matches!(
            name,
            "expires"
                | "etag"
                | "if_modified_since"
                | "types"
                | "default_type"
                | "server_tokens"
                | "msie_padding"
                | "msie_refresh"
                | "add_trailer"
                | "more_set_headers"
                | "more_clear_headers"
                | "autoindex"
                | "limit_req_status"
                | "reset_timedout_connection"
                | "underscores_in_headers"
                | "ignore_invalid_headers"
                | "max_ranges"
                | "merge_slashes"
                | "absolute_redirect"
                | "port_in_redirect"
                | "server_name_in_redirect"
                | "recursive_error_pages"
                | "log_not_found"
                | "disable_symlinks"
                | "read_ahead"
                | "http2_push"
                | "http2_push_preload"
                | "set"
                | "mirror"
                | "mirror_request_body"
                | "slice"
                | "sub_filter"
                | "sub_filter_once"
                | "sub_filter_types"
        )
}

/// A route that refuses: `matcher`, a note saying why, and the status.
pub(super) fn refusal_route(cx: &mut Ctx, matcher: Value, r: &Refusal) -> Value {
    let mut route = Mapping::new();
    route.insert(s("match"), matcher);
    let (k, v) = cx.note(format!("answers {}: {}", r.status, r.why));
    route.insert(k, v);
    route.insert(
        s("respond"),
        map(vec![("status", Value::Number(r.status.into()))]),
    );
    Value::Mapping(route)
}

/// What a scope's `allow`/`deny` rules (and untranslatable access controls) make of its routes.
pub(super) enum Access {
    Open,
    /// An `ip` filter.
    Filter(Value),
    /// 403 for everyone, and why (listed) when it is stricter than nginx.
    Closed(Option<String>),
}

pub(super) fn access(scope: &Scope) -> Access {
    if let Some(d) = &scope.fail_closed {
        return Access::Closed(Some(format!(
            "`{d}` is not translated: the route answers 403"
        )));
    }
    let rules = &scope.access;
    let Some(((last_allow, last_who), rest)) = rules.split_last() else {
        return Access::Open;
    };
    let ip_list = |v: &[(bool, String)]| Value::Sequence(v.iter().map(|(_, w)| s(w)).collect());
    match (last_allow, last_who.as_str()) {
        (false, "all") if rest.is_empty() => Access::Closed(None),
        (false, "all") if rest.iter().all(|(a, w)| *a && w != "all") => {
            Access::Filter(map(vec![("ip", map(vec![("allow", ip_list(rest))]))]))
        }
        (true, "all") if rest.iter().all(|(a, w)| !*a && w != "all") => {
            Access::Filter(map(vec![("ip", map(vec![("deny", ip_list(rest))]))]))
        }
        _ if rules.iter().all(|(a, w)| !*a && w != "all") => {
            Access::Filter(map(vec![("ip", map(vec![("deny", ip_list(rules))]))]))
        }
        _ => Access::Closed(Some(
            "allow/deny rules in an order weir's ip filter cannot keep: the route answers 403"
                .into(),
        )),
    }
}

/// Makes `route` a 403: its action replaced, its match kept.
pub(super) fn close(route: &mut Mapping) {
    for k in [
        "proxy",
        "static",
        "respond",
        "redirect",
        "cache",
        "error_pages",
    ] {
        route.remove(s(k));
    }
    route.insert(
        s("respond"),
        map(vec![("status", Value::Number(403.into()))]),
    );
}
