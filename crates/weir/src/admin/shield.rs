//! The shield's admin endpoints: `GET /shield` (the table's size and bound, evictions, and every
//! blocked client with the seconds left and the limit it passed) and `POST
//! /shield/unblock?client=ADDRESS`.

use std::net::IpAddr;

use serde_json::json;

use crate::runtime::RuntimeConfig;

/// `GET /shield`.
pub(super) fn list(cfg: &RuntimeConfig) -> (u16, String) {
    let state = &cfg.registry.shield;
    let blocked: Vec<_> = state
        .clients
        .blocked(state.now())
        .into_iter()
        .map(|(ip, ms, why)| json!({"client": ip.to_string(), "seconds": ms.div_ceil(1000), "limit": why.as_str()}))
        .collect();
    let body = json!({
        "enabled": cfg.shield.is_some(),
        "clients": state.clients.len(),
        "max_clients": state.clients.max(),
        "evicted": state.clients.evicted.load(std::sync::atomic::Ordering::Relaxed),
        "blocked": blocked,
    });
    (200, body.to_string())
}

/// `POST /shield/unblock?client=ADDRESS`: 200 when it was blocked, 404 when it was not.
pub(super) fn unblock(cfg: &RuntimeConfig, client: Option<&str>) -> (u16, String) {
    let Some(ip) = client.and_then(|c| c.trim().parse::<IpAddr>().ok()) else {
        return (
            400,
            super::json_error("give client=ADDRESS (an IPv4 or IPv6 address)"),
        );
    };
    // Counted by its network (`ipv6_prefix`): any address of it unblocks the client.
    let ip = cfg.shield.as_ref().map_or(ip, |s| s.client(ip));
    if cfg.registry.shield.unblock(ip) {
        tracing::info!(client = %ip, "client unblocked (admin API)");
        (200, json!({"unblocked": ip.to_string()}).to_string())
    } else {
        (404, super::json_error(&format!("{ip} is not blocked")))
    }
}
