//! `POST /upstreams/drain` and `POST /upstreams/enable` (`?upstream=NAME&server=NAME`): an
//! operator takes a server out of rotation and back, as HAProxy's `set server … state drain`
//! and nginx Plus's API do. A drained server gets no new requests (the balancers, sticky
//! sessions and readiness all see it as not up); requests in flight finish. The state lives in
//! the server's shared health, so it holds across reloads that keep the server, and ends with
//! the process.

use serde_json::json;

use super::json_error;
use crate::runtime::RuntimeConfig;

/// Drains (`drain`) or enables server `server` of upstream `upstream`.
pub(super) fn set(
    cfg: &RuntimeConfig,
    upstream: Option<&str>,
    server: Option<&str>,
    drain: bool,
) -> (u16, String) {
    let (Some(upstream), Some(server)) = (upstream, server) else {
        return (
            400,
            json_error("give the server as ?upstream=NAME&server=NAME (names as in /metrics)"),
        );
    };
    let Some(u) = cfg.upstreams.iter().find(|u| u.name == upstream) else {
        return (404, json_error(&format!("no upstream named {upstream:?}")));
    };
    let Some(s) = u.servers.iter().find(|s| s.name == server) else {
        let names: Vec<&str> = u.servers.iter().map(|s| s.name.as_str()).collect();
        return (
            404,
            json_error(&format!(
                "upstream {upstream:?} has no server named {server:?} (it has {names:?})"
            )),
        );
    };
    let changed = s.health.set_drained(drain);
    if changed {
        let what = if drain { "drained" } else { "enabled" };
        tracing::warn!(upstream, server, "server {what} through the admin API");
    }
    let up = s.health.is_up(crate::proxy::upstream::now_ms());
    (
        200,
        json!({"upstream": upstream, "server": server, "drained": drain, "changed": changed, "up": up})
            .to_string(),
    )
}
