//! Sites (virtual hosts: nginx `server` blocks, Caddy's site blocks) become plain routes: each
//! route of a site gets the site's hosts as its `match.host`, the site's filters before its
//! own, the site's error pages and access log where it sets none. The listener's route table is
//! then compiled as before, so a request costs what the same routes written with `match.host`
//! cost. The sites' certificates join the listener's TLS section (`runtime/compile.rs`).
//!
//! Sites are tried in order, the `default` one last. A name that a wildcard site listed earlier
//! covers is refused in a later site (it would never be reached), so exact names go first.

use std::collections::BTreeMap;

use crate::config::model::{self, FilterRef, OneOrMany};
use crate::config::CompileError;

use super::matcher::{any_host, host_patterns, HostPattern};

/// A listener's routes, from its `routes` or its `sites`, each with its key path; and the
/// sites' certificates and ACME sections, with theirs.
#[derive(Debug, Default)]
pub(crate) struct Flattened {
    pub routes: Vec<Item>,
    pub certificates: Vec<(String, model::Certificate)>,
    pub acme: Vec<(String, model::Acme)>,
}

/// Flattens listener `l`'s (at `path`) routes or sites.
pub(crate) fn flatten(
    routes: Vec<model::Route>,
    sites: Vec<model::Site>,
    path: &str,
) -> Result<Flattened, CompileError> {
    let mut out = Flattened::default();
    if sites.is_empty() {
        out.routes = routes
            .into_iter()
            .enumerate()
            .map(|(i, r)| Item::Route(format!("{path}.routes[{i}]"), Box::new(r)))
            .collect();
        return Ok(out);
    }
    if !routes.is_empty() {
        return Err((
            format!("{path}.routes"),
            "give routes or sites, not both (a site with `default: true` takes the other names)"
                .into(),
        ));
    }
    // Earlier sites' patterns, to refuse names they already take.
    let mut seen: Vec<(usize, Vec<HostPattern>, Vec<String>)> = Vec::new();
    let mut default_site = None;
    for (i, site) in sites.iter().enumerate() {
        let key = format!("{path}.sites[{i}]");
        let hosts = one_or_many(&site.hosts);
        match (site.default, hosts.is_empty()) {
            (true, false) => {
                return Err((
                    format!("{key}.hosts"),
                    "the default site takes the names no other site has: give it no hosts".into(),
                ))
            }
            (false, true) => {
                return Err((
                    format!("{key}.hosts"),
                    "name the site's hosts (or make it the `default: true` site)".into(),
                ))
            }
            (true, true) => {
                if let Some(first) = default_site {
                    return Err((
                        format!("{key}.default"),
                        format!("sites[{first}] is already the default site"),
                    ));
                }
                default_site = Some(i);
                continue;
            }
            (false, false) => {}
        }
        let patterns = host_patterns(hosts.clone(), &format!("{key}.hosts"))?;
        let normal = |h: &str| h.trim_end_matches('.').to_ascii_lowercase();
        for h in &hosts {
            let h = normal(h);
            // A name, or one standing for a wildcard's names (a label no real name has, so an
            // earlier exact name never covers it).
            let probe = match h.strip_prefix('*') {
                Some(rest) => format!("\u{1}{rest}"),
                None => h.clone(),
            };
            if let Some((j, _, _)) = seen.iter().find(|(_, p, names)| {
                names.iter().any(|n| normal(n) == h) || any_host(p, probe.as_bytes())
            }) {
                return Err((
                    format!("{key}.hosts"),
                    format!("{h:?} is taken by sites[{j}], listed first (list exact names before wildcards)"),
                ));
            }
        }
        seen.push((i, patterns, hosts));
    }
    let order = (0..sites.len())
        .filter(|i| Some(*i) != default_site)
        .chain(default_site);
    let mut sites: Vec<Option<model::Site>> = sites.into_iter().map(Some).collect();
    for i in order {
        let Some(site) = sites[i].take() else {
            continue;
        };
        let key = format!("{path}.sites[{i}]");
        let hosts = one_or_many(&site.hosts);
        let mut shared = Vec::with_capacity(site.filters.len());
        for (k, f) in site.filters.iter().enumerate() {
            match f {
                FilterRef::Name(n) => shared.push(n.clone()),
                FilterRef::Inline(_) => {
                    return Err((
                        format!("{key}.filters[{k}]"),
                        "a site's filters are named (define it under the top-level `filters:`), so that its routes share one".into(),
                    ))
                }
            }
        }
        for (j, mut r) in site.routes.into_iter().enumerate() {
            let rkey = format!("{key}.routes[{j}]");
            if !r.matcher.host.is_empty() {
                return Err((
                    format!("{rkey}.match.host"),
                    "a site's routes take the site's hosts; give the route its own site".into(),
                ));
            }
            if !hosts.is_empty() {
                r.matcher.host = OneOrMany::Many(hosts.clone());
            }
            let own = std::mem::take(&mut r.filters);
            r.filters = shared.iter().cloned().map(FilterRef::Name).collect();
            r.filters.extend(own);
            r.error_pages = merged(&site.error_pages, std::mem::take(&mut r.error_pages));
            if r.access_log.is_none() {
                r.access_log.clone_from(&site.access_log);
            }
            // The site's limits, key by key, where the route gives none of its own.
            if let Some(site_limits) = &site.limits {
                let own = r.limits.get_or_insert_with(Default::default);
                own.max_body_bytes = own.max_body_bytes.or(site_limits.max_body_bytes);
                own.body_timeout = own.body_timeout.or(site_limits.body_timeout);
                own.keepalive_timeout = own.keepalive_timeout.or(site_limits.keepalive_timeout);
            }
            out.routes.push(Item::Route(rkey, Box::new(r)));
        }
        out.routes.push(Item::SiteEnd {
            path: key.clone(),
            hosts: hosts.clone(),
            filters: shared.clone(),
            error_pages: site.error_pages.clone(),
            access_log: site.access_log.clone(),
        });
        if let Some(tls) = site.tls {
            for (k, mut c) in tls.certificates.into_iter().enumerate() {
                if c.names.is_empty() {
                    c.names.clone_from(&hosts);
                }
                out.certificates
                    .push((format!("{key}.tls.certificates[{k}]"), c));
            }
            if let Some(mut a) = tls.acme {
                if a.names.is_empty() {
                    a.names.clone_from(&hosts);
                }
                out.acme.push((format!("{key}.tls.acme"), a));
            }
        }
    }
    Ok(out)
}

/// One entry of a listener's route table.
#[derive(Debug)]
pub(crate) enum Item {
    /// A route, at its key path (boxed: the config model's route is large).
    Route(String, Box<model::Route>),
    /// The end of a site: its other paths get 404 with the site's error pages, never another
    /// site's route (nginx answers from the `server` block the Host chose).
    SiteEnd {
        path: String,
        /// Empty for the default site (its 404 takes every name left).
        hosts: Vec<String>,
        /// The site's named filters.
        filters: Vec<String>,
        error_pages: BTreeMap<String, String>,
        access_log: Option<model::AccessLogSetting>,
    },
}

fn one_or_many(h: &OneOrMany) -> Vec<String> {
    match h {
        OneOrMany::None => Vec::new(),
        OneOrMany::One(s) => vec![s.clone()],
        OneOrMany::Many(v) => v.clone(),
    }
}

/// The site's pages with the route's over them.
fn merged(
    site: &BTreeMap<String, String>,
    route: BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut m = site.clone();
    m.extend(route);
    m
}
