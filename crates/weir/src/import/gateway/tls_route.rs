//! A `TLSRoute` (onto a `protocol: TLS`, `mode: Passthrough` listener) as routes of weir's TCP
//! listener: the connection's TLS server name, read from its ClientHello without terminating
//! TLS (`tcp/`), picks the backend, which makes the handshake itself.
//!
//! - `hostnames` (narrowed to the listener's) are the route's server names; a route without
//!   any takes the names no other route takes (the listener's `upstream`), the first such
//!   route only (noted otherwise).
//! - `backendRefs` as an HTTPRoute's (Services, ReferenceGrants, `BackendNotFound` …); one
//!   backend per rule: several are weighted in the Gateway API, and weir's TCP routes have one
//!   upstream, so the heaviest takes the rule (noted). A rule whose backends do not resolve is
//!   left out: its names are closed, never sent elsewhere.

use serde_yaml::{Mapping, Value};

use super::super::ingress::Converted;
use super::rules::{self, RouteCtx};
use super::Gateways;

/// The TCP routes of a TLSRoute's rules for `hosts`, into `out`.
pub(super) fn routes(
    x: &RouteCtx<'_>,
    obj: &Value,
    hosts: &[String],
    (c, upstreams): (&mut Converted, &mut Mapping),
    out: &mut Gateways,
) {
    let id = x.id;
    for (ri, rule) in obj["spec"]["rules"]
        .as_sequence()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let backends = match rules::backends(x, rule, c, upstreams) {
            Ok(b) if !b.is_empty() => b,
            Ok(_) => {
                c.skipped
                    .push(format!("{id}: rule {ri}: no backendRefs: left out"));
                continue;
            }
            Err(why) => {
                c.gateway.unresolved(id, &why);
                c.skipped.push(format!(
                    "{id}: rule {ri}: {why}: left out (its server names are closed)"
                ));
                continue;
            }
        };
        if backends.len() > 1 {
            c.skipped.push(format!(
                "{id}: rule {ri}: several weighted backends: the heaviest takes every connection"
            ));
        }
        let (up, _) = backends
            .iter()
            .max_by_key(|(_, w)| *w)
            .cloned()
            .unwrap_or_default();
        if hosts.is_empty() {
            match &out.passthrough_default {
                None => out.passthrough_default = Some(up),
                Some(_) => c.skipped.push(format!(
                    "{id}: rule {ri}: another TLSRoute without hostnames takes the other names: left out"
                )),
            }
            c.translated += 1;
            continue;
        }
        let mut r = Mapping::new();
        r.insert(
            "sni".into(),
            Value::Sequence(hosts.iter().map(|h| h.clone().into()).collect()),
        );
        r.insert("upstream".into(), up.into());
        out.passthrough.push(Value::Mapping(r));
        c.translated += 1;
    }
}
