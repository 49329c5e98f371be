//! `providers.kubernetes` (issue 56 §1): weir as the controller of a Gateway API
//! GatewayClass (`controller_name`) and of an Ingress class (ingress-nginx's `nginx` by
//! default), run in the cluster (its service account) or outside it (a kubeconfig).
//!
//! One task on the control loop's runtime:
//!
//! 1. connect (kube-rs, rustls with aws-lc-rs as everywhere in weir; retried with backoff);
//! 2. watch GatewayClass, Gateway, HTTPRoute, ReferenceGrant, Ingress, Service,
//!    EndpointSlice and Secret (`watch.rs`: reflectors, a relist swapped in whole);
//! 3. once every kind is listed, and after each burst of changes (`debounce`): read one
//!    snapshot (`view.rs`), convert it as `weir import` converts manifests (`publish.rs`, the
//!    same code), and when the text differs, hand it to the control loop, which reloads
//!    through the path every config source shares (`reload/`): connections are kept, and a
//!    text that does not compile leaves the running config serving (the provider then puts
//!    back its last good fragment, so an etcd change or a SIGHUP is not blocked by it);
//! 4. write status (`status.rs`) and tell each object what was not served as written
//!    (`events.rs`) when this replica holds the Lease (`lease.rs`).
//!
//! Before the first complete list the provider publishes nothing: its listeners open with
//! the cluster's config, never with an empty one. Losing the API server keeps the last
//! good config; the watches resume (relisting when theirs expired) with backoff.
//!
//! The runtime sees the provider only through the fragment it publishes. kube-rs and
//! k8s-openapi are the Rust ecosystem's Kubernetes client (used by linkerd2-proxy's
//! controllers, among others); they cost weir's first debug build about a minute on 2 cores
//! and its stripped binary 5.0 MB (23.2 → 28.2 MB, measured 2026-11-30), and nothing at run
//! time unless `providers.kubernetes` is set.

mod events;
mod lease;
pub mod publish;
mod status;
mod view;
mod watch;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::metrics::kubernetes::{APPLIED, FAILED, REBUILDS, SKIPPED};

use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::oneshot;

pub use crate::config::kubernetes::Settings;

use crate::config::assemble::Fragment;

/// What the provider asks the control loop: reload with its new fragment, and say how it went.
pub type Ask = oneshot::Sender<Result<(), String>>;

/// Rate limit of the "cannot reach the API server" lines.
static CONNECT_LOG: crate::logs::Limited = crate::logs::Limited::new();

/// The running provider.
#[derive(Debug)]
pub struct Provider {
    pub settings: Settings,
    task: tokio::task::JoinHandle<()>,
    /// Asks the task to give up the status Lease and end (`shutdown`).
    quit: Option<oneshot::Sender<()>>,
}

impl Provider {
    /// Starts the provider on the current runtime. `slot` is the reloader's provided
    /// fragments; `ask` reaches the control loop.
    pub fn spawn(
        settings: Settings,
        (slot, texts): (Arc<Mutex<Vec<Fragment>>>, publish::Base),
        ask: UnboundedSender<Ask>,
    ) -> Provider {
        let s = settings.clone();
        let (quit, quitting) = oneshot::channel();
        let task = tokio::spawn(async move { run(s, (slot, texts), ask, quitting).await });
        Provider {
            settings,
            task,
            quit: Some(quit),
        }
    }

    /// Stops it (its watches with it).
    pub fn stop(self) {
        self.task.abort();
    }

    /// Stops it on the way out: the status Lease given up first when held (bounded: an API
    /// server that does not answer leaves it to expire).
    pub async fn shutdown(mut self) {
        if let Some(q) = self.quit.take() {
            let _ = q.send(());
        }
        if tokio::time::timeout(Duration::from_secs(3), &mut self.task)
            .await
            .is_err()
        {
            self.task.abort();
        }
    }
}

/// An error with its causes (`client error (Connect): invalid peer certificate: …`): kube-rs
/// errors say little without them.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let c = cause.to_string();
        if !out.contains(&c) {
            out.push_str(": ");
            out.push_str(&c);
        }
        next = cause.source();
    }
    out
}

/// Builds the client: the kubeconfig's current context, or the pod's service account.
async fn connect(s: &Settings) -> Result<kube::Client, String> {
    let config = match &s.kubeconfig {
        Some(p) => {
            let kc = kube::config::Kubeconfig::read_from(p)
                .map_err(|e| format!("kubeconfig {}: {}", p.display(), chain(&e)))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| format!("kubeconfig {}: {}", p.display(), chain(&e)))?
        }
        None => kube::Config::incluster()
            .map_err(|e| format!("in-cluster config (no kubeconfig given): {}", chain(&e)))?,
    };
    kube::Client::try_from(config).map_err(|e| format!("Kubernetes client: {}", chain(&e)))
}

/// Stops the watches when the provider's task ends or is aborted.
struct StopOnDrop(watch::Watches);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop();
    }
}

async fn run(
    s: Settings,
    (slot, texts): (Arc<Mutex<Vec<Fragment>>>, publish::Base),
    ask: UnboundedSender<Ask>,
    mut quitting: oneshot::Receiver<()>,
) {
    let mut backoff = Duration::from_millis(200);
    let client = loop {
        match connect(&s).await {
            Ok(c) => break c,
            Err(e) => {
                if let Some(suppressed) = CONNECT_LOG.admit() {
                    tracing::error!(error = %e, suppressed, "Kubernetes provider not started: retrying");
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(10));
            }
        }
    };
    let (changed_tx, mut changed) = tokio::sync::mpsc::unbounded_channel();
    let watches = watch::Watches::start(&client, changed_tx);
    let _stop = StopOnDrop(watches.clone());
    let mut lease = lease::Lease::new(&client, &s.lease, &s.identity);
    let mut renew = tokio::time::interval(lease::RENEW);
    renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The text last handed over, the last one that applied, and the last reload's error.
    let mut published: Option<String> = None;
    let mut good: Vec<Fragment> = Vec::new();
    let mut error: Option<String> = None;
    let mut notes: Vec<String> = Vec::new();
    let mut told = events::Told::default();
    // What the last conversion named: changes to other Services and Secrets are skipped.
    let mut referenced = None;
    loop {
        tokio::select! {
            Some(first) = changed.recv() => {
                tokio::time::sleep(s.debounce).await;
                let mut any = watch::matters(&first, referenced.as_ref());
                while let Ok(next) = changed.try_recv() {
                    any |= watch::matters(&next, referenced.as_ref());
                }
                if !any {
                    SKIPPED.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
            }
            _ = renew.tick() => {
                let was = lease.held;
                // A new holder writes every status once; otherwise only the renewal.
                if !lease.hold().await || was {
                    continue;
                }
            }
            _ = &mut quitting => {
                lease.release().await;
                return;
            }
            else => return,
        }
        if !watches.ready() {
            continue;
        }
        let started = std::time::Instant::now();
        REBUILDS.fetch_add(1, Ordering::Relaxed);
        let snap = view::read(&watches, &s.controller_name, s.ingress_class.as_deref());
        let built = match publish::build(&snap, &s, &texts) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(error = %e, "the cluster's config was not built: the last one keeps serving");
                continue;
            }
        };
        referenced = Some(built.referenced.clone());
        if built.notes != notes {
            for n in &built.notes {
                tracing::info!(note = %n, "Kubernetes object not served as written");
            }
            notes = built.notes.clone();
        }
        if published.as_deref() != Some(built.fragment.text.as_str()) {
            published = Some(built.fragment.text.clone());
            *slot.lock().unwrap_or_else(|e| e.into_inner()) = vec![built.fragment.clone()];
            let (done, result) = oneshot::channel();
            if ask.send(done).is_err() {
                return;
            }
            match result.await {
                Ok(Ok(())) => {
                    good = vec![built.fragment.clone()];
                    error = None;
                    APPLIED.fetch_add(1, Ordering::Relaxed);
                    publish::prune(&s.secrets_dir, &built.files);
                    tracing::info!(
                        objects = snap.objects.len(),
                        ms = started.elapsed().as_millis() as u64,
                        "Kubernetes config applied"
                    );
                }
                Ok(Err(e)) => {
                    // Back to the last good fragment: other sources' reloads go on.
                    *slot.lock().unwrap_or_else(|e| e.into_inner()) = good.clone();
                    error = Some(e);
                    FAILED.fetch_add(1, Ordering::Relaxed);
                }
                Err(_) => return,
            }
        }
        if lease.hold().await {
            let applied = status::Applied {
                outcomes: &built.outcomes,
                error: error.as_deref(),
                classes: &snap.classes,
                objects: &snap.objects,
            };
            status::write_all(&client, &s, &applied).await;
            told.tell(&client, &built.notes, &snap.objects).await;
        }
    }
}
