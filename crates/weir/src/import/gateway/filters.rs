//! An HTTPRoute rule's action: its filters (header modifiers, redirect, rewrite, mirrors,
//! CORS), its backends (one, or a weighted `split`), or a 500 for what cannot be carried out.

use serde_yaml::{Mapping, Value};

use super::super::ingress::Converted;
use super::Backends;

/// The rule's action and filters into route `r`.
pub(super) fn action(
    id: &str,
    rule: &Value,
    (backends, mirrors): (&Backends, &[String]),
    prefix: Option<&str>,
    r: &mut Mapping,
    c: &mut Converted,
) {
    let mut proxy = Mapping::new();
    let mut filters = Vec::new();
    let mut redirect = None;
    let mut failed: Option<String> = None;
    for f in rule["filters"].as_sequence().into_iter().flatten() {
        match f["type"].as_str().unwrap_or("") {
            t @ ("RequestHeaderModifier" | "ResponseHeaderModifier") => {
                let spec = if t == "RequestHeaderModifier" {
                    &f["requestHeaderModifier"]
                } else {
                    &f["responseHeaderModifier"]
                };
                let mut ops = Mapping::new();
                for (key, field) in [("set", "set"), ("add", "add")] {
                    let mut m = Mapping::new();
                    for h in spec[field].as_sequence().into_iter().flatten() {
                        m.insert(
                            h["name"].as_str().unwrap_or("").into(),
                            h["value"].as_str().unwrap_or("").into(),
                        );
                    }
                    if !m.is_empty() {
                        ops.insert(key.into(), Value::Mapping(m));
                    }
                }
                if let Some(rm) = spec["remove"].as_sequence() {
                    ops.insert("remove".into(), Value::Sequence(rm.clone()));
                }
                let key = if t == "RequestHeaderModifier" {
                    "request_headers"
                } else {
                    "response_headers"
                };
                proxy.insert(key.into(), Value::Mapping(ops));
            }
            "RequestRedirect" => {
                let s = &f["requestRedirect"];
                let scheme = s["scheme"].as_str().unwrap_or("$scheme");
                let host = s["hostname"].as_str().unwrap_or("$host");
                let port = s["port"]
                    .as_u64()
                    .map_or(String::new(), |p| format!(":{p}"));
                let path = match (s["path"]["type"].as_str(), prefix) {
                    (Some("ReplaceFullPath"), _) => s["path"]["replaceFullPath"]
                        .as_str()
                        .unwrap_or("/")
                        .to_string(),
                    (Some("ReplacePrefixMatch"), Some(_)) => {
                        let repl = s["path"]["replacePrefixMatch"].as_str().unwrap_or("/");
                        format!("{}$1", repl.trim_end_matches('/'))
                    }
                    _ => "$request_uri".to_string(),
                };
                let mut red = Mapping::new();
                red.insert("to".into(), format!("{scheme}://{host}{port}{path}").into());
                red.insert(
                    "status".into(),
                    s["statusCode"].as_u64().unwrap_or(302).into(),
                );
                redirect = Some(red);
            }
            "URLRewrite" => {
                let s = &f["urlRewrite"];
                if let Some(h) = s["hostname"].as_str() {
                    proxy.insert("host".into(), h.into());
                }
                match (s["path"]["type"].as_str(), prefix) {
                    (Some("ReplaceFullPath"), _) => {
                        let mut rr = Mapping::new();
                        rr.insert("pattern".into(), "^.*$".into());
                        rr.insert(
                            "replacement".into(), // A literal path: `$` is not a capture here.
                            s["path"]["replaceFullPath"]
                                .as_str()
                                .unwrap_or("/")
                                .replace('$', "$$")
                                .into(),
                        );
                        proxy.insert("regex_replace".into(), Value::Mapping(rr));
                    }
                    (Some("ReplacePrefixMatch"), Some(p)) => {
                        let repl = s["path"]["replacePrefixMatch"].as_str().unwrap_or("/");
                        let mut rr = Mapping::new();
                        rr.insert(
                            "pattern".into(),
                            format!("^{}(/.*)?$", regex::escape(p)).into(),
                        );
                        let head = repl.trim_end_matches('/');
                        rr.insert(
                            "replacement".into(),
                            if head.is_empty() {
                                "/$1".to_string()
                            } else {
                                format!("{head}$1")
                            }
                            .into(),
                        );
                        proxy.insert("regex_replace".into(), Value::Mapping(rr));
                    }
                    (None, _) => {}
                    (Some(other), _) => c.skipped.push(format!(
                        "{id}: URLRewrite path {other} on this match is not translated"
                    )),
                }
            }
            "CORS" => {
                let mut filter = Mapping::new();
                filter.insert("cors".into(), Value::Mapping(cors(id, &f["cors"], c)));
                filters.push(Value::Mapping(filter));
            }
            // Made by the caller (`mirrors`).
            "RequestMirror" => {} // The specification: a filter that cannot be carried out is not skipped; the
            // requests it covers get 500 (ExtensionRef is how auth is often attached).
            other => failed = Some(format!("filter {other} not translated")),
        }
    }
    if let Some(why) = failed {
        c.skipped.push(format!("{id}: {why}: the rule answers 500"));
        let mut respond = Mapping::new();
        respond.insert("status".into(), 500.into());
        r.insert("respond".into(), Value::Mapping(respond));
        return;
    }
    if let Some(red) = redirect {
        r.insert("redirect".into(), Value::Mapping(red));
        return;
    }
    for up in mirrors {
        let mut m = Mapping::new();
        m.insert("upstream".into(), up.clone().into());
        let mut f = Mapping::new();
        f.insert("mirror".into(), Value::Mapping(m));
        filters.push(Value::Mapping(f));
    }
    match backends {
        Ok(b) if !b.is_empty() => {
            proxy.insert("upstream".into(), b[0].0.clone().into());
            if b.len() > 1 {
                let mut split = Mapping::new();
                for (up, w) in b {
                    split.insert(up.clone().into(), (*w).into());
                }
                let mut s = Mapping::new();
                s.insert("upstreams".into(), Value::Mapping(split));
                let mut f = Mapping::new();
                f.insert("split".into(), Value::Mapping(s));
                filters.push(Value::Mapping(f));
            }
            if !filters.is_empty() {
                r.insert("filters".into(), Value::Sequence(filters));
            }
            r.insert("proxy".into(), Value::Mapping(proxy));
        }
        other => {
            let why = match other {
                Err(e) => e.clone(),
                Ok(_) => "no backendRefs".to_string(),
            };
            // A Service that exists with no ready endpoint is unavailable (503), not an
            // invalid reference (500).
            let status = match why.starts_with(crate::import::cluster::NO_ENDPOINTS) {
                true => 503,
                false => 500,
            };
            c.skipped
                .push(format!("{id}: {why}: the rule answers {status}"));
            let mut respond = Mapping::new();
            respond.insert("status".into(), status.into());
            r.insert("respond".into(), Value::Mapping(respond));
        }
    }
}

/// The methods `allowMethods: ["*"]` stands for (the specification's list).
const ANY_METHOD: [&str; 9] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
];

/// An `HTTPCORSFilter` as weir's `cors` filter. Where the two differ, weir's narrower reading
/// is kept and noted: `allowCredentials` with the `*` origin (which the specification answers
/// by echoing any origin, cookies and all) is left off; an origin weir cannot say allows none.
fn cors(id: &str, spec: &Value, c: &mut Converted) -> Mapping {
    let strings = |key: &str| -> Vec<String> {
        spec[key]
            .as_sequence()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect()
    };
    // The specification's forms only (its CRD's pattern, less `scheme://*`, which weir cannot
    // say): weir's own (`~regex`) would let an origin match anything, past the credentials
    // check, and `https://*.` any host ending in a dot (the attack reviews of 2026-11-30).
    static ORIGIN: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"^(\*|https?://(\*\.)?([a-zA-Z0-9-]+\.)*[a-zA-Z0-9-]+(:[0-9]{1,5})?)$")
            .unwrap_or_else(|e| unreachable!("{e}"))
    });
    let (origins, odd): (Vec<String>, Vec<String>) = strings("allowOrigins")
        .into_iter()
        .partition(|o| ORIGIN.is_match(o));
    for o in &odd {
        c.skipped.push(format!(
            "{id}: CORS origin `{}` is not an origin the specification allows: left out",
            o.escape_debug()
        ));
    }
    let mut credentials = spec["allowCredentials"].as_bool().unwrap_or(false);
    if credentials && origins.iter().any(|o| o == "*") {
        credentials = false;
        c.skipped.push(format!(
            "{id}: CORS allowCredentials with the origin *: credentials left off (list the origins to allow them)"
        ));
    }
    let methods = strings("allowMethods");
    let methods: Vec<String> = match methods.iter().any(|m| m == "*") {
        true => ANY_METHOD.iter().map(|m| m.to_string()).collect(),
        // Not given: the CORS-safelisted methods (weir's default too).
        false if methods.is_empty() => vec!["GET".into(), "HEAD".into(), "POST".into()],
        false => methods,
    };
    let seq = |v: Vec<String>| Value::Sequence(v.into_iter().map(Value::from).collect());
    let mut m = Mapping::new();
    // No origin listed: no cross-origin request is allowed (weir needs one: a name no
    // request's Origin can be).
    m.insert(
        "origins".into(),
        match origins.is_empty() {
            true => seq(vec!["~^$".into()]),
            false => seq(origins),
        },
    );
    m.insert("methods".into(), seq(methods));
    m.insert("headers".into(), seq(strings("allowHeaders")));
    m.insert("expose".into(), seq(strings("exposeHeaders")));
    m.insert("credentials".into(), credentials.into());
    // The specification's default: 5 seconds.
    let age = spec["maxAge"].as_u64().unwrap_or(5);
    m.insert("max_age".into(), format!("{age}s").into());
    m
}
