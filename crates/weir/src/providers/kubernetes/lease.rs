//! One writer of status among replicas: a `coordination.k8s.io/v1` Lease, as Kubernetes'
//! own controllers elect their leader. Every replica serves; the one holding the Lease writes
//! status. It is taken when absent, expired (not renewed for `leaseDurationSeconds`) or
//! already this replica's, by a replace at the read `resourceVersion`: two replicas racing
//! for it cannot both win (the second gets 409). It is renewed at every rebuild and every
//! [`RENEW`]; a replica that cannot reach the API server stops writing at once and another
//! takes over once the Lease expires. One that stops gracefully gives it up first.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease as LeaseObject, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::{Api, Client};

/// How long a Lease lasts unless renewed.
pub const DURATION: Duration = Duration::from_secs(15);

/// How often the holder renews it (and the others look whether it expired).
pub const RENEW: Duration = Duration::from_secs(5);

/// Rate limit of the "Lease not reachable" lines.
static LEASE_LOG: crate::logs::Limited = crate::logs::Limited::new();

/// The Lease as this replica sees it.
#[derive(Debug)]
pub struct Lease {
    api: Api<LeaseObject>,
    name: String,
    identity: String,
    /// Whether this replica held it at the last look.
    pub held: bool,
}

impl Lease {
    pub fn new(client: &Client, (ns, name): &(String, String), identity: &str) -> Lease {
        Lease {
            api: Api::namespaced(client.clone(), ns),
            name: name.clone(),
            identity: identity.to_string(),
            held: false,
        }
    }

    /// Takes or renews the Lease when it may; whether this replica holds it now.
    pub async fn hold(&mut self) -> bool {
        let was = self.held;
        self.held = match self.try_hold().await {
            Ok(held) => held,
            Err(e) => {
                if let Some(suppressed) = LEASE_LOG.admit() {
                    tracing::warn!(lease = %self.name, error = %super::chain(&e), suppressed, "the status Lease cannot be read or written: status not written by this replica");
                }
                false
            }
        };
        if self.held != was {
            match self.held {
                true => {
                    tracing::info!(lease = %self.name, identity = %self.identity, "holding the status Lease: this replica writes Gateway API status")
                }
                false => {
                    tracing::info!(lease = %self.name, "not holding the status Lease: another replica writes status")
                }
            }
        }
        self.held
    }

    /// Gives the Lease up when this replica holds it (on a graceful stop, as client-go's
    /// `ReleaseOnCancel`): the holder emptied, another replica takes it at its next look
    /// ([`RENEW`]) rather than once it expires. A replica that crashes cannot: the others wait
    /// out [`DURATION`].
    pub async fn release(&mut self) {
        if !std::mem::take(&mut self.held) {
            return;
        }
        match self.try_release().await {
            Ok(true) => {
                tracing::info!(lease = %self.name, "status Lease released");
            }
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(lease = %self.name, error = %super::chain(&e), "status Lease not released: the other replicas take it once it expires");
            }
        }
    }

    async fn try_release(&self) -> Result<bool, kube::Error> {
        let Some(mut current) = self.api.get_opt(&self.name).await? else {
            return Ok(false);
        };
        let mut spec = current.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(false);
        }
        spec.holder_identity = None;
        spec.acquire_time = None;
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        spec.lease_duration_seconds = Some(1);
        current.spec = Some(spec);
        // At the read resourceVersion: a Lease taken meanwhile is not emptied (409).
        self.replace(&current).await
    }

    async fn try_hold(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let mine = |transitions: i32, acquired: Option<MicroTime>| LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(DURATION.as_secs() as i32),
            acquire_time: acquired.or(Some(MicroTime(now))),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        };
        let Some(mut current) = self.api.get_opt(&self.name).await? else {
            let lease = LeaseObject {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(mine(0, None)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = current.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.as_deref().unwrap_or("");
        let expired = spec.renew_time.as_ref().is_none_or(|t| {
            let lasts = i64::from(spec.lease_duration_seconds.unwrap_or(15));
            t.0.as_second() + lasts < now.as_second()
        });
        let ours = holder == self.identity;
        if !ours && !holder.is_empty() && !expired {
            return Ok(false);
        }
        let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!ours);
        current.spec = Some(mine(
            transitions,
            if ours {
                spec.acquire_time.clone()
            } else {
                None
            },
        ));
        self.replace(&current).await
    }

    /// Writes `lease` at the resourceVersion it was read at: `false` when it changed meanwhile
    /// (another replica wrote it: 409).
    async fn replace(&self, lease: &LeaseObject) -> Result<bool, kube::Error> {
        match self
            .api
            .replace(&self.name, &PostParams::default(), lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }
}
