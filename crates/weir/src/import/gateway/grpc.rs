//! A `GRPCRoute`'s rules as weir routes: a gRPC call is an HTTP/2 POST to
//! `/SERVICE/METHOD`, so each rule is said as the HTTPRoute rule it is (`rules.rs` then gives
//! it the same hosts, precedence, header matches, filters and backends), with:
//!
//! - `method` matches as paths: `Exact` service and method → the exact path, a service alone
//!   → the `/SERVICE` prefix by segments, a method alone or `RegularExpression` → an anchored
//!   regex (`[^/]+` for the part not given); an `Exact` name outside gRPC's characters
//!   (letters, digits, `_`, `.`) is left out, noted, rather than read into a path;
//! - the backends' upstreams speak HTTP/2 (`protocol: h2`, h2c to the Service's endpoints):
//!   an `.h2` twin of the HTTPRoute's upstream for the same Service port;
//! - the plain listener accepts h2c (`Outcomes::grpc_plain`), as gRPC clients without TLS
//!   speak it.

use serde_yaml::{Mapping, Value};

use super::super::ingress::{Converted, Route};
use super::rules::{self, RouteCtx};

/// Whether `s` is a gRPC service or method name an exact path can hold.
fn grpc_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
}

/// A GRPCRoute match said as an HTTPRoute match; `None` (noted) when it cannot be.
fn as_http_match(id: &str, m: &Value, c: &mut Converted) -> Option<Value> {
    let method = &m["method"];
    let service = method["service"].as_str();
    let name = method["method"].as_str();
    let path = match method["type"].as_str().unwrap_or("Exact") {
        "Exact" => {
            if [service, name].into_iter().flatten().any(|s| !grpc_name(s)) {
                c.skipped.push(format!(
                    "{id}: gRPC method match {}/{} is not a gRPC name: the match is left out",
                    service.unwrap_or("*"),
                    name.unwrap_or("*")
                ));
                return None;
            }
            match (service, name) {
                (Some(s), Some(n)) => ("Exact", format!("/{s}/{n}")),
                (Some(s), None) => ("PathPrefix", format!("/{s}")),
                (None, Some(n)) => ("RegularExpression", format!("/[^/]+/{}", regex::escape(n))),
                (None, None) => ("PathPrefix", "/".to_string()),
            }
        }
        "RegularExpression" => {
            let s = service.unwrap_or("[^/]+");
            let n = name.unwrap_or("[^/]+");
            if regex::Regex::new(s).is_err() || regex::Regex::new(n).is_err() {
                c.skipped.push(format!(
                    "{id}: gRPC method regex {s}/{n} does not compile: the match is left out"
                ));
                return None;
            }
            ("RegularExpression", format!("/(?:{s})/(?:{n})"))
        }
        other => {
            c.skipped.push(format!(
                "{id}: gRPC method match type {other} not translated: the match is left out"
            ));
            return None;
        }
    };
    let mut p = Mapping::new();
    p.insert("type".into(), path.0.into());
    p.insert("value".into(), path.1.into());
    let mut out = Mapping::new();
    out.insert("path".into(), Value::Mapping(p));
    if let Some(h) = m.get("headers") {
        out.insert("headers".into(), h.clone());
    }
    Some(Value::Mapping(out))
}

/// The HTTP/2 twin of upstream `up` (made once).
fn h2_upstream(up: &str, upstreams: &mut Mapping) -> String {
    let twin = format!("{up}.h2");
    if !upstreams.contains_key(twin.as_str()) {
        if let Some(Value::Mapping(u)) = upstreams.get(up).cloned() {
            let mut u = u;
            u.insert("protocol".into(), "h2".into());
            upstreams.insert(twin.clone().into(), Value::Mapping(u));
        }
    }
    twin
}

/// The weir routes of a GRPCRoute's rules, for `hosts`.
pub(super) fn rules(
    x: &RouteCtx<'_>,
    obj: &Value,
    hosts: &[String],
    c: &mut Converted,
    upstreams: &mut Mapping,
) -> Vec<Route> {
    let mut http_rules = Vec::new();
    for rule in obj["spec"]["rules"].as_sequence().into_iter().flatten() {
        let mut r = Mapping::new();
        let matches: Vec<Value> = rule["matches"]
            .as_sequence()
            .into_iter()
            .flatten()
            .filter_map(|m| as_http_match(x.id, m, c))
            .collect();
        let given = rule["matches"].as_sequence().is_some_and(|m| !m.is_empty());
        if given && matches.is_empty() {
            // Every match left out: the rule takes nothing (never everything).
            continue;
        }
        if !matches.is_empty() {
            r.insert("matches".into(), Value::Sequence(matches));
        }
        for key in ["filters", "backendRefs"] {
            if let Some(v) = rule.get(key) {
                r.insert(key.into(), v.clone());
            }
        }
        http_rules.push(Value::Mapping(r));
    }
    let mut spec = Mapping::new();
    spec.insert("rules".into(), Value::Sequence(http_rules));
    let mut as_http = Mapping::new();
    as_http.insert("spec".into(), Value::Mapping(spec));
    let mut routes = rules::rules(x, &Value::Mapping(as_http), hosts, c, upstreams);
    // Their upstreams speak HTTP/2.
    for route in &mut routes {
        if let Some(Value::Mapping(proxy)) = route.body.get_mut("proxy") {
            if let Some(up) = proxy.get("upstream").and_then(Value::as_str) {
                let twin = h2_upstream(up, upstreams);
                proxy.insert("upstream".into(), twin.into());
            }
        }
        if let Some(Value::Sequence(filters)) = route.body.get_mut("filters") {
            for f in filters {
                if let Some(Value::Mapping(split)) =
                    f.get_mut("split").and_then(|s| s.get_mut("upstreams"))
                {
                    let renamed: Mapping = split
                        .iter()
                        .map(|(k, w)| {
                            let name = k.as_str().unwrap_or("").to_string();
                            (h2_upstream(&name, upstreams).into(), w.clone())
                        })
                        .collect();
                    *split = renamed;
                }
                if let Some(Value::Mapping(mirror)) = f.get_mut("mirror") {
                    if let Some(up) = mirror.get("upstream").and_then(Value::as_str) {
                        let twin = h2_upstream(up, upstreams);
                        mirror.insert("upstream".into(), twin.into());
                    }
                }
            }
        }
    }
    routes
}
