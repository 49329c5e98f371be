//! The kinds the provider reads, each kept by a kube-rs reflector fed by a watcher: a first
//! complete list, then changes; an expired watch (410 Gone) or an API server that restarted
//! is listed again, and the store swaps to the new list only once it is complete (kube-rs
//! buffers a relist until its `InitDone`), so a rebuild never sees a half-listed, empty or
//! stale-and-fresh mix. Between failures the store keeps the last complete list: losing the
//! API server keeps the last good config serving.
//!
//! Objects are `DynamicObject`s (JSON as the API server sends it), which the conversion
//! (`import/`) reads as it reads manifests: one representation for files and the cluster.
//! A kind whose resource does not exist (the Gateway API's CRDs not installed) counts as
//! listed and empty, and is looked for again every minute.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{self, store::Writer, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};
use tokio::sync::mpsc::UnboundedSender;

/// A kind read: group, version, kind, plural.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
}

const GATEWAY: &str = "gateway.networking.k8s.io";

/// Every kind read, in the order the snapshot holds them.
pub const KINDS: [Kind; 10] = [
    Kind {
        group: GATEWAY,
        version: "v1",
        kind: "GatewayClass",
        plural: "gatewayclasses",
    },
    Kind {
        group: GATEWAY,
        version: "v1",
        kind: "Gateway",
        plural: "gateways",
    },
    Kind {
        group: GATEWAY,
        version: "v1",
        kind: "HTTPRoute",
        plural: "httproutes",
    },
    // v1beta1: served by every release of the Gateway API (v1 only from v1.5).
    Kind {
        group: GATEWAY,
        version: "v1beta1",
        kind: "ReferenceGrant",
        plural: "referencegrants",
    },
    Kind {
        group: "networking.k8s.io",
        version: "v1",
        kind: "Ingress",
        plural: "ingresses",
    },
    Kind {
        group: "",
        version: "v1",
        kind: "Service",
        plural: "services",
    },
    Kind {
        group: "discovery.k8s.io",
        version: "v1",
        kind: "EndpointSlice",
        plural: "endpointslices",
    },
    Kind {
        group: "",
        version: "v1",
        kind: "Secret",
        plural: "secrets",
    },
    Kind {
        group: GATEWAY,
        version: "v1",
        kind: "GRPCRoute",
        plural: "grpcroutes",
    },
    Kind {
        group: GATEWAY,
        version: "v1",
        kind: "TLSRoute",
        plural: "tlsroutes",
    },
];

/// Index of each kind in [`KINDS`].
pub const GATEWAY_CLASS: usize = 0;
pub const GATEWAY_KIND: usize = 1;
pub const HTTP_ROUTE: usize = 2;
pub const REFERENCE_GRANT: usize = 3;
pub const INGRESS: usize = 4;
pub const SERVICE: usize = 5;
pub const ENDPOINT_SLICE: usize = 6;
pub const SECRET: usize = 7;
pub const GRPC_ROUTE: usize = 8;
pub const TLS_ROUTE: usize = 9;

impl Kind {
    pub fn resource(&self) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(self.group, self.version, self.kind),
            self.plural,
        )
    }

    /// `apiVersion` as objects carry it.
    pub fn api_version(&self) -> String {
        match self.group {
            "" => self.version.to_string(),
            g => format!("{g}/{}", self.version),
        }
    }
}

/// A kind's state: not listed yet, listed (the store is complete), or absent.
const WAITING: u8 = 0;
const LISTED: u8 = 1;
const ABSENT: u8 = 2;

/// A change a watch saw: its kind (an index in [`KINDS`]) and, for an object applied or
/// deleted, its namespace and name (an EndpointSlice's: its Service's); `None` for a relist.
pub type Change = (usize, Option<(String, String)>);

/// The stores, and whether each has been listed once.
#[derive(Debug, Clone)]
pub struct Watches {
    pub stores: Vec<Store<DynamicObject>>,
    states: Arc<[AtomicU8; KINDS.len()]>,
    tasks: Arc<Vec<tokio::task::JoinHandle<()>>>,
}

/// Rate limit of the "cannot watch" lines.
static WATCH_LOG: crate::logs::Limited = crate::logs::Limited::new();

impl Watches {
    /// Starts a watcher per kind on the current runtime; each change is sent to `changed`.
    pub fn start(client: &Client, changed: UnboundedSender<Change>) -> Watches {
        let states: Arc<[AtomicU8; KINDS.len()]> = Arc::new(Default::default());
        let mut stores = Vec::new();
        let mut tasks = Vec::new();
        for (i, kind) in KINDS.iter().enumerate() {
            let ar = kind.resource();
            let writer: Writer<DynamicObject> = Writer::new(ar.clone());
            stores.push(writer.as_reader());
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
            let states = states.clone();
            let changed = changed.clone();
            let kind = *kind;
            tasks.push(tokio::spawn(async move {
                let stream = reflector::reflector(
                    writer,
                    watcher(api, watcher::Config::default()).default_backoff(),
                );
                futures_util::pin_mut!(stream);
                while let Some(event) = stream.next().await {
                    match event {
                        Ok(watcher::Event::InitDone) => {
                            states[i].store(LISTED, Ordering::Release);
                            let _ = changed.send((i, None));
                        }
                        Ok(watcher::Event::Apply(o) | watcher::Event::Delete(o)) => {
                            let _ = changed.send((i, Some(key_of(i, &o))));
                        }
                        Ok(_) => {}
                        Err(e) => {
                            if not_found(&e) && states[i].load(Ordering::Acquire) != LISTED {
                                // The resource is not served (its CRD not installed): empty
                                // for now, looked for again in a minute.
                                if states[i].swap(ABSENT, Ordering::AcqRel) != ABSENT {
                                    tracing::warn!(kind = kind.kind, "not served by the API server (CRD not installed?): read as none");
                                    let _ = changed.send((i, None));
                                }
                                tokio::time::sleep(Duration::from_secs(60)).await;
                                continue;
                            }
                            if let Some(suppressed) = WATCH_LOG.admit() {
                                match states[i].load(Ordering::Acquire) {
                                    WAITING => tracing::warn!(kind = kind.kind, error = %super::chain(&e), suppressed, "cannot list this kind (RBAC? the API server?): nothing from the cluster is served until every kind is listed"),
                                    _ => tracing::warn!(kind = kind.kind, error = %super::chain(&e), suppressed, "Kubernetes watch failed: retrying, the last config keeps serving"),
                                }
                            }
                        }
                    }
                }
            }));
        }
        Watches {
            stores,
            states,
            tasks: Arc::new(tasks),
        }
    }

    /// Whether every kind has been listed once (or is absent).
    pub fn ready(&self) -> bool {
        self.states
            .iter()
            .all(|s| s.load(Ordering::Acquire) != WAITING)
    }

    /// Stops the watchers.
    pub fn stop(&self) {
        for t in self.tasks.iter() {
            t.abort();
        }
    }
}

/// An object's namespace and name; an EndpointSlice's are its Service's.
fn key_of(kind: usize, o: &DynamicObject) -> (String, String) {
    let ns = o.metadata.namespace.clone().unwrap_or_default();
    let name = match kind {
        ENDPOINT_SLICE => o
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("kubernetes.io/service-name"))
            .cloned()
            .unwrap_or_default(),
        _ => o.metadata.name.clone().unwrap_or_default(),
    };
    (ns, name)
}

/// Whether a change can change the config: any change to a kind that is converted, a
/// relist, or a Service, EndpointSlice or Secret that `referenced` (the last conversion's)
/// names. With many Secrets and Services in a cluster, most changes are none of weir's, and
/// each rebuild costs the conversion of every route (the attack review of issue 56: an
/// unrelated EndpointSlice updated every second cost 40% of a core at 1,500 routes).
pub fn matters(
    (kind, key): &Change,
    referenced: Option<&std::collections::BTreeSet<(&'static str, String, String)>>,
) -> bool {
    let (Some(referenced), Some((ns, name))) = (referenced, key) else {
        return true;
    };
    let as_kind = match *kind {
        SERVICE | ENDPOINT_SLICE => "Service",
        SECRET => "Secret",
        _ => return true,
    };
    referenced.contains(&(as_kind, ns.clone(), name.clone()))
}

/// Whether a watcher's error is the resource's 404.
fn not_found(e: &watcher::Error) -> bool {
    let api = match e {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => e,
        _ => return false,
    };
    matches!(api, kube::Error::Api(s) if s.code == 404)
}
