//! The `nginx.ingress.kubernetes.io/*` annotations of one Ingress, read once into what its
//! upstreams and routes get (`mod.rs` says which are translated and how).

use std::collections::BTreeMap;

use serde_yaml::{Mapping, Value};

use super::{parse_bool, refusal, Converted, CORS_HEADERS, PREFIX, RESTRICTING, TRANSLATED};

/// An Ingress's annotations, read once.
#[derive(Debug, Default)]
pub(super) struct Annotated {
    pub(super) regex: bool,
    pub(super) rewrite: Option<String>,
    pub(super) ssl_redirect: Option<bool>,
    pub(super) force_ssl_redirect: bool,
    pub(super) protocol: Option<String>,
    pub(super) body_size: Option<String>,
    pub(super) connect_timeout: Option<String>,
    pub(super) read_timeout: Option<String>,
    pub(super) send_timeout: Option<String>,
    pub(super) filters: Vec<Value>,
    pub(super) redirect: Option<(String, u16)>,
    pub(super) app_root: Option<String>,
    pub(super) aliases: Vec<String>,
    /// Why the object's routes refuse, when they do.
    pub(super) refuse: Option<String>,
    /// Upstreams the filters name (an `auth-url`'s service).
    pub(super) auth_upstreams: Vec<(String, Mapping)>,
}

/// `5`, `5s`: a duration in seconds for weir (up to a year).
fn seconds(v: &str) -> Option<String> {
    let n = v.trim().trim_end_matches('s');
    n.parse::<u64>()
        .ok()
        .filter(|n| *n <= 366 * 86_400)
        .map(|n| format!("{n}s"))
}

fn list(v: &str) -> Vec<Value> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| Value::String(s.to_string()))
        .collect()
}

impl Annotated {
    pub(super) fn read(
        id: &str,
        ns: &str,
        a: &BTreeMap<String, String>,
        c: &mut Converted,
    ) -> Annotated {
        let mut out = Annotated::default();
        // Authentication first: the filters after it (a rate limit) see who the client is.
        out.auth(id, ns, a, c);
        // Booleans as ingress-nginx reads them (`True`, `1`, …).
        let yes = |k: &str| a.get(k).and_then(|v| parse_bool(v)) == Some(true);
        out.regex = yes("use-regex") || a.contains_key("rewrite-target");
        out.rewrite = a.get("rewrite-target").cloned();
        out.ssl_redirect = a.get("ssl-redirect").and_then(|v| parse_bool(v));
        out.force_ssl_redirect = yes("force-ssl-redirect");
        out.protocol = a.get("backend-protocol").map(|p| p.to_ascii_uppercase());
        if let Some(v) = a.get("proxy-body-size") {
            let v = v.trim().to_ascii_lowercase();
            match v.as_str() {
                "0" => out.body_size = Some("1024g".into()),
                _ if v.parse::<crate::config::units::Size>().is_ok() => out.body_size = Some(v),
                // A limit it cannot keep: the routes refuse rather than take any body.
                _ => out.refuse(
                    c,
                    id,
                    format!("{PREFIX}proxy-body-size `{v}` is not a size"),
                ),
            }
        }
        for (key, slot) in [
            ("proxy-connect-timeout", &mut out.connect_timeout),
            ("proxy-read-timeout", &mut out.read_timeout),
            ("proxy-send-timeout", &mut out.send_timeout),
        ] {
            if let Some(v) = a.get(key) {
                match seconds(v) {
                    Some(s) => *slot = Some(s),
                    None => c.skipped.push(format!(
                        "{id}: {PREFIX}{key}: `{v}` is not seconds (up to a year): left out"
                    )),
                }
            }
        }
        if let Some(rps) = a.get("limit-rps") {
            match rps.trim().parse::<u64>() {
                Ok(n) if n > 0 => {
                    let mut f = Mapping::new();
                    let mut rl = Mapping::new();
                    rl.insert("rate".into(), n.into());
                    rl.insert("burst".into(), n.saturating_mul(5).into());
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
        // `allowlist-source-range` is the current name, `whitelist-` the older one.
        if let Some((key, ranges)) = ["allowlist-source-range", "whitelist-source-range"]
            .iter()
            .find_map(|k| a.get(*k).map(|v| (*k, v)))
        {
            let allow = list(ranges);
            let bad = allow.iter().filter_map(Value::as_str).find(|r| {
                r.parse::<ipnet::IpNet>().is_err() && r.parse::<std::net::IpAddr>().is_err()
            });
            match (allow.is_empty(), bad) {
                (false, None) => {
                    let mut f = Mapping::new();
                    let mut ip = Mapping::new();
                    ip.insert("allow".into(), Value::Sequence(allow));
                    f.insert("ip".into(), Value::Mapping(ip));
                    out.filters.push(Value::Mapping(f));
                }
                // Fails closed: an allow list weir cannot read allows nobody.
                (_, bad) => out.refuse(
                    c,
                    id,
                    format!(
                        "{PREFIX}{key} `{ranges}` is not a list of addresses and CIDRs{}",
                        bad.map_or(String::new(), |b| format!(" (`{b}`)"))
                    ),
                ),
            }
        }
        if yes("enable-cors") {
            let origins = a.get("cors-allow-origin").map_or("*", String::as_str);
            let mut credentials = a
                .get("cors-allow-credentials")
                .is_none_or(|v| parse_bool(v) != Some(false));
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
        for key in ["permanent-redirect", "temporal-redirect", "app-root"] {
            if let Some(v) = a.get(key) {
                // Said as written, or refused: no variables, spaces or control bytes.
                if v.is_empty() || v.bytes().any(|b| b <= b' ' || b == b'$' || b == 0x7f) {
                    out.refuse(
                        c,
                        id,
                        format!("{PREFIX}{key} `{}` is not translated", v.escape_debug()),
                    );
                }
            }
        }
        if a.get("app-root").is_some_and(|v| !v.starts_with('/')) {
            out.refuse(c, id, format!("{PREFIX}app-root must be a path"));
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
        if let Some(kind) = a.get("affinity") {
            if kind.eq_ignore_ascii_case("cookie") {
                let mut st = Mapping::new();
                st.insert(
                    "cookie".into(),
                    a.get("session-cookie-name")
                        .map_or("INGRESSCOOKIE", String::as_str)
                        .into(),
                );
                st.insert("secret_env".into(), "WEIR_STICKY_SECRET".into());
                if let Some(age) = a.get("session-cookie-max-age").and_then(|v| seconds(v)) {
                    st.insert("max_age".into(), age.into());
                }
                let mut f = Mapping::new();
                f.insert("sticky".into(), Value::Mapping(st));
                out.filters.push(Value::Mapping(f));
                c.skipped.push(format!(
                    "{id}: {PREFIX}affinity: cookie: weir signs its cookie with WEIR_STICKY_SECRET (32 characters or more): set it in weir's environment"
                ));
            } else {
                c.skipped
                    .push(format!("{id}: {PREFIX}affinity: `{kind}` not translated"));
            }
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
        // A host name or `*.` and one (nginx's regex aliases and ports are not).
        out.aliases.retain(|al| {
            let name = al.strip_prefix("*.").unwrap_or(al);
            let ok = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
            if !ok {
                c.skipped.push(format!(
                    "{id}: {PREFIX}server-alias `{al}` is not a host name: left out"
                ));
            }
            ok
        });
        if let Some(p) = &out.protocol {
            if !matches!(p.as_str(), "HTTP" | "HTTPS" | "GRPC" | "GRPCS") {
                out.refuse = Some(format!("{PREFIX}backend-protocol {p} is not translated"));
            }
        }
        for (k, v) in a {
            if TRANSLATED.contains(&k.as_str()) || k == "canary" {
                continue;
            }
            // Any other `auth-*` restricts too (`auth-tls-match-cn`, `auth-proxy-set-headers`).
            if RESTRICTING.contains(&k.as_str()) || k.starts_with("auth-") {
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

    /// The routes refuse, for `why` (the first reason is the one said).
    fn refuse(&mut self, c: &mut Converted, id: &str, why: String) {
        let why = format!("{why}: its routes answer 503");
        c.skipped.push(format!("{id}: {why}"));
        self.refuse.get_or_insert(why);
    }

    /// `auth-url` (`forward_auth`) and `auth-type: basic` (`basic_auth`); what cannot be kept
    /// makes the routes refuse.
    fn auth(&mut self, id: &str, ns: &str, a: &BTreeMap<String, String>, c: &mut Converted) {
        if let Some(url) = a.get("auth-url") {
            match auth_service(ns, url, c.cluster.is_some()) {
                Some((name, upstream, path)) => {
                    let mut fa = Mapping::new();
                    fa.insert("upstream".into(), name.clone().into());
                    fa.insert("path".into(), path.into());
                    if let Some(h) = a.get("auth-response-headers") {
                        // Never the framing or hop-by-hop fields: copied onto the request they
                        // would desynchronise it (the second attack review of issue 56).
                        let (kept, dropped): (Vec<Value>, Vec<Value>) =
                            list(h).into_iter().partition(|v| {
                                !v.as_str()
                                    .is_some_and(crate::filters::forward_auth::not_copied)
                            });
                        for d in &dropped {
                            c.skipped.push(format!(
                                "{id}: {PREFIX}auth-response-headers: {} is not copied (framing or hop-by-hop)",
                                d.as_str().unwrap_or("")
                            ));
                        }
                        fa.insert("copy_headers".into(), Value::Sequence(kept));
                    }
                    let mut f = Mapping::new();
                    f.insert("forward_auth".into(), Value::Mapping(fa));
                    self.filters.push(Value::Mapping(f));
                    self.auth_upstreams.push((name, upstream));
                    if a.contains_key("auth-signin") {
                        c.skipped.push(format!(
                            "{id}: {PREFIX}auth-signin not translated: the auth service's 401 goes to the client as it is (no redirect to sign in)"
                        ));
                    }
                }
                None => {
                    let why = format!(
                        "{PREFIX}auth-url `{url}` is not translated (an http(s) URL without variables is): its routes answer 503"
                    );
                    c.skipped.push(format!("{id}: {why}"));
                    self.refuse.get_or_insert(why);
                }
            }
        }
        let secret_type = a
            .get("auth-secret-type")
            .map_or("auth-file", String::as_str);
        match (
            a.get("auth-type").map(|t| t.to_ascii_lowercase()),
            a.get("auth-secret"),
        ) {
            (Some(t), Some(secret)) if t == "basic" && secret_type == "auth-file" => {
                let (sns, sname) = secret.split_once('/').unwrap_or((ns, secret));
                // Another namespace's Secret is not read (ingress-nginx 1.12's
                // `allow-cross-namespace-resources: false`): a tenant could test another's
                // passwords, and get its users' credentials sent to its own backend.
                if sns != ns {
                    let why = format!(
                        "{PREFIX}auth-secret {sns}/{sname} is in another namespace (not read): its routes answer 503"
                    );
                    c.skipped.push(format!("{id}: {why}"));
                    self.refuse.get_or_insert(why);
                    return;
                }
                let file = format!(
                    "{}.htpasswd",
                    crate::import::cluster::secret_file(
                        &c.secrets_dir,
                        "auth",
                        (sns, sname),
                        c.cluster.as_deref()
                    )
                );
                c.referenced
                    .insert(("Secret", sns.to_string(), sname.to_string()));
                // Against a cluster the Secret must be there with its `auth` key: else the
                // routes refuse (never served without the authentication asked for).
                let missing = c
                    .cluster
                    .as_ref()
                    .is_some_and(|v| !v.has_secret(sns, sname, &["auth"]));
                if missing {
                    let why = format!(
                        "{PREFIX}auth-secret {sns}/{sname} not found or without an `auth` key: its routes answer 503"
                    );
                    c.skipped.push(format!("{id}: {why}"));
                    self.refuse.get_or_insert(why);
                    return;
                }
                let mut b = Mapping::new();
                b.insert("file".into(), file.clone().into());
                b.insert(
                    "realm".into(),
                    a.get("auth-realm")
                        .map_or("Authentication Required", String::as_str)
                        .into(),
                );
                let mut f = Mapping::new();
                f.insert("basic_auth".into(), Value::Mapping(b));
                self.filters.push(Value::Mapping(f));
                c.auth_secrets_used
                    .push((sns.to_string(), sname.to_string()));
                if c.cluster.is_none() {
                    c.skipped.push(format!(
                        "{id}: {PREFIX}auth-secret {sns}/{sname}: write its `auth` key (htpasswd) to {file} (kubectl get secret -n {sns} {sname} -o jsonpath='{{.data.auth}}' | base64 -d)"
                    ));
                }
            }
            (None, None) => {}
            (t, _) => {
                let why = format!(
                    "{PREFIX}auth-type {} with auth-secret-type {secret_type} is not translated (basic with an auth-file Secret is): its routes answer 503",
                    t.unwrap_or_else(|| "(none)".into())
                );
                c.skipped.push(format!("{id}: {why}"));
                self.refuse.get_or_insert(why);
            }
        }
    }

    /// The upstream's settings from `backend-protocol` and the timeouts.
    pub(super) fn upstream(&self, u: &mut Mapping) {
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
        if let Some(s) = &self.send_timeout {
            t.insert("send".into(), s.clone().into());
        }
        if !t.is_empty() {
            u.insert("timeouts".into(), Value::Mapping(t));
        }
    }

    /// The action of a path to upstream `up`.
    pub(super) fn action(&self, up: &str, path: &str) -> Mapping {
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
    pub(super) fn route(
        &self,
        mut r: Mapping,
        action: Mapping,
        (over_tls, extra): (bool, Vec<Value>),
        c: &mut Converted,
    ) -> (Mapping, Option<Mapping>) {
        let action = match &self.refuse {
            Some(why) => refusal(c, why),
            None => action,
        };
        let mut filters = self.filters.clone();
        filters.extend(extra);
        if !filters.is_empty() && self.refuse.is_none() {
            r.insert("filters".into(), Value::Sequence(filters));
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

/// An `auth-url`'s service: its upstream's name and settings, and the path asked. `None` for
/// a URL with variables (`$host`) or not http(s).
/// The upstream of an `auth-url`: named by the Ingress's namespace and the URL's hash, so
/// that two Ingresses never share one another's auth service (the name once came from the
/// host alone, and the oldest Ingress's servers answered every other's checks: attack review
/// of issue 56).
fn auth_service(ns: &str, url: &str, cluster: bool) -> Option<(String, Mapping, String)> {
    if url.contains('$') {
        return None;
    }
    let uri: http::Uri = url.trim().parse().ok()?;
    let tls = match uri.scheme_str()? {
        "http" => false,
        "https" => true,
        _ => return None,
    };
    let host = uri.host()?;
    // Against a cluster, whose tenants write the URL: never weir itself or what only this
    // machine reaches, loopback and link-local addresses (the admin API, a metadata service)
    // and `localhost` (the second attack review of issue 56: an auth-url made weir's admin API
    // answer, and its headers reach the tenant). `weir import` of an operator's own files
    // keeps them.
    let literal = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<std::net::IpAddr>();
    let lower = host.to_ascii_lowercase();
    if cluster
        && (literal.is_ok_and(|ip| !crate::import::cluster::routable(ip))
            || lower == "localhost"
            || lower.ends_with(".localhost")
            || lower.ends_with(".localhost."))
    {
        return None;
    }
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let path = uri
        .path_and_query()
        .map_or("/".to_string(), |p| p.as_str().to_string());
    let name = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        url.trim().hash(&mut h);
        format!("auth.{ns}.{:016x}", h.finish())
    };
    let server = match tls {
        true => format!("https://{host}:{port}"),
        false => format!("{host}:{port}"),
    };
    let mut u = Mapping::new();
    u.insert("servers".into(), Value::Sequence(vec![server.into()]));
    Some((name, u, path))
}

#[cfg(test)]
mod tests {
    use super::auth_service;

    #[test]
    fn auth_upstreams_are_named_by_namespace_and_url() {
        // The same host from two namespaces, or two URLs on one host: never one upstream
        // (an older Ingress's auth service once answered every other's checks).
        let url = "http://oauth2.auth.svc/oauth2/auth";
        let (a, ua, _) = auth_service("finance", url, true).unwrap();
        let (b, _, _) = auth_service("evil", url, true).unwrap();
        let (c, uc, _) = auth_service("finance", "http://oauth2.auth.svc/allow-all", true).unwrap();
        assert!(a != b && a != c && b != c, "{a} {b} {c}");
        assert!(a.starts_with("auth.finance."));
        assert_eq!(ua, uc, "the servers are the URL's");
        assert_eq!(
            auth_service("finance", url, true).unwrap().0,
            a,
            "stable: the same config converts to the same text"
        );
        for inside in [
            "http://127.0.0.1:9901/status",
            "http://localhost:9901/status",
            "http://[::1]/x",
            "http://169.254.169.254/latest/meta-data",
            "http://admin.localhost/",
        ] {
            assert!(auth_service("evil", inside, true).is_none(), "{inside}");
            // An operator's own files, offline, keep them.
            assert!(auth_service("ops", inside, false).is_some(), "{inside}");
        }
    }
}
