//! The config as one worker runs it: the published [`RuntimeConfig`] plus the worker's own state
//! for each upstream (balancer, idle connection pool, retry budget), which a reload carries over
//! by name when the upstream's servers and policy are unchanged. Thread-per-core: `Rc`, never
//! shared between workers.

use std::rc::Rc;
use std::sync::Arc;

use super::RuntimeConfig;
use crate::access_log::LogBuffer;
use crate::filters::request_id::Generator;
use crate::metrics::{RouteMetrics, ServerMetrics, WorkerMetrics};
use crate::proxy::per_worker::WorkerUpstream;

/// The config as this worker runs it: the published `RuntimeConfig` and this worker's state for
/// each of its upstreams, indexed like `cfg.upstreams`.
#[derive(Debug)]
pub(crate) struct WorkerRuntime {
    pub cfg: Arc<RuntimeConfig>,
    /// The `Published` generation `cfg` was loaded at.
    pub generation: u64,
    pub upstreams: Vec<Rc<WorkerUpstream>>,
    /// Per listener, the counters of each route (index `route + 1`; 0: no route matched).
    pub route_metrics: Vec<Vec<Arc<RouteMetrics>>>,
    /// Per upstream, each server's request counter.
    pub server_metrics: Vec<Vec<Arc<ServerMetrics>>>,
    /// This worker's buffer for each of `cfg.access_logs`.
    pub logs: Vec<Rc<LogBuffer>>,
    pub ids: Rc<Generator>,
}

impl WorkerRuntime {
    /// The runtime for `cfg`, keeping `old`'s per-upstream state where it still fits.
    pub(crate) fn build(
        cfg: Arc<RuntimeConfig>,
        generation: u64,
        old: Option<&WorkerRuntime>,
        metrics: &Arc<WorkerMetrics>,
    ) -> WorkerRuntime {
        let upstreams = cfg
            .upstreams
            .iter()
            .map(|up| {
                old.and_then(|o| {
                    o.cfg
                        .upstreams
                        .iter()
                        .zip(&o.upstreams)
                        .find(|(u, w)| u.name == up.name && w.fits(up))
                        .map(|(_, w)| w.clone())
                })
                .unwrap_or_else(|| Rc::new(WorkerUpstream::new(up)))
            })
            .collect::<Vec<_>>();
        // State not carried over closes its idle connections now rather than when the last
        // request holding the old runtime ends.
        for w in old.iter().flat_map(|o| &o.upstreams) {
            if !upstreams.iter().any(|n| Rc::ptr_eq(n, w)) {
                w.pool.borrow_mut().retire();
            }
        }
        let route_metrics = cfg
            .listeners
            .iter()
            .map(|l| {
                let listener = if l.admin {
                    "admin".to_string()
                } else {
                    l.shown()
                };
                std::iter::once(metrics.route(&listener, "-"))
                    .chain(l.routes.iter().map(|r| metrics.route(&listener, &r.name)))
                    .collect()
            })
            .collect();
        let server_metrics = cfg
            .upstreams
            .iter()
            .map(|u| {
                u.servers
                    .iter()
                    .map(|s| metrics.server(&u.name, &s.name))
                    .collect()
            })
            .collect();
        metrics.forget_unused();
        // A buffer per log, the old one when it writes to the same place (nothing is lost or
        // reordered across a reload).
        let logs = cfg
            .access_logs
            .iter()
            .map(|l| {
                old.and_then(|o| o.logs.iter().find(|b| Arc::ptr_eq(&b.sink, &l.sink)))
                    .cloned()
                    .unwrap_or_else(|| Rc::new(LogBuffer::new(l.sink.clone())))
            })
            .collect();
        WorkerRuntime {
            cfg,
            generation,
            upstreams,
            route_metrics,
            server_metrics,
            logs,
            ids: old.map_or_else(Default::default, |o| o.ids.clone()),
        }
    }
}
