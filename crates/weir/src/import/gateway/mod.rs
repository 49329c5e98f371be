//! `weir import` of Gateway API manifests (issue 56 §2, offline; `gateway.networking.k8s.io/v1`):
//! `Gateway` listeners (HTTP onto weir's plain listener, HTTPS onto its TLS one) and the
//! `HTTPRoute`s attached to them, with the specification's meaning:
//!
//! - attachment: a `parentRef` names a Gateway (and a listener by `sectionName`); a listener's
//!   `allowedRoutes.namespaces.from` (`Same` by default, `All`) and `hostname` decide whether
//!   the route attaches (else noted: `NotAllowedByListeners`, `NoMatchingListenerHostname`);
//!   the route's hosts are its `hostnames` narrowed to the listener's.
//! - matches: `path` (`Exact`, `PathPrefix` by whole segments, `RegularExpression`),
//!   `headers` and `queryParams` (`Exact`, or `RegularExpression` through `vars`), `method`;
//!   routes ordered by the specification's precedence (exact path, longer prefix, method,
//!   more headers, more query parameters).
//! - filters: `RequestHeaderModifier`, `ResponseHeaderModifier`, `RequestRedirect`,
//!   `URLRewrite` (hostname, `ReplaceFullPath`, `ReplacePrefixMatch`), `RequestMirror`,
//!   `CORS` (weir's `cors`; `allowCredentials` with the `*` origin left off, noted).
//! - `timeouts`: `request` and `backendRequest` bound the exchange (upstream `timeouts.total`
//!   on the rule's own upstreams; 504).
//! - `backendRefs`: Services (their port), weights (a `split`); one in another namespace only
//!   with a `ReferenceGrant` there allowing it, else the rule answers 500 as the specification
//!   says for an invalid reference (`RefNotPermitted`, `BackendNotFound`, `InvalidKind`, noted).
//!
//! `GRPCRoute`s attach as HTTPRoutes do, their rules said as HTTPRoute rules (`grpc.rs`);
//! `TLSRoute`s onto the passthrough listener (`tls_route.rs`). Status is written by
//! `providers.kubernetes` from [`Outcomes`].

use serde_yaml::{Mapping, Value};

use super::ingress::{host_class, tls_certificate, Converted, Options, Route};

mod filters;
mod grants;
mod grpc;
mod outcomes;
mod owners;
mod rules;
mod tls_route;

pub use outcomes::{ListenerOutcome, Outcomes, ParentOutcome, Problem};

/// The route kinds a listener takes: those of `allowed` (`allowedRoutes.kinds`) it can serve,
/// or every one of `offered` when none are listed; and the ones it cannot, as written.
fn route_kinds(allowed: &Value, offered: &[&'static str]) -> (Vec<&'static str>, Vec<String>) {
    let listed = allowed.as_sequence().filter(|s| !s.is_empty());
    let Some(listed) = listed else {
        return (offered.to_vec(), Vec::new());
    };
    let (mut kinds, mut refused) = (Vec::new(), Vec::new());
    for k in listed {
        let group = k["group"].as_str().unwrap_or("gateway.networking.k8s.io");
        let kind = k["kind"].as_str().unwrap_or("");
        match offered.iter().find(|o| **o == kind) {
            Some(o) if group == "gateway.networking.k8s.io" => {
                if !kinds.contains(o) {
                    kinds.push(*o);
                }
            }
            _ => refused.push(format!("{group}/{kind}")),
        }
    }
    (kinds, refused)
}

use grants::granted;

/// A route's precedence (`Route::rank`).
pub(super) type Rank = (u8, u8, std::cmp::Reverse<usize>, u8);

/// A rule's backends by upstream and weight, or why it answers 500.
pub(super) type Backends = Result<Vec<(String, u64)>, String>;

/// One Gateway listener.
#[derive(Debug)]
struct Listener {
    gateway: (String, String),
    name: String,
    tls: bool,
    /// `protocol: TLS` with `mode: Passthrough`: TLSRoutes, onto weir's TCP listener.
    passthrough: bool,
    hostname: Option<String>,
    /// `allowedRoutes.namespaces.from: All`.
    all_namespaces: bool,
    /// The route kinds it takes (`allowedRoutes.kinds`, else its protocol's).
    kinds: Vec<&'static str>,
}

/// What the Gateway API objects convert to.
#[derive(Debug, Default)]
pub(super) struct Gateways {
    /// The routes for the plain listener and for the TLS one.
    pub(super) plain: Vec<Route>,
    pub(super) secure: Vec<Route>,
    /// The TLS certificates wanted.
    pub(super) certificates: Vec<Value>,
    /// The hosts the Gateways serve (an Ingress does not get them).
    pub(super) hosts: Vec<String>,
    /// The TCP listener's routes by server name (TLSRoutes), and the upstream of the names
    /// none takes (a TLSRoute without hostnames).
    pub(super) passthrough: Vec<Value>,
    pub(super) passthrough_default: Option<String>,
}

/// Converts the Gateway API objects among `objects`.
pub(super) fn convert(
    objects: &[Value],
    opts: &Options,
    (c, ingress_hosts): (&mut Converted, &[(String, String)]),
    upstreams: &mut Mapping,
) -> Gateways {
    let mut listeners = Vec::new();
    let mut certificates = Vec::new();
    let grants: Vec<Value> = objects
        .iter()
        .filter(|o| o["kind"].as_str() == Some("ReferenceGrant"))
        .cloned()
        .collect();
    // weir's import serves one plain and one TLS listener: the first HTTP port and the first
    // HTTPS port seen; a listener on another port is not merged onto them (an internal port
    // would become a public one), and several Gateways sharing them is said.
    let (mut http_port, mut https_port, mut passthrough_port) = (None, None, None);
    let mut gateways = 0;
    // The oldest first (`creationTimestamp`, then namespace and name), as the specification
    // settles conflicts: a newer Gateway or route never takes a port or a host an older one
    // has (attack review of issue 56: the first by name took them).
    let mut objects: Vec<&Value> = objects.iter().collect();
    objects.sort_by_key(|o| {
        (
            o["metadata"]["creationTimestamp"]
                .as_str()
                .map_or((1, String::new()), |t| (0, t.to_string())),
            ident(o).1.to_string(),
            ident(o).2.to_string(),
        )
    });
    for obj in objects.iter().copied() {
        let (kind, ns, name) = ident(obj);
        match kind {
            "Gateway" => {
                gateways += 1;
                if gateways == 2 {
                    c.skipped.push(format!(
                        "Gateway {ns}/{name}: several Gateways are served on weir's one plain and one TLS listener"
                    ));
                }
                let gw = (ns.to_string(), name.to_string());
                for l in obj["spec"]["listeners"].as_sequence().into_iter().flatten() {
                    let lname = l["name"].as_str().unwrap_or("").to_string();
                    let port = l["port"].as_u64();
                    let passthrough = l["protocol"].as_str() == Some("TLS")
                        && l["tls"]["mode"].as_str() == Some("Passthrough");
                    let tls = match l["protocol"].as_str() {
                        Some("HTTP") => false,
                        Some("HTTPS") => true,
                        Some("TLS") if passthrough => false,
                        other => {
                            let why = format!(
                                "listener {lname}: protocol {}{} not translated",
                                other.unwrap_or("(none)"),
                                if other == Some("TLS") {
                                    " (mode Terminate)"
                                } else {
                                    ""
                                }
                            );
                            c.skipped.push(format!("Gateway {ns}/{name}: {why}"));
                            c.gateway.listener_problem(
                                (&gw, &lname),
                                "Accepted",
                                "UnsupportedProtocol",
                                why,
                            );
                            continue;
                        }
                    };
                    let slot = match (tls, passthrough) {
                        (_, true) => &mut passthrough_port,
                        (true, _) => &mut https_port,
                        (false, _) => &mut http_port,
                    };
                    if slot.is_some_and(|p| Some(p) != port) {
                        let why = format!(
                            "listener {lname} on port {}: another port than the first of its protocol, not translated (run another weir for it)",
                            port.unwrap_or(0)
                        );
                        c.skipped.push(format!("Gateway {ns}/{name}: {why}"));
                        c.gateway.listener_problem(
                            (&gw, &lname),
                            "Accepted",
                            "PortUnavailable",
                            why,
                        );
                        continue;
                    }
                    *slot = port.or(Some(0));
                    if tls {
                        let refs = l["tls"]["certificateRefs"]
                            .as_sequence()
                            .map_or(0, Vec::len);
                        let foreign = l["tls"]["certificateRefs"]
                            .as_sequence()
                            .into_iter()
                            .flatten()
                            .find(|r| {
                                let sns = r["namespace"].as_str().unwrap_or(ns);
                                sns != ns
                                    && !granted(
                                        &grants,
                                        ("Gateway", ns),
                                        ("Secret", sns, r["name"].as_str().unwrap_or("")),
                                    )
                            });
                        // A reference to anything but a core Secret is not one weir reads.
                        let other_kind = l["tls"]["certificateRefs"]
                            .as_sequence()
                            .into_iter()
                            .flatten()
                            .any(|r| {
                                r["kind"].as_str().is_some_and(|k| k != "Secret")
                                    || r["group"].as_str().is_some_and(|g| !g.is_empty())
                            });
                        if refs == 0 || foreign.is_some() || other_kind {
                            let (reason, what) = if refs == 0 {
                                ("InvalidCertificateRef", "HTTPS without certificateRefs")
                            } else if other_kind {
                                (
                                    "InvalidCertificateRef",
                                    "a certificate reference to something other than a Secret",
                                )
                            } else {
                                ("RefNotPermitted", "RefNotPermitted: a certificate in another namespace without a ReferenceGrant")
                            };
                            let why = format!("listener {lname}: {what}: not translated");
                            c.skipped.push(format!("Gateway {ns}/{name}: {why}"));
                            c.gateway
                                .listener_problem((&gw, &lname), "ResolvedRefs", reason, why);
                            continue;
                        }
                        // Every certificate first (against a cluster a Secret may be missing:
                        // then the listener is left out, and none of its certificates kept).
                        let mut mine = Vec::new();
                        let mut all = true;
                        for r in l["tls"]["certificateRefs"]
                            .as_sequence()
                            .into_iter()
                            .flatten()
                        {
                            let secret = r["name"].as_str().unwrap_or("?");
                            let sns = r["namespace"].as_str().unwrap_or(ns);
                            let id = format!("Gateway {ns}/{name} listener {lname}");
                            // Chosen for the listener's host only (absent: the certificate's
                            // names), never for another Gateway's or an Ingress's.
                            let names: Vec<String> = l["hostname"]
                                .as_str()
                                .map(str::to_ascii_lowercase)
                                .into_iter()
                                .collect();
                            all &= tls_certificate(&id, (sns, secret), &names, &mut mine, c);
                        }
                        if !all {
                            let why = format!(
                                "listener {lname}: a certificate Secret not found, or without tls.crt and tls.key"
                            );
                            c.gateway.listener_problem(
                                (&gw, &lname),
                                "ResolvedRefs",
                                "InvalidCertificateRef",
                                why,
                            );
                            continue;
                        }
                        for cert in mine {
                            if !certificates.contains(&cert) {
                                certificates.push(cert);
                            }
                        }
                    }
                    if l["allowedRoutes"]["namespaces"]["from"].as_str() == Some("Selector") {
                        c.skipped.push(format!(
                            "Gateway {ns}/{name}: listener {lname}: allowedRoutes from Selector is read as Same (the listener's own namespace only)"
                        ));
                    }
                    let offered: &[&'static str] = match passthrough {
                        true => &["TLSRoute"],
                        false => &["HTTPRoute", "GRPCRoute"],
                    };
                    let (kinds, refused) = route_kinds(&l["allowedRoutes"]["kinds"], offered);
                    // Kinds it cannot take: `ResolvedRefs: False` (`InvalidRouteKinds`), the
                    // others still served (the conformance suite's mixed case).
                    let problem = (!refused.is_empty()).then(|| {
                        let message = format!(
                            "listener {lname}: route kinds {} are not supported on a {} listener",
                            refused.join(", "),
                            l["protocol"].as_str().unwrap_or("")
                        );
                        c.skipped.push(format!("Gateway {ns}/{name}: {message}"));
                        Problem {
                            condition: "ResolvedRefs",
                            reason: "InvalidRouteKinds".into(),
                            message,
                        }
                    });
                    c.gateway.listeners.push(ListenerOutcome {
                        gateway: gw.clone(),
                        name: lname.clone(),
                        attached: 0,
                        kinds: kinds.clone(),
                        problem,
                    });
                    listeners.push(Listener {
                        gateway: gw.clone(),
                        name: lname,
                        tls,
                        passthrough,
                        hostname: l["hostname"].as_str().map(str::to_ascii_lowercase),
                        all_namespaces: l["allowedRoutes"]["namespaces"]["from"].as_str()
                            == Some("All"),
                        kinds,
                    });
                    c.translated += 1;
                }
            }
            "TCPRoute" | "UDPRoute" => {
                c.skipped
                    .push(format!("{kind} {ns}/{name}: not translated yet"));
            }
            _ => {}
        }
    }
    // The hosts routes were attached for, per listener kind: each gets a 404 after its
    // routes, so that its requests stay with the routes of its listener (the
    // specification's SHOULD) and never reach another listener's or an Ingress's host-less
    // rules.
    let mut hosts_seen: Vec<(String, bool)> = listeners
        .iter()
        .filter(|l| !l.passthrough)
        .filter_map(|l| l.hostname.clone().map(|h| (h, l.tls)))
        .collect();
    let mut out = Gateways::default();
    // Each host to the Gateway whose routes claimed it first (the oldest route): another
    // Gateway's routes do not get it (`HostnameConflict`).
    let mut owners = owners::Owners::default();
    let mut seen: std::collections::HashSet<(String, bool)> = hosts_seen.iter().cloned().collect();
    for obj in objects.iter().copied() {
        let (kind, ns, name) = ident(obj);
        if !matches!(kind, "HTTPRoute" | "GRPCRoute" | "TLSRoute") {
            continue;
        }
        let id = format!("{kind} {ns}/{name}");
        let hostnames: Vec<String> = obj["spec"]["hostnames"]
            .as_sequence()
            .into_iter()
            .flatten()
            .filter_map(|h| h.as_str().map(str::to_ascii_lowercase))
            .collect();
        let mut attached = false;
        for parent in obj["spec"]["parentRefs"]
            .as_sequence()
            .into_iter()
            .flatten()
        {
            if parent["kind"].as_str().is_some_and(|k| k != "Gateway") {
                c.skipped.push(format!(
                    "{id}: a parent of kind {} is not a Gateway",
                    parent["kind"].as_str().unwrap_or("")
                ));
                continue;
            }
            let gw = (
                parent["namespace"].as_str().unwrap_or(ns).to_string(),
                parent["name"].as_str().unwrap_or("").to_string(),
            );
            let section = parent["sectionName"].as_str();
            let named: Vec<&Listener> = listeners
                .iter()
                .filter(|l| l.gateway == gw && section.is_none_or(|s| s == l.name))
                .collect();
            // TLSRoutes to passthrough listeners, HTTP and gRPC routes to the others.
            let candidates: Vec<&Listener> = named
                .iter()
                .copied()
                .filter(|l| l.passthrough == (kind == "TLSRoute") && l.kinds.contains(&kind))
                .collect();
            // The parent's `Accepted`: attached to one listener at least, else the last
            // reason (only for Gateways converted here: another's status is not ours).
            let mut accepted = Err((
                "NoMatchingParent".to_string(),
                format!(
                    "Gateway {}/{} has no listener{}",
                    gw.0,
                    gw.1,
                    section.map_or(String::new(), |s| format!(" {s}"))
                ),
            ));
            if candidates.is_empty() && !named.is_empty() {
                accepted = Err((
                    "NotAllowedByListeners".to_string(),
                    format!("no listener of Gateway {}/{} takes a {kind}", gw.0, gw.1),
                ));
            }
            if candidates.is_empty() {
                c.skipped.push(format!(
                    "{id}: no Gateway {}/{} listener{} in the manifests",
                    gw.0,
                    gw.1,
                    section.map_or(String::new(), |s| format!(" {s}"))
                ));
            }
            for l in candidates {
                if !l.all_namespaces && l.gateway.0 != ns {
                    let why = format!(
                        "listener {} of Gateway {}/{} takes routes of its own namespace",
                        l.name, l.gateway.0, l.gateway.1
                    );
                    c.skipped
                        .push(format!("{id}: NotAllowedByListeners: {why}"));
                    if accepted.is_err() {
                        accepted = Err(("NotAllowedByListeners".into(), why));
                    }
                    continue;
                }
                let Some(mut hosts) = hosts_for(&hostnames, l.hostname.as_deref()) else {
                    let why = format!(
                        "listener {} is for {}",
                        l.name,
                        l.hostname.as_deref().unwrap_or("*")
                    );
                    c.skipped
                        .push(format!("{id}: NoMatchingListenerHostname: {why}"));
                    if accepted.is_err() {
                        accepted = Err(("NoMatchingListenerHostname".into(), why));
                    }
                    continue;
                };
                // Hosts another Gateway's routes have are not this one's.
                let before = hosts.len();
                let age = obj["metadata"]["creationTimestamp"].as_str().unwrap_or("");
                hosts.retain(|h| {
                    let overlaps = |o: &str| o == h || host_matches(o, h) || host_matches(h, o);
                    if let Some((o, g)) = owners.taken_from(h, &l.gateway) {
                        c.skipped.push(format!(
                            "{id}: HostnameConflict: {h} is served by Gateway {}/{} ({o}, an older route's)",
                            g.0, g.1
                        ));
                        return false;
                    }
                    // An Ingress as old or older keeps its host.
                    if let Some((o, _)) = ingress_hosts
                        .iter()
                        .find(|(o, t)| t.as_str() <= age && overlaps(o))
                    {
                        c.skipped.push(format!(
                            "{id}: HostnameConflict: {h} is an older Ingress's ({o})"
                        ));
                        return false;
                    }
                    true
                });
                if before > 0 && hosts.is_empty() {
                    if accepted.is_err() {
                        accepted = Err((
                            "NoMatchingListenerHostname".into(),
                            "every host of the route is another Gateway's".into(),
                        ));
                    }
                    continue;
                }
                for h in &hosts {
                    owners.claim(h, &l.gateway);
                }
                attached = true;
                accepted = Ok(());
                c.gateway.attach(&l.gateway, &l.name);
                if l.passthrough {
                    let x = rules::RouteCtx {
                        id: &id,
                        ns,
                        grants: &grants,
                        opts,
                    };
                    tls_route::routes(&x, obj, &hosts, (c, upstreams), &mut out);
                    continue;
                }
                for h in &hosts {
                    if seen.insert((h.clone(), l.tls)) {
                        hosts_seen.push((h.clone(), l.tls));
                    }
                }
                let x = rules::RouteCtx {
                    id: &id,
                    ns,
                    grants: &grants,
                    opts,
                };
                let routes = match kind {
                    "GRPCRoute" => {
                        // gRPC without TLS is h2c: the plain listener takes it.
                        c.gateway.grpc_plain |= !l.tls;
                        grpc::rules(&x, obj, &hosts, c, upstreams)
                    }
                    _ => rules::rules(&x, obj, &hosts, c, upstreams),
                };
                if l.tls {
                    out.secure.extend(routes);
                } else {
                    out.plain.extend(routes);
                }
            }
            if c.gateway.has_gateway(&gw) {
                let resolved = c.gateway.resolved_of(&id);
                c.gateway.parents.push(ParentOutcome {
                    kind: kind.to_string(),
                    route: (ns.to_string(), name.to_string()),
                    parent: parent.clone(),
                    accepted,
                    resolved,
                });
            }
        }
        if !attached {
            c.skipped
                .push(format!("{id}: attached to no listener: not served"));
        }
    }
    for (i, (host, tls)) in hosts_seen.into_iter().enumerate() {
        let mut m = Mapping::new();
        m.insert("host".into(), host.clone().into());
        let mut r = Mapping::new();
        r.insert("name".into(), format!("gateway-host-{i}").into());
        r.insert("match".into(), Value::Mapping(m));
        let mut respond = Mapping::new();
        respond.insert("status".into(), 404.into());
        r.insert("respond".into(), Value::Mapping(respond));
        let route = Route {
            rank: (host_class(Some(&host)), 9, std::cmp::Reverse(0), 0),
            body: r,
        };
        match tls {
            true => out.secure.push(route),
            false => out.plain.push(route),
        }
    }
    // The hosts the routes took (a listener's `hostname` says which routes it takes, and
    // claims nothing by itself: an older Ingress's host stays the Ingress's).
    let mut hosts: Vec<String> = owners.into_hosts();
    hosts.sort();
    hosts.dedup();
    out.certificates = certificates;
    out.hosts = hosts;
    out
}

/// Whether `host` (an Ingress rule's) is one of `gateway_hosts`, or under one of their
/// wildcards.
pub(super) fn gateway_owned(gateway_hosts: &[String], host: &str) -> bool {
    gateway_hosts
        .iter()
        .any(|g| g == host || host_matches(g, host) || host_matches(host, g))
}

fn ident(obj: &Value) -> (&str, &str, &str) {
    (
        obj["kind"].as_str().unwrap_or(""),
        obj["metadata"]["namespace"].as_str().unwrap_or("default"),
        obj["metadata"]["name"].as_str().unwrap_or("?"),
    )
}

/// Whether host name `h` is matched by `pattern` (`*.example.com` takes subdomains).
fn host_matches(pattern: &str, h: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(suffix) => h
            .strip_suffix(suffix)
            .is_some_and(|rest| rest.ends_with('.') && rest.len() > 1),
        None => pattern == h,
    }
}

/// The route's hosts under a listener's: `None` when none intersect. An empty list is any
/// host.
fn hosts_for(route: &[String], listener: Option<&str>) -> Option<Vec<String>> {
    let Some(l) = listener else {
        return Some(route.to_vec());
    };
    if route.is_empty() {
        return Some(vec![l.to_string()]);
    }
    let hosts: Vec<String> = route
        .iter()
        .filter_map(|h| {
            if host_matches(l, h) || l == h {
                Some(h.clone())
            } else if host_matches(h, l) {
                Some(l.to_string())
            } else {
                None
            }
        })
        .collect();
    (!hosts.is_empty()).then_some(hosts)
}
