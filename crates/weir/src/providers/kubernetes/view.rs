//! One consistent reading of the stores: the objects the conversion reads (weir's
//! GatewayClasses and their Gateways, HTTPRoutes, ReferenceGrants, the Ingresses of its
//! class), and the cluster facts it resolves them against ([`ClusterView`]: each Service
//! port's ready endpoints from its EndpointSlices, which Secrets exist), with the Secrets'
//! contents the files are written from.

use std::collections::BTreeMap;

use kube::api::DynamicObject;
use serde_json::Value as Json;

use super::watch::{self, Watches, KINDS};
use crate::import::cluster::{ClusterView, Service, ServicePort};

/// What a rebuild works from.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// The objects converted, each with its `apiVersion` and `kind`.
    pub objects: Vec<serde_yaml::Value>,
    pub view: ClusterView,
    /// Each Secret's data, decoded, by (namespace, name).
    pub secrets: BTreeMap<(String, String), BTreeMap<String, Vec<u8>>>,
    /// weir's GatewayClasses (their status is written).
    pub classes: Vec<DynamicObject>,
}

/// An object as JSON with its type (list items come without `apiVersion` and `kind`).
fn typed(kind: usize, o: &DynamicObject) -> Json {
    let mut v = serde_json::to_value(o).unwrap_or(Json::Null);
    if let Some(m) = v.as_object_mut() {
        m.insert("apiVersion".into(), KINDS[kind].api_version().into());
        m.insert("kind".into(), KINDS[kind].kind.into());
    }
    v
}

fn ns_name(o: &DynamicObject) -> (String, String) {
    (
        o.metadata.namespace.clone().unwrap_or_default(),
        o.metadata.name.clone().unwrap_or_default(),
    )
}

/// Reads the stores.
pub fn read(w: &Watches, controller: &str, ingress_class: Option<&str>) -> Snapshot {
    let state = |k: usize| {
        let mut v: Vec<DynamicObject> = w.stores[k].state().iter().map(|o| (**o).clone()).collect();
        // A stable order: the same cluster converts to the same text.
        v.sort_by_key(ns_name);
        v
    };
    let mut snap = Snapshot::default();
    let classes: Vec<DynamicObject> = state(watch::GATEWAY_CLASS)
        .into_iter()
        .filter(|c| c.data["spec"]["controllerName"].as_str() == Some(controller))
        .collect();
    let class_names: Vec<String> = classes.iter().map(|c| ns_name(c).1).collect();
    let mut json = Vec::new();
    for g in state(watch::GATEWAY_KIND) {
        let class = g.data["spec"]["gatewayClassName"].as_str().unwrap_or("");
        if class_names.iter().any(|c| c == class) {
            json.push(typed(watch::GATEWAY_KIND, &g));
        }
    }
    for k in [
        watch::HTTP_ROUTE,
        watch::GRPC_ROUTE,
        watch::TLS_ROUTE,
        watch::REFERENCE_GRANT,
    ] {
        json.extend(state(k).iter().map(|o| typed(k, o)));
    }
    // The Ingresses of weir's class only: one without a class belongs to the cluster's
    // default class, which may be another controller's (ingress-nginx takes them only with
    // `--watch-ingress-without-class`); weir never claims another controller's objects.
    if let Some(class) = ingress_class {
        json.extend(
            state(watch::INGRESS)
                .iter()
                .filter(|o| {
                    o.data["spec"]["ingressClassName"].as_str().or_else(|| {
                        o.metadata
                            .annotations
                            .as_ref()
                            .and_then(|a| a.get("kubernetes.io/ingress.class"))
                            .map(String::as_str)
                    }) == Some(class)
                })
                .map(|o| typed(watch::INGRESS, o)),
        );
    }
    snap.objects = json
        .into_iter()
        .filter_map(|j| serde_yaml::to_value(j).ok())
        .collect();
    snap.classes = classes;
    // Services and their endpoints.
    let mut slices: BTreeMap<(String, String), Vec<DynamicObject>> = BTreeMap::new();
    for s in state(watch::ENDPOINT_SLICE) {
        let (ns, _) = ns_name(&s);
        if let Some(svc) = s
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("kubernetes.io/service-name"))
        {
            slices.entry((ns, svc.clone())).or_default().push(s);
        }
    }
    for s in state(watch::SERVICE) {
        let key = ns_name(&s);
        let spec = &s.data["spec"];
        let external_name = match spec["type"].as_str() {
            Some("ExternalName") => spec["externalName"].as_str().map(str::to_string),
            _ => None,
        };
        let mut ports = Vec::new();
        for p in spec["ports"].as_array().into_iter().flatten() {
            let Some(port) = p["port"].as_u64().and_then(|n| u16::try_from(n).ok()) else {
                continue;
            };
            let name = p["name"].as_str().unwrap_or("").to_string();
            if p["protocol"].as_str().is_some_and(|x| x != "TCP") {
                continue;
            }
            let endpoints = endpoints_of(slices.get(&key).map_or(&[][..], Vec::as_slice), &name);
            ports.push(ServicePort {
                name,
                port,
                endpoints,
            });
        }
        snap.view.services.insert(
            key,
            Service {
                ports,
                external_name,
            },
        );
    }
    for s in state(watch::SECRET) {
        let key = ns_name(&s);
        let mut data = BTreeMap::new();
        for (k, v) in s.data["data"].as_object().into_iter().flatten() {
            use base64::Engine;
            if let Some(bytes) = v
                .as_str()
                .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            {
                data.insert(k.clone(), bytes);
            }
        }
        let digest = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            data.hash(&mut h);
            format!("{:016x}", h.finish())
        };
        snap.view
            .secrets
            .insert(key.clone(), data.keys().cloned().collect());
        snap.view.digests.insert(key.clone(), digest);
        snap.secrets.insert(key, data);
    }
    snap
}

/// The ready endpoints of a Service port named `port_name` in `slices`: `ip:port` (IPv6
/// bracketed), sorted, once each.
fn endpoints_of(slices: &[DynamicObject], port_name: &str) -> Vec<String> {
    let mut out = Vec::new();
    for s in slices {
        let Some(port) = s.data["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"].as_str().unwrap_or("") == port_name)
            .and_then(|p| p["port"].as_u64())
        else {
            continue;
        };
        for e in s.data["endpoints"].as_array().into_iter().flatten() {
            // `ready` absent is ready (the API's meaning); terminating ones are not.
            if e["conditions"]["ready"].as_bool() == Some(false) {
                continue;
            }
            for a in e["addresses"].as_array().into_iter().flatten() {
                let Some(ip) = a.as_str().and_then(|a| a.parse::<std::net::IpAddr>().ok()) else {
                    continue;
                };
                // What the API refuses anyway, refused again: loopback (weir's own admin
                // API), link-local (cloud metadata), unspecified, multicast.
                if !crate::import::cluster::routable(ip) {
                    continue;
                }
                out.push(std::net::SocketAddr::new(ip, port as u16).to_string());
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(json: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn ready_endpoints_of_the_named_port_only() {
        let s = slice(serde_json::json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "shop-1", "namespace": "web"},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080}, {"name": "admin", "port": 9000}],
            "endpoints": [
                {"addresses": ["10.0.0.2"], "conditions": {"ready": true}},
                {"addresses": ["10.0.0.1"]},
                {"addresses": ["10.0.0.3"], "conditions": {"ready": false}},
                {"addresses": ["fd00::1"]},
                {"addresses": ["127.0.0.1", "169.254.169.254", "fe80::1", "0.0.0.0"]}
            ]
        }));
        assert_eq!(
            endpoints_of(std::slice::from_ref(&s), "http"),
            ["10.0.0.1:8080", "10.0.0.2:8080", "[fd00::1]:8080"]
        );
        assert_eq!(endpoints_of(&[s], "metrics"), Vec::<String>::new());
    }
}
