//! `location` blocks and what they hold: the match, nested locations (flattened; their order
//! is `precedence.rs`'s), files (`root`, `alias`, `try_files`; `files.rs`), the filters a
//! location's inherited settings make, and the refusal of what is not translated (`refuse.rs`;
//! the actions `proxy_pass`, `return` and `rewrite` are `actions.rs`, `fastcgi_pass`
//! `fastcgi.rs`).

use serde_yaml::{Mapping, Value};

use super::actions::{proxy_pass, return_action, rewrite};
use super::files::{app_keeps_filters, files_to_try};
use super::http::{inherited, Scope};
use super::parse::Directive;
pub(super) use super::refuse::{access, close, Access};
use super::refuse::{access_control, handler, harmless, refusal_route, Refusal};
use super::server::error_pages;
use super::{fastcgi, map, not_translated, s, Ctx};

/// One converted `location` (or a location nested in one): its rank in nginx's precedence (0
/// exact, 1 `^~`, 2 regex, 3 prefix), its prefix (for the ordering), whether it was nested,
/// and its routes in order (a `rewrite`'s before the location's, a `limit_except`'s refusal
/// after).
pub(super) struct Loc {
    pub(super) rank: u8,
    pub(super) prefix: Option<String>,
    /// The prefix of the location it is nested in (`None`: at the server's level, or nested in
    /// a regex location).
    pub(super) parent: Option<String>,
    pub(super) routes: Vec<Value>,
}

/// `location`: its routes, then those of the locations nested in it (flattened: a nested
/// regex also requires its parent's prefix). `inherited` carries a refusal an enclosing
/// location made (`internal`, access) down to its nested ones.
pub(super) fn location(cx: &mut Ctx, d: &Directive, scope: &Scope) -> Vec<Loc> {
    location_in(cx, d, scope, None, None)
}

fn location_in(
    cx: &mut Ctx,
    d: &Directive,
    scope: &Scope,
    parent: Option<&Loc>,
    inherited_refusal: Option<&Refusal>,
) -> Vec<Loc> {
    let mut scope = scope.nested();
    let mut args = d.args.clone();
    let mut refusal: Option<Refusal> = inherited_refusal.cloned();
    if let [m, r] = args.as_mut_slice() {
        if m.starts_with('~') && regex::Regex::new(r).is_err() {
            // Without its look-arounds the regex matches a superset of what it matched: a
            // location that only denies may deny more than nginx, never less, and any other
            // refuses (503) on that superset rather than let its paths fall to another route.
            let denies = d
                .children()
                .iter()
                .any(|c| c.name == "deny" && c.args.first().map(String::as_str) == Some("all"));
            let stripped = without_lookarounds(r);
            if regex::Regex::new(&stripped).is_err() {
                cx.skip(d, "the regex is not one weir's regex engine takes (look-arounds and backreferences are not supported)");
                return Vec::new();
            }
            if denies {
                cx.skip(d, &format!("weir's regex engine has no look-arounds: {r:?} became {stripped:?}, which denies more than nginx did"));
            } else {
                let why = format!("weir's regex engine has no look-arounds: {r:?} became {stripped:?}, which refuses more than nginx served");
                cx.skip(d, &why);
                Refusal::add(&mut refusal, 503, why);
            }
            *r = stripped;
        }
    }
    let (rank, mut matcher, prefix) = match args.as_slice() {
        [m, p] if m == "=" => (0, map(vec![("path", s(&encode_path(p)))]), None),
        [m, p] if m == "^~" => (
            1,
            map(vec![("path_prefix", s(&encode_path(p)))]),
            Some(encode_path(p)),
        ),
        [m, r] if m == "~" || m == "~*" => {
            if !r.is_ascii() {
                cx.skip(d, "a regex with non-ASCII letters: weir matches the path percent-encoded, as sent");
                return Vec::new();
            }
            let r = if m == "~*" {
                format!("(?i){r}")
            } else {
                r.clone()
            };
            (2, map(vec![("path_regex", s(&r))]), None)
        }
        [p] if p.starts_with('/') => (3, prefix_match(&encode_path(p)), Some(encode_path(p))),
        // A server's named locations are its `try_files`' apps (`files.rs`).
        [p] if p.starts_with('@') => {
            if parent.is_some() {
                cx.skip(d, "a named location inside a location is not translated");
            }
            return Vec::new();
        }
        _ => {
            cx.skip(d, "location form not understood");
            return Vec::new();
        }
    };
    // Nested in a location: a regex also needs the parent's prefix; one nested in a regex
    // location cannot say both regexes, so it refuses unless it refuses anyway.
    if let Some(p) = parent {
        if rank == 2 {
            match &p.prefix {
                Some(pp) => {
                    if let Value::Mapping(m) = &mut matcher {
                        m.insert(s("path_prefix"), s(pp));
                    }
                }
                None if p.rank == 2 => Refusal::add(
                    &mut refusal,
                    503,
                    "a regex location inside a regex location is not translated".into(),
                ),
                None => {}
            }
        }
    }
    let mut returned: Option<Vec<(Value, Value)>> = None;
    let mut proxied: Option<Vec<(Value, Value)>> = None;
    let mut pass: Option<&Directive> = None;
    let mut alias = None;
    let mut try_files = None;
    let mut limit_except: Option<&Directive> = None;
    let mut before = Vec::new();
    let mut nested = Vec::new();
    // A FastCGI location's `fastcgi_pass`, and the `set`s its parameters may use.
    let mut fcgi_pass: Option<&Directive> = None;
    let has_fcgi = d.children().iter().any(|c| c.name == "fastcgi_pass");
    let mut sets = Vec::new();
    for x in d.children() {
        match x.name.as_str() {
            "fastcgi_pass" if fcgi_pass.is_none() => fcgi_pass = Some(x),
            "set" if has_fcgi => sets.push(x),
            // Translated once the whole block is read: its `proxy_set_header`s may follow it.
            "proxy_pass" => pass = Some(x),
            "return" => {
                if returned.is_none() {
                    returned = return_action(cx, x);
                    if returned.is_none() {
                        Refusal::add(
                            &mut refusal,
                            503,
                            format!("{}: return not translated", x.at()),
                        );
                    }
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
            "rewrite" => match rewrite(cx, x) {
                Some(r) => before.push(r),
                None => Refusal::add(
                    &mut refusal,
                    503,
                    format!("{}: an internal rewrite is not translated", x.at()),
                ),
            },
            "limit_except" => {
                limit_except = Some(x);
                cx.done();
            }
            "location" => nested.push(x),
            "internal" => {
                cx.skip(
                    x,
                    "an internal location answers 404 to every request from outside",
                );
                Refusal::add(&mut refusal, 404, format!("{}: internal", x.at()));
            }
            name if handler(name) => {
                cx.skip(x, not_translated(name));
                Refusal::add(
                    &mut refusal,
                    503,
                    format!("{}: {name} is not translated", x.at()),
                );
            }
            name if access_control(name) => {
                if name == "ssl_verify_client" && x.args.first().map(String::as_str) == Some("off")
                {
                    continue;
                }
                cx.skip(x, "access control not translated: the location answers 403");
                Refusal::add(
                    &mut refusal,
                    403,
                    format!("{}: {name} is not translated", x.at()),
                );
            }
            name => {
                if !inherited(cx, x, &mut scope) {
                    cx.skip(x, not_translated(name));
                    if !harmless(name) {
                        Refusal::add(
                            &mut refusal,
                            503,
                            format!("{}: {name} is not translated", x.at()),
                        );
                    }
                }
            }
        }
    }
    if let Some(x) = pass {
        proxied = proxy_pass(cx, x, prefix.as_deref(), &scope);
        if proxied.is_none() {
            Refusal::add(
                &mut refusal,
                503,
                format!("{}: proxy_pass not translated", x.at()),
            );
        }
    }
    // Access rules weir cannot translate (inherited `auth_request`, `satisfy`, ...), and `deny`.
    if let Access::Closed(why) = access(&scope) {
        let why = why.unwrap_or_else(|| "deny".into());
        Refusal::add(&mut refusal, 403, why);
    }
    let fastcgi = fcgi_pass.is_some();
    let mut used_sets = Vec::new();
    if let Some(p) = fcgi_pass {
        if returned.is_some() {
            cx.skip(
                p,
                "both `return` and `fastcgi_pass`: the `return` answers, as in nginx",
            );
        } else if refusal.is_some() {
            cx.skip(p, "not translated: the location refuses (see its note)");
        } else if proxied.is_some() {
            cx.skip(
                p,
                "beside proxy_pass (nginx takes one): the location answers 503",
            );
            Refusal::add(
                &mut refusal,
                503,
                format!("{}: fastcgi_pass beside proxy_pass", p.at()),
            );
        } else {
            match fastcgi::location(cx, p, &scope, try_files.as_deref(), alias.is_some(), &sets) {
                Ok(t) => {
                    proxied = Some(t.action);
                    used_sets = t.used_sets;
                    try_files = None;
                }
                Err(u) => {
                    cx.out.skipped.push(format!(
                        "{}: {}: {}: the location answers 503",
                        u.at, u.directive, u.why
                    ));
                    Refusal::add(
                        &mut refusal,
                        503,
                        format!("{}: {} {} is not translated", u.at, u.directive, u.why),
                    );
                }
            }
        }
    }
    for (k, x) in sets.iter().enumerate() {
        if used_sets.contains(&k) {
            cx.done();
        } else {
            cx.skip(x, not_translated("set"));
        }
    }
    let this = Loc {
        rank,
        prefix: prefix.clone(),
        parent: parent.and_then(|p| p.prefix.clone()),
        routes: Vec::new(),
    };
    // What nested locations inherit: `internal` and access refusals (a handler is the
    // location's own).
    let passed_down = refusal.as_ref().filter(|r| r.status != 503).cloned();
    let mut out = Vec::new();
    let routes = match refusal {
        Some(r) => vec![refusal_route(cx, matcher, &r)],
        None => match content_routes(
            cx,
            d,
            &scope,
            matcher,
            Content {
                alias,
                try_files,
                returned,
                proxied,
                limit_except,
                fastcgi,
            },
        ) {
            Ok(mut routes) => {
                before.append(&mut routes);
                before
            }
            Err(r) => {
                let (rank, prefix) = (this.rank, this.prefix.clone());
                let matcher = location_matcher(&args, rank, prefix.as_deref(), parent);
                vec![refusal_route(cx, matcher, &r)]
            }
        },
    };
    for x in nested {
        out.extend(location_in(
            cx,
            x,
            &scope,
            Some(&this),
            passed_down.as_ref(),
        ));
    }
    cx.done();
    out.push(Loc { routes, ..this });
    out
}

/// The match of a location again (a refusal decided after the match was used).
fn location_matcher(
    args: &[String],
    rank: u8,
    prefix: Option<&str>,
    parent: Option<&Loc>,
) -> Value {
    let mut m = match (rank, args) {
        (0, [_, p]) => map(vec![("path", s(&encode_path(p)))]),
        (1 | 3, _) => map(vec![("path_prefix", s(prefix.unwrap_or("/")))]),
        (_, [m, r]) => map(vec![(
            "path_regex",
            s(&if m == "~*" {
                format!("(?i){r}")
            } else {
                r.clone()
            }),
        )]),
        _ => map(vec![("path_prefix", s("/"))]),
    };
    if let (2, Some(pp)) = (rank, parent.and_then(|p| p.prefix.as_ref())) {
        if let Value::Mapping(mm) = &mut m {
            mm.insert(s("path_prefix"), s(pp));
        }
    }
    m
}

/// What a location's directives asked for, gathered before its routes are made.
struct Content<'a> {
    alias: Option<String>,
    try_files: Option<Vec<String>>,
    returned: Option<Vec<(Value, Value)>>,
    proxied: Option<Vec<(Value, Value)>>,
    limit_except: Option<&'a Directive>,
    /// `proxied` is a FastCGI location's (not cached: `proxy_cache` is not `fastcgi_cache`).
    fastcgi: bool,
}

/// A location's own routes when nothing in it refuses: its action (`return`, `proxy_pass`, or
/// files), filters, error pages, and a `limit_except`'s refusal. `Err` when it has nothing
/// weir can serve (no action and no root, a root with a variable).
fn content_routes(
    cx: &mut Ctx,
    d: &Directive,
    scope: &Scope,
    matcher: Value,
    c: Content<'_>,
) -> Result<Vec<Value>, Refusal> {
    let Content {
        alias,
        try_files,
        returned,
        proxied,
        limit_except,
        fastcgi,
    } = c;
    let mut app = None;
    let mut route = Mapping::new();
    route.insert(s("match"), matcher.clone());
    if let Some(v) = &scope.client_max_body_size {
        route.insert(s("limits"), map(vec![("max_body_bytes", s(v))]));
    }
    if let Some(l) = limit_except {
        if let Some(Value::Mapping(m)) = route.get_mut(s("match")) {
            m.insert(
                s("methods"),
                Value::Sequence(l.args.iter().map(|x| s(x)).collect()),
            );
        }
    }
    let mut filters = location_filters(cx, scope);
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
                cx.skip(
                    d,
                    "no action: no proxy_pass, return or root to serve: the location answers 503",
                );
                return Err(Refusal {
                    status: 503,
                    why: format!("{}: no proxy_pass, return or root weir can serve", d.at()),
                });
            };
            if root.contains('$') {
                cx.skip(
                    d,
                    "a root or alias with a variable is not translated: the location answers 503",
                );
                return Err(Refusal {
                    status: 503,
                    why: format!("{}: root {root:?} has a variable", d.at()),
                });
            }
            let try_files = try_files.map(|t| {
                let (t, a) = files_to_try(cx, d, t, &mut route);
                app = a;
                t
            });
            let Value::Mapping(mut st) = static_route(root, scope, try_files, alias.is_some())
            else {
                return Err(Refusal {
                    status: 503,
                    why: format!("{}: files not translated", d.at()),
                });
            };
            if let (Some(a), Some(Value::Mapping(inner))) = (&app, st.get_mut(s("static"))) {
                inner.insert(s("app"), a.proxy.clone());
            }
            for (k, v) in st {
                route.insert(k, v);
            }
            if scope.gzip {
                filters.push(gzip_filter(scope));
            }
        }
    }
    if route.contains_key(s("proxy")) {
        if scope.gzip {
            filters.push(gzip_filter(scope));
        }
        if let Some(zone) = scope.proxy_cache.as_ref().filter(|_| !fastcgi) {
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
    if let Access::Filter(f) = access(scope) {
        filters.insert(0, f);
    }
    if let Some(a) = &app {
        app_keeps_filters(cx, d, &mut route, a, &filters);
    }
    if !filters.is_empty() {
        route.insert(s("filters"), Value::Sequence(filters));
    }
    let pages = error_pages(cx, scope);
    if !pages.is_empty() {
        let mut m = Mapping::new();
        for (k, v) in pages {
            m.insert(s(&k), s(&v));
        }
        route.insert(s("error_pages"), Value::Mapping(m));
    }
    let mut routes = vec![Value::Mapping(route)];
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
    Ok(routes)
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
    if scope.add_header.iter().any(|(_, v)| !v.is_empty()) {
        let mut add = Mapping::new();
        // nginx adds nothing for an empty value (`add_header ETag ""`).
        for (k, v) in scope.add_header.iter().filter(|(_, v)| !v.is_empty()) {
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
        map(vec![
            ("types", Value::Sequence(types)),
            // nginx compresses from 20 bytes unless `gzip_min_length` says otherwise.
            (
                "min_length",
                s(scope.gzip_min_length.as_deref().unwrap_or("20")),
            ),
        ]),
    )])
}
pub(super) fn static_route(
    root: &str,
    scope: &Scope,
    try_files: Option<Vec<String>>,
    alias: bool,
) -> Value {
    let mut st = vec![("root", s(root))];
    // nginx's `$uri` is a file, never a directory's index: without a `$uri/` (or a fallback
    // ending in `/`), a `try_files` serves no index (weir's `$uri` would take `/`'s).
    let no_dirs = try_files
        .as_ref()
        .is_some_and(|t| !t.iter().any(|e| e.ends_with('/')));
    if no_dirs {
        st.push(("index", Value::Sequence(Vec::new())));
    } else if !scope.index.is_empty() {
        st.push((
            "index",
            Value::Sequence(scope.index.iter().map(|i| s(i)).collect()),
        ));
    }
    if !alias {
        st.push(("strip_prefix", Value::Bool(false)));
    }
    if let Some(secs) = scope.expires {
        let rule = map(vec![
            ("pattern", s("*")),
            ("expires", s(&format!("{secs}s"))),
        ]);
        st.push(("cache_control", Value::Sequence(vec![rule])));
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
