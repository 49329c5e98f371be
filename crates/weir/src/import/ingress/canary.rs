//! Canary Ingresses (`nginx.ingress.kubernetes.io/canary: "true"`): ingress-nginx sends part of
//! a main Ingress's traffic for the same host and path to the canary's backend, by weight
//! (`canary-weight` of `canary-weight-total`, 100), by header (`canary-by-header`: `always`,
//! or `canary-by-header-value`'s value) or by cookie (`canary-by-cookie`: `always`). Here: a
//! `canary` filter on the main route, the candidate upstream the canary's backend.
//!
//! Read before the main Ingresses (`mod.rs`); a canary with no main Ingress for its host and
//! path is listed and left out. `never` values and `canary-by-header-pattern` are not
//! translated (listed): a header or cookie that should keep a client off the canary may then
//! send it there with the weight, never to a backend outside the Ingresses.

use std::collections::BTreeMap;

use serde_yaml::{Mapping, Value};

/// A canary's choice of requests, for the main route of (host, path).
#[derive(Debug, Clone)]
pub(super) struct Canary {
    /// The canary Ingress, for notes.
    pub id: String,
    /// The backend: (namespace, Service, port number).
    pub backend: (String, String, String),
    pub percent: u64,
    pub header: Option<(String, String)>,
    pub cookie: Option<String>,
}

/// (host, path) → the canary for it.
/// By namespace, host and path: a canary serves a main Ingress of its own namespace only (the
/// attack review of issue 56: keyed by host and path, another namespace's canary took the
/// traffic, then displaced the tenant's own canary).
pub(super) type Canaries = BTreeMap<(String, Option<String>, String), Canary>;

/// Reads a canary Ingress `obj` (its annotations `a`, short names) into `out`; `skipped` gets
/// what is not translated.
pub(super) fn read(
    id: &str,
    ns: &str,
    obj: &Value,
    a: &BTreeMap<String, String>,
    out: &mut Canaries,
    skipped: &mut Vec<String>,
) {
    let weight: u64 = a
        .get("canary-weight")
        .and_then(|w| w.trim().parse().ok())
        .unwrap_or(0);
    let total: u64 = a
        .get("canary-weight-total")
        .and_then(|w| w.trim().parse().ok())
        .filter(|t| *t > 0)
        .unwrap_or(100);
    let percent = (weight.saturating_mul(100) / total).min(100);
    let header = a.get("canary-by-header").map(|h| {
        let value = a
            .get("canary-by-header-value")
            .cloned()
            .unwrap_or_else(|| "always".into());
        (h.to_ascii_lowercase(), value)
    });
    let cookie = a.get("canary-by-cookie").cloned();
    for k in a.keys() {
        if k.starts_with("canary")
            && !matches!(
                k.as_str(),
                "canary"
                    | "canary-weight"
                    | "canary-weight-total"
                    | "canary-by-header"
                    | "canary-by-header-value"
                    | "canary-by-cookie"
            )
        {
            skipped.push(format!(
                "{id}: nginx.ingress.kubernetes.io/{k} not translated"
            ));
        }
    }
    if header.is_some() && !a.contains_key("canary-by-header-value") {
        skipped.push(format!(
            "{id}: canary-by-header: `always` sends to the canary; `never` is not translated (such a request goes by the weight)"
        ));
    }
    for rule in obj["spec"]["rules"].as_sequence().into_iter().flatten() {
        let host = rule["host"].as_str().map(str::to_string);
        for p in rule["http"]["paths"].as_sequence().into_iter().flatten() {
            let path = p["path"].as_str().unwrap_or("/").to_string();
            let svc = &p["backend"]["service"];
            let (Some(name), Value::Number(port)) = (svc["name"].as_str(), &svc["port"]["number"])
            else {
                skipped.push(format!(
                    "{id}: a canary backend without a Service name and port number is left out"
                ));
                continue;
            };
            // The oldest canary of the namespace keeps it (Ingresses come oldest first).
            out.entry((ns.to_string(), host.clone(), path))
                .or_insert(Canary {
                    id: id.to_string(),
                    backend: (ns.to_string(), name.to_string(), port.to_string()),
                    percent,
                    header: header.clone(),
                    cookie: cookie.clone(),
                });
        }
    }
}

/// The `canary` filter sending to upstream `up`.
pub(super) fn filter(c: &Canary, up: &str) -> Value {
    let mut f = Mapping::new();
    f.insert("upstream".into(), up.into());
    f.insert("percent".into(), c.percent.into());
    if let Some((name, value)) = &c.header {
        let mut h = Mapping::new();
        h.insert(name.clone().into(), value.clone().into());
        f.insert("headers".into(), Value::Mapping(h));
    }
    if let Some(name) = &c.cookie {
        let mut k = Mapping::new();
        k.insert(name.clone().into(), "always".into());
        f.insert("cookies".into(), Value::Mapping(k));
    }
    let mut out = Mapping::new();
    out.insert("canary".into(), Value::Mapping(f));
    Value::Mapping(out)
}
