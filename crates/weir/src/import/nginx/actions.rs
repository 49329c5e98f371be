//! A location's actions as weir writes them: `proxy_pass` (an upstream, the prefix replaced by
//! its URI, the request fields it sets), `return` (a redirect or a response) and `rewrite ...
//! permanent|redirect` (a route of its own).

use serde_yaml::{Mapping, Value};

use super::http::Scope;
use super::parse::Directive;
use super::unknown_variable;
use super::{map, s, Ctx};

pub(super) fn proxy_pass(
    cx: &mut Ctx,
    d: &Directive,
    prefix: Option<&str>,
    scope: &Scope,
) -> Option<Vec<(Value, Value)>> {
    let url = d.args.first()?;
    if scope.expires.is_some() {
        // weir's `expires` is the static action's: a proxied response keeps its own fields.
        cx.skip(
            d,
            "`expires` on proxied responses is not translated (files only)",
        );
    }
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
        cx.proxied_blocks.insert(hostport.to_string());
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
            "a URI part in a regex location or after a `rewrite` is not used (the path goes as it is, as nginx passes it)",
        );
    }
    // nginx sends `Host: $proxy_host` (the proxy_pass host as written) unless told otherwise.
    if !scope
        .proxy_set_header
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("host"))
    {
        p.push(("host", s(hostport)));
    }
    let mut set = Mapping::new();
    let mut remove = Vec::new();
    for (k, v) in &scope.proxy_set_header {
        match (k.to_ascii_lowercase().as_str(), v.as_str()) {
            // weir sends these itself (docs/config.md#upstreams).
            ("host", "$host" | "$http_host") => {}
            ("x-forwarded-for" | "x-forwarded-proto", _) => {}
            ("connection" | "upgrade", _) => {}
            // nginx sends no field for an empty value.
            (_, "") => remove.push(s(k)),
            // A variable weir does not have ($proxy_add_x_forwarded_for under another name):
            // the field is not sent, and the output says so (a field never silently dropped).
            (_, v) if unknown_variable(v).is_some() => {
                let var = unknown_variable(v).unwrap_or_default();
                cx.out.skipped.push(format!(
                    "{}: proxy_set_header {k}: ${var} is not a weir variable: the field is not sent",
                    d.at()
                ));
            }
            // `X-Real-IP $remote_addr` is not one weir sends itself (the corpus of issue 53
            // found it dropped): set as written, `$remote_addr` being weir's too.
            _ => {
                set.insert(s(k), s(v));
            }
        }
    }
    let mut edits = Vec::new();
    if !remove.is_empty() {
        edits.push(("remove", Value::Sequence(remove)));
    }
    if !set.is_empty() {
        edits.push(("set", Value::Mapping(set)));
    }
    if !edits.is_empty() {
        p.push(("request_headers", map(edits)));
    }
    // nginx relays an upgrade only where the location sends `Upgrade` itself
    // (`proxy_set_header Upgrade $http_upgrade`): `Upgrade` is hop-by-hop.
    let relays = scope
        .proxy_set_header
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("upgrade") && !v.is_empty());
    if !relays {
        p.push(("upgrade", Value::Bool(false)));
    }
    cx.done();
    Some(vec![(s("proxy"), map(p))])
}
pub(super) fn return_action(cx: &mut Ctx, d: &Directive) -> Option<Vec<(Value, Value)>> {
    let args: Vec<String> = match &cx.server_name {
        Some(n) => d
            .args
            .iter()
            .map(|a| a.replace("$server_name", n))
            .collect(),
        None => d.args.clone(),
    };
    let (code, rest) = match args.as_slice() {
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
        // `return` never appends the arguments, where weir's `redirect` does unless the target
        // places them: such a target is a response with its `Location`.
        let places_query = ["?", "$args", "$request_uri", "$is_args", "$query_string"]
            .iter()
            .any(|v| to.contains(v));
        if !places_query {
            return Some(vec![(
                s("respond"),
                map(vec![
                    ("status", Value::Number(code.into())),
                    ("headers", map(vec![("Location", s(&to))])),
                ]),
            )]);
        }
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
/// A rewrite's replacement as weir's redirect takes it: nginx's trailing `?` (do not append
/// the arguments) goes where the replacement places the query itself (`$request_uri?`);
/// elsewhere it stays, and keeps weir from appending them.
pub(super) fn rewrite_target(to: &str) -> String {
    match to.strip_suffix('?') {
        Some(rest)
            if ["$args", "$request_uri", "$is_args", "$query_string", "?"]
                .iter()
                .any(|v| rest.contains(v)) =>
        {
            rest.to_string()
        }
        _ => to.to_string(),
    }
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
                ("to", s(&rewrite_target(to))),
                ("status", Value::Number(status.into())),
            ]),
        ),
    ]))
}
