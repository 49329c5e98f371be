//! `location` blocks and what they hold: the match (in nginx's precedence), `proxy_pass`,
//! `return`, `rewrite`, files (`root`, `alias`, `try_files`), and the filters a location's
//! inherited settings make.

use serde_yaml::{Mapping, Value};

use super::http::{inherited, Scope};
use super::parse::Directive;
use super::server::error_pages;
use super::{map, s, Ctx};
use super::{not_translated, unknown_variable};

/// A `location`: its rank in nginx's precedence (0 exact, 1 `^~`, 2 regex, 3 prefix), its
/// prefix (for the ordering), and its routes in order (a `rewrite`'s before the location's, a
/// `limit_except`'s refusal after).
pub(super) fn location(
    cx: &mut Ctx,
    d: &Directive,
    scope: &Scope,
) -> Option<(u8, Option<String>, Vec<Value>)> {
    let mut scope = scope.nested();
    let mut args = d.args.clone();
    if let [m, r] = args.as_mut_slice() {
        if m.starts_with('~') && regex::Regex::new(r).is_err() {
            // A location that only denies may deny more than nginx, never less: without its
            // look-arounds the regex matches a superset of what it matched.
            let denies = d
                .children()
                .iter()
                .any(|c| c.name == "deny" && c.args.first().map(String::as_str) == Some("all"));
            let stripped = without_lookarounds(r);
            if denies && regex::Regex::new(&stripped).is_ok() {
                cx.skip(d, &format!("weir's regex engine has no look-arounds: {r:?} became {stripped:?}, which denies more than nginx did"));
                *r = stripped;
            } else {
                cx.skip(d, "the regex is not one weir's regex engine takes (look-arounds and backreferences are not supported)");
                return None;
            }
        }
    }
    let (rank, matcher, prefix) = match args.as_slice() {
        [m, p] if m == "=" => (0, map(vec![("path", s(&encode_path(p)))]), None),
        [m, p] if m == "^~" => (
            1,
            map(vec![("path_prefix", s(&encode_path(p)))]),
            Some(encode_path(p)),
        ),
        [m, r] if m == "~" || m == "~*" => {
            if !r.is_ascii() {
                cx.skip(d, "a regex with non-ASCII letters: weir matches the path percent-encoded, as sent");
                return None;
            }
            let r = if m == "~*" {
                format!("(?i){r}")
            } else {
                r.clone()
            };
            (2, map(vec![("path_regex", s(&r))]), None)
        }
        [p] if p.starts_with('/') => (3, prefix_match(&encode_path(p)), Some(encode_path(p))),
        [p] if p.starts_with('@') => {
            cx.skip(d, "named locations are not translated");
            return None;
        }
        _ => {
            cx.skip(d, "location form not understood");
            return None;
        }
    };
    let mut returned: Option<Vec<(Value, Value)>> = None;
    let mut proxied: Option<Vec<(Value, Value)>> = None;
    let mut alias = None;
    let mut try_files = None;
    let mut limit_except: Option<&Directive> = None;
    let mut before = Vec::new();
    for x in d.children() {
        match x.name.as_str() {
            "proxy_pass" => proxied = proxy_pass(cx, x, prefix.as_deref(), &scope),
            "return" => {
                if returned.is_none() {
                    returned = return_action(cx, x);
                } else {
                    cx.skip(x, "a second `return`: the first one answers");
                }
            }
            "alias" => {
                alias = x.args.first().cloned();
                cx.done();
            }
            "try_files" => {
                try_files = Some(x.args.clone());
                cx.done();
            }
            // Its own route, before the location's: the regex keeps deciding.
            "rewrite" => before.extend(rewrite(cx, x)),
            "limit_except" => {
                limit_except = Some(x);
                cx.done();
            }
            "location" => cx.skip(x, "nested locations are not translated"),
            _ => {
                if !inherited(cx, x, &mut scope) {
                    cx.skip(x, not_translated(&x.name));
                }
            }
        }
    }
    let mut route = Mapping::new();
    route.insert(s("match"), matcher.clone());
    if let Some(l) = limit_except {
        if let Some(Value::Mapping(m)) = route.get_mut(s("match")) {
            m.insert(
                s("methods"),
                Value::Sequence(l.args.iter().map(|x| s(x)).collect()),
            );
        }
    }
    let mut filters = location_filters(cx, &scope);
    // `return` runs before the content phase: it wins over proxy_pass and files.
    let content = returned.or_else(|| proxied.clone());
    if content.is_some() && proxied.is_some() && d.children().iter().any(|c| c.name == "return") {
        cx.skip(
            d,
            "both `return` and `proxy_pass`: the `return` answers, as in nginx",
        );
    }
    match content {
        Some(a) => {
            for (k, v) in a {
                route.insert(k, v);
            }
        }
        None => {
            let root = alias.as_ref().or(scope.root.as_ref());
            let Some(root) = root else {
                cx.skip(d, "no action: no proxy_pass, return or root to serve");
                return None;
            };
            let Value::Mapping(st) = static_route(root, &scope, try_files, alias.is_some()) else {
                return None;
            };
            for (k, v) in st {
                route.insert(k, v);
            }
            if scope.gzip {
                filters.push(gzip_filter(&scope));
            }
        }
    }
    if route.contains_key(s("proxy")) {
        if scope.gzip {
            filters.push(gzip_filter(&scope));
        }
        if let Some(zone) = &scope.proxy_cache {
            let mut ttl = Mapping::new();
            for (c, t) in &scope.proxy_cache_valid {
                ttl.insert(s(c), s(t));
            }
            let mut cache = vec![("zone", s(zone))];
            if !ttl.is_empty() {
                cache.push(("ttl", Value::Mapping(ttl)));
            }
            route.insert(s("cache"), map(cache));
        }
    }
    // Access: what nginx closes stays closed.
    match access(&scope) {
        Access::Open => {}
        Access::Filter(f) => filters.insert(0, f),
        Access::Closed(why) => {
            if let Some(why) = why {
                cx.skip(d, &why);
            }
            close(&mut route);
            filters.clear();
        }
    }
    if !filters.is_empty() {
        route.insert(s("filters"), Value::Sequence(filters));
    }
    let pages = error_pages(&scope);
    if !pages.is_empty() {
        let mut m = Mapping::new();
        for (k, v) in pages {
            m.insert(s(&k), s(&v));
        }
        route.insert(s("error_pages"), Value::Mapping(m));
    }
    let mut routes = before;
    routes.push(Value::Mapping(route));
    // `limit_except M { deny all; }`: the other methods are refused here, not passed on to a
    // later route.
    if let Some(l) = limit_except {
        if l.children().iter().any(|c| c.name != "deny") {
            cx.skip(l, "allowed addresses inside limit_except are not translated: the other methods get 403 from everyone");
        }
        routes.push(map(vec![
            ("match", matcher),
            ("respond", map(vec![("status", Value::Number(403.into()))])),
        ]));
    }
    cx.done();
    Some((rank, prefix, routes))
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

/// A location path as weir compares it: percent-encoded as a client sends it (nginx compares
/// the decoded path).
fn encode_path(p: &str) -> String {
    let mut out = String::with_capacity(p.len());
    for b in p.bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~!$&'()*+,;=:@%".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `re` without its look-around groups (`(?!...)`, `(?=...)`, `(?<!...)`, `(?<=...)`).
pub(super) fn without_lookarounds(re: &str) -> String {
    let b = re.as_bytes();
    let mut out = String::with_capacity(re.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 1 < b.len() {
            out.push_str(&re[i..i + 2]);
            i += 2;
            continue;
        }
        let look = ["(?!", "(?=", "(?<!", "(?<="]
            .iter()
            .find(|p| re[i..].starts_with(**p));
        if look.is_some() {
            let mut depth = 0usize;
            let mut j = i;
            while j < b.len() {
                match b[j] {
                    b'\\' => j += 1,
                    b'(' => depth += 1,
                    b')' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            i = j + 1;
            continue;
        }
        let c = re[i..].chars().next().unwrap_or(' ');
        out.push(c);
        i += c.len_utf8();
    }
    out
}
/// `location /x/` matches `/x/...`; `location /x` matches `/x`, `/xyz` and `/x/...` too.
pub(super) fn prefix_match(p: &str) -> Value {
    map(vec![("path_prefix", s(p))])
}
pub(super) fn location_filters(cx: &mut Ctx, scope: &Scope) -> Vec<Value> {
    let mut out = Vec::new();
    for (zone, burst, nodelay) in &scope.limit_req {
        if let Some((rate, per, key)) = cx.limit_zones.get(zone).cloned() {
            // nginx delays the burst without `nodelay`: weir's queue does that.
            let (burst_v, queue) = if *nodelay { (*burst, 0) } else { (0, *burst) };
            let name = format!(
                "limit_{zone}_{burst}{}",
                if *nodelay { "_nodelay" } else { "" }
            );
            cx.filters.insert(
                s(&name),
                map(vec![(
                    "rate_limit",
                    map(vec![
                        ("rate", Value::Number(rate.into())),
                        ("per", s(per)),
                        ("burst", Value::Number(burst_v.into())),
                        ("queue", Value::Number(queue.into())),
                        ("key", s(&key)),
                        ("status", Value::Number(503.into())),
                    ]),
                )]),
            );
            out.push(s(&name));
        }
    }
    if let Some((realm, Some(file))) = &scope.auth_basic {
        out.push(map(vec![(
            "basic_auth",
            map(vec![("file", s(file)), ("realm", s(realm))]),
        )]));
    }
    if !scope.add_header.is_empty() {
        let mut add = Mapping::new();
        for (k, v) in &scope.add_header {
            add.insert(s(k), s(v));
        }
        out.push(map(vec![(
            "headers",
            map(vec![("response", map(vec![("add", Value::Mapping(add))]))]),
        )]));
    }
    out
}
pub(super) fn gzip_filter(scope: &Scope) -> Value {
    let mut types = vec![s("text/html")];
    types.extend(
        scope
            .gzip_types
            .iter()
            .filter(|t| *t != "text/html")
            .map(|t| s(t)),
    );
    map(vec![(
        "compress",
        map(vec![("types", Value::Sequence(types))]),
    )])
}
pub(super) fn static_route(
    root: &str,
    scope: &Scope,
    try_files: Option<Vec<String>>,
    alias: bool,
) -> Value {
    let mut st = vec![("root", s(root))];
    if !scope.index.is_empty() {
        st.push((
            "index",
            Value::Sequence(scope.index.iter().map(|i| s(i)).collect()),
        ));
    }
    if !alias {
        st.push(("strip_prefix", Value::Bool(false)));
    }
    if let Some(t) = try_files {
        st.push((
            "try_files",
            Value::Sequence(t.iter().map(|x| s(x)).collect()),
        ));
    }
    let mut route = vec![("static", map(st))];
    if scope.gzip {
        route.push(("filters", Value::Sequence(vec![gzip_filter(scope)])));
    }
    map(route)
}
pub(super) fn proxy_pass(
    cx: &mut Ctx,
    d: &Directive,
    prefix: Option<&str>,
    scope: &Scope,
) -> Option<Vec<(Value, Value)>> {
    let url = d.args.first()?;
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
    if url.contains('$') {
        cx.skip(d, "a proxy_pass with variables is not translated");
        return None;
    }
    let (hostport, uri) = match rest.find('/') {
        Some(i) => (&rest[..i], Some(&rest[i..])),
        None => (rest, None),
    };
    let upstream = if cx.upstreams.contains_key(s(hostport)) {
        hostport.to_string()
    } else {
        let name = hostport.replace([':', '.'], "_");
        let server = if scheme == "https" {
            format!("https://{hostport}")
        } else if hostport.contains(':') {
            hostport.to_string()
        } else {
            format!("{hostport}:80")
        };
        cx.upstreams.insert(
            s(&name),
            map(vec![("servers", Value::Sequence(vec![s(&server)]))]),
        );
        name
    };
    let mut p = vec![("upstream", s(&upstream))];
    if let (Some(uri), Some(prefix)) = (uri, prefix) {
        // nginx replaces the location's prefix with the URI, byte for byte.
        p.push((
            "regex_replace",
            map(vec![
                ("pattern", s(&format!("^{}", regex::escape(prefix)))),
                ("replacement", s(&uri.replace('$', "$$"))),
            ]),
        ));
    } else if uri.is_some() {
        cx.skip(
            d,
            "a URI part with a regex location is not translated (the path goes as it is)",
        );
    }
    let mut set = Mapping::new();
    for (k, v) in &scope.proxy_set_header {
        match (k.to_ascii_lowercase().as_str(), v.as_str()) {
            // weir sends these itself (docs/config.md#upstreams).
            ("host", "$host" | "$http_host") => {}
            ("x-real-ip" | "x-forwarded-for" | "x-forwarded-proto", _) => {}
            ("connection" | "upgrade", _) => {}
            _ => {
                set.insert(s(k), s(v));
            }
        }
    }
    if !set.is_empty() {
        p.push(("request_headers", map(vec![("set", Value::Mapping(set))])));
    }
    cx.done();
    Some(vec![(s("proxy"), map(p))])
}
pub(super) fn return_action(cx: &mut Ctx, d: &Directive) -> Option<Vec<(Value, Value)>> {
    let (code, rest) = match d.args.as_slice() {
        [c] if c.parse::<u16>().is_ok() => (c.parse::<u16>().ok()?, None),
        [c, r] if c.parse::<u16>().is_ok() => (c.parse::<u16>().ok()?, Some(r.clone())),
        [u] => (302, Some(u.clone())),
        _ => {
            cx.skip(d, "form not understood");
            return None;
        }
    };
    if let Some(v) = rest.as_deref().and_then(unknown_variable) {
        cx.skip(d, &format!("${v} is not a weir variable"));
        return None;
    }
    if code == 444 {
        // nginx closes without answering; weir answers: the nearest is a bare 404.
        cx.skip(
            d,
            "444 (close without a response) has no weir form: answered 404 instead",
        );
        return Some(vec![(
            s("respond"),
            map(vec![("status", Value::Number(404.into()))]),
        )]);
    }
    cx.done();
    if matches!(code, 301 | 302 | 303 | 307 | 308) {
        let to = rest.unwrap_or_else(|| "/".into());
        return Some(vec![(
            s("redirect"),
            map(vec![("to", s(&to)), ("status", Value::Number(code.into()))]),
        )]);
    }
    let mut r = vec![("status", Value::Number(code.into()))];
    if let Some(body) = rest {
        r.push(("body", s(&body)));
    }
    Some(vec![(s("respond"), map(r))])
}
/// `rewrite REGEX REPLACEMENT permanent|redirect`: a route with the regex and a redirect.
pub(super) fn rewrite(cx: &mut Ctx, d: &Directive) -> Option<Value> {
    let (re, to, flag) = match d.args.as_slice() {
        [re, to, flag] => (re, to, flag.as_str()),
        _ => {
            cx.skip(
                d,
                "only `rewrite ... permanent|redirect` is translated (internal rewrites are not)",
            );
            return None;
        }
    };
    if let Some(v) = unknown_variable(to) {
        cx.skip(d, &format!("${v} is not a weir variable"));
        return None;
    }
    let status: u16 = match flag {
        "permanent" => 301,
        "redirect" => 302,
        _ => {
            cx.skip(
                d,
                "only `rewrite ... permanent|redirect` is translated (internal rewrites are not)",
            );
            return None;
        }
    };
    cx.done();
    Some(map(vec![
        ("match", map(vec![("path_regex", s(re))])),
        (
            "redirect",
            map(vec![
                ("to", s(to)),
                ("status", Value::Number(status.into())),
            ]),
        ),
    ]))
}
#[cfg(test)]
mod tests {
    use super::without_lookarounds;

    #[test]
    fn lookarounds_are_removed_whole() {
        assert_eq!(without_lookarounds(r"/\.(?!well-known\/)"), r"/\.");
        assert_eq!(without_lookarounds(r"^/a(?=(b|c))d\(x\)"), r"^/ad\(x\)");
        assert_eq!(without_lookarounds(r"(?<!x)y"), "y");
    }
}
