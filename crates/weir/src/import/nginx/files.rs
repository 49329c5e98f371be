//! Files and what comes after them: `try_files` entries, the application a `try_files` falls
//! back to (issue 53: a named location's `proxy_pass`, `try_files $uri @app`; a FastCGI
//! location's front controller, `try_files $uri $uri/ /index.php?$args`), both weir's `@app`,
//! and `index` names and fallbacks that another location serves in nginx
//! ([`files_stay_files`]).

use std::collections::BTreeMap;

use serde_yaml::{Mapping, Value};

use super::actions::proxy_pass;
use super::content::{gzip_filter, location_filters};
use super::http::{inherited, Scope};
use super::location::{access, Access};
use super::parse::Directive;
use super::refuse::harmless;
use super::{map, not_translated, s, Ctx};

/// A route key holding a `try_files` fallback URI that may be a front controller, removed by
/// [`files_stay_files`] (which knows every route): `{ entry, at, args }`.
const FRONT_KEY: &str = "__weir_import_front__";

/// A server's named location (`location @app`), translated when a `try_files` names it.
pub(super) struct Named {
    pub(super) def: Directive,
    app: Option<Result<App, String>>,
}

/// A named location as weir's `app`: its proxy action, and the filters its requests get in
/// nginx (a `try_files` route whose filters differ cannot hand them over).
#[derive(Clone)]
pub(super) struct App {
    pub(super) proxy: Value,
    pub(super) filters: Vec<Value>,
    /// What the named location's `if`s answer (`script.rs`): routes before the `try_files`
    /// one (they take files' requests too: nginx asks them only of what reaches `@name`).
    pub(super) before: Vec<Value>,
    /// The `set` values its proxy uses.
    pub(super) set: Vec<(String, String)>,
}

/// The named locations among a server's directives, and the scope they inherit.
pub(super) fn named_locations(cx: &mut Ctx, server: &Directive, scope: &Scope) {
    cx.named = server
        .children()
        .iter()
        .filter(|x| x.name == "location" && x.args.len() == 1)
        .filter_map(|x| {
            let name = x.args[0].strip_prefix('@')?;
            Some((
                name.to_string(),
                Named {
                    def: x.clone(),
                    app: None,
                },
            ))
        })
        .collect();
    cx.named_scope = scope.clone();
}

/// Lists the server's named locations no `try_files` made an app of.
pub(super) fn unused_named(cx: &mut Ctx) {
    let named = std::mem::take(&mut cx.named);
    for (_, n) in named {
        match n.app {
            None => cx.skip(
                &n.def,
                "a named location is translated when a try_files ... @name or an `error_page 404 = @name` over files reaches it (a proxy), or an error_page serves its one page",
            ),
            Some(Err(e)) if e == REWRITES || e == PAGE => {}
            Some(Err(_)) => cx.skip(
                &n.def,
                "holds what is not translated: a try_files that names it answers 503",
            ),
            Some(Ok(_)) => cx.done(),
        }
    }
}

/// The app named location `@name` makes, translated once.
fn named_app(cx: &mut Ctx, name: &str) -> Result<App, String> {
    let def = match cx.named.get(name) {
        None => return Err(format!("no location @{name} in this server")),
        Some(Named { app: Some(r), .. }) => return r.clone(),
        Some(n) => n.def.clone(),
    };
    let r = translate_named(cx, &def);
    if let Some(n) = cx.named.get_mut(name) {
        n.app = Some(r.clone());
    }
    r
}

/// `location @name { proxy_pass ...; proxy_set_header ...; }` as a proxy action; anything else
/// weir would not run the same way keeps the `try_files` refusing.
fn translate_named(cx: &mut Ctx, def: &Directive) -> Result<App, String> {
    let mut scope = cx.named_scope.nested();
    let mut pass = None;
    let mut bad = None;
    let mut stmts = Vec::new();
    for x in def.children() {
        match x.name.as_str() {
            "proxy_pass" => pass = Some(x),
            name if super::script::is_script(name) => stmts.push(x),
            // A named location is internal anyway.
            "internal" => cx.done(),
            name => {
                if !inherited(cx, x, &mut scope) {
                    cx.skip(x, not_translated(name));
                    if !harmless(name) {
                        bad.get_or_insert_with(|| format!("{}: {name} is not translated", x.at()));
                    }
                }
            }
        }
    }
    if let Some(why) = bad {
        return Err(why);
    }
    let (before, set) = if stmts.is_empty() {
        (Vec::new(), Vec::new())
    } else {
        let content: Vec<&str> = def
            .children()
            .iter()
            .filter(|c| !super::script::is_script(&c.name))
            .flat_map(|c| c.args.iter().map(String::as_str))
            .collect();
        let sc = super::script::script(cx, &stmts, &content, false)?;
        // An answer on every way would take the files' requests too: not translated.
        if sc
            .before
            .iter()
            .any(|r| r.get("match").and_then(|m| m.get("vars")).is_none())
        {
            return Err(format!(
                "{}: an unconditional `return` or `rewrite` is not translated here",
                def.at()
            ));
        }
        if !sc.before.is_empty() {
            cx.out.skipped.push(format!(
                "{}: location: its `if`s' answers come before the files (nginx asks them only of what reaches it)",
                def.at()
            ));
        }
        (sc.before, sc.set)
    };
    let Some(pass) = pass else {
        return Err(format!(
            "{}: no proxy_pass (an app behind try_files is a proxy)",
            def.at()
        ));
    };
    // After the block's `proxy_set_header`s, wherever they are written.
    let Some(action) = proxy_pass(cx, pass, None, &scope) else {
        return Err(format!("{}: proxy_pass not translated", pass.at()));
    };
    let mut filters = location_filters(cx, &scope);
    if scope.gzip {
        filters.push(gzip_filter(&scope));
    }
    match access(&scope) {
        Access::Open => {}
        Access::Filter(f) => filters.insert(0, f),
        Access::Closed(why) => {
            return Err(why.unwrap_or_else(|| format!("{}: deny", def.at())));
        }
    }
    if scope.proxy_cache.is_some() {
        cx.out.skipped.push(format!(
            "{}: proxy_cache: the app behind try_files is not cached",
            def.at()
        ));
    }
    let proxy = action
        .into_iter()
        .find(|(k, _)| k.as_str() == Some("proxy"))
        .map(|(_, v)| v)
        .ok_or_else(|| format!("{}: proxy_pass not translated", pass.at()))?;
    Ok(App {
        proxy,
        filters,
        before,
        set,
    })
}

/// A `try_files` fallback to a front controller: `/index.php?$args` (`?$query_string`,
/// `$is_args$args`): the script's path.
fn front_form(e: &str) -> Option<&str> {
    let path = match e.split_once('?') {
        Some((p, "$args" | "$query_string")) => p,
        Some(_) => return None,
        None => e
            .strip_suffix("$is_args$args")
            .or_else(|| e.strip_suffix("$is_args$query_string"))?,
    };
    (path.starts_with('/') && !path.contains('$')).then_some(path)
}

/// `try_files` as weir's static action takes it: `$uri` forms and paths; an entry with another
/// variable is left out (fewer files tried, never more). The last entry: a named location
/// weir translates becomes `@app` (its app returned), a front controller's URI its path (decided
/// by [`files_stay_files`]), anything else not translated `=503`, noted on the route.
pub(super) fn files_to_try(
    cx: &mut Ctx,
    d: &Directive,
    t: Vec<String>,
    route: &mut Mapping,
) -> (Vec<String>, Option<App>) {
    let n = t.len();
    let mut out = Vec::with_capacity(n);
    let mut app = None;
    let front = |entry: &str, args: bool| {
        map(vec![
            ("entry", s(entry)),
            ("at", s(&d.at())),
            ("args", Value::Bool(args)),
        ])
    };
    for (i, e) in t.into_iter().enumerate() {
        let last = i + 1 == n;
        let plain = e.starts_with('=')
            || ((e.starts_with('/') || e.starts_with("$uri"))
                && !e.replace("$uri", "").contains('$'));
        let named = e.strip_prefix('@').filter(|_| last);
        // `location @rewrites { rewrite ^(.+)$ /index.html last; }` (SPAs): that path.
        let redirected = named.and_then(|n| named_rewrite(cx, n));
        if let Some(path) = redirected {
            route.insert(s(FRONT_KEY), front(&path, false));
            out.push(path);
        } else if plain {
            if last && e.starts_with('/') {
                route.insert(s(FRONT_KEY), front(&e, false));
            }
            out.push(e);
        } else if let Some(name) = named {
            match named_app(cx, name) {
                Ok(a) => {
                    app = Some(a);
                    out.push("@app".into());
                }
                Err(why) => {
                    let why = format!("try_files falls back to {e:?}, which is not translated ({why}): 503 instead");
                    cx.skip(d, &why);
                    let (k, v) = cx.note(why);
                    route.insert(k, v);
                    out.push("=503".into());
                }
            }
        } else if let Some(path) = front_form(&e).filter(|_| last) {
            route.insert(s(FRONT_KEY), front(&e, true));
            out.push(path.to_string());
        } else if last {
            let why =
                format!("try_files falls back to {e:?}, which is not translated: 503 instead");
            cx.skip(d, &why);
            let (k, v) = cx.note(why);
            route.insert(k, v);
            out.push("=503".into());
        } else {
            cx.skip(
                d,
                &format!("try_files entry {e:?} is not translated: left out"),
            );
        }
    }
    (out, app)
}

/// The named location's `if` answers for the route that falls back to it: only when the route
/// still hands requests to the app (its filters the named location's), and with the route's
/// filters, as nginx reaches them after the location's access checks (the review of issue 53:
/// they skipped an `auth_basic`, and stayed when the fallback refused).
pub(super) fn app_answers(route: &Mapping, a: &App) -> Vec<Value> {
    let kept = route
        .get(s("static"))
        .and_then(|st| st.get("app"))
        .is_some();
    if !kept {
        return Vec::new();
    }
    a.before
        .iter()
        .map(|r| {
            let mut r = r.clone();
            if let (Value::Mapping(m), Some(f)) = (&mut r, route.get(s("filters"))) {
                m.insert(s("filters"), f.clone());
            }
            r
        })
        .collect()
}

/// What a named location [`named_rewrite`] took stands for (translated as a path).
const REWRITES: &str = "rewrites every URI to a path";
/// A named location an `error_page` serves as a page (`server.rs`).
const PAGE: &str = "an error page";

/// Marks named location `name` as translated: an `error_page`'s page.
pub(super) fn named_is_page(cx: &mut Ctx, name: &str) {
    if let Some(n) = cx.named.get_mut(name) {
        if n.app.is_none() {
            n.app = Some(Err(PAGE.into()));
            cx.done();
        }
    }
}

/// A named location that only rewrites every URI to one path (`rewrite ^(.+)$ /index.html
/// last;`, `rewrite ^ /index.php last;`): that path, a `try_files` fallback like any other.
fn named_rewrite(cx: &mut Ctx, name: &str) -> Option<String> {
    let def = cx.named.get(name)?.def.clone();
    let [r] = def.children() else {
        return None;
    };
    let [re, to, flag] = r.args.as_slice() else {
        return None;
    };
    let every = matches!(
        re.as_str(),
        "^" | "^(.+)$" | "^(.*)$" | "^.*$" | "^.+$" | ".*" | "(.*)"
    );
    let plain = to.starts_with('/') && !to.contains(['$', '?']);
    if r.name != "rewrite" || flag != "last" || !every || !plain {
        return None;
    }
    cx.done();
    if let Some(n) = cx.named.get_mut(name) {
        n.app = Some(Err(REWRITES.into()));
    }
    Some(to.clone())
}

/// `add_header Cache-Control ...` beside `try_files ... @app` (Rails' assets): in nginx the
/// field is on the files only (the app's answers are the named location's). When it is all
/// that keeps the filters apart, it moves to the files' `cache_control` (after `expires`'s
/// field, as nginx writes them), and the app can be handed over.
pub(super) fn files_take_cache_control(route: &mut Mapping, filters: &mut Vec<Value>, app: &App) {
    if *filters == app.filters {
        return;
    }
    let mut rest = filters.clone();
    let mut value = None;
    for f in rest.iter_mut() {
        let Some(Value::Mapping(add)) = f
            .get_mut("headers")
            .and_then(|h| h.get_mut("response"))
            .and_then(|r| r.get_mut("add"))
        else {
            continue;
        };
        let key = add
            .keys()
            .find(|k| {
                k.as_str()
                    .is_some_and(|k| k.eq_ignore_ascii_case("cache-control"))
            })
            .cloned();
        if let Some(k) = key {
            value = add.shift_remove(&k);
        }
    }
    rest.retain(|f| {
        f.get("headers")
            .and_then(|h| h.get("response"))
            .and_then(|r| r.get("add"))
            .and_then(Value::as_mapping)
            .is_none_or(|m| !m.is_empty())
    });
    let (Some(value), true) = (value, rest == app.filters) else {
        return;
    };
    let Some(Value::Mapping(st)) = route.get_mut(s("static")) else {
        return;
    };
    let rules = st
        .entry(s("cache_control"))
        .or_insert_with(|| Value::Sequence(vec![map(vec![("pattern", s("*"))])]));
    if let Value::Sequence(rules) = rules {
        for r in rules.iter_mut() {
            if let Value::Mapping(r) = r {
                r.insert(s("value"), value.clone());
            }
        }
    }
    *filters = rest;
}

/// The app from a named location goes only where the `try_files` route's filters are the
/// named location's: else the fallback answers 503 (noted).
pub(super) fn app_keeps_filters(
    cx: &mut Ctx,
    d: &Directive,
    route: &mut Mapping,
    app: &App,
    filters: &[Value],
) {
    if app.filters == filters {
        return;
    }
    let why = "try_files falls back to a named location whose filters (add_header, limit_req, auth_basic, allow/deny, gzip) differ from this location's: 503 instead".to_string();
    cx.skip(d, &why);
    let (k, v) = cx.note(why);
    route.insert(k, v);
    if let Some(Value::Mapping(st)) = route.get_mut(s("static")) {
        st.shift_remove(s("app"));
        if let Some(Value::Sequence(t)) = st.get_mut(s("try_files")) {
            if let Some(l) = t.last_mut() {
                *l = s("=503");
            }
        }
    }
}

/// nginx's `index` and a `try_files` whose last entry is a path are internal redirects: that
/// URI is matched against the locations again. weir's static action serves it as a file of the
/// same root, which is the same answer only when the URI lands on a static route of that
/// root. When another route would take it (`/index.php` into a PHP location), serving the file
/// would hand out a script's source, which the import must never do: an index name is left
/// out (a directory without one answers 403), and a fallback becomes `=503`, noted on the
/// route. When that route is a FastCGI location of the same root and filters, the fallback is
/// its front controller instead (issue 53): `@app`, with an upstream whose `fallback` is the
/// script and which runs a directory's index script (the index name left out of the files).
pub(super) fn files_stay_files(cx: &mut Ctx, routes: &mut [Value]) {
    let root_of = |r: &Value| {
        r.get("static")
            .and_then(|st| st.get("root"))
            .and_then(Value::as_str)
            .map(String::from)
    };
    for i in 0..routes.len() {
        let marker = match &mut routes[i] {
            Value::Mapping(m) => m.shift_remove(s(FRONT_KEY)),
            _ => None,
        };
        let Some(root) = root_of(&routes[i]) else {
            continue;
        };
        let taker =
            |routes: &[Value], path: &str| routes.iter().position(|r| path_matches(r, path));
        // Whether `path` is answered by this route or a static one of the same root and the
        // same filters (the review of issue 53: a fallback into a location with `auth_basic`
        // was served without it).
        let stays = |routes: &[Value], path: &str| {
            taker(routes, path).is_none_or(|t| {
                t == i
                    || (root_of(&routes[t]).as_deref() == Some(&root)
                        && routes[t].get("filters") == routes[i].get("filters"))
            })
        };
        let st = routes[i].get("static");
        // The directories whose index this route serves: its exact path or prefix as a
        // directory (`location /sub` serves `/sub/`), and `/` (review of issue 52: an index was
        // checked under `/` alone, and `/sub/index.php` was served as a file).
        let m = routes[i].get("match");
        let mut dirs = vec!["/".to_string()];
        for key in ["path", "path_prefix"] {
            if let Some(p) = m.and_then(|m| m.get(key)).and_then(Value::as_str) {
                let d = match p.rfind('/') {
                    Some(at) if key == "path" => p[..=at].to_string(),
                    _ if p.ends_with('/') => p.to_string(),
                    _ => format!("{p}/"),
                };
                dirs.push(d);
            }
        }
        let index: Vec<String> = match st.and_then(|st| st.get("index")) {
            Some(Value::Sequence(v)) => v
                .iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect(),
            _ => vec!["index.html".into()],
        };
        // nginx tries the names in order: after one that another location serves (and runs),
        // a later one would be served where nginx ran the first, so it goes too (the corpus:
        // Nextcloud's `/` served index.html where nginx ran index.php).
        let kept: Vec<String> = index
            .iter()
            .take_while(|n| dirs.iter().all(|d| stays(routes, &format!("{d}{n}"))))
            .cloned()
            .collect();
        let last = st
            .and_then(|st| st.get("try_files"))
            .and_then(Value::as_sequence)
            .and_then(|t| t.last())
            .and_then(Value::as_str)
            .filter(|l| l.starts_with('/'))
            .map(String::from);
        let fallback_leaves = last
            .as_ref()
            .is_some_and(|l| !stays(routes, l.split('?').next().unwrap_or("/")));
        let field = |k: &str| {
            marker
                .as_ref()
                .and_then(|m| m.get(k))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let (entry, at) = (field("entry"), field("at"));
        let args = marker
            .as_ref()
            .and_then(|m| m.get("args"))
            .and_then(Value::as_bool);
        let front = match (args, &last, fallback_leaves) {
            (Some(_), Some(l), true) => front_controller(cx, routes, i, l, &index, &dirs),
            _ => None,
        };
        let script = front.as_ref().and_then(|(_, n)| n.clone());
        let mut notes = Vec::new();
        let gone: Vec<&String> = index
            .iter()
            .filter(|n| !kept.contains(n) && script.as_ref() != Some(*n))
            .collect();
        if !gone.is_empty() {
            notes.push((Listed::Route, format!("index {gone:?} left out: another location serves it in nginx (a directory without an index answers 403)")));
        }
        if let Some(n) = &script {
            let first = index.iter().position(|x| x == n);
            let after: Vec<&String> = kept
                .iter()
                .filter(|k| index.iter().position(|x| x == *k) > first)
                .collect();
            if !after.is_empty() {
                // Said in the output only: nothing is left out.
                notes.push((Listed::No, format!("index: a directory holding both {n:?} and one of {after:?} runs {n:?} in nginx; here the file is served")));
            }
        }
        match (&front, args) {
            (Some(_), Some(false)) => notes.push((
                Listed::At(at.clone()),
                format!("try_files falls back to {entry:?}: nginx passes it no query string (no ?$args); weir's front controller gets the client's"),
            )),
            (Some(_), _) => {}
            (None, Some(true)) => notes.push((
                Listed::At(at.clone()),
                format!("try_files falls back to {entry:?}, which is not translated: 503 instead"),
            )),
            (None, _) if fallback_leaves => notes.push((
                Listed::Route,
                format!(
                    "try_files falls back to {:?}, which another location serves in nginx: 503 instead",
                    last.as_deref().unwrap_or_default()
                ),
            )),
            (None, _) => {}
        }
        let refuse = front.is_none() && (fallback_leaves || args == Some(true));
        let Value::Mapping(m) = &mut routes[i] else {
            continue;
        };
        for (listed, why) in notes {
            let line = match listed {
                Listed::At(at) => Some(format!("{at}: location: {why}")),
                Listed::Route => Some(format!("(a static route of root {root}): {why}")),
                Listed::No => None,
            };
            if let Some(line) = line.filter(|l| !cx.out.skipped.contains(l)) {
                cx.out.skipped.push(line);
            }
            let (k, v) = cx.note(why);
            m.insert(k, v);
        }
        let Some(Value::Mapping(st)) = m.get_mut(s("static")) else {
            continue;
        };
        if kept.len() != index.len() {
            st.insert(
                s("index"),
                Value::Sequence(kept.iter().map(|n| s(n)).collect()),
            );
        }
        if let Some(Value::Sequence(t)) = st.get_mut(s("try_files")) {
            if let Some(l) = t.last_mut() {
                if refuse {
                    *l = s("=503");
                } else if front.is_some() {
                    *l = s("@app");
                }
            }
        }
        if let Some((name, _)) = front {
            st.insert(s("app"), map(vec![("upstream", s(&name))]));
        }
    }
}

/// Where a note of [`files_stay_files`] is listed (with `--strict`'s count).
enum Listed {
    /// Under the `try_files` directive's file and line.
    At(String),
    /// Under the static route (a root: several locations may share it).
    Route,
    /// Not at all: said in the output, nothing was left out.
    No,
}

/// The front controller of static route `i` falling back to `fallback`: the route nginx
/// hands that URI to is a plain proxy to a FastCGI upstream of this root and these filters;
/// its twin with `fallback` (`fastcgi::front`), and the index script the same upstream runs
/// for the route's directories (left out of the files: the app runs it).
fn front_controller(
    cx: &mut Ctx,
    routes: &[Value],
    i: usize,
    fallback: &str,
    index: &[String],
    dirs: &[String],
) -> Option<(String, Option<String>)> {
    let root = routes[i].get("static")?.get("root")?.as_str()?;
    // The upstream a plain proxy route with this route's filters sends `path` to.
    let upstream_of = |path: &str| {
        let t = routes.iter().position(|r| path_matches(r, path))?;
        let p = routes[t].get("proxy")?.as_mapping()?;
        let same = p.len() == 1 && routes[t].get("filters") == routes[i].get("filters");
        same.then(|| p.get("upstream")?.as_str().map(String::from))?
    };
    let up = upstream_of(fallback).filter(|_| !fallback.contains('?'))?;
    // Without a `$uri/` candidate nginx never reaches the index module: a directory runs the
    // front controller (Drupal's `try_files $uri /index.php?$query_string`), never 403.
    let dir_candidate = routes[i]
        .get("static")
        .and_then(|st| st.get("try_files"))
        .and_then(Value::as_sequence)
        .is_some_and(|t| t.iter().filter_map(Value::as_str).any(|c| c.ends_with('/')));
    let script = index
        .iter()
        .filter(|_| dir_candidate)
        .find(|n| {
            dirs.iter()
                .all(|d| upstream_of(&format!("{d}{n}")).as_ref() == Some(&up))
        })
        .cloned();
    let name = super::fastcgi::front(cx, &up, root, fallback, script.as_deref(), dir_candidate)?;
    Some((name, script))
}

/// Whether route `r`'s path conditions (exact, prefix, regex) all hold for `path`, and it has
/// no other condition that could make it pass the path on.
pub(super) fn path_matches(r: &Value, path: &str) -> bool {
    let Some(m) = r.get("match") else {
        return true;
    };
    let exact = m
        .get("path")
        .and_then(Value::as_str)
        .is_none_or(|p| p == path);
    let prefix = m
        .get("path_prefix")
        .and_then(Value::as_str)
        .is_none_or(|p| path.starts_with(p));
    let re = m
        .get("path_regex")
        .and_then(Value::as_str)
        .is_none_or(|re| regex::Regex::new(re).is_ok_and(|re| re.is_match(path)));
    let only_path = m.as_mapping().is_none_or(|m| {
        m.keys()
            .all(|k| matches!(k.as_str(), Some("path" | "path_prefix" | "path_regex")))
    });
    exact && prefix && re && only_path
}

/// Named locations by name (without `@`).
pub(super) type NamedTable = BTreeMap<String, Named>;
