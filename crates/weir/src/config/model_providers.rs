//! `providers:` — config that comes from elsewhere and is served beside the file's (issue 56
//! §1): `kubernetes`, the Gateway API and Ingress objects of a cluster (`providers/kubernetes/`).

use serde::Deserialize;

use super::units::Dur;

/// `providers:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Providers {
    pub kubernetes: Option<Kubernetes>,
}

/// `providers.kubernetes`: weir as the controller of a GatewayClass and of an Ingress class.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Kubernetes {
    /// A kubeconfig file (its current context); empty: the pod's service account
    /// (`KUBERNETES_SERVICE_HOST` and the mounted token).
    #[serde(default)]
    pub kubeconfig: String,
    /// The GatewayClasses whose `controllerName` is this are weir's.
    #[serde(default = "default_controller")]
    pub controller_name: String,
    /// The Ingress class taken (`spec.ingressClassName` or the older annotation); empty:
    /// Ingresses are not read.
    #[serde(default = "default_ingress_class")]
    pub ingress_class: String,
    /// The address the Gateways' HTTP listeners and the Ingresses are served on.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// The address of the HTTPS listeners (certificates from their Secrets).
    #[serde(default = "default_listen_tls")]
    pub listen_tls: String,
    /// The address of the TCP listener for TLSRoutes (TLS passed through, routed by server
    /// name).
    #[serde(default = "default_listen_passthrough")]
    pub listen_passthrough: String,
    /// Where the Secrets' certificates and htpasswd files are written (mode 0600).
    #[serde(default = "default_secrets_dir")]
    pub secrets_dir: String,
    /// The addresses written into the Gateways' status (IPs or host names).
    #[serde(default)]
    pub addresses: Vec<String>,
    /// Changes arriving within this long of the first are one rebuild.
    #[serde(default = "default_debounce")]
    pub debounce: Dur,
    /// The Lease that elects the one replica writing status: `NAMESPACE/NAME`.
    #[serde(default = "default_lease")]
    pub lease: String,
    /// This replica's name in the Lease (default: the host name and process id).
    #[serde(default)]
    pub identity: String,
}

fn default_controller() -> String {
    "weir.dev/gateway-controller".into()
}

fn default_ingress_class() -> String {
    "nginx".into()
}

fn default_listen() -> String {
    "0.0.0.0:80".into()
}

fn default_listen_tls() -> String {
    "0.0.0.0:443".into()
}

fn default_listen_passthrough() -> String {
    "0.0.0.0:8443".into()
}

fn default_secrets_dir() -> String {
    "/var/lib/weir/kubernetes".into()
}

fn default_debounce() -> Dur {
    Dur(std::time::Duration::from_millis(200))
}

fn default_lease() -> String {
    "default/weir-gateway-status".into()
}
