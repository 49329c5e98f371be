//! `providers.kubernetes` checked once, when the config compiles: a bad address, Lease name or
//! debounce is the config's error at its key, not the provider's at run time. Here rather than
//! in `providers/` so that the runtime's config does not depend on the provider, which depends
//! on it.

use std::time::Duration;

use super::model_providers::Kubernetes;
use super::CompileError;

/// The provider's settings, compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// A kubeconfig file; `None`: the pod's service account.
    pub kubeconfig: Option<std::path::PathBuf>,
    pub controller_name: String,
    /// `None`: Ingresses are not read.
    pub ingress_class: Option<String>,
    pub listen: String,
    pub listen_tls: String,
    pub listen_passthrough: String,
    pub secrets_dir: std::path::PathBuf,
    pub addresses: Vec<String>,
    pub debounce: Duration,
    /// The status Lease's namespace and name.
    pub lease: (String, String),
    pub identity: String,
}

impl Settings {
    /// Compiles `providers.kubernetes`; relative paths are against the config's directory.
    pub fn compile(k: &Kubernetes, base: &std::path::Path) -> Result<Settings, CompileError> {
        let at = |key: &str| format!("providers.kubernetes.{key}");
        for (key, addr) in [
            ("listen", &k.listen),
            ("listen_tls", &k.listen_tls),
            ("listen_passthrough", &k.listen_passthrough),
        ] {
            if addr.parse::<std::net::SocketAddr>().is_err() {
                return Err((at(key), format!("`{addr}` is not an address (IP:PORT)")));
            }
        }
        if k.listen == k.listen_tls {
            return Err((
                at("listen_tls"),
                "the HTTPS listener needs an address of its own".into(),
            ));
        }
        if k.listen_passthrough == k.listen || k.listen_passthrough == k.listen_tls {
            return Err((
                at("listen_passthrough"),
                "the TLS passthrough listener needs an address of its own".into(),
            ));
        }
        if k.controller_name.is_empty() || !k.controller_name.contains('/') {
            return Err((
                at("controller_name"),
                "a controller name is DOMAIN/PATH (weir.dev/gateway-controller)".into(),
            ));
        }
        let lease = match k.lease.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                (ns.to_string(), name.to_string())
            }
            _ => return Err((at("lease"), "give the Lease as NAMESPACE/NAME".into())),
        };
        let debounce = k.debounce.0;
        if !(Duration::from_millis(10)..=Duration::from_secs(60)).contains(&debounce) {
            return Err((at("debounce"), "between 10ms and 60s".into()));
        }
        for a in &k.addresses {
            if a.is_empty() || a.contains(char::is_whitespace) {
                return Err((
                    at("addresses"),
                    format!("`{a}` is not an IP or a host name"),
                ));
            }
        }
        let identity = match k.identity.trim() {
            "" => format!(
                "{}-{}",
                std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .map(|h| h.trim().to_string())
                    .unwrap_or_else(|_| "weir".into()),
                std::process::id()
            ),
            id => id.to_string(),
        };
        Ok(Settings {
            kubeconfig: (!k.kubeconfig.is_empty()).then(|| base.join(&k.kubeconfig)),
            controller_name: k.controller_name.clone(),
            ingress_class: (!k.ingress_class.is_empty()).then(|| k.ingress_class.clone()),
            listen: k.listen.clone(),
            listen_tls: k.listen_tls.clone(),
            listen_passthrough: k.listen_passthrough.clone(),
            secrets_dir: base.join(&k.secrets_dir),
            addresses: k.addresses.clone(),
            debounce,
            lease,
            identity,
        })
    }
}
