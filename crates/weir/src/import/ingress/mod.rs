//! `weir import` of Kubernetes Ingress manifests (issue 56 §2, offline): the `Ingress`
//! objects of class `nginx` in a YAML file (several documents, or a `List`) turned into a weir
//! config with ingress-nginx's meaning, the annotations people use most translated, the rest
//! listed on stderr per object, never dropped silently.
//!
//! What ingress-nginx does, and what the config here does:
//! - a rule's host and paths become routes on one listener (`:80`, and `:443` when an Ingress
//!   has `tls`); `Exact` paths first, then regexes, then prefixes longest first, host rules
//!   before host-less ones, default backends last (ingress-nginx's order). A `Prefix` path
//!   matches whole segments (`/foo` is `/foo` and `/foo/…`, not `/foobar`): a regex, not a
//!   string prefix, which would widen it. `ImplementationSpecific` is nginx's string prefix.
//! - a backend Service port becomes an upstream of one server, the Service's cluster DNS name
//!   (`{service}.{namespace}.svc.cluster.local:{port}`, or `--service-address`'s template);
//!   a named port needs the Service object: listed, the path refuses.
//! - annotations: `rewrite-target` and `use-regex` (a `regex_replace` on the path, as
//!   ingress-nginx's `rewrite … break`), `ssl-redirect`/`force-ssl-redirect` (308 to https),
//!   `backend-protocol` (HTTP, HTTPS, GRPC, GRPCS: TLS without verification, as ingress-nginx
//!   proxies), `proxy-body-size`, `proxy-connect-timeout`, `proxy-read-timeout`, `proxy-send-timeout`, `limit-rps`
//!   (burst ×5, 503, as ingress-nginx), `limit-connections`, `whitelist-source-range`,
//!   `enable-cors` and `cors-*`, `permanent-redirect`(`-code`), `temporal-redirect`,
//!   `app-root`, `server-alias`, `auth-url` and `auth-response-headers` (`forward_auth` to an
//!   upstream made for the URL), `auth-type: basic` with `auth-secret` (`basic_auth` on the
//!   Secret's htpasswd, written to a file named in a note), `affinity: cookie` (`sticky`),
//!   and canary Ingresses (`canary-weight`, `-by-header`, `-by-header-value`, `-by-cookie`:
//!   a `canary` filter on the main Ingress's route for the same host and path, `canary.rs`).
//! - what is not translated is listed with the object's namespace/name; an untranslated
//!   annotation that restricts access (authentication, snippets, deny lists, ModSecurity)
//!   makes the object's routes refuse (503, a comment says why): weir never serves more than
//!   the Ingress allowed.

use std::collections::BTreeMap;
use std::path::Path;

use serde_yaml::{Mapping, Value};

mod annotations;
mod build;
mod canary;

use annotations::Annotated;
use build::{add_hosts, refusal, service_port, upstream_for};
pub(in crate::import) use build::{service_upstream, tls_certificate};

/// The annotations' prefix.
const PREFIX: &str = "nginx.ingress.kubernetes.io/";

/// Annotations that restrict who gets what: left untranslated, the object's routes refuse.
const RESTRICTING: &[&str] = &[
    "auth-method",
    "auth-snippet",
    "auth-cache-key",
    "auth-tls-secret",
    "auth-tls-verify-client",
    "configuration-snippet",
    "server-snippet",
    "denylist-source-range",
    "enable-modsecurity",
    "modsecurity-snippet",
    "satisfy",
    "global-rate-limit",
];

/// The annotations translated here.
const TRANSLATED: &[&str] = &[
    "rewrite-target",
    "use-regex",
    "ssl-redirect",
    "force-ssl-redirect",
    "backend-protocol",
    "proxy-body-size",
    "proxy-connect-timeout",
    "proxy-read-timeout",
    "proxy-send-timeout",
    "limit-rps",
    "limit-connections",
    "whitelist-source-range",
    "allowlist-source-range",
    "enable-cors",
    "cors-allow-origin",
    "cors-allow-methods",
    "cors-allow-headers",
    "cors-allow-credentials",
    "cors-max-age",
    "permanent-redirect",
    "permanent-redirect-code",
    "temporal-redirect",
    "app-root",
    "server-alias",
    "auth-url",
    "auth-response-headers",
    "auth-type",
    "auth-secret",
    "auth-secret-type",
    "auth-realm",
    "affinity",
    "session-cookie-name",
    "session-cookie-max-age",
];

/// ingress-nginx's `cors-allow-headers` default.
const CORS_HEADERS: &str = "DNT,Keep-Alive,User-Agent,X-Requested-With,If-Modified-Since,Cache-Control,Content-Type,Range,Authorization";

/// Options of the conversion.
#[derive(Debug, Clone)]
pub struct Options {
    /// The Ingress class taken (`nginx`).
    pub class: String,
    /// A backend's address: `{service}`, `{namespace}` and `{port}` replaced.
    pub service_address: String,
    /// Where the Secrets' files are expected: `tls/NS-NAME.crt` and `.key`,
    /// `auth/NS.NAME.htpasswd`.
    pub secrets_dir: String,
    /// A live cluster's Services and Secrets (`providers.kubernetes`; `None` for files).
    pub cluster: Option<std::sync::Arc<crate::import::cluster::ClusterView>>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            class: "nginx".into(),
            service_address: "{service}.{namespace}.svc.cluster.local:{port}".into(),
            secrets_dir: "/etc/weir".into(),
            cluster: None,
        }
    }
}

/// Whether `text` looks like Kubernetes manifests (a document with `apiVersion` and `kind`).
pub fn is_manifest(text: &str) -> bool {
    let yaml = text.lines().any(|l| l.starts_with("apiVersion:"))
        && text.lines().any(|l| l.starts_with("kind:"));
    // `kubectl get -o json`.
    let json = text.trim_start().starts_with('{')
        && text.contains("\"apiVersion\"")
        && text.contains("\"kind\"");
    yaml || json
}

/// A route being built, with what orders it (`gateway.rs` makes them too).
#[derive(Debug)]
pub(super) struct Route {
    /// The host first (an exact name, a wildcard, none: as nginx picks its server before
    /// a location, and the Gateway API the most specific host), then the path (0: exact, 1:
    /// regex, 2: prefix), longer paths first, then what else the match asks (a method, more
    /// headers, more query parameters: the Gateway API's order).
    pub(super) rank: (u8, u8, std::cmp::Reverse<usize>, u8),
    pub(super) body: Mapping,
}

/// The conversion's result: the config, the notes put in it, what was left out, how much was
/// translated.
#[derive(Debug, Default)]
pub struct Converted {
    /// `Options::secrets_dir`, for the annotations.
    pub secrets_dir: String,
    pub config: Mapping,
    pub notes: Vec<String>,
    pub skipped: Vec<String>,
    pub translated: usize,
    /// `Options::cluster`.
    pub cluster: Option<std::sync::Arc<crate::import::cluster::ClusterView>>,
    /// The TLS Secrets and the htpasswd Secrets the config names files of.
    pub secrets_used: Vec<(String, String)>,
    pub auth_secrets_used: Vec<(String, String)>,
    /// Every Service and Secret the objects name, found or not: a change to another one
    /// changes nothing (`providers.kubernetes` skips the rebuild).
    pub referenced: std::collections::BTreeSet<(&'static str, String, String)>,
    /// What became of each Gateway listener and route parent (the provider's status).
    pub gateway: crate::import::gateway::Outcomes,
}

/// Converts the manifests in `text`.
pub fn convert(text: &str, opts: &Options) -> Result<Converted, String> {
    let mut objects = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(text) {
        let mut v = Value::deserialize_from(doc)?;
        // `<<: *anchor` merged as kubectl does (an annotation in a merged block is kept).
        v.apply_merge().map_err(|e| e.to_string())?;
        collect(v, &mut objects);
    }
    Ok(convert_objects(objects, opts))
}

/// Converts `objects` (Kubernetes objects, `List`s opened).
pub fn convert_objects(objects: Vec<Value>, opts: &Options) -> Converted {
    let mut c = Converted {
        secrets_dir: opts.secrets_dir.trim_end_matches('/').to_string(),
        cluster: opts.cluster.clone(),
        ..Converted::default()
    };
    let mut routes: Vec<Route> = Vec::new();
    let mut tls_routes: Vec<Route> = Vec::new();
    let mut upstreams = Mapping::new();
    let mut certificates: Vec<Value> = Vec::new();
    let mut canaries = canary::Canaries::new();
    // Every host an Ingress of the class names, with its age: a newer Gateway route does not
    // get it (the second attack review of issue 56), an older one does (below).
    let ingress_hosts = build::ingress_hosts(&objects, &opts.class);
    // Gateway API objects first (`gateway/`): the hosts their routes take are not an
    // Ingress's.
    let gateway = super::gateway::convert(&objects, opts, (&mut c, &ingress_hosts), &mut upstreams);
    // ingress-nginx takes the oldest Ingress first (`creationTimestamp`); file order otherwise.
    let mut ingresses: Vec<&Value> = objects
        .iter()
        .filter(|o| o.get("kind").and_then(Value::as_str) == Some("Ingress"))
        .collect();
    ingresses.sort_by_key(|o| {
        o["metadata"]["creationTimestamp"]
            .as_str()
            .map_or((1, String::new()), |t| (0, t.to_string()))
    });
    // What ingress-nginx decides per host, across Ingresses: TLS, and regex paths
    // (`use-regex` or `rewrite-target` on any Ingress of a host makes all its paths regexes).
    let mut tls_hosts: Vec<String> = Vec::new();
    let mut regex_hosts: Vec<Option<String>> = Vec::new();
    let mut all_hosts: Vec<String> = Vec::new();
    for obj in &ingresses {
        let (ns, name) = names(obj);
        let id = format!("Ingress {ns}/{name}");
        let a = annotations(obj);
        let class = class_of(obj);
        let canary = a.get("canary").and_then(|v| parse_bool(v)) == Some(true);
        if class.is_none() {
            c.skipped.push(format!(
                "{id}: no Ingress class: ingress-nginx serves it only as the default class (or with --watch-ingress-without-class); imported"
            ));
        }
        if class.is_some_and(|k| k != opts.class) {
            continue;
        }
        if canary {
            canary::read(&id, ns, obj, &a, &mut canaries, &mut c.skipped);
            continue;
        }
        let regex = ["use-regex", "rewrite-target"].iter().any(|k| {
            k == &"rewrite-target" && a.contains_key(*k)
                || a.get(*k).and_then(|v| parse_bool(v)) == Some(true)
        });
        for t in obj["spec"]["tls"].as_sequence().into_iter().flatten() {
            let hosts: Vec<String> = t["hosts"]
                .as_sequence()
                .into_iter()
                .flatten()
                .filter_map(|h| h.as_str().map(str::to_ascii_lowercase))
                .collect();
            // A Gateway's host keeps its Gateway's certificate (attack review of issue 56).
            let (theirs, mine): (Vec<String>, Vec<String>) = hosts
                .into_iter()
                .partition(|h| super::gateway::gateway_owned(&gateway.hosts, h));
            for h in &theirs {
                c.skipped.push(format!(
                    "{id}: tls host {h} is a Gateway's: its certificate is not taken for it"
                ));
            }
            if let Some(secret) = t["secretName"].as_str() {
                if !mine.is_empty() || theirs.is_empty() {
                    tls_certificate(&id, (ns, secret), &mine, &mut certificates, &mut c);
                }
            }
            tls_hosts.extend(mine);
        }
        for r in obj["spec"]["rules"].as_sequence().into_iter().flatten() {
            let host = r["host"].as_str().map(str::to_ascii_lowercase);
            if regex && !regex_hosts.contains(&host) {
                regex_hosts.push(host.clone());
            }
            if let Some(h) = host {
                all_hosts.push(h);
            }
        }
    }
    // (host, path, type) → the Ingress that has it (the oldest).
    let mut taken: std::collections::BTreeMap<(Option<String>, String, String), String> =
        std::collections::BTreeMap::new();
    // Host → its catch-all (the first Ingress with a `defaultBackend` naming that host), or
    // 404.
    let mut catch_all: Vec<(Option<String>, Option<Mapping>)> = Vec::new();
    for obj in &objects {
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
        let (ns, name) = names(obj);
        let id = format!("{kind} {ns}/{name}");
        if kind != "Ingress" {
            let gateway_api = matches!(
                kind,
                "Gateway"
                    | "GatewayClass"
                    | "HTTPRoute"
                    | "GRPCRoute"
                    | "TLSRoute"
                    | "TCPRoute"
                    | "UDPRoute"
                    | "ReferenceGrant"
            );
            if !kind.is_empty() && !gateway_api && kind != "Service" && kind != "Namespace" {
                c.skipped.push(format!("{id}: not translated"));
            }
        }
    }
    for obj in &ingresses {
        let (ns, name) = names(obj);
        let id = format!("Ingress {ns}/{name}");
        let annotations = annotations(obj);
        let class = class_of(obj);
        if class.is_some_and(|k| k != opts.class) {
            c.skipped.push(format!(
                "{id}: class {}, not {}",
                class.unwrap_or(""),
                opts.class
            ));
            continue;
        }
        if annotations.get("canary").and_then(|v| parse_bool(v)) == Some(true) {
            // Read before (`canary.rs`).
            continue;
        }
        let mut a = Annotated::read(&id, ns, &annotations, &mut c);
        // An alias naming a host another rule has is dropped (ingress-nginx: "Conflicting
        // hostname and alias").
        a.aliases.retain(|al| {
            let clash = all_hosts.contains(&al.to_ascii_lowercase())
                || super::gateway::gateway_owned(&gateway.hosts, &al.to_ascii_lowercase());
            if clash {
                c.skipped.push(format!(
                    "{id}: server-alias {al} is a host of its own: the alias is dropped"
                ));
            }
            !clash
        });
        let rules: Vec<(Option<String>, Value)> = obj["spec"]["rules"]
            .as_sequence()
            .into_iter()
            .flatten()
            .map(|r| {
                (
                    r["host"].as_str().map(str::to_ascii_lowercase),
                    r["http"]["paths"].clone(),
                )
            })
            .collect();
        // A `defaultBackend`: the catch-all of the Ingress's own hosts, or of every host when
        // it has no rules.
        if let Some(default) = obj["spec"]["defaultBackend"].as_mapping() {
            let svc = &default.get("service").cloned().unwrap_or(Value::Null);
            let action = match service_port(svc, ns, &c).and_then(|(service, port)| {
                upstream_for((ns, &service, &port), &a, &mut upstreams, opts, &mut c)
            }) {
                Ok(up) => a.action(&up, "/"),
                Err(why) => refusal(&mut c, &format!("{id}: {why}")),
            };
            let hosts: Vec<Option<String>> = match rules.is_empty() {
                true => vec![None],
                false => rules.iter().map(|(h, _)| h.clone()).collect(),
            };
            for h in hosts {
                match catch_all.iter_mut().find(|(k, _)| *k == h) {
                    Some((_, Some(_))) => c.skipped.push(format!(
                        "{id}: defaultBackend for {}: an older Ingress's is kept",
                        h.as_deref().unwrap_or("any host")
                    )),
                    Some((_, slot)) => *slot = Some(action.clone()),
                    None => catch_all.push((h, Some(action.clone()))),
                }
            }
        }
        for (ri, (host, paths)) in rules.into_iter().enumerate() {
            if let Some(h) = host
                .as_deref()
                .filter(|h| super::gateway::gateway_owned(&gateway.hosts, h))
            {
                c.skipped.push(format!(
                    "{id}: host {h} is a Gateway's (its routes and listener's): left out"
                ));
                continue;
            }
            if !catch_all.iter().any(|(k, _)| *k == host) {
                catch_all.push((host.clone(), None));
            }
            let mut hosts: Vec<String> = host.iter().cloned().collect();
            if host.is_some() {
                hosts.extend(a.aliases.iter().cloned());
                for al in &a.aliases {
                    let al = Some(al.to_ascii_lowercase());
                    if !catch_all.iter().any(|(k, _)| *k == al) {
                        catch_all.push((al, None));
                    }
                }
            }
            let over_tls = host.as_ref().is_some_and(|h| tls_hosts.contains(h));
            let regex = regex_hosts.contains(&host);
            if let (Some(root), true) = (&a.app_root, host.is_some()) {
                // `app-root`: `/` redirects there (302), unless the routes refuse.
                let mut m = Mapping::new();
                m.insert("path".into(), "/".into());
                add_hosts(&mut m, &hosts);
                let mut r = Mapping::new();
                r.insert("name".into(), format!("app-root.{ns}.{name}.{ri}").into());
                r.insert("match".into(), Value::Mapping(m));
                match &a.refuse {
                    Some(why) => {
                        for (k, v) in refusal(&mut c, why) {
                            r.insert(k, v);
                        }
                    }
                    None => {
                        let mut red = Mapping::new();
                        red.insert("to".into(), root.clone().into());
                        red.insert("status".into(), 302.into());
                        r.insert("redirect".into(), Value::Mapping(red));
                    }
                }
                let rank = (host_class(host.as_deref()), 0, std::cmp::Reverse(1), 0);
                if over_tls {
                    tls_routes.push(Route {
                        rank,
                        body: r.clone(),
                    });
                }
                routes.push(Route { rank, body: r });
            }
            for p in paths.as_sequence().into_iter().flatten() {
                let path = p["path"].as_str().unwrap_or("/");
                let kind = p["pathType"].as_str().unwrap_or("ImplementationSpecific");
                let key = (host.clone(), path.to_string(), kind.to_string());
                if let Some(older) = taken.get(&key) {
                    c.skipped.push(format!(
                        "{id}: host {} path {path} ({kind}) is {older}'s (the older Ingress): left out",
                        host.as_deref().unwrap_or("*")
                    ));
                    continue;
                }
                taken.insert(key, id.clone());
                let mut m = Mapping::new();
                add_hosts(&mut m, &hosts);
                let mut bad_regex = None;
                // 0: exact, 1: regex, 2: prefix.
                let kind_rank = match (kind, regex) {
                    ("Exact", _) => {
                        m.insert("path".into(), path.into());
                        0
                    }
                    (_, true) => {
                        // ingress-nginx: `location ~* "^path"`, longest first.
                        let re = format!("(?i)^{path}");
                        if let Err(e) = regex::Regex::new(&re) {
                            bad_regex = Some(format!("the path regex {path}: {e}"));
                        }
                        m.insert("path_regex".into(), re.into());
                        1
                    }
                    ("Prefix", false) => {
                        let p = path.trim_end_matches('/');
                        if p.is_empty() {
                            m.insert("path_prefix".into(), "/".into());
                        } else {
                            m.insert(
                                "path_regex".into(),
                                format!("^{}(/|$)", regex::escape(p)).into(),
                            );
                        }
                        2
                    }
                    (_, false) => {
                        m.insert("path_prefix".into(), path.into());
                        2
                    }
                };
                let mut r = Mapping::new();
                r.insert(
                    "name".into(),
                    // Unique whatever the names: a namespace has no dot, the kind is first
                    // and the count last (`{ns}-{name}-N` let `a-b/c` and `a/b-c` clash,
                    // and the clash failed everyone's reload: attack review of issue 56).
                    format!("ingress.{ns}.{name}.{}", routes.len()).into(),
                );
                r.insert("match".into(), Value::Mapping(m));
                let order = (
                    host_class(host.as_deref()),
                    kind_rank,
                    std::cmp::Reverse(path.len()),
                    0,
                );
                let mut extra = Vec::new();
                let backend =
                    service_port(&p["backend"]["service"], ns, &c).and_then(|(service, port)| {
                        upstream_for((ns, &service, &port), &a, &mut upstreams, opts, &mut c)
                    });
                let action = match (backend, bad_regex) {
                    (_, Some(why)) | (Err(why), None) => {
                        c.skipped
                            .push(format!("{id}: {why}: the path {path} answers 503"));
                        refusal(&mut c, &format!("{id}: {why}"))
                    }
                    (Ok(up), None) => {
                        if let Some(k) =
                            canaries.remove(&(ns.to_string(), host.clone(), path.to_string()))
                        {
                            let (cns, svc, port) = &k.backend;
                            match upstream_for((cns, svc, port), &a, &mut upstreams, opts, &mut c) {
                                Ok(cup) => extra.push(canary::filter(&k, &cup)),
                                Err(why) => c
                                    .skipped
                                    .push(format!("{}: {why}: the canary is left out", k.id)),
                            }
                        }
                        a.action(&up, path)
                    }
                };
                let (plain, secure) = a.route(r, action, (over_tls, extra), &mut c);
                routes.push(Route {
                    rank: order,
                    body: plain,
                });
                if let Some(s) = secure {
                    tls_routes.push(Route {
                        rank: order,
                        body: s,
                    });
                }
                c.translated += 1;
            }
        }
    }
    // Each host's requests stay with it: what none of its paths takes gets its catch-all (a
    // `defaultBackend`) or 404, never another host's routes (ingress-nginx's server per host).
    for (i, (host, action)) in catch_all.into_iter().enumerate() {
        let mut m = Mapping::new();
        if let Some(h) = &host {
            m.insert("host".into(), h.clone().into());
        }
        let mut r = Mapping::new();
        r.insert("name".into(), format!("catch-all-{i}").into());
        if !m.is_empty() {
            r.insert("match".into(), Value::Mapping(m));
        }
        match action {
            Some(action) => {
                for (k, v) in action {
                    r.insert(k, v);
                }
            }
            None if host.is_none() => continue,
            None => {
                let mut respond = Mapping::new();
                respond.insert("status".into(), 404.into());
                r.insert("respond".into(), Value::Mapping(respond));
            }
        }
        let rank = (host_class(host.as_deref()), 9, std::cmp::Reverse(0), 0);
        if host.as_ref().is_some_and(|h| tls_hosts.contains(h))
            || (host.is_none() && !certificates.is_empty())
        {
            tls_routes.push(Route {
                rank,
                body: r.clone(),
            });
        }
        routes.push(Route { rank, body: r });
    }
    for ((_, host, path), k) in &canaries {
        c.skipped.push(format!(
            "{}: no main Ingress of its namespace for host {} and path {path}: the canary is left out",
            k.id,
            host.as_deref().unwrap_or("*")
        ));
    }
    // The Gateway API objects' routes (converted first).
    routes.extend(gateway.plain);
    tls_routes.extend(gateway.secure);
    for cert in gateway.certificates {
        if !certificates.contains(&cert) {
            certificates.push(cert);
        }
    }
    routes.sort_by_key(|r| r.rank);
    tls_routes.sort_by_key(|r| r.rank);
    let listeners = build::listeners(
        (routes, tls_routes),
        certificates,
        (gateway.passthrough, gateway.passthrough_default),
        c.gateway.grpc_plain,
    );
    c.config
        .insert("upstreams".into(), Value::Mapping(upstreams));
    c.config
        .insert("listeners".into(), Value::Sequence(listeners));
    c
}

/// An object's namespace and name.
fn names(obj: &Value) -> (&str, &str) {
    (
        obj["metadata"]["namespace"].as_str().unwrap_or("default"),
        obj["metadata"]["name"].as_str().unwrap_or("?"),
    )
}

/// A boolean as ingress-nginx reads one (Go's `strconv.ParseBool`).
pub(super) fn parse_bool(v: &str) -> Option<bool> {
    match v.trim() {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// How specific a host is: an exact name 0, a wildcard 1, any host 2.
pub(super) fn host_class(host: Option<&str>) -> u8 {
    match host {
        Some(h) if h.starts_with("*.") => 1,
        Some(_) => 0,
        None => 2,
    }
}

/// The Ingress class an object asks for (`spec.ingressClassName`, or the older annotation).
fn class_of(obj: &Value) -> Option<&str> {
    obj["spec"]["ingressClassName"]
        .as_str()
        .or_else(|| obj["metadata"]["annotations"]["kubernetes.io/ingress.class"].as_str())
}

/// The listeners' addresses, replaced by environment references after the YAML is written
/// (`import/mod.rs`): `WEIR_LISTEN` and `WEIR_LISTEN_TLS`.
pub const LISTEN: &str = "__weir_listen__";
pub const LISTEN_TLS: &str = "__weir_listen_tls__";
pub const LISTEN_PASSTHROUGH: &str = "__weir_listen_passthrough__";

/// `List` objects opened up; every object with a `kind`.
pub(crate) fn collect(v: Value, out: &mut Vec<Value>) {
    match v.get("kind").and_then(Value::as_str) {
        Some("List") => {
            if let Some(items) = v.get("items").and_then(Value::as_sequence) {
                for i in items {
                    collect(i.clone(), out);
                }
            }
        }
        Some(_) => out.push(v),
        None => {}
    }
}

/// The object's `nginx.ingress.kubernetes.io/*` annotations, by short name.
fn annotations(obj: &Value) -> BTreeMap<String, String> {
    obj["metadata"]["annotations"]
        .as_mapping()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| {
            let short = k.as_str()?.strip_prefix(PREFIX)?;
            let value = match v {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                _ => return None,
            };
            Some((short.to_string(), value))
        })
        .collect()
}

/// Reads `path` and converts it.
pub fn convert_file(path: &Path, opts: &Options) -> Result<Converted, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    convert(&text, opts).map_err(|e| format!("{}: {e}", path.display()))
}

trait FromDoc: Sized {
    fn deserialize_from(doc: serde_yaml::Deserializer<'_>) -> Result<Self, String>;
}

impl FromDoc for Value {
    fn deserialize_from(doc: serde_yaml::Deserializer<'_>) -> Result<Value, String> {
        serde::Deserialize::deserialize(doc).map_err(|e| e.to_string())
    }
}
