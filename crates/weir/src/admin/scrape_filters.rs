//! The traffic-control filters' part of `/metrics` (`scrape.rs`): rate-limit and concurrency
//! tables, circuit breakers, mirrors, one family per figure, labelled by filter name.

use std::fmt;
use std::sync::atomic::Ordering::Relaxed;

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::scrape::{counter, family, gauge, Labels};
use crate::filters::compile::Kind;
use crate::runtime::RuntimeConfig;

/// Encodes the families of the filters `cfg` has (none when it has no such filter).
pub(super) fn families(cfg: &RuntimeConfig, enc: &mut DescriptorEncoder) -> fmt::Result {
    let name = |n: &str| -> Labels { vec![("filter", n.to_string())] };
    let (mut limits, mut conc, mut breakers, mut mirrors) = (vec![], vec![], vec![], vec![]);
    for c in &cfg.filters {
        match &c.kind {
            Kind::RateLimit(r) => limits.push(r.clone()),
            Kind::Concurrency(r) => conc.push(r.clone()),
            Kind::Breaker(b) => breakers.push(b.snapshot()),
            Kind::Mirror(m) => mirrors.push(m.clone()),
            Kind::Other => {}
        }
    }
    if !limits.is_empty() {
        family(
            enc,
            "weir_rate_limit_keys",
            "Keys a rate limit remembers (bounded by max_keys).",
            MetricType::Gauge,
            limits
                .iter()
                .map(|r| (name(&r.name), gauge(r.table.len() as i64))),
        )?;
        family(
            enc,
            "weir_rate_limit_rejected",
            "Requests a rate limit refused.",
            MetricType::Counter,
            limits
                .iter()
                .map(|r| (name(&r.name), counter(r.table.rejected.load(Relaxed)))),
        )?;
        family(
            enc,
            "weir_rate_limit_delayed",
            "Requests a rate limit delayed (its queue).",
            MetricType::Counter,
            limits
                .iter()
                .map(|r| (name(&r.name), counter(r.table.delayed.load(Relaxed)))),
        )?;
    }
    if !conc.is_empty() {
        family(
            enc,
            "weir_concurrency_keys",
            "Keys with requests in flight under a concurrency limit.",
            MetricType::Gauge,
            conc.iter()
                .map(|r| (name(&r.name), gauge(r.table.len() as i64))),
        )?;
        family(
            enc,
            "weir_concurrency_rejected",
            "Requests a concurrency limit refused.",
            MetricType::Counter,
            conc.iter()
                .map(|r| (name(&r.name), counter(r.table.rejected.load(Relaxed)))),
        )?;
    }
    if !mirrors.is_empty() {
        for (metric, help, pick) in [
            (
                "weir_mirror_sent",
                "Request copies a mirror delivered (the shadow answered).",
                0,
            ),
            (
                "weir_mirror_skipped",
                "Requests a mirror did not copy: too many in flight, or a body over max_body.",
                1,
            ),
            (
                "weir_mirror_failed",
                "Request copies the shadow upstream did not answer.",
                2,
            ),
        ] {
            family(
                enc,
                metric,
                help,
                MetricType::Counter,
                mirrors.iter().map(|m| {
                    let c = &m.counts;
                    let v = [&c.sent, &c.skipped, &c.failed][pick].load(Relaxed);
                    (name(&m.name), counter(v))
                }),
            )?;
        }
    }
    if !breakers.is_empty() {
        family(
            enc,
            "weir_circuit_breaker_state",
            "A circuit breaker's state: 0 closed, 1 open, 2 half-open.",
            MetricType::Gauge,
            breakers
                .iter()
                .map(|b| (name(&b.name), gauge(b.phase.number().into()))),
        )?;
        family(
            enc,
            "weir_circuit_breaker_opened",
            "Times a circuit breaker opened.",
            MetricType::Counter,
            breakers.iter().map(|b| (name(&b.name), counter(b.opened))),
        )?;
    }
    shield(cfg, enc)
}

/// The shield's families: when it is configured, or a listener takes the PROXY protocol.
fn shield(cfg: &RuntimeConfig, enc: &mut DescriptorEncoder) -> fmt::Result {
    use crate::shield::{Action, Limit};
    if cfg.shield.is_none() && cfg.listeners.iter().all(|l| l.proxy_protocol.is_none()) {
        return Ok(());
    }
    let state = &cfg.registry.shield;
    let none = || -> Labels { Vec::new() };
    family(
        enc,
        "weir_shield_clients",
        "Clients the shield remembers (bounded by weir_shield_max_clients).",
        MetricType::Gauge,
        [(none(), gauge(state.clients.len() as i64))],
    )?;
    family(
        enc,
        "weir_shield_max_clients",
        "The bound of the shield's client table (shield.clients).",
        MetricType::Gauge,
        [(none(), gauge(state.clients.max() as i64))],
    )?;
    family(
        enc,
        "weir_shield_clients_evicted",
        "Clients evicted from the full table, oldest first.",
        MetricType::Counter,
        [(none(), counter(state.clients.evicted.load(Relaxed)))],
    )?;
    family(
        enc,
        "weir_shield_blocked_clients",
        "Clients blocked now.",
        MetricType::Gauge,
        [(
            none(),
            gauge(state.clients.blocked(state.now()).len() as i64),
        )],
    )?;
    family(
        enc,
        "weir_shield_actions",
        "Actions the shield took, by the limit passed and the action (reply, close, block).",
        MetricType::Counter,
        Limit::ALL.into_iter().flat_map(|l| {
            Action::ALL.into_iter().map(move |a| {
                let labels: Labels = vec![
                    ("limit", l.as_str().to_string()),
                    ("action", a.as_str().to_string()),
                ];
                (labels, counter(state.count(l, a)))
            })
        }),
    )
}
