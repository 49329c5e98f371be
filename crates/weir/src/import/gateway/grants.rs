//! ReferenceGrants (`gateway.networking.k8s.io`): whether an object of one namespace may refer
//! to another namespace's object (a route to a Service, a Gateway to a Secret).

use serde_yaml::Value;

/// Whether a ReferenceGrant in `to.1` lets objects of kind `from.0` in namespace `from.1` use
/// the `to.0` named `to.2`.
pub(super) fn granted(grants: &[Value], from: (&str, &str), to: (&str, &str, &str)) -> bool {
    let (from_kind, from_ns) = from;
    let (to_kind, to_ns, name) = to;
    grants.iter().any(|g| {
        g["metadata"]["namespace"].as_str().unwrap_or("default") == to_ns
            && g["spec"]["from"]
                .as_sequence()
                .into_iter()
                .flatten()
                .any(|f| {
                    f["kind"].as_str() == Some(from_kind)
                        && f["group"].as_str() == Some("gateway.networking.k8s.io")
                        && f["namespace"].as_str() == Some(from_ns)
                })
            && g["spec"]["to"]
                .as_sequence()
                .into_iter()
                .flatten()
                .any(|t| {
                    t["kind"].as_str() == Some(to_kind)
                        && t["group"].as_str().unwrap_or("").is_empty()
                        && t["name"].as_str().is_none_or(|n| n == name)
                })
    })
}
