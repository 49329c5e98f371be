//! A location's own routes once nothing in it refuses: its action (`return`, `proxy_pass`,
//! FastCGI or files), the filters its inherited settings make (`limit_req`, `auth_basic`,
//! `add_header`, `gzip`), its error pages and a `limit_except`'s refusal.

use serde_yaml::{Mapping, Value};

use super::files::{app_answers, app_keeps_filters, files_take_cache_control, files_to_try};
use super::http::Scope;
use super::location::{app_script, within};
use super::parse::Directive;
use super::refuse::{access, Access, Refusal};
use super::server::error_pages;
use super::{map, s, Ctx};

/// What a location's directives asked for, gathered before its routes are made.
pub(super) struct Content<'a> {
    pub(super) alias: Option<String>,
    pub(super) try_files: Option<Vec<String>>,
    pub(super) returned: Option<Vec<(Value, Value)>>,
    pub(super) proxied: Option<Vec<(Value, Value)>>,
    pub(super) limit_except: Option<&'a Directive>,
    /// `proxied` is a FastCGI location's (not cached: `proxy_cache` is not `fastcgi_cache`).
    pub(super) fastcgi: bool,
}

/// A location's own routes when nothing in it refuses: its action (`return`, `proxy_pass`, or
/// files), filters, error pages, and a `limit_except`'s refusal. `Err` when it has nothing
/// weir can serve (no action and no root, a root with a variable).
pub(super) fn content_routes(
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
    let mut limits = Vec::new();
    if let Some(v) = &scope.client_max_body_size {
        limits.push(("max_body_bytes", s(v)));
    }
    if let Some(v) = &scope.client_body_timeout {
        limits.push(("body_timeout", s(v)));
    }
    if let Some(v) = &scope.keepalive_timeout {
        limits.push(("keepalive_timeout", s(v)));
    }
    if !limits.is_empty() {
        route.insert(s("limits"), map(limits));
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
            if let Some(a) = &app {
                app_script(&mut route, a);
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
        files_take_cache_control(&mut route, &mut filters, a);
        app_keeps_filters(cx, d, &mut route, a, &filters);
    }
    if !filters.is_empty() {
        route.insert(s("filters"), Value::Sequence(filters));
    }
    let mut pages = error_pages(cx, scope);
    super::server::named_pages(cx, scope, &mut pages);
    if !pages.is_empty() {
        let mut m = Mapping::new();
        for (k, v) in pages {
            m.insert(s(&k), s(&v));
        }
        route.insert(s("error_pages"), Value::Mapping(m));
    }
    let mut routes = Vec::new();
    for r in app.iter().flat_map(|a| app_answers(&route, a)) {
        routes.push(within(r, &matcher).ok_or_else(|| Refusal {
            status: 503,
            why: format!(
                "{}: an `if` of the named location is not translated",
                d.at()
            ),
        })?);
    }
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
    Ok(routes)
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
            (
                "expires",
                s(&if secs == u64::MAX {
                    "max".to_string()
                } else {
                    format!("{secs}s")
                }),
            ),
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
