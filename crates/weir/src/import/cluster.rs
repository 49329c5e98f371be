//! What a live cluster knows that manifests alone do not (issue 56 §1): each Service's ports
//! and the ready endpoints behind them, and which Secrets exist. `weir import` of files has
//! none of it and names backends by a DNS template; `providers.kubernetes` builds one from
//! its watches (`providers/kubernetes/view.rs`) and the conversion then:
//!
//! - makes a backend's upstream of the Service port's ready endpoints (a port by number or by
//!   name); a Service that does not exist, or lacks the port, is `BackendNotFound`; one with no
//!   ready endpoint answers 503, as kube-proxy's would refuse; an `ExternalName` Service is
//!   not followed (it may name any host: weir's own admin API, a metadata service);
//! - takes a TLS certificate or an htpasswd only from a Secret that exists with the keys it
//!   needs: a listener whose certificate is missing is left out (`InvalidCertificateRef`), a
//!   route whose basic auth Secret is missing refuses (503): the reload never fails on a file
//!   that is not there, and nothing is served with less protection than asked.
//!
//! Secret files are named `NAMESPACE.NAME`: a namespace is a DNS label (no dot), so two
//! Secrets never share a file (`ns-name` did: `a-b/c` and `a/b-c`).

use std::collections::BTreeMap;

/// One port of a Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicePort {
    /// The port's name (empty when the Service has one unnamed port).
    pub name: String,
    pub port: u16,
    /// `ip:port` of each ready endpoint, sorted.
    pub endpoints: Vec<String>,
}

/// A Service as the conversion needs it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Service {
    pub ports: Vec<ServicePort>,
    /// `type: ExternalName`: the name its ports go to.
    pub external_name: Option<String>,
}

/// The cluster's Services and Secrets, by (namespace, name).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterView {
    pub services: BTreeMap<(String, String), Service>,
    /// Each Secret's data keys.
    pub secrets: BTreeMap<(String, String), Vec<String>>,
    /// Each Secret's content digest (in its files' names).
    pub digests: BTreeMap<(String, String), String>,
}

impl ClusterView {
    /// The servers of Service `ns/name`'s `port` (a number or a port's name), or why there
    /// are none (the reason first, as the Gateway API names it).
    pub fn servers(&self, ns: &str, name: &str, port: &str) -> Result<Vec<String>, String> {
        let Some(svc) = self.services.get(&(ns.to_string(), name.to_string())) else {
            return Err(format!("BackendNotFound: Service {ns}/{name} not found"));
        };
        let Some(p) = svc
            .ports
            .iter()
            .find(|p| p.port.to_string() == port || (!p.name.is_empty() && p.name == port))
        else {
            return Err(format!(
                "BackendNotFound: Service {ns}/{name} has no port {port}"
            ));
        };
        // An ExternalName may name any host: weir's own admin API on localhost, a metadata
        // service, another namespace's Service past its ReferenceGrants (Contour's
        // CVE-2021-32783). Not followed.
        if let Some(host) = &svc.external_name {
            return Err(format!(
                "BackendNotFound: Service {ns}/{name} is of type ExternalName ({host}), which weir does not follow"
            ));
        }
        if p.endpoints.is_empty() {
            return Err(format!(
                "{NO_ENDPOINTS}: Service {ns}/{name} port {port} has no ready endpoint"
            ));
        }
        Ok(p.endpoints.clone())
    }

    /// Whether Secret `ns/name` exists with every key in `keys`.
    pub fn has_secret(&self, ns: &str, name: &str, keys: &[&str]) -> bool {
        self.secrets
            .get(&(ns.to_string(), name.to_string()))
            .is_some_and(|have| keys.iter().all(|k| have.iter().any(|h| h == k)))
    }
}

/// Whether an address may be proxied to from a cluster's objects: not loopback (weir's own
/// admin API), link-local (cloud metadata), unspecified, multicast or broadcast.
pub fn routable(ip: std::net::IpAddr) -> bool {
    use std::net::IpAddr;
    let link_local = match ip {
        IpAddr::V4(v4) => v4.is_link_local() || v4.is_broadcast(),
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
    };
    !(ip.is_loopback() || ip.is_unspecified() || ip.is_multicast() || link_local)
}

/// The reason a backend with no ready endpoint is given (it answers 503, not 500).
pub const NO_ENDPOINTS: &str = "NoReadyEndpoints";

/// The file of Secret `ns/name` under `dir/kind/`, without its extension. Against a cluster
/// the Secret's content digest is in the name: a changed Secret is a new file, and the config
/// running (or the last good one, put back when the new one does not compile) keeps reading
/// the old one, which is removed only once no applied config names it.
pub fn secret_file(
    dir: &str,
    kind: &str,
    (ns, name): (&str, &str),
    view: Option<&ClusterView>,
) -> String {
    match view.and_then(|v| v.digests.get(&(ns.to_string(), name.to_string()))) {
        Some(d) => format!("{dir}/{kind}/{ns}.{name}.{d}"),
        None => format!("{dir}/{kind}/{ns}.{name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view() -> ClusterView {
        let mut v = ClusterView::default();
        v.services.insert(
            ("web".into(), "shop".into()),
            Service {
                ports: vec![
                    ServicePort {
                        name: "http".into(),
                        port: 8080,
                        endpoints: vec!["10.0.0.1:80".into()],
                    },
                    ServicePort {
                        name: "admin".into(),
                        port: 9000,
                        endpoints: vec![],
                    },
                ],
                external_name: None,
            },
        );
        v.secrets
            .insert(("web".into(), "cert".into()), vec!["tls.crt".into()]);
        v
    }

    #[test]
    fn a_port_by_number_or_name_and_the_reasons_when_none() {
        let v = view();
        assert_eq!(v.servers("web", "shop", "8080").unwrap(), ["10.0.0.1:80"]);
        assert_eq!(v.servers("web", "shop", "http").unwrap(), ["10.0.0.1:80"]);
        assert!(v
            .servers("web", "shop", "9000")
            .unwrap_err()
            .starts_with(NO_ENDPOINTS));
        assert!(v
            .servers("web", "shop", "81")
            .unwrap_err()
            .starts_with("BackendNotFound"));
        assert!(v
            .servers("other", "shop", "8080")
            .unwrap_err()
            .starts_with("BackendNotFound"));
        assert!(v.has_secret("web", "cert", &["tls.crt"]));
        assert!(!v.has_secret("web", "cert", &["tls.crt", "tls.key"]));
        assert_ne!(
            secret_file("/d", "tls", ("a-b", "c"), None),
            secret_file("/d", "tls", ("a", "b-c"), None)
        );
        let mut v = v;
        v.digests
            .insert(("web".into(), "cert".into()), "00ff".into());
        assert_eq!(
            secret_file("/d", "tls", ("web", "cert"), Some(&v)),
            "/d/tls/web.cert.00ff"
        );
    }
}
