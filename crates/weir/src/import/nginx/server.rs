//! `server` blocks: their `listen`s and names, and how servers on one address become a
//! listener's routes or its sites.

use std::collections::BTreeMap;

use serde_yaml::{Mapping, Value};

use super::actions::{return_action, rewrite};
use super::content::{location_filters, static_route};
use super::files::{files_stay_files, named_locations, path_matches, unused_named};
use super::http::{inherited, Scope};
use super::location::{access, close, location, Access, Loc};
use super::parse::Directive;
use super::refuse::{refusal_route, Refusal};
use super::{map, s, Ctx};
use super::{not_translated, Listen, Server};

pub(super) fn server(cx: &mut Ctx, d: &Directive, scope: Scope) -> Server {
    // nginx's `$server_name`: this server's first name, whatever the request's Host.
    cx.server_name = d
        .children()
        .iter()
        .find(|c| c.name == "server_name")
        .and_then(|c| c.args.first().cloned())
        .filter(|n| !n.contains(['~', '*', '$']));
    let mut srv = Server {
        listens: Vec::new(),
        names: Vec::new(),
        cert: None,
        routes: Vec::new(),
        error_pages: BTreeMap::new(),
    };
    let (mut cert, mut key) = (None, None);
    let mut server_try: Option<&Directive> = None;
    // Inheritance first: a location sees its server's settings wherever they are written.
    let mut scope = scope.nested();
    for x in d.children() {
        match x.name.as_str() {
            "listen" => {
                if let Some(l) = listen(cx, x) {
                    srv.listens.push(l);
                }
            }
            "server_name" => {
                scope.server_name = x.args.first().cloned();
                srv.names = x
                    .args
                    .iter()
                    .filter(|n| !n.is_empty() && *n != "_" && *n != "\"\"")
                    // nginx's `.example.com` is example.com and its subdomains.
                    .flat_map(|n| match n.strip_prefix('.') {
                        Some(bare) => vec![bare.to_string(), format!("*.{bare}")],
                        None => vec![n.clone()],
                    })
                    .filter(|n| {
                        let regex = n.starts_with('~');
                        if regex {
                            cx.out.skipped.push(format!(
                                "{}: server_name {n}: regex names are not translated",
                                x.at()
                            ));
                        }
                        !regex
                    })
                    .collect();
                cx.done();
            }
            "ssl_certificate" => {
                cert = x.args.first().cloned();
                cx.done();
            }
            "ssl_certificate_key" => {
                key = x.args.first().cloned();
                cx.done();
            }
            "location" | "return" | "rewrite" | "try_files" | "proxy_pass" | "if" => {}
            _ => {
                if !inherited(cx, x, &mut scope) {
                    cx.skip(x, not_translated(&x.name));
                }
            }
        }
    }
    if srv.listens.is_empty() {
        srv.listens.push(Listen {
            addr: "0.0.0.0:80".into(),
            ssl: false,
            default: false,
        });
    }
    srv.cert = cert.zip(key);
    srv.error_pages = error_pages(cx, &scope);
    // Server-level `rewrite`s and `return` come before its locations, as nginx runs them.
    let mut server_level = Vec::new();
    // A server-level `if` or internal rewrite weir cannot translate decides, for every request,
    // what the locations then see: the whole server refuses (review of issue 52: they were
    // listed, and the locations served what the `if` would have refused).
    let mut refusal: Option<Refusal> = None;
    for x in d.children() {
        match x.name.as_str() {
            "rewrite" => match rewrite(cx, x) {
                Some(r) => server_level.push(r),
                None => Refusal::add(
                    &mut refusal,
                    503,
                    format!(
                        "{}: a server-level internal rewrite is not translated",
                        x.at()
                    ),
                ),
            },
            "return" => match return_action(cx, x) {
                Some(action) => {
                    let mut r = Mapping::new();
                    for (k, v) in action {
                        r.insert(k, v);
                    }
                    server_level.push(Value::Mapping(r));
                }
                None => Refusal::add(
                    &mut refusal,
                    503,
                    format!("{}: a server-level return is not translated", x.at()),
                ),
            },
            "if" => match host_redirect(cx, x) {
                Some(Some(r)) => server_level.push(r),
                Some(None) => cx.skip(
                    x,
                    "$host is lower-case in nginx: this `if` never matches, and is left out",
                ),
                None => {
                    cx.skip(
                        x,
                        "a server-level `if` is not translated: the server answers 503",
                    );
                    Refusal::add(
                        &mut refusal,
                        503,
                        format!("{}: a server-level if is not translated", x.at()),
                    );
                }
            },
            // A server's `try_files` is what a request no location takes gets (nginx runs it
            // before looking for a location, and a location's own replaces it): kept for the
            // server's own files route below.
            "try_files" if !x.args.is_empty() => server_try = Some(x),
            "try_files" | "proxy_pass" => cx.skip(x, "outside a location: put it in `location /`"),
            _ => {}
        }
    }
    let mut locations: Vec<(Loc, usize)> = Vec::new();
    named_locations(cx, d, &scope);
    for (i, x) in d.children().iter().enumerate() {
        if x.name == "location" {
            for l in location(cx, x, &scope) {
                locations.push((l, i));
            }
        }
    }
    // The server's `try_files` (Rails' `$uri/index.html $uri @unicorn`), its named location
    // an `@app` as in a location (before the unused named locations are listed).
    let mut notes = Mapping::new();
    let has_root = srv_has_root_location(d);
    let (tried, app) = match server_try.filter(|_| !has_root) {
        Some(x) => {
            let (t, a) = super::files::files_to_try(cx, x, x.args.clone(), &mut notes);
            (Some(t), a.map(|a| (x, a)))
        }
        None => (None, None),
    };
    named_pages(cx, &scope, &mut srv.error_pages);
    unused_named(cx);
    // `error_page 50x /50x.html` with `location = /50x.html { root ...; }`: the page is that
    // location's file.
    for (code, uri) in scope.error_pages.clone() {
        let own_root = d.children().iter().find_map(|x| {
            (x.name == "location" && x.args.len() == 2 && x.args[0] == "=" && x.args[1] == uri)
                .then(|| {
                    x.children()
                        .iter()
                        .find(|c| c.name == "root")
                        .and_then(|c| c.args.first().cloned())
                })
                .flatten()
        });
        if let Some(root) = own_root {
            let file = format!("{}{uri}", root.trim_end_matches('/'));
            cx.page_uris.insert(file.clone(), uri.clone());
            srv.error_pages.insert(code, file);
        }
    }
    // nginx's precedence (`precedence.rs`).
    srv.routes = server_level;
    srv.routes.extend(super::precedence::ordered(locations));
    let has_root_location = srv.routes.iter().any(|r| {
        r.get("match")
            .and_then(|m| m.get("path_prefix"))
            .is_some_and(|p| p.as_str() == Some("/"))
    });
    if let (true, Some(x)) = (has_root_location, server_try) {
        cx.skip(
            x,
            "a server's try_files, where `location /` takes every request, is not translated",
        );
    }
    // nginx serves files from `root` when no location takes a path.
    if !has_root_location && scope.fail_closed.is_some() {
        srv.routes.push(map(vec![(
            "respond",
            map(vec![("status", Value::Number(403.into()))]),
        )]));
    } else if !has_root_location {
        if let Some(root) = &scope.root {
            let mut route = static_route(root, &scope, tried, false);
            let mut filters = location_filters(cx, &scope);
            if let Value::Mapping(m) = &mut route {
                for (k, v) in notes {
                    m.insert(k, v);
                }
                if let (Some((_, a)), Some(Value::Mapping(inner))) = (&app, m.get_mut(s("static")))
                {
                    inner.insert(s("app"), a.proxy.clone());
                }
                if let Some((_, a)) = &app {
                    super::location::app_script(m, a);
                }
                if let Some(Value::Sequence(gz)) = m.remove(s("filters")) {
                    filters.extend(gz);
                }
                match access(&scope) {
                    Access::Open => {}
                    Access::Filter(f) => filters.insert(0, f),
                    Access::Closed(_) => {
                        close(m);
                        filters.clear();
                    }
                }
                if let Some((x, a)) = &app {
                    super::files::app_keeps_filters(cx, x, m, a, &filters);
                }
                if !filters.is_empty() {
                    m.insert(s("filters"), Value::Sequence(filters));
                }
                if let Some((_, a)) = &app {
                    srv.routes.extend(super::files::app_answers(m, a));
                }
            }
            srv.routes.push(route);
        }
    }
    files_stay_files(cx, &mut srv.routes);
    pages_stay_files(cx, &mut srv.routes, &mut srv.error_pages);
    if let Some(r) = refusal {
        srv.routes = vec![refusal_route(cx, Value::Mapping(Mapping::new()), &r)];
        srv.error_pages.clear();
    }
    srv
}

/// certbot's `if ($host = NAME) { return 301 https://$host$request_uri; }` as a route: that
/// host, that redirect; `Some(None)` when it can never match (a capital in NAME); `None` for
/// any other `if`.
fn host_redirect(cx: &mut Ctx, d: &Directive) -> Option<Option<Value>> {
    let cond: String = d.args.join(" ");
    let cond = cond.strip_prefix('(')?.strip_suffix(')')?.trim();
    let (var, name) = cond.split_once('=')?;
    if var.trim() != "$host" {
        return None;
    }
    let name = name.trim().trim_matches('"');
    // nginx's `$host` is lower-case: a name with a capital never matches (review of issue 52),
    // while weir's host match ignores case.
    if name.is_empty() || name.contains(['$', '~', '!', ' ', '(']) {
        return None;
    }
    let [ret] = d.children() else {
        return None;
    };
    if ret.name != "return" {
        return None;
    }
    let action = return_action(cx, ret)?;
    if name.bytes().any(|b| b.is_ascii_uppercase()) {
        return Some(None);
    }
    let mut r = Mapping::new();
    r.insert(s("match"), map(vec![("host", s(name))]));
    for (k, v) in action {
        r.insert(k, v);
    }
    cx.done();
    Some(Some(Value::Mapping(r)))
}
pub(super) fn error_pages(cx: &mut Ctx, scope: &Scope) -> BTreeMap<String, String> {
    let Some(root) = &scope.root else {
        return BTreeMap::new();
    };
    let mut out = BTreeMap::new();
    for (code, uri) in scope.error_pages.iter().filter(|(_, u)| u.starts_with('/')) {
        // `error_page 404 /err.html?x=1`: the file is the path's (review of issue 52: the query
        // went into the file name, and the config did not start).
        let uri = uri.split('?').next().unwrap_or(uri);
        let file = format!("{}{uri}", root.trim_end_matches('/'));
        // A page that is not there where its root is (nginx then answers its own page for
        // that request): left out, and said (the corpus of issue 53: kept, the config failed
        // `weir check`), wherever the root is: a page weir cannot read would stop it starting.
        if !std::path::Path::new(&file).is_file() {
            cx.out.skipped.push(format!(
                "error_page {code} {uri}: {file} does not exist: nginx's own page answers instead"
            ));
            continue;
        }
        cx.page_uris.insert(file.clone(), uri.to_string());
        out.insert(code.clone(), file);
    }
    out
}

/// Error pages are internal redirects in nginx: the page's URI is matched against the
/// locations again. weir serves the page as a file, which is the same answer only when the URI
/// lands on a static route of the root the file is under. Any other page is left out, with a
/// note (review of issue 52: `error_page 404 /index.php` sent index.php's source as every 404).
fn pages_stay_files(cx: &mut Ctx, routes: &mut [Value], server: &mut BTreeMap<String, String>) {
    let root_of = |r: &Value| {
        r.get("static")
            .and_then(|st| st.get("root"))
            .and_then(Value::as_str)
            .map(|r| r.trim_end_matches('/').to_string())
    };
    let served_as = |routes: &[Value], cx: &Ctx, file: &str| -> bool {
        let Some(uri) = cx.page_uris.get(file) else {
            return true;
        };
        let taker = routes.iter().position(|r| path_matches(r, uri));
        taker
            .is_some_and(|t| root_of(&routes[t]).is_some_and(|root| file == format!("{root}{uri}")))
    };
    let gone: Vec<String> = server
        .iter()
        .filter(|(_, f)| !served_as(routes, cx, f))
        .map(|(c, _)| c.clone())
        .collect();
    for code in gone {
        if let Some(file) = server.remove(&code) {
            cx.out.skipped.push(format!(
                "error_page {code} {}: another location serves it in nginx (a script, a proxy): left out",
                cx.page_uris.get(&file).cloned().unwrap_or(file)
            ));
        }
    }
    for i in 0..routes.len() {
        let Some(Value::Mapping(pages)) = routes[i].get("error_pages") else {
            continue;
        };
        let gone: Vec<Value> = pages
            .iter()
            .filter(|(_, f)| f.as_str().is_some_and(|f| !served_as(routes, cx, f)))
            .map(|(c, _)| c.clone())
            .collect();
        if gone.is_empty() {
            continue;
        }
        let why = "an error page another location serves in nginx (a script, a proxy): left out";
        cx.out.skipped.push(format!("error_page on a route: {why}"));
        let (k, v) = cx.note(why.to_string());
        if let Value::Mapping(m) = &mut routes[i] {
            m.insert(k, v);
            if let Some(Value::Mapping(pages)) = m.get_mut(s("error_pages")) {
                for c in gone {
                    pages.remove(&c);
                }
                if pages.is_empty() {
                    m.remove(s("error_pages"));
                }
            }
        }
    }
}
pub(super) fn listen(cx: &mut Ctx, d: &Directive) -> Option<Listen> {
    let a = d.args.first()?;
    if a.starts_with('[') {
        cx.skip(d, "IPv6 listen not translated: weir's listener takes an IPv4 or IPv6 address of its own (add one with [::]:PORT if wanted)");
        return None;
    }
    if a.starts_with("unix:") {
        cx.skip(d, "unix-socket listeners are not supported yet");
        return None;
    }
    let addr = if a.chars().all(|c| c.is_ascii_digit()) {
        format!("0.0.0.0:{a}")
    } else if let Some(port) = a.strip_prefix("*:") {
        format!("0.0.0.0:{port}")
    } else if a.contains(':') {
        a.clone()
    } else {
        format!("{a}:80")
    };
    let mut l = Listen {
        addr,
        ssl: false,
        default: false,
    };
    for f in &d.args[1..] {
        match f.as_str() {
            "ssl" => l.ssl = true,
            "default_server" | "default" => l.default = true,
            "http2" | "reuseport" | "deferred" => {}
            f if f.starts_with("backlog=") => {}
            other => cx.skip(d, &format!("listen flag {other:?} not translated")),
        }
    }
    cx.done();
    Some(l)
}
/// Servers grouped by listen address into weir listeners.
pub(super) fn listeners(cx: &mut Ctx, servers: Vec<Server>) -> Vec<Value> {
    // Per address: whether any listen there is `ssl`, and its servers (index, default_server).
    type Address = (String, bool, Vec<(usize, bool)>);
    let mut by_addr: Vec<Address> = Vec::new();
    for (i, srv) in servers.iter().enumerate() {
        for l in &srv.listens {
            match by_addr.iter_mut().find(|(a, _, _)| *a == l.addr) {
                Some((_, ssl, list)) => {
                    *ssl |= l.ssl;
                    list.push((i, l.default));
                }
                None => by_addr.push((l.addr.clone(), l.ssl, vec![(i, l.default)])),
            }
        }
    }
    let mut out = Vec::new();
    for (addr, ssl, list) in by_addr {
        let mut listener = Mapping::new();
        listener.insert(s("address"), s(&addr));
        let cert_of = |i: usize| {
            servers[i]
                .cert
                .as_ref()
                .map(|(c, k)| Value::Sequence(vec![map(vec![("cert", s(c)), ("key", s(k))])]))
        };
        let pages = |i: usize| {
            let mut m = Mapping::new();
            for (k, v) in &servers[i].error_pages {
                m.insert(s(k), s(v));
            }
            m
        };
        if list.len() == 1 {
            let i = list[0].0;
            if ssl {
                match cert_of(i) {
                    Some(c) => {
                        listener.insert(s("tls"), map(vec![("certificates", c)]));
                    }
                    None => cx.out.skipped.push(format!(
                        "listen {addr} ssl: no ssl_certificate in its server (the listener is left without TLS)"
                    )),
                }
            }
            let p = pages(i);
            if !p.is_empty() {
                listener.insert(s("error_pages"), Value::Mapping(p));
            }
            listener.insert(s("routes"), Value::Sequence(servers[i].routes.clone()));
        } else {
            if ssl {
                listener.insert(s("tls"), Value::Mapping(Mapping::new()));
            }
            // The default server: `default_server`, else the first (as nginx picks).
            let default = list.iter().find(|(_, d)| *d).map_or(list[0].0, |(i, _)| *i);
            let mut sites = Vec::new();
            let mut last = None;
            // A name two servers on one address give belongs to the first (nginx: "conflicting
            // server name ... ignored"; certbot-edited files): later ones lose it, and a server
            // left with no name is not reachable.
            let mut claimed: Vec<String> = Vec::new();
            for (i, _) in &list {
                let srv = &servers[*i];
                let mut names = Vec::new();
                for n in &srv.names {
                    let key = n.to_ascii_lowercase();
                    if claimed.contains(&key) {
                        cx.out.skipped.push(format!(
                            "server_name {n}: conflicting server name on {addr}: the first server keeps it, as nginx does (this one's is ignored)"
                        ));
                    } else {
                        claimed.push(key);
                        names.push(n.clone());
                    }
                }
                if *i != default && !srv.names.is_empty() && names.is_empty() {
                    cx.out.skipped.push(format!(
                        "a server on {addr} whose every name an earlier server has: its routes are not translated"
                    ));
                    continue;
                }
                let mut site = Mapping::new();
                if *i == default || srv.names.is_empty() {
                    if *i != default {
                        cx.out.skipped.push(format!(
                            "a second server without server_name on {addr}: its routes are not translated"
                        ));
                        continue;
                    }
                    site.insert(s("default"), Value::Bool(true));
                } else {
                    site.insert(
                        s("hosts"),
                        Value::Sequence(names.iter().map(|n| s(n)).collect()),
                    );
                }
                if ssl {
                    if let Some(c) = cert_of(*i) {
                        site.insert(s("tls"), map(vec![("certificates", c)]));
                    }
                }
                let p = pages(*i);
                if !p.is_empty() {
                    site.insert(s("error_pages"), Value::Mapping(p));
                }
                site.insert(s("routes"), Value::Sequence(srv.routes.clone()));
                if *i == default {
                    last = Some(Value::Mapping(site));
                } else {
                    sites.push(Value::Mapping(site));
                }
            }
            // Exact names before wildcards (weir refuses a name an earlier wildcard covers).
            sites.sort_by_key(|site| {
                site.get("hosts")
                    .and_then(|h| h.as_sequence())
                    .is_some_and(|h| {
                        h.iter()
                            .any(|n| n.as_str().is_some_and(|n| n.starts_with('*')))
                    })
            });
            sites.extend(last);
            listener.insert(s("sites"), Value::Sequence(sites));
        }
        out.push(Value::Mapping(listener));
    }
    out
}

/// Whether server `d` has a `location /` (which takes every request a longer one does not).
fn srv_has_root_location(d: &Directive) -> bool {
    d.children()
        .iter()
        .any(|x| x.name == "location" && x.args.len() == 1 && x.args[0] == "/")
}

/// `error_page 500 502 @maintenance` with `location @maintenance { root ...; try_files
/// /maintenance.html =503; }` (or `rewrite ^ /maintenance.html break;`): the page is that
/// file. Any other named error page is left out and listed (weir's own page answers).
pub(super) fn named_pages(cx: &mut Ctx, scope: &Scope, pages: &mut BTreeMap<String, String>) {
    for (code, (name, eq)) in scope.error_named.clone() {
        let skip = |cx: &mut Ctx, line: String| {
            if !cx.out.skipped.contains(&line) {
                cx.out.skipped.push(line);
            }
        };
        let Some(def) = cx.named.get(name.as_str()).map(|n| n.def.clone()) else {
            skip(
                cx,
                format!("error_page {code} @{name}: no such named location: left out"),
            );
            continue;
        };
        let proxies = def.children().iter().any(|c| c.name == "proxy_pass");
        if eq && code == "404" && proxies {
            // The files' fallback (`location.rs`): said where it applies.
            continue;
        }
        let file = (!eq).then(|| named_page(&def, scope)).flatten();
        match file {
            Some(file) if std::path::Path::new(&file).is_file() => {
                pages.insert(code.clone(), file);
                super::files::named_is_page(cx, &name);
            }
            _ => skip(cx, format!(
                "error_page {code} {}@{name}: only a named location that serves one file (root and try_files /page or rewrite ^ /page break), or `= @app` over files with a proxying @app, is translated: left out (weir's own page answers)",
                if eq { "= " } else { "" }
            )),
        }
    }
}

/// The file a named location serves for every request, if that is all it does.
fn named_page(def: &Directive, scope: &Scope) -> Option<String> {
    let mut root = scope.root.clone();
    let mut page = None;
    for c in def.children() {
        match (c.name.as_str(), c.args.as_slice()) {
            ("root", [r]) => root = Some(r.clone()),
            ("try_files", [p]) | ("try_files", [p, _])
                if p.starts_with('/') && !p.contains('$') =>
            {
                page = Some(p.clone())
            }
            ("rewrite", [re, p, flag])
                if (re == "^" || re == "^(.*)$" || re == "^.*$")
                    && p.starts_with('/')
                    && !p.contains('$')
                    && flag == "break" =>
            {
                page = Some(p.clone())
            }
            ("internal" | "access_log" | "log_not_found" | "expires", _) => {}
            _ => return None,
        }
    }
    let page = page?;
    Some(format!(
        "{}{}",
        root?.trim_end_matches('/'),
        page.split('?').next()?
    ))
}
