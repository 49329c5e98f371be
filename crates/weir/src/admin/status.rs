//! `GET /status`: what `weir status` shows of a running weir — its process id, version,
//! uptime, the config generation (reloads since start) and file, listeners and workers.

use crate::runtime::RuntimeConfig;

/// The status document.
pub(super) fn status(cfg: &RuntimeConfig, generation: u64) -> (u16, String) {
    let p = &cfg.registry.process;
    let listeners: Vec<serde_json::Value> = cfg
        .listeners
        .iter()
        .map(|l| {
            serde_json::json!({
                "address": l.shown(),
                "admin": l.admin,
                "tls": l.tls.is_some(),
            })
        })
        .collect();
    let body = serde_json::json!({
        "pid": std::process::id(),
        "version": env!("CARGO_PKG_VERSION"),
        "started_unix": p.started_unix,
        "uptime_s": p.started.elapsed().as_secs(),
        "generation": generation,
        "config_file": p.config_file.get(),
        "pid_file": p.pid_file.get(),
        "workers": cfg.workers,
        "listeners": listeners,
    });
    (200, body.to_string())
}
