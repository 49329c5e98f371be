//! The Kubernetes provider's counters (`providers/kubernetes/`), process-wide: they outlive
//! configs and providers restarted by a reload. `admin/scrape.rs` exposes them as
//! `weir_kubernetes_*`.

use std::sync::atomic::AtomicU64;

/// Bursts of changes that were converted.
pub static REBUILDS: AtomicU64 = AtomicU64::new(0);
/// Bursts of changes skipped: only Services, EndpointSlices or Secrets no object names.
pub static SKIPPED: AtomicU64 = AtomicU64::new(0);
/// Configs handed to the reload path that applied.
pub static APPLIED: AtomicU64 = AtomicU64::new(0);
/// Configs that did not apply (the last good one kept serving).
pub static FAILED: AtomicU64 = AtomicU64::new(0);
/// Objects left out of the last rebuild because their config does not compile.
pub static LEFT_OUT: AtomicU64 = AtomicU64::new(0);
