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
//!   proxies), `proxy-body-size`, `proxy-connect-timeout`, `proxy-read-timeout`, `limit-rps`
//!   (burst ×5, 503, as ingress-nginx), `limit-connections`, `whitelist-source-range`,
//!   `enable-cors` and `cors-*`, `permanent-redirect`(`-code`), `temporal-redirect`,
//!   `app-root`, `server-alias`.
//! - what is not translated is listed with the object's namespace/name; an untranslated
//!   annotation that restricts access (authentication, snippets, deny lists, ModSecurity)
//!   makes the object's routes refuse (503, a comment says why): weir never serves more than
//!   the Ingress allowed. A canary Ingress is left out (its main Ingress serves all traffic).

use std::collections::BTreeMap;
use std::path::Path;

use serde_yaml::{Mapping, Value};

/// The annotations' prefix.
const PREFIX: &str = "nginx.ingress.kubernetes.io/";

/// Annotations that restrict who gets what: left untranslated, the object's routes refuse.
const RESTRICTING: &[&str] = &[
    "auth-type",
    "auth-secret",
    "auth-secret-type",
    "auth-realm",
    "auth-url",
    "auth-signin",
    "auth-method",
    "auth-response-headers",
    "auth-snippet",
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
    "limit-rps",
    "limit-connections",
    "whitelist-source-range",
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
}

impl Default for Options {
    fn default() -> Options {
        Options {
            class: "nginx".into(),
            service_address: "{service}.{namespace}.svc.cluster.local:{port}".into(),
        }
    }
}

/// Whether `text` looks like Kubernetes manifests (a document with `apiVersion` and `kind`).
pub fn is_manifest(text: &str) -> bool {
    text.lines().any(|l| l.starts_with("apiVersion:"))
        && text.lines().any(|l| l.starts_with("kind:"))
}

/// A route being built, with what orders it.
struct Route {
    /// 0: exact, 1: regex, 2: prefix; then longer first.
    rank: (u8, bool, u8, std::cmp::Reverse<usize>),
    body: Mapping,
}

/// The conversion's result: the config, the notes put in it, what was left out, how much was
/// translated.
#[derive(Debug, Default)]
pub struct Converted {
    pub config: Mapping,
    pub notes: Vec<String>,
    pub skipped: Vec<String>,
    pub translated: usize,
}

/// Converts the manifests in `text`.
pub fn convert(text: &str, opts: &Options) -> Result<Converted, String> {
    let mut objects = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(text) {
        let v = Value::deserialize_from(doc)?;
        collect(v, &mut objects);
    }
    let mut c = Converted::default();
    let mut routes: Vec<Route> = Vec::new();
    let mut tls_routes: Vec<Route> = Vec::new();
    let mut upstreams = Mapping::new();
    let mut certificates: Vec<Value> = Vec::new();
    for obj in &objects {
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
        let name = obj["metadata"]["name"].as_str().unwrap_or("?");
        let ns = obj["metadata"]["namespace"].as_str().unwrap_or("default");
        let id = format!("{kind} {ns}/{name}");
        if kind != "Ingress" {
            if !kind.is_empty() && kind != "Service" && kind != "Namespace" {
                c.skipped.push(format!(
                    "{id}: not an Ingress (Gateway API objects: not yet)"
                ));
            }
            continue;
        }
        let annotations = annotations(obj);
        let class = obj["spec"]["ingressClassName"]
            .as_str()
            .or_else(|| obj["metadata"]["annotations"]["kubernetes.io/ingress.class"].as_str());
        if class.is_some_and(|k| k != opts.class) {
            c.skipped.push(format!(
                "{id}: class {}, not {}",
                class.unwrap_or(""),
                opts.class
            ));
            continue;
        }
        if annotations.get("canary").map(String::as_str) == Some("true") {
            c.skipped.push(format!(
                "{id}: a canary Ingress is not translated (its main Ingress serves all traffic)"
            ));
            continue;
        }
        let a = Annotated::read(&id, &annotations, &mut c);
        let tls_hosts: Vec<String> = obj["spec"]["tls"]
            .as_sequence()
            .into_iter()
            .flatten()
            .flat_map(|t| {
                if let Some(secret) = t["secretName"].as_str() {
                    let base = format!("/etc/weir/tls/{ns}-{secret}");
                    let mut cert = Mapping::new();
                    cert.insert("cert".into(), format!("{base}.crt").into());
                    cert.insert("key".into(), format!("{base}.key").into());
                    if !certificates.contains(&Value::Mapping(cert.clone())) {
                        certificates.push(Value::Mapping(cert));
                        c.skipped.push(format!(
                            "{id}: TLS Secret {ns}/{secret}: write its tls.crt and tls.key to {base}.crt and {base}.key (kubectl get secret -n {ns} {secret} -o jsonpath='{{.data.tls\\.crt}}' | base64 -d)"
                        ));
                    }
                }
                t["hosts"]
                    .as_sequence()
                    .into_iter()
                    .flatten()
                    .filter_map(|h| h.as_str().map(str::to_string))
                    .collect::<Vec<_>>()
            })
            .collect();
        let mut backend = |svc: &Value, c: &mut Converted| -> Result<String, String> {
            let service = svc["name"]
                .as_str()
                .ok_or("a backend without a service name")?;
            let port = match (&svc["port"]["number"], svc["port"]["name"].as_str()) {
                (Value::Number(n), _) => n.to_string(),
                (_, Some(named)) => {
                    return Err(format!(
                        "the named port {named} of Service {ns}/{service} (give its number)"
                    ))
                }
                _ => return Err(format!("Service {ns}/{service} without a port")),
            };
            let up = format!("{ns}-{service}-{port}");
            if !upstreams.contains_key(up.as_str()) {
                let addr = opts
                    .service_address
                    .replace("{service}", service)
                    .replace("{namespace}", ns)
                    .replace("{port}", &port);
                let mut u = Mapping::new();
                u.insert("servers".into(), Value::Sequence(vec![addr.into()]));
                a.upstream(&mut u);
                upstreams.insert(up.clone().into(), Value::Mapping(u));
                c.translated += 1;
            }
            Ok(up)
        };
        let mut rules: Vec<(Option<String>, Value)> = obj["spec"]["rules"]
            .as_sequence()
            .into_iter()
            .flatten()
            .map(|r| {
                (
                    r["host"].as_str().map(str::to_string),
                    r["http"]["paths"].clone(),
                )
            })
            .collect();
        if let Some(default) = obj["spec"]["defaultBackend"].as_mapping() {
            let mut path = Mapping::new();
            path.insert("path".into(), "/".into());
            path.insert("pathType".into(), "Prefix".into());
            path.insert("backend".into(), Value::Mapping(default.clone()));
            rules.push((None, Value::Sequence(vec![Value::Mapping(path)])));
        }
        for (host, paths) in rules {
            let mut hosts: Vec<String> = host.iter().cloned().collect();
            if host.is_some() {
                hosts.extend(a.aliases.iter().cloned());
            }
            let over_tls = host.as_ref().is_some_and(|h| tls_hosts.contains(h));
            if let (Some(root), true) = (&a.app_root, host.is_some()) {
                // `app-root`: `/` redirects there (302).
                let mut m = Mapping::new();
                m.insert("path".into(), "/".into());
                add_hosts(&mut m, &hosts);
                let mut r = Mapping::new();
                r.insert("name".into(), format!("{ns}-{name}-app-root").into());
                r.insert("match".into(), Value::Mapping(m));
                let mut red = Mapping::new();
                red.insert("to".into(), root.clone().into());
                red.insert("status".into(), 302.into());
                r.insert("redirect".into(), Value::Mapping(red));
                routes.push(Route {
                    rank: (0, host.is_none(), 0, std::cmp::Reverse(1)),
                    body: r.clone(),
                });
                if over_tls {
                    tls_routes.push(Route {
                        rank: (0, false, 0, std::cmp::Reverse(1)),
                        body: r,
                    });
                }
            }
            for (i, p) in paths.as_sequence().into_iter().flatten().enumerate() {
                let path = p["path"].as_str().unwrap_or("/");
                let kind = p["pathType"].as_str().unwrap_or("ImplementationSpecific");
                let mut m = Mapping::new();
                add_hosts(&mut m, &hosts);
                let rank = if a.regex {
                    m.insert("path_regex".into(), format!("(?i)^{path}").into());
                    (1, i as u8)
                } else {
                    match kind {
                        "Exact" => {
                            m.insert("path".into(), path.into());
                            (0, 0)
                        }
                        "Prefix" => {
                            let p = path.trim_end_matches('/');
                            if p.is_empty() {
                                m.insert("path_prefix".into(), "/".into());
                            } else {
                                m.insert(
                                    "path_regex".into(),
                                    format!("^{}(/|$)", regex::escape(p)).into(),
                                );
                            }
                            (2, 0)
                        }
                        _ => {
                            m.insert("path_prefix".into(), path.into());
                            (2, 0)
                        }
                    }
                };
                let mut r = Mapping::new();
                r.insert(
                    "name".into(),
                    format!("{ns}-{name}-{}", routes.len()).into(),
                );
                r.insert("match".into(), Value::Mapping(m));
                let order = (
                    rank.0,
                    host.is_none(),
                    rank.1,
                    std::cmp::Reverse(path.len()),
                );
                let action = match backend(&p["backend"]["service"], &mut c) {
                    Ok(up) => a.action(&up, path),
                    Err(why) => {
                        c.skipped
                            .push(format!("{id}: {why}: the path {path} answers 503"));
                        refusal(&mut c, &format!("{id}: {why}"))
                    }
                };
                let (plain, secure) = a.route(r, action, over_tls, &mut c);
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
    routes.sort_by_key(|r| r.rank);
    tls_routes.sort_by_key(|r| r.rank);
    let mut listeners = vec![listener(LISTEN, None, routes)];
    if !certificates.is_empty() {
        let mut tls = Mapping::new();
        tls.insert("certificates".into(), Value::Sequence(certificates));
        listeners.push(listener(LISTEN_TLS, Some(tls), tls_routes));
    }
    c.config
        .insert("upstreams".into(), Value::Mapping(upstreams));
    c.config
        .insert("listeners".into(), Value::Sequence(listeners));
    Ok(c)
}

/// The listeners' addresses, replaced by environment references after the YAML is written
/// (`import/mod.rs`): `WEIR_LISTEN` and `WEIR_LISTEN_TLS`.
pub const LISTEN: &str = "__weir_listen__";
pub const LISTEN_TLS: &str = "__weir_listen_tls__";

fn listener(address: &str, tls: Option<Mapping>, routes: Vec<Route>) -> Value {
    let mut l = Mapping::new();
    l.insert("address".into(), address.into());
    if let Some(tls) = tls {
        l.insert("tls".into(), Value::Mapping(tls));
    }
    let mut routes: Vec<Value> = routes.into_iter().map(|r| Value::Mapping(r.body)).collect();
    if routes.is_empty() {
        let mut r = Mapping::new();
        let mut respond = Mapping::new();
        respond.insert("status".into(), 404.into());
        r.insert("respond".into(), Value::Mapping(respond));
        routes.push(Value::Mapping(r));
    }
    l.insert("routes".into(), Value::Sequence(routes));
    Value::Mapping(l)
}

fn add_hosts(m: &mut Mapping, hosts: &[String]) {
    match hosts {
        [] => {}
        [one] => {
            m.insert("host".into(), one.clone().into());
        }
        many => {
            m.insert(
                "host".into(),
                Value::Sequence(many.iter().map(|h| h.clone().into()).collect()),
            );
        }
    }
}

/// A 503 route action with a note saying why.
fn refusal(c: &mut Converted, why: &str) -> Mapping {
    let mut respond = Mapping::new();
    respond.insert("status".into(), 503.into());
    respond.insert("body".into(), "not translated by weir import\n".into());
    let mut action = Mapping::new();
    action.insert(
        format!("{}{}", super::nginx::NOTE_KEY, c.notes.len()).into(),
        c.notes.len().into(),
    );
    c.notes.push(why.to_string());
    action.insert("respond".into(), Value::Mapping(respond));
    action
}

/// `List` objects opened up; every object with a `kind`.
fn collect(v: Value, out: &mut Vec<Value>) {
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

/// An Ingress's annotations, read once.
#[derive(Default)]
struct Annotated {
    regex: bool,
    rewrite: Option<String>,
    ssl_redirect: Option<bool>,
    force_ssl_redirect: bool,
    protocol: Option<String>,
    body_size: Option<String>,
    connect_timeout: Option<String>,
    read_timeout: Option<String>,
    filters: Vec<Value>,
    redirect: Option<(String, u16)>,
    app_root: Option<String>,
    aliases: Vec<String>,
    /// Why the object's routes refuse, when they do.
    refuse: Option<String>,
}

/// `5`, `5s`: a duration in seconds for weir.
fn seconds(v: &str) -> Option<String> {
    let n = v.trim().trim_end_matches('s');
    n.parse::<u64>().ok().map(|n| format!("{n}s"))
}

fn list(v: &str) -> Vec<Value> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| Value::String(s.to_string()))
        .collect()
}

impl Annotated {
    fn read(id: &str, a: &BTreeMap<String, String>, c: &mut Converted) -> Annotated {
        let mut out = Annotated::default();
        let yes = |k: &str| a.get(k).is_some_and(|v| v.eq_ignore_ascii_case("true"));
        out.regex = yes("use-regex") || a.contains_key("rewrite-target");
        out.rewrite = a.get("rewrite-target").cloned();
        out.ssl_redirect = a
            .get("ssl-redirect")
            .map(|v| v.eq_ignore_ascii_case("true"));
        out.force_ssl_redirect = yes("force-ssl-redirect");
        out.protocol = a.get("backend-protocol").map(|p| p.to_ascii_uppercase());
        out.body_size = a.get("proxy-body-size").map(|s| match s.trim() {
            "0" => "1024g".to_string(),
            s => s.to_ascii_lowercase(),
        });
        for (key, slot) in [
            ("proxy-connect-timeout", &mut out.connect_timeout),
            ("proxy-read-timeout", &mut out.read_timeout),
        ] {
            if let Some(v) = a.get(key) {
                match seconds(v) {
                    Some(s) => *slot = Some(s),
                    None => c
                        .skipped
                        .push(format!("{id}: {PREFIX}{key}: `{v}` is not seconds")),
                }
            }
        }
        if let Some(rps) = a.get("limit-rps") {
            match rps.trim().parse::<u64>() {
                Ok(n) if n > 0 => {
                    let mut f = Mapping::new();
                    let mut rl = Mapping::new();
                    rl.insert("rate".into(), n.into());
                    rl.insert("burst".into(), (n * 5).into());
                    rl.insert("key".into(), "$remote_addr".into());
                    rl.insert("status".into(), 503.into());
                    f.insert("rate_limit".into(), Value::Mapping(rl));
                    out.filters.push(Value::Mapping(f));
                }
                _ => c.skipped.push(format!("{id}: {PREFIX}limit-rps: `{rps}`")),
            }
        }
        if let Some(n) = a.get("limit-connections") {
            match n.trim().parse::<u64>() {
                Ok(n) if n > 0 => {
                    let mut f = Mapping::new();
                    let mut cc = Mapping::new();
                    cc.insert("max".into(), n.into());
                    cc.insert("key".into(), "$remote_addr".into());
                    cc.insert("status".into(), 503.into());
                    f.insert("concurrency".into(), Value::Mapping(cc));
                    out.filters.push(Value::Mapping(f));
                }
                _ => c
                    .skipped
                    .push(format!("{id}: {PREFIX}limit-connections: `{n}`")),
            }
        }
        if let Some(ranges) = a.get("whitelist-source-range") {
            let mut f = Mapping::new();
            let mut ip = Mapping::new();
            ip.insert("allow".into(), Value::Sequence(list(ranges)));
            f.insert("ip".into(), Value::Mapping(ip));
            out.filters.push(Value::Mapping(f));
        }
        if yes("enable-cors") {
            let origins = a.get("cors-allow-origin").map_or("*", String::as_str);
            let mut credentials = a
                .get("cors-allow-credentials")
                .is_none_or(|v| v.eq_ignore_ascii_case("true"));
            let origins = list(origins);
            if credentials && origins.iter().any(|o| o.as_str() == Some("*")) {
                // ingress-nginx answers any origin with credentials; weir refuses that.
                credentials = false;
                c.skipped.push(format!(
                    "{id}: {PREFIX}cors-allow-credentials with origin *: credentials left off (list the origins to allow them)"
                ));
            }
            let mut cors = Mapping::new();
            cors.insert("origins".into(), Value::Sequence(origins));
            cors.insert(
                "methods".into(),
                Value::Sequence(list(
                    a.get("cors-allow-methods")
                        .map_or("GET, PUT, POST, DELETE, PATCH, OPTIONS", String::as_str),
                )),
            );
            cors.insert(
                "headers".into(),
                Value::Sequence(list(
                    a.get("cors-allow-headers")
                        .map_or(CORS_HEADERS, String::as_str),
                )),
            );
            cors.insert("credentials".into(), credentials.into());
            let age = a
                .get("cors-max-age")
                .and_then(|v| seconds(v))
                .unwrap_or_else(|| "1728000s".into());
            cors.insert("max_age".into(), age.into());
            let mut f = Mapping::new();
            f.insert("cors".into(), Value::Mapping(cors));
            out.filters.push(Value::Mapping(f));
        }
        if let Some(to) = a.get("permanent-redirect") {
            let code = a
                .get("permanent-redirect-code")
                .and_then(|c| c.trim().parse().ok())
                .filter(|c| (300..400).contains(c))
                .unwrap_or(301);
            out.redirect = Some((to.clone(), code));
        } else if let Some(to) = a.get("temporal-redirect") {
            out.redirect = Some((to.clone(), 302));
        }
        out.app_root = a.get("app-root").cloned();
        out.aliases = a
            .get("server-alias")
            .map(|v| {
                v.split([',', ' '])
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        if let Some(p) = &out.protocol {
            if !matches!(p.as_str(), "HTTP" | "HTTPS" | "GRPC" | "GRPCS") {
                out.refuse = Some(format!("{PREFIX}backend-protocol {p} is not translated"));
            }
        }
        for (k, v) in a {
            if TRANSLATED.contains(&k.as_str()) || k == "canary" {
                continue;
            }
            if RESTRICTING.contains(&k.as_str()) {
                let why = format!("{PREFIX}{k} is not translated: its routes answer 503");
                c.skipped.push(format!("{id}: {why}"));
                out.refuse.get_or_insert(why);
            } else {
                c.skipped
                    .push(format!("{id}: {PREFIX}{k}: `{v}` not translated"));
            }
        }
        out
    }

    /// The upstream's settings from `backend-protocol` and the timeouts.
    fn upstream(&self, u: &mut Mapping) {
        match self.protocol.as_deref() {
            Some("GRPC") => {
                u.insert("protocol".into(), "h2".into());
            }
            Some(p @ ("HTTPS" | "GRPCS")) => {
                // ingress-nginx does not verify the backend's certificate (proxy_ssl_verify off).
                let mut tls = Mapping::new();
                tls.insert("insecure_skip_verify".into(), true.into());
                u.insert("tls".into(), Value::Mapping(tls));
                if p == "GRPCS" {
                    u.insert("protocol".into(), "h2".into());
                }
            }
            _ => {}
        }
        let mut t = Mapping::new();
        if let Some(s) = &self.connect_timeout {
            t.insert("connect".into(), s.clone().into());
        }
        if let Some(s) = &self.read_timeout {
            t.insert("response_header".into(), s.clone().into());
            t.insert("idle".into(), s.clone().into());
        }
        if !t.is_empty() {
            u.insert("timeouts".into(), Value::Mapping(t));
        }
    }

    /// The action of a path to upstream `up`.
    fn action(&self, up: &str, path: &str) -> Mapping {
        let mut action = Mapping::new();
        if let Some((to, code)) = &self.redirect {
            let mut r = Mapping::new();
            r.insert("to".into(), to.clone().into());
            r.insert("status".into(), (*code).into());
            action.insert("redirect".into(), Value::Mapping(r));
            return action;
        }
        let mut p = Mapping::new();
        p.insert("upstream".into(), up.into());
        if let Some(target) = &self.rewrite {
            let mut rr = Mapping::new();
            rr.insert("pattern".into(), format!("(?i)^{path}").into());
            rr.insert("replacement".into(), target.clone().into());
            p.insert("regex_replace".into(), Value::Mapping(rr));
        }
        action.insert("proxy".into(), Value::Mapping(p));
        action
    }

    /// The route on the plain listener (a redirect to https when the Ingress asks for it),
    /// and on the TLS one when its host is served over TLS.
    fn route(
        &self,
        mut r: Mapping,
        action: Mapping,
        over_tls: bool,
        c: &mut Converted,
    ) -> (Mapping, Option<Mapping>) {
        let action = match &self.refuse {
            Some(why) => refusal(c, why),
            None => action,
        };
        if !self.filters.is_empty() && self.refuse.is_none() {
            r.insert("filters".into(), Value::Sequence(self.filters.clone()));
        }
        if let Some(size) = &self.body_size {
            let mut l = Mapping::new();
            l.insert("max_body_bytes".into(), size.clone().into());
            r.insert("limits".into(), Value::Mapping(l));
        }
        let secure = over_tls.then(|| {
            let mut s = r.clone();
            for (k, v) in &action {
                s.insert(k.clone(), v.clone());
            }
            s
        });
        // ingress-nginx redirects to https when the host has TLS (unless `ssl-redirect:
        // "false"`), or always with `force-ssl-redirect`.
        let redirect = self.force_ssl_redirect || (over_tls && self.ssl_redirect != Some(false));
        let mut plain = r;
        if redirect {
            let mut red = Mapping::new();
            red.insert("to".into(), "https://$host$request_uri".into());
            red.insert("status".into(), 308.into());
            plain.remove("filters");
            plain.remove("limits");
            plain.insert("redirect".into(), Value::Mapping(red));
        } else {
            for (k, v) in action {
                plain.insert(k, v);
            }
        }
        (plain, secure)
    }
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
