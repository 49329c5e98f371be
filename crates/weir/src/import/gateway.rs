//! `weir import` of Gateway API manifests (issue 56 §2, offline; `gateway.networking.k8s.io/v1`):
//! `Gateway` listeners (HTTP onto weir's plain listener, HTTPS onto its TLS one) and the
//! `HTTPRoute`s attached to them, with the specification's meaning:
//!
//! - attachment: a `parentRef` names a Gateway (and a listener by `sectionName`); a listener's
//!   `allowedRoutes.namespaces.from` (`Same` by default, `All`) and `hostname` decide whether
//!   the route attaches (else noted: `NotAllowedByListeners`, `NoMatchingListenerHostname`);
//!   the route's hosts are its `hostnames` narrowed to the listener's.
//! - matches: `path` (`Exact`, `PathPrefix` by whole segments, `RegularExpression`),
//!   `headers` and `queryParams` (`Exact`, or `RegularExpression` through `vars`), `method`;
//!   routes ordered by the specification's precedence (exact path, longer prefix, method,
//!   more headers, more query parameters).
//! - filters: `RequestHeaderModifier`, `ResponseHeaderModifier`, `RequestRedirect`,
//!   `URLRewrite` (hostname, `ReplaceFullPath`, `ReplacePrefixMatch`), `RequestMirror`.
//! - `backendRefs`: Services (their port), weights (a `split`); one in another namespace only
//!   with a `ReferenceGrant` there allowing it, else the rule answers 500 as the specification
//!   says for an invalid reference (`RefNotPermitted`, `BackendNotFound`, `InvalidKind`, noted).
//!
//! Not yet: `GRPCRoute`, `TLSRoute`, route `timeouts` (listed); status is not written (no
//! cluster: `providers.kubernetes` is issue 56 §1).

use serde_yaml::{Mapping, Value};

use super::ingress::{host_class, service_upstream, tls_certificate, Converted, Options, Route};

/// A route's precedence (`Route::rank`).
type Rank = (u8, u8, std::cmp::Reverse<usize>, u8);

/// A rule's backends by upstream and weight, or why it answers 500.
type Backends = Result<Vec<(String, u64)>, String>;

/// One Gateway listener.
#[derive(Debug)]
struct Listener {
    gateway: (String, String),
    name: String,
    tls: bool,
    hostname: Option<String>,
    /// `allowedRoutes.namespaces.from: All`.
    all_namespaces: bool,
}

/// Converts the Gateway API objects among `objects`; the routes for the plain listener and
/// the TLS one, and the TLS certificates wanted.
pub(super) fn convert(
    objects: &[Value],
    opts: &Options,
    c: &mut Converted,
    upstreams: &mut Mapping,
) -> (Vec<Route>, Vec<Route>, Vec<Value>) {
    let mut listeners = Vec::new();
    let mut certificates = Vec::new();
    let grants: Vec<Value> = objects
        .iter()
        .filter(|o| o["kind"].as_str() == Some("ReferenceGrant"))
        .cloned()
        .collect();
    // weir's import serves one plain and one TLS listener: the first HTTP port and the first
    // HTTPS port seen; a listener on another port is not merged onto them (an internal port
    // would become a public one), and several Gateways sharing them is said.
    let (mut http_port, mut https_port) = (None, None);
    let mut gateways = 0;
    for obj in objects {
        let (kind, ns, name) = ident(obj);
        match kind {
            "Gateway" => {
                gateways += 1;
                if gateways == 2 {
                    c.skipped.push(format!(
                        "Gateway {ns}/{name}: several Gateways are served on weir's one plain and one TLS listener"
                    ));
                }
                for l in obj["spec"]["listeners"].as_sequence().into_iter().flatten() {
                    let lname = l["name"].as_str().unwrap_or("").to_string();
                    let port = l["port"].as_u64();
                    let slot = match l["protocol"].as_str() {
                        Some("HTTPS") => &mut https_port,
                        _ => &mut http_port,
                    };
                    if slot.is_some_and(|p| Some(p) != port) {
                        c.skipped.push(format!(
                            "Gateway {ns}/{name}: listener {lname} on port {}: another port than the first of its protocol, not translated (run another weir for it)",
                            port.unwrap_or(0)
                        ));
                        continue;
                    }
                    *slot = port.or(Some(0));
                    let tls = match l["protocol"].as_str() {
                        Some("HTTP") => false,
                        Some("HTTPS") => true,
                        other => {
                            c.skipped.push(format!(
                                "Gateway {ns}/{name}: listener {lname}: protocol {} not translated",
                                other.unwrap_or("(none)")
                            ));
                            continue;
                        }
                    };
                    if tls {
                        let refs = l["tls"]["certificateRefs"]
                            .as_sequence()
                            .map_or(0, Vec::len);
                        let foreign = l["tls"]["certificateRefs"]
                            .as_sequence()
                            .into_iter()
                            .flatten()
                            .find(|r| {
                                let sns = r["namespace"].as_str().unwrap_or(ns);
                                sns != ns
                                    && !secret_granted(
                                        &grants,
                                        ns,
                                        sns,
                                        r["name"].as_str().unwrap_or(""),
                                    )
                            });
                        if refs == 0 || foreign.is_some() {
                            c.skipped.push(format!(
                                "Gateway {ns}/{name}: listener {lname}: {}: not translated",
                                if refs == 0 { "HTTPS without certificateRefs".to_string() } else { "RefNotPermitted: a certificate in another namespace without a ReferenceGrant".to_string() }
                            ));
                            continue;
                        }
                        for r in l["tls"]["certificateRefs"]
                            .as_sequence()
                            .into_iter()
                            .flatten()
                        {
                            let secret = r["name"].as_str().unwrap_or("?");
                            let sns = r["namespace"].as_str().unwrap_or(ns);
                            let id = format!("Gateway {ns}/{name}");
                            tls_certificate(&id, (sns, secret), &mut certificates, c);
                        }
                    }
                    listeners.push(Listener {
                        gateway: (ns.to_string(), name.to_string()),
                        name: lname,
                        tls,
                        hostname: l["hostname"].as_str().map(str::to_ascii_lowercase),
                        all_namespaces: l["allowedRoutes"]["namespaces"]["from"].as_str()
                            == Some("All"),
                    });
                    c.translated += 1;
                }
            }
            "GRPCRoute" | "TLSRoute" | "TCPRoute" | "UDPRoute" => {
                c.skipped
                    .push(format!("{kind} {ns}/{name}: not translated yet"));
            }
            _ => {}
        }
    }
    let mut plain = Vec::new();
    let mut secure = Vec::new();
    // The hosts routes were attached for, per listener kind: each gets a 404 after its
    // routes, so that its requests stay with the routes of its listener (the
    // specification's SHOULD) and never reach another listener's or an Ingress's host-less
    // rules.
    let mut hosts_seen: Vec<(String, bool)> = listeners
        .iter()
        .filter_map(|l| l.hostname.clone().map(|h| (h, l.tls)))
        .collect();
    for obj in objects {
        let (kind, ns, name) = ident(obj);
        if kind != "HTTPRoute" {
            continue;
        }
        let id = format!("HTTPRoute {ns}/{name}");
        let hostnames: Vec<String> = obj["spec"]["hostnames"]
            .as_sequence()
            .into_iter()
            .flatten()
            .filter_map(|h| h.as_str().map(str::to_ascii_lowercase))
            .collect();
        let mut attached = false;
        for parent in obj["spec"]["parentRefs"]
            .as_sequence()
            .into_iter()
            .flatten()
        {
            if parent["kind"].as_str().is_some_and(|k| k != "Gateway") {
                c.skipped.push(format!(
                    "{id}: a parent of kind {} is not a Gateway",
                    parent["kind"].as_str().unwrap_or("")
                ));
                continue;
            }
            let gw = (
                parent["namespace"].as_str().unwrap_or(ns).to_string(),
                parent["name"].as_str().unwrap_or("").to_string(),
            );
            let section = parent["sectionName"].as_str();
            let candidates: Vec<&Listener> = listeners
                .iter()
                .filter(|l| l.gateway == gw && section.is_none_or(|s| s == l.name))
                .collect();
            if candidates.is_empty() {
                c.skipped.push(format!(
                    "{id}: no Gateway {}/{} listener{} in the manifests",
                    gw.0,
                    gw.1,
                    section.map_or(String::new(), |s| format!(" {s}"))
                ));
                continue;
            }
            for l in candidates {
                if !l.all_namespaces && l.gateway.0 != ns {
                    c.skipped.push(format!(
                        "{id}: NotAllowedByListeners: listener {} of Gateway {}/{} takes routes of its own namespace",
                        l.name, l.gateway.0, l.gateway.1
                    ));
                    continue;
                }
                let Some(hosts) = hosts_for(&hostnames, l.hostname.as_deref()) else {
                    c.skipped.push(format!(
                        "{id}: NoMatchingListenerHostname: listener {} is for {}",
                        l.name,
                        l.hostname.as_deref().unwrap_or("*")
                    ));
                    continue;
                };
                attached = true;
                for h in &hosts {
                    if !hosts_seen.contains(&(h.clone(), l.tls)) {
                        hosts_seen.push((h.clone(), l.tls));
                    }
                }
                let routes = rules(&id, ns, obj, &hosts, &grants, opts, c, upstreams);
                if l.tls {
                    secure.extend(routes);
                } else {
                    plain.extend(routes);
                }
            }
        }
        if !attached {
            c.skipped
                .push(format!("{id}: attached to no listener: not served"));
        }
    }
    for (i, (host, tls)) in hosts_seen.into_iter().enumerate() {
        let mut m = Mapping::new();
        m.insert("host".into(), host.clone().into());
        let mut r = Mapping::new();
        r.insert("name".into(), format!("gateway-host-{i}").into());
        r.insert("match".into(), Value::Mapping(m));
        let mut respond = Mapping::new();
        respond.insert("status".into(), 404.into());
        r.insert("respond".into(), Value::Mapping(respond));
        let route = Route {
            rank: (host_class(Some(&host)), 9, std::cmp::Reverse(0), 0),
            body: r,
        };
        match tls {
            true => secure.push(route),
            false => plain.push(route),
        }
    }
    (plain, secure, certificates)
}

fn ident(obj: &Value) -> (&str, &str, &str) {
    (
        obj["kind"].as_str().unwrap_or(""),
        obj["metadata"]["namespace"].as_str().unwrap_or("default"),
        obj["metadata"]["name"].as_str().unwrap_or("?"),
    )
}

/// Whether host name `h` is matched by `pattern` (`*.example.com` takes subdomains).
fn host_matches(pattern: &str, h: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(suffix) => h
            .strip_suffix(suffix)
            .is_some_and(|rest| rest.ends_with('.') && rest.len() > 1),
        None => pattern == h,
    }
}

/// The route's hosts under a listener's: `None` when none intersect. An empty list is any
/// host.
fn hosts_for(route: &[String], listener: Option<&str>) -> Option<Vec<String>> {
    let Some(l) = listener else {
        return Some(route.to_vec());
    };
    if route.is_empty() {
        return Some(vec![l.to_string()]);
    }
    let hosts: Vec<String> = route
        .iter()
        .filter_map(|h| {
            if host_matches(l, h) || l == h {
                Some(h.clone())
            } else if host_matches(h, l) {
                Some(l.to_string())
            } else {
                None
            }
        })
        .collect();
    (!hosts.is_empty()).then_some(hosts)
}

/// The weir routes of an HTTPRoute's rules, for `hosts`.
#[allow(clippy::too_many_arguments)]
fn rules(
    id: &str,
    ns: &str,
    obj: &Value,
    hosts: &[String],
    grants: &[Value],
    opts: &Options,
    c: &mut Converted,
    upstreams: &mut Mapping,
) -> Vec<Route> {
    let mut out = Vec::new();
    let default_match = {
        let mut m = Mapping::new();
        let mut p = Mapping::new();
        p.insert("type".into(), "PathPrefix".into());
        p.insert("value".into(), "/".into());
        m.insert("path".into(), Value::Mapping(p));
        vec![Value::Mapping(m)]
    };
    for (ri, rule) in obj["spec"]["rules"]
        .as_sequence()
        .into_iter()
        .flatten()
        .enumerate()
    {
        if rule.get("timeouts").is_some() {
            c.skipped
                .push(format!("{id}: rule {ri}: timeouts not translated"));
        }
        let backends = backends(id, ns, rule, grants, opts, c, upstreams);
        // RequestMirror: its Service an upstream of its own (same rules as a backend's).
        let mut mirrors = Vec::new();
        for f in rule["filters"].as_sequence().into_iter().flatten() {
            if f["type"].as_str() != Some("RequestMirror") {
                continue;
            }
            let b = &f["requestMirror"]["backendRef"];
            let name = b["name"].as_str().unwrap_or("");
            let bns = b["namespace"].as_str().unwrap_or(ns);
            match b["port"].as_u64() {
                Some(port) if bns == ns || granted(grants, ns, bns, name) => {
                    mirrors.push(service_upstream((bns, name, &port.to_string()), upstreams, opts, c));
                }
                _ => c.skipped.push(format!(
                    "{id}: RequestMirror to Service {bns}/{name}: without a port or a ReferenceGrant, not mirrored"
                )),
            }
        }
        let matches = rule["matches"]
            .as_sequence()
            .cloned()
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| default_match.clone());
        for (mi, m) in matches.iter().enumerate() {
            let Some((mut wm, mut rank, prefix)) = matcher(id, m, c) else {
                continue;
            };
            rank.0 = hosts.iter().map(|h| host_class(Some(h))).min().unwrap_or(2);
            if !hosts.is_empty() {
                let hs: Vec<Value> = hosts.iter().map(|h| h.clone().into()).collect();
                wm.insert(
                    "host".into(),
                    if hs.len() == 1 {
                        hs[0].clone()
                    } else {
                        Value::Sequence(hs)
                    },
                );
            }
            let mut r = Mapping::new();
            r.insert(
                "name".into(),
                format!("{}-r{ri}-m{mi}", id.replace(['/', ' '], "-")).into(),
            );
            r.insert("match".into(), Value::Mapping(wm));
            action(
                id,
                rule,
                (&backends, &mirrors),
                prefix.as_deref(),
                &mut r,
                c,
            );
            out.push(Route { rank, body: r });
            c.translated += 1;
        }
    }
    out
}

/// The backends of a rule, by upstream name and weight; `Err` with the reason when the rule
/// must answer 500.
fn backends(
    id: &str,
    ns: &str,
    rule: &Value,
    grants: &[Value],
    opts: &Options,
    c: &mut Converted,
    upstreams: &mut Mapping,
) -> Backends {
    let mut out = Vec::new();
    for b in rule["backendRefs"].as_sequence().into_iter().flatten() {
        let kind = b["kind"].as_str().unwrap_or("Service");
        let group = b["group"].as_str().unwrap_or("");
        let name = b["name"].as_str().unwrap_or("");
        let bns = b["namespace"].as_str().unwrap_or(ns);
        if kind != "Service" || !group.is_empty() {
            return Err(format!("InvalidKind: a backend of kind {kind}"));
        }
        if bns != ns && !granted(grants, ns, bns, name) {
            return Err(format!(
                "RefNotPermitted: Service {bns}/{name} without a ReferenceGrant in {bns} for HTTPRoutes of {ns}"
            ));
        }
        let Some(port) = b["port"].as_u64() else {
            return Err(format!(
                "BackendNotFound: Service {bns}/{name} without a port"
            ));
        };
        if b["filters"].as_sequence().is_some_and(|f| !f.is_empty()) {
            return Err(format!("filters on the backend {name} are not translated"));
        }
        let weight = match &b["weight"] {
            Value::Null => 1,
            w => w
                .as_u64()
                .ok_or(format!("the weight of backend {name} is not a count"))?,
        };
        if weight == 0 {
            continue;
        }
        let up = service_upstream((bns, name, &port.to_string()), upstreams, opts, c);
        out.push((up, weight));
    }
    if out.is_empty()
        && rule["backendRefs"]
            .as_sequence()
            .is_some_and(|s| !s.is_empty())
    {
        return Err("every backend has weight 0".into());
    }
    let _ = id;
    Ok(out)
}

/// Whether a ReferenceGrant in `to_ns` lets Gateways of `from_ns` use Secret `name`.
fn secret_granted(grants: &[Value], from_ns: &str, to_ns: &str, name: &str) -> bool {
    grants.iter().any(|g| {
        g["metadata"]["namespace"].as_str().unwrap_or("default") == to_ns
            && g["spec"]["from"]
                .as_sequence()
                .into_iter()
                .flatten()
                .any(|f| {
                    f["kind"].as_str() == Some("Gateway")
                        && f["group"].as_str() == Some("gateway.networking.k8s.io")
                        && f["namespace"].as_str() == Some(from_ns)
                })
            && g["spec"]["to"]
                .as_sequence()
                .into_iter()
                .flatten()
                .any(|t| {
                    t["kind"].as_str() == Some("Secret")
                        && t["group"].as_str().unwrap_or("").is_empty()
                        && t["name"].as_str().is_none_or(|n| n == name)
                })
    })
}

/// Whether a ReferenceGrant in `to_ns` lets HTTPRoutes of `from_ns` use Service `name`.
fn granted(grants: &[Value], from_ns: &str, to_ns: &str, name: &str) -> bool {
    grants.iter().any(|g| {
        g["metadata"]["namespace"].as_str().unwrap_or("default") == to_ns
            && g["spec"]["from"]
                .as_sequence()
                .into_iter()
                .flatten()
                .any(|f| {
                    f["kind"].as_str() == Some("HTTPRoute")
                        && f["group"].as_str() == Some("gateway.networking.k8s.io")
                        && f["namespace"].as_str() == Some(from_ns)
                })
            && g["spec"]["to"]
                .as_sequence()
                .into_iter()
                .flatten()
                .any(|t| {
                    t["kind"].as_str() == Some("Service")
                        && t["group"].as_str().unwrap_or("").is_empty()
                        && t["name"].as_str().is_none_or(|n| n == name)
                })
    })
}

/// A match as weir's, its precedence, and the path prefix it matched (for
/// `ReplacePrefixMatch`). `None` (noted) when it cannot be said.
fn matcher(id: &str, m: &Value, c: &mut Converted) -> Option<(Mapping, Rank, Option<String>)> {
    let mut wm = Mapping::new();
    let mut vars = Mapping::new();
    let path_type = m["path"]["type"].as_str().unwrap_or("PathPrefix");
    let value = m["path"]["value"].as_str().unwrap_or("/");
    let mut prefix = None;
    // As `Route::rank` has it: 0 exact, 1 regex, 2 prefix.
    let kind = match path_type {
        "Exact" => {
            wm.insert("path".into(), value.into());
            0
        }
        "PathPrefix" => {
            let p = value.trim_end_matches('/');
            if p.is_empty() {
                // Every path, captured whole for a `ReplacePrefixMatch` (`$1`).
                wm.insert("path_regex".into(), "^(/.*)$".into());
            } else {
                wm.insert(
                    "path_regex".into(),
                    format!("^{}(/.*)?$", regex::escape(p)).into(),
                );
            }
            prefix = Some(p.to_string());
            2
        }
        "RegularExpression" => {
            // Checked alone first: `/a)|(.*` must not escape its anchors.
            if regex::Regex::new(value).is_err() {
                c.skipped.push(format!(
                    "{id}: path regex `{value}` does not compile: the match is left out"
                ));
                return None;
            }
            wm.insert("path_regex".into(), format!("^(?:{value})$").into());
            1
        }
        other => {
            c.skipped.push(format!(
                "{id}: path match type {other} not translated: the match is left out"
            ));
            return None;
        }
    };
    let mut headers = Mapping::new();
    let nh = m["headers"].as_sequence().map_or(0, Vec::len);
    for h in m["headers"].as_sequence().into_iter().flatten() {
        let name = h["name"].as_str().unwrap_or("").to_ascii_lowercase();
        let v = h["value"].as_str().unwrap_or("");
        match h["type"].as_str().unwrap_or("Exact") {
            "Exact" => {
                headers.insert(name.into(), v.into());
            }
            _ => {
                if regex::Regex::new(v).is_err() {
                    c.skipped.push(format!(
                        "{id}: header regex `{v}` does not compile: the match is left out"
                    ));
                    return None;
                }
                // The whole value, as Envoy-based implementations match it.
                vars.insert(
                    format!("$http_{}", name.replace('-', "_")).into(),
                    format!("~^(?:{v})$").into(),
                );
            }
        }
    }
    if !headers.is_empty() {
        wm.insert("headers".into(), Value::Mapping(headers));
    }
    let mut query = Mapping::new();
    let nq = m["queryParams"].as_sequence().map_or(0, Vec::len);
    for q in m["queryParams"].as_sequence().into_iter().flatten() {
        let name = q["name"].as_str().unwrap_or("");
        let v = q["value"].as_str().unwrap_or("");
        match q["type"].as_str().unwrap_or("Exact") {
            "Exact" => {
                query.insert(name.into(), v.into());
            }
            _ => {
                if regex::Regex::new(v).is_err()
                    || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                {
                    c.skipped.push(format!(
                        "{id}: query match `{name}` ~ `{v}` is not translated: the match is left out"
                    ));
                    return None;
                }
                vars.insert(format!("$arg_{name}").into(), format!("~^(?:{v})$").into());
            }
        }
    }
    if !query.is_empty() {
        wm.insert("query".into(), Value::Mapping(query));
    }
    if let Some(method) = m["method"].as_str() {
        wm.insert("methods".into(), Value::Sequence(vec![method.into()]));
    }
    if !vars.is_empty() {
        wm.insert("vars".into(), Value::Mapping(vars));
    }
    // The specification's precedence: exact path, then the longest prefix, then a method,
    // then more headers, then more query parameters (the host's part is the caller's).
    let method = u8::from(m["method"].as_str().is_none());
    let rank = (
        0,
        kind,
        std::cmp::Reverse(value.len()),
        method * 128 + (127 - (nh.min(15) * 8 + nq.min(7)) as u8),
    );
    Some((wm, rank, prefix))
}

/// The rule's action and filters into route `r`.
fn action(
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
            c.skipped.push(format!("{id}: {why}: the rule answers 500"));
            let mut respond = Mapping::new();
            respond.insert("status".into(), 500.into());
            r.insert("respond".into(), Value::Mapping(respond));
        }
    }
}
