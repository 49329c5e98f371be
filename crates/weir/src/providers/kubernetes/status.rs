//! Status as the Gateway API asks it to be written (GEP-1364 conditions), by the replica that
//! holds the Lease (`lease.rs`):
//!
//! - each of weir's GatewayClasses: `Accepted`;
//! - each of their Gateways: `Accepted`, `Programmed` (false, `Invalid`, with the reload's
//!   error when the config did not apply), the configured `addresses`, and per listener its
//!   `attachedRoutes`, `supportedKinds` and `Accepted`/`Programmed`/`ResolvedRefs`/`Conflicted`
//!   with the reason the conversion gave (`UnsupportedProtocol`, `PortUnavailable`,
//!   `InvalidCertificateRef`, `RefNotPermitted`);
//! - each HTTPRoute parent that names one of them: `Accepted` (or `NotAllowedByListeners`,
//!   `NoMatchingListenerHostname`, `NoMatchingParent`) and `ResolvedRefs` (or
//!   `BackendNotFound`, `RefNotPermitted`, `InvalidKind`); the entries of other controllers
//!   are kept.
//!
//! - each Ingress of weir's class: `status.loadBalancer.ingress`, the configured `addresses`.
//!
//! Every condition carries the object's `metadata.generation` as `observedGeneration`; a
//! condition's `lastTransitionTime` moves only when its status does. A status equal to the one
//! written is not written again: weir's own writes come back as watch events, and must not
//! become a loop.

use kube::api::{DynamicObject, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{json, Value as Json};

use super::watch::{self, KINDS};
use crate::config::kubernetes::Settings;
use crate::import::gateway::{Outcomes, ParentOutcome};

/// Rate limit of the "status not written" lines.
static STATUS_LOG: crate::logs::Limited = crate::logs::Limited::new();

/// What a rebuild did, for the statuses.
#[derive(Debug)]
pub struct Applied<'a> {
    pub outcomes: &'a Outcomes,
    /// The reload's error, when the config did not apply.
    pub error: Option<&'a str>,
    pub classes: &'a [DynamicObject],
    /// The objects converted (YAML).
    pub objects: &'a [serde_yaml::Value],
}

/// `now` as the API's timestamps (`2026-11-29T23:30:00Z`).
fn now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (y, mo, d, h, mi, s) = weir_http::date::civil(secs);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

/// A condition; its transition time kept from `old` when its status did not change.
fn condition(
    old: &Json,
    (kind, ok): (&str, bool),
    (reason, message): (&str, &str),
    generation: i64,
) -> Json {
    let status = if ok { "True" } else { "False" };
    let previous = old
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == kind && c["status"] == status)
        .and_then(|c| c["lastTransitionTime"].as_str())
        .map_or_else(now, str::to_string);
    json!({
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": previous,
    })
}

/// Whether two statuses differ other than in transition times.
fn differs(a: &Json, b: &Json) -> bool {
    fn strip(v: &Json) -> Json {
        match v {
            Json::Object(m) => Json::Object(
                m.iter()
                    .filter(|(k, _)| *k != "lastTransitionTime")
                    .map(|(k, v)| (k.clone(), strip(v)))
                    .collect(),
            ),
            Json::Array(a) => Json::Array(a.iter().map(strip).collect()),
            other => other.clone(),
        }
    }
    strip(a) != strip(b)
}

/// Writes `status` into `obj` (of `kind`) unless it is there already.
async fn write(client: &Client, kind: usize, obj: &Json, status: Json) {
    if !differs(&obj["status"], &status) {
        return;
    }
    let ar = KINDS[kind].resource();
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    let api: Api<DynamicObject> = match obj["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    // The resourceVersion read: a status changed meanwhile is not overwritten (409, and the
    // next rebuild writes again from the fresh object).
    let patch = json!({
        "metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
        "status": status,
    });
    if let Err(e) = api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        if let Some(suppressed) = STATUS_LOG.admit() {
            tracing::warn!(kind = KINDS[kind].kind, name, error = %super::chain(&e), suppressed, "status not written");
        }
    }
}

fn generation(obj: &Json) -> i64 {
    obj["metadata"]["generation"].as_i64().unwrap_or(0)
}

/// Writes the statuses of a rebuild.
pub async fn write_all(client: &Client, s: &Settings, a: &Applied<'_>) {
    for class in a.classes {
        let obj = serde_json::to_value(class).unwrap_or(Json::Null);
        let old = &obj["status"]["conditions"];
        let g = generation(&obj);
        let status = json!({"conditions": [condition(old, ("Accepted", true), ("Accepted", "weir serves this class"), g)]});
        write(client, watch::GATEWAY_CLASS, &obj, status).await;
    }
    let objects: Vec<Json> = a
        .objects
        .iter()
        .filter_map(|o| serde_json::to_value(o).ok())
        .collect();
    for gw in objects.iter().filter(|o| o["kind"] == "Gateway") {
        let status = gateway_status(gw, s, a);
        write(client, watch::GATEWAY_KIND, gw, status).await;
    }
    // Each route's parents, found by name: a scan of every parent per route was quadratic
    // (a fifth of the control loop's CPU per rebuild at 2,000 HTTPRoutes).
    let mut by_route: std::collections::HashMap<(&str, &str, &str), Vec<&ParentOutcome>> =
        std::collections::HashMap::new();
    for p in &a.outcomes.parents {
        by_route
            .entry((p.kind.as_str(), p.route.0.as_str(), p.route.1.as_str()))
            .or_default()
            .push(p);
    }
    for route in objects
        .iter()
        .filter(|o| o["kind"] == "HTTPRoute" || o["kind"] == "GRPCRoute" || o["kind"] == "TLSRoute")
    {
        let key = (
            route["kind"].as_str().unwrap_or(""),
            route["metadata"]["namespace"].as_str().unwrap_or(""),
            route["metadata"]["name"].as_str().unwrap_or(""),
        );
        let mine = by_route.get(&key).map_or(&[][..], Vec::as_slice);
        if let Some(status) = route_status(route, s, mine) {
            let kind = match route["kind"].as_str() {
                Some("GRPCRoute") => watch::GRPC_ROUTE,
                Some("TLSRoute") => watch::TLS_ROUTE,
                _ => watch::HTTP_ROUTE,
            };
            write(client, kind, route, status).await;
        }
    }
    // Ingresses of the class: the addresses they are served at, as ingress-nginx publishes
    // them (`kubectl get ingress` shows them).
    if !s.addresses.is_empty() {
        let lb: Vec<Json> = s
            .addresses
            .iter()
            .map(|v| match v.parse::<std::net::IpAddr>() {
                Ok(_) => json!({"ip": v}),
                Err(_) => json!({"hostname": v}),
            })
            .collect();
        // `view.rs` passes the Ingresses of weir's class only.
        for ing in objects.iter().filter(|o| o["kind"] == "Ingress") {
            let status = json!({"loadBalancer": {"ingress": lb}});
            write(client, watch::INGRESS, ing, status).await;
        }
    }
}

fn gateway_status(gw: &Json, s: &Settings, a: &Applied<'_>) -> Json {
    let g = generation(gw);
    let key = (
        gw["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string(),
        gw["metadata"]["name"].as_str().unwrap_or("").to_string(),
    );
    let old = &gw["status"];
    let programmed = match a.error {
        None => ("Programmed", "the config is serving".to_string()),
        Some(e) => ("Invalid", format!("the config did not apply: {e}")),
    };
    let mut listeners = Vec::new();
    for l in gw["spec"]["listeners"].as_array().into_iter().flatten() {
        let name = l["name"].as_str().unwrap_or("");
        let out = a
            .outcomes
            .listeners
            .iter()
            .find(|o| o.gateway == key && o.name == name);
        let old_l = old["listeners"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|x| x["name"] == name)
            .map_or(Json::Null, |x| x["conditions"].clone());
        let problem = out.and_then(|o| o.problem.as_ref());
        let accepted = problem.filter(|p| p.condition == "Accepted");
        let refs = problem.filter(|p| p.condition == "ResolvedRefs");
        // A listener that refuses some of `allowedRoutes.kinds` still serves the others.
        let narrowed = out.filter(|o| {
            !o.kinds.is_empty() || refs.is_some_and(|p| p.reason == "InvalidRouteKinds")
        });
        let served = a.error.is_none()
            && match problem {
                None => true,
                Some(p) => {
                    p.reason == "InvalidRouteKinds" && narrowed.is_some_and(|o| !o.kinds.is_empty())
                }
            };
        let kinds = match (accepted, l["protocol"].as_str()) {
            (Some(_), _) => json!([]),
            (None, _) if narrowed.is_some() => Json::Array(
                narrowed
                    .into_iter()
                    .flat_map(|o| &o.kinds)
                    .map(|k| json!({"group": "gateway.networking.k8s.io", "kind": k}))
                    .collect(),
            ),
            (None, Some("TLS")) => {
                json!([{"group": "gateway.networking.k8s.io", "kind": "TLSRoute"}])
            }
            (None, _) => json!([
                {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"},
                {"group": "gateway.networking.k8s.io", "kind": "GRPCRoute"}
            ]),
        };
        listeners.push(json!({
            "name": name,
            "supportedKinds": kinds,
            "attachedRoutes": out.map_or(0, |o| o.attached),
            "conditions": [
                condition(&old_l, ("Accepted", accepted.is_none()),
                    accepted.map_or(("Accepted", "accepted"), |p| (p.reason.as_str(), p.message.as_str())), g),
                condition(&old_l, ("ResolvedRefs", refs.is_none()),
                    refs.map_or(("ResolvedRefs", "resolved"), |p| (p.reason.as_str(), p.message.as_str())), g),
                condition(&old_l, ("Programmed", served),
                    if served { ("Programmed", "serving") } else { ("Invalid", "not served") }, g),
                condition(&old_l, ("Conflicted", false), ("NoConflicts", "no conflicts"), g),
            ],
        }));
    }
    let addresses: Vec<Json> = s
        .addresses
        .iter()
        .map(|v| {
            let kind = if v.parse::<std::net::IpAddr>().is_ok() {
                "IPAddress"
            } else {
                "Hostname"
            };
            json!({"type": kind, "value": v})
        })
        .collect();
    let oc = &old["conditions"];
    let mut status = json!({
        "conditions": [
            condition(oc, ("Accepted", true), ("Accepted", "accepted by weir"), g),
            condition(oc, ("Programmed", a.error.is_none()), (programmed.0, &programmed.1), g),
        ],
        "listeners": listeners,
    });
    if !addresses.is_empty() {
        status["addresses"] = Json::Array(addresses);
    }
    status
}

/// An HTTPRoute's status: other controllers' parents kept, weir's replaced; `None` when
/// it names none of weir's Gateways.
fn route_status(route: &Json, s: &Settings, mine: &[&ParentOutcome]) -> Option<Json> {
    let g = generation(route);
    let old = route["status"]["parents"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let ours = |p: &Json| p["controllerName"] == s.controller_name.as_str();
    if mine.is_empty() && !old.iter().any(ours) {
        return None;
    }
    let mut parents: Vec<Json> = old.iter().filter(|p| !ours(p)).cloned().collect();
    for p in mine {
        let parent_ref = serde_json::to_value(&p.parent).unwrap_or(Json::Null);
        let old_c = old
            .iter()
            .find(|o| ours(o) && o["parentRef"] == parent_ref)
            .map_or(Json::Null, |o| o["conditions"].clone());
        let (acc_reason, acc_msg) = match &p.accepted {
            Ok(()) => ("Accepted".to_string(), "attached".to_string()),
            Err((r, m)) => (r.clone(), m.clone()),
        };
        let (ref_reason, ref_msg) = match &p.resolved {
            Ok(()) => ("ResolvedRefs".to_string(), "resolved".to_string()),
            Err((r, m)) => (r.clone(), m.clone()),
        };
        parents.push(json!({
            "parentRef": parent_ref,
            "controllerName": s.controller_name,
            "conditions": [
                condition(&old_c, ("Accepted", p.accepted.is_ok()), (&acc_reason, &acc_msg), g),
                condition(&old_c, ("ResolvedRefs", p.resolved.is_ok()), (&ref_reason, &ref_msg), g),
            ],
        }));
    }
    Some(json!({"parents": parents}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_times_alone_are_no_change() {
        let old = json!([{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "m", "observedGeneration": 1, "lastTransitionTime": "2026-01-01T00:00:00Z"}]);
        let same = condition(&old, ("Accepted", true), ("Accepted", "m"), 1);
        assert_eq!(same["lastTransitionTime"], "2026-01-01T00:00:00Z");
        assert!(!differs(&old, &json!([same])));
        let flipped = condition(&old, ("Accepted", false), ("NoMatchingParent", "m"), 1);
        assert_ne!(flipped["lastTransitionTime"], "2026-01-01T00:00:00Z");
        assert!(differs(&old, &json!([flipped])));
        let newer = condition(&old, ("Accepted", true), ("Accepted", "m"), 2);
        assert!(differs(&old, &json!([newer])));
    }
}
