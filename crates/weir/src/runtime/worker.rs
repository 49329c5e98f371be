//! The config as one worker runs it: the published [`RuntimeConfig`] plus the worker's own state
//! for each upstream (balancer, idle connection pool, retry budget), which a reload carries over
//! by name when the upstream's servers and policy are unchanged. Thread-per-core: `Rc`, never
//! shared between workers.

use std::rc::Rc;
use std::sync::Arc;

use super::RuntimeConfig;
use crate::proxy::per_worker::WorkerUpstream;

/// The config as this worker runs it: the published `RuntimeConfig` and this worker's state for
/// each of its upstreams, indexed like `cfg.upstreams`.
#[derive(Debug)]
pub(crate) struct WorkerRuntime {
    pub cfg: Arc<RuntimeConfig>,
    /// The `Published` generation `cfg` was loaded at.
    pub generation: u64,
    pub upstreams: Vec<Rc<WorkerUpstream>>,
}

impl WorkerRuntime {
    /// The runtime for `cfg`, keeping `old`'s per-upstream state where it still fits.
    pub(crate) fn build(
        cfg: Arc<RuntimeConfig>,
        generation: u64,
        old: Option<&WorkerRuntime>,
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
        WorkerRuntime {
            cfg,
            generation,
            upstreams,
        }
    }
}
