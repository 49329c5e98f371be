//! `location` blocks and what they hold: the match, nested locations (flattened; their order
//! is `precedence.rs`'s), files (`root`, `alias`, `try_files`; `files.rs`), the filters a
//! location's inherited settings make and its own routes (`content.rs`), its `if`s and `set`s
//! (`script.rs`), and the refusal of what is not translated (`refuse.rs`;
//! the actions `proxy_pass`, `return` and `rewrite` are `actions.rs`, `fastcgi_pass`
//! `fastcgi.rs`).

use serde_yaml::{Mapping, Value};

use super::actions::{proxy_pass, return_action, rewrite};
use super::content::{content_routes, Content};
use super::http::{inherited, Scope};
use super::parse::Directive;
pub(super) use super::refuse::{access, close, Access};
use super::refuse::{access_control, handler, harmless, refusal_route, Refusal};
use super::{fastcgi, map, not_translated, s, script, Ctx};

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
    // `if`, `break` or a `set` of its own: the rewrite-module directives run as a script
    // (`script.rs`), in order, before the content.
    let internal_rewrite = |c: &Directive| {
        c.name == "rewrite"
            && !matches!(
                c.args.get(2).map(String::as_str),
                Some("permanent" | "redirect")
            )
    };
    let scripted = d.children().iter().any(|c| {
        c.name == "if" || c.name == "break" || (c.name == "set" && !has_fcgi) || internal_rewrite(c)
    });
    let mut script_stmts = Vec::new();
    for x in d.children() {
        match x.name.as_str() {
            "fastcgi_pass" if fcgi_pass.is_none() => fcgi_pass = Some(x),
            "set" if has_fcgi => sets.push(x),
            name if scripted && script::is_script(name) => script_stmts.push(x),
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
                alias = x.args.first().map(|p| cx.absolute(x, p));
                cx.done();
            }
            "try_files" => {
                try_files = Some(x.args.clone());
                cx.done();
            }
            // Its own route, before the location's: the regex keeps deciding.
            "rewrite" => match rewrite(cx, x).and_then(|r| within(r, &matcher)) {
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
    let mut script_set = Vec::new();
    // After `rewrite ... break` nginx passes the rewritten URI whole: no prefix replaced.
    let mut script_rewrote = false;
    // Every way through the script answers: the location's content is never reached.
    let mut script_answers_all = false;
    if !script_stmts.is_empty() {
        // What the content uses: the location's own directives and what it inherits.
        let content: Vec<&str> = d
            .children()
            .iter()
            .filter(|c| !script::is_script(&c.name))
            .flat_map(|c| c.args.iter().map(String::as_str))
            .chain(scope.proxy_set_header.iter().map(|(_, v)| v.as_str()))
            .chain(scope.add_header.iter().map(|(_, v)| v.as_str()))
            .collect();
        let made =
            script::script(cx, &script_stmts, &content, try_files.is_some()).and_then(|sc| {
                let mut routes = Vec::new();
                for r in sc.before {
                    routes.push(within(r, &matcher).ok_or_else(|| {
                        "a `rewrite` in a regex location is not translated".to_string()
                    })?);
                }
                Ok((routes, sc.set, sc.rewrote, !sc.falls_through))
            });
        match made {
            Ok((mut routes, set, rewrote, all)) => {
                script_rewrote = rewrote;
                script_answers_all = all;
                for x in &script_stmts {
                    if matches!(x.name.as_str(), "set" | "if" | "break") {
                        cx.done();
                    }
                }
                before.append(&mut routes);
                script_set = set;
            }
            Err(why) => {
                cx.out.skipped.push(format!(
                    "{}: location: {why}: the location answers 503",
                    d.at()
                ));
                Refusal::add(&mut refusal, 503, why);
            }
        }
    }
    if let Some(x) = pass {
        let prefix = prefix.as_deref().filter(|_| !script_rewrote);
        proxied = proxy_pass(cx, x, prefix, &scope);
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
    // `error_page 404 = @app` over files: the files, else the application (as `try_files
    // $uri $uri/ @app`), when the named location proxies.
    if try_files.is_none() && returned.is_none() && proxied.is_none() && !fastcgi {
        if let Some((name, true)) = scope.error_named.get("404") {
            let proxies = cx
                .named
                .get(name.as_str())
                .is_some_and(|n| n.def.children().iter().any(|c| c.name == "proxy_pass"));
            if proxies {
                try_files = Some(vec!["$uri".into(), "$uri/".into(), format!("@{name}")]);
            }
        }
    }
    let routes = match refusal {
        None if script_answers_all => before,
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
                if !script_set.is_empty() {
                    let set: Mapping = script_set.iter().map(|(k, v)| (s(k), s(v))).collect();
                    for r in &mut routes {
                        if let Value::Mapping(m) = r {
                            m.insert(s("set"), Value::Mapping(set.clone()));
                        }
                    }
                }
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

/// The `set` values a named location's proxy uses, on the route that falls back to it.
pub(super) fn app_script(route: &mut Mapping, a: &super::files::App) {
    if !a.set.is_empty() {
        let set: Mapping = a.set.iter().map(|(k, v)| (s(k), s(v))).collect();
        route.insert(s("set"), Value::Mapping(set));
    }
}

/// `route` (a `rewrite`'s or an `if`'s answer) under the location's match: its own
/// `path_regex` (whose captures its redirect uses) and conditions kept; the location's regex,
/// when both have one, becomes a condition on `$uri` (the same path).
pub(super) fn within(route: Value, matcher: &Value) -> Option<Value> {
    let Value::Mapping(mut r) = route else {
        return None;
    };
    let mut m = match r.shift_remove(s("match")) {
        Some(Value::Mapping(m)) => m,
        _ => Mapping::new(),
    };
    if let Value::Mapping(loc) = matcher {
        for (k, v) in loc {
            if m.contains_key(k) && k.as_str() == Some("path_regex") {
                let vars = m
                    .entry(s("vars"))
                    .or_insert_with(|| Value::Mapping(Mapping::new()));
                let Value::Mapping(vars) = vars else {
                    return None;
                };
                let want = format!("~{}", v.as_str()?);
                let key = if vars.contains_key(s("$uri")) {
                    "${uri}"
                } else {
                    "$uri"
                };
                if vars.contains_key(s(key)) {
                    return None;
                }
                vars.insert(s(key), s(&want));
                continue;
            }
            if !m.contains_key(k) {
                m.insert(k.clone(), v.clone());
            }
        }
    }
    let mut out = Mapping::new();
    out.insert(s("match"), Value::Mapping(m));
    for (k, v) in r {
        out.insert(k, v);
    }
    Some(Value::Mapping(out))
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
