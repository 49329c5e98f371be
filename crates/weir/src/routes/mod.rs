//! Route tables: compiled once per listener at config load, then matched per request in order.
//!
//! A route matches on host (exact or `*.` wildcard), path (exact, prefix or regex), method and
//! header values. When some route matches everything but the method, the answer is 405 with an
//! `Allow` listing the methods those routes accept; when none matches at all, 404.

mod conditions;
pub(crate) mod matcher;
pub(crate) mod sites;
mod values;

use bytes::Bytes;
use weir_http::{Method, RequestHead};

use std::sync::Arc;

use crate::actions::error_pages::ErrorPages;
use crate::actions::Action;
use crate::config::model;
use crate::config::BaseDir;
use crate::config::CompileError;
use crate::filters::{Chain, Filter};
pub use matcher::{HostPattern, Matcher, PathMatch};

/// The routes of one listener.
#[derive(Debug)]
pub struct RouteTable {
    routes: Vec<Route>,
}

/// One compiled route.
#[derive(Debug)]
pub struct Route {
    /// Name for logs (`routes[N]` when none was given).
    pub name: String,
    /// Position in its table (tasks that outlive a request find their route by it).
    pub index: usize,
    pub matcher: Matcher,
    /// Methods this route answers; `None` = any.
    pub methods: Option<Vec<Method>>,
    pub action: Action,
    /// Slot of its access log in `RuntimeConfig::access_logs` (the route's own, else its
    /// listener's, else the top-level one).
    pub access_log: Option<usize>,
    /// The listener's filters then the route's (a proxy keeps them in its own chain, after
    /// which its forwarding and header filters run: see [`Route::filters`]).
    filters: Chain,
    /// Its error pages, then its listener's (`actions/error_pages.rs`).
    pub error_pages: Option<Arc<ErrorPages>>,
    /// Its own (or its site's) largest request body, over `limits.max_body_bytes`.
    pub max_body_bytes: Option<u64>,
    /// Its own (or its site's) wait between body bytes, over `timeouts.body`.
    pub body_timeout: Option<std::time::Duration>,
    /// Its own (or its site's) keep-alive wait after it answered, over `timeouts.keepalive`.
    pub keepalive_timeout: Option<std::time::Duration>,
}

/// What a listener gives each of its routes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ListenerDefaults<'a> {
    /// Slot of the listener's access log.
    pub access_log: Option<usize>,
    /// Filters every route runs first.
    pub filters: &'a [Arc<dyn Filter>],
    pub error_pages: Option<&'a Arc<ErrorPages>>,
}

impl Route {
    /// The route's filters, in order.
    #[inline(always)]
    pub fn filters(&self) -> &Chain {
        match &self.action {
            Action::Proxy(p) => &p.filters,
            _ => &self.filters,
        }
    }

    /// What the route does, in a few words (the dashboard's route table); `zone` names a
    /// cache zone by index.
    pub fn describe_action(&self, zone: impl Fn(usize) -> String) -> String {
        match &self.action {
            Action::Respond(r) => format!("respond {}", r.status),
            Action::Static(_) => "static files".into(),
            Action::Echo(_) => "echo".into(),
            Action::Proxy(p) => match &p.cache {
                Some(c) => format!("proxy {} (cache {})", p.upstream_name, zone(c.zone)),
                None => format!("proxy {}", p.upstream_name),
            },
            Action::Admin => "admin API".into(),
            Action::Health(_) => "health".into(),
            Action::Kv(k) => format!("kv {}", k.name),
            Action::AcmeChallenge(_) => "ACME HTTP-01 answers".into(),
            Action::NotFound => "404: the site's other paths".into(),
        }
    }

    /// The route's `path_regex`, for `$1`..`$9`.
    pub fn regex(&self) -> Option<&regex::bytes::Regex> {
        match &self.matcher.path {
            PathMatch::Regex(r) | PathMatch::PrefixRegex(_, r) => Some(r),
            _ => None,
        }
    }
}

/// The outcome of routing one request.
#[derive(Debug)]
pub enum Routed<'a> {
    /// This route answers.
    Found(&'a Route),
    /// Some routes match but none accepts this method: the value for `Allow`.
    MethodNotAllowed(Bytes),
    /// No route matches.
    NotFound,
}

impl RouteTable {
    pub(crate) fn compile(
        routes: Vec<sites::Item>,
        listener_path: &str,
        base: &BaseDir,
        server: Option<&Bytes>,
        refs: &crate::actions::Refs<'_>,
        listener: ListenerDefaults<'_>,
    ) -> Result<RouteTable, CompileError> {
        let (access_log, listener_filters) = (listener.access_log, listener.filters);
        let mut out: Vec<Route> = Vec::with_capacity(routes.len());
        for (i, item) in routes.into_iter().enumerate() {
            let (path, r) = match item {
                sites::Item::Route(path, r) => (path, *r),
                sites::Item::SiteEnd {
                    path,
                    hosts,
                    filters: site_filters,
                    error_pages,
                    access_log: site_log,
                } => {
                    let m = model::Match {
                        host: if hosts.is_empty() {
                            model::OneOrMany::None
                        } else {
                            model::OneOrMany::Many(hosts)
                        },
                        ..Default::default()
                    };
                    // The site's filters run on its 404s too (its authentication, its headers).
                    let mut filters = listener_filters.to_vec();
                    filters.extend(
                        refs.filters.list(
                            site_filters
                                .into_iter()
                                .map(model::FilterRef::Name)
                                .collect(),
                            &path,
                            refs.upstreams,
                            base,
                            None,
                        )?,
                    );
                    let (matcher, _) = Matcher::compile(m, &format!("{path}.hosts"))?;
                    out.push(Route {
                        name: format!(
                            "{}.not_found",
                            path.strip_prefix(listener_path)
                                .and_then(|p| p.strip_prefix('.'))
                                .unwrap_or(&path)
                        ),
                        index: i,
                        matcher,
                        methods: None,
                        action: Action::NotFound,
                        max_body_bytes: None,
                        body_timeout: None,
                        keepalive_timeout: None,
                        access_log: refs.logs.slot(
                            site_log.as_ref(),
                            &format!("{path}.access_log"),
                            access_log,
                        )?,
                        filters: Chain::new(filters),
                        error_pages: ErrorPages::compile(
                            &error_pages,
                            &format!("{path}.error_pages"),
                            base,
                            listener.error_pages,
                        )?,
                    });
                    continue;
                }
            };
            // Unnamed: its key path under the listener (`routes[2]`, `sites[1].routes[0]`).
            let name = r.name.clone().unwrap_or_else(|| {
                path.strip_prefix(listener_path)
                    .and_then(|p| p.strip_prefix('.'))
                    .unwrap_or(&path)
                    .to_string()
            });
            // A name labels the route's metrics and log lines: two routes must not share one.
            if let Some(first) = out.iter().position(|o| o.name == name) {
                return Err((
                    format!("{path}.name"),
                    format!("{name:?} is already the name of routes[{first}] on this listener"),
                ));
            }
            let log = refs.logs.slot(
                r.access_log.as_ref(),
                &format!("{path}.access_log"),
                access_log,
            )?;
            let error_pages = ErrorPages::compile(
                &r.error_pages,
                &format!("{path}.error_pages"),
                base,
                listener.error_pages,
            )?;
            let max_body_bytes = r
                .limits
                .as_ref()
                .and_then(|l| l.max_body_bytes)
                .map(|s| s.0);
            let body_timeout = r.limits.as_ref().and_then(|l| l.body_timeout).map(|d| d.0);
            let keepalive_timeout = r
                .limits
                .as_ref()
                .and_then(|l| l.keepalive_timeout)
                .map(|d| d.0);
            if keepalive_timeout.is_some_and(|d| d.is_zero()) {
                return Err((
                    format!("{path}.limits.keepalive_timeout"),
                    "0 (no keep-alive) is not taken per route: a positive duration (timeouts.keepalive for the listener's)".into(),
                ));
            }
            // The route's `set` variables, known to its own values until it is compiled.
            let _set = crate::vars::map::scope(&r.set, &path)?;
            let (matcher, methods) = Matcher::compile(r.matcher, &format!("{path}.match"))?;
            let regex = match &matcher.path {
                PathMatch::Regex(r) | PathMatch::PrefixRegex(_, r) => Some(r.clone()),
                _ => None,
            };
            let mut filters = listener_filters.to_vec();
            filters.extend(refs.filters.list(
                r.filters,
                &path,
                refs.upstreams,
                base,
                Some((&name, regex.as_ref())),
            )?);
            crate::filters::compile::check_chain(&filters, r.proxy.is_some(), &path)?;
            let given = crate::actions::Given {
                redirect: r.redirect,
                respond: r.respond,
                static_files: r.static_files,
                echo: r.echo,
                health: r.health,
                proxy: r.proxy,
                cache: r.cache,
                kv: r.kv,
            };
            let site = crate::actions::Site {
                prefix: matcher.prefix(),
                path: &path,
                base,
                server,
                name: &name,
                regex: regex.as_ref(),
            };
            let action = Action::compile(given, site, refs, &mut filters)?;
            let methods = match (methods, action.methods()) {
                (None, None) => None,
                (Some(m), None) => Some(m),
                (None, Some(a)) => Some(a.to_vec()),
                (Some(m), Some(a)) => {
                    let both: Vec<Method> = m.into_iter().filter(|x| a.contains(x)).collect();
                    if both.is_empty() {
                        return Err((
                            format!("{path}.match.methods"),
                            format!("this action only answers {}", join_methods(a)),
                        ));
                    }
                    Some(both)
                }
            };
            out.push(Route {
                name,
                index: i,
                matcher,
                methods,
                action,
                access_log: log,
                filters: Chain::new(filters),
                error_pages,
                max_body_bytes,
                body_timeout,
                keepalive_timeout,
            });
        }
        Ok(RouteTable { routes: out })
    }

    /// The admin listener's table: one route, the admin API.
    pub(crate) fn admin(access_log: Option<usize>) -> RouteTable {
        let (matcher, _) =
            Matcher::compile(model::Match::default(), "admin").unwrap_or_else(|_| unreachable!());
        RouteTable {
            routes: vec![Route {
                name: "admin".into(),
                index: 0,
                matcher,
                methods: None,
                action: Action::Admin,
                access_log,
                filters: Chain::default(),
                error_pages: None,
                max_body_bytes: None,
                body_timeout: None,
                keepalive_timeout: None,
            }],
        }
    }

    /// Puts the ACME HTTP-01 route first (`/.well-known/acme-challenge/`): a CA's validation
    /// reaches it whatever the other routes catch.
    pub(crate) fn prepend_acme(
        &mut self,
        challenges: Arc<crate::tls::acme::Challenges>,
        access_log: Option<usize>,
    ) {
        let m = model::Match {
            path_prefix: Some("/.well-known/acme-challenge/".into()),
            ..Default::default()
        };
        let (matcher, _) = Matcher::compile(m, "acme").unwrap_or_else(|_| unreachable!());
        self.routes.insert(
            0,
            Route {
                name: "acme-challenge".into(),
                index: 0,
                matcher,
                methods: Some(vec![Method::Get, Method::Head]),
                action: Action::AcmeChallenge(challenges),
                access_log,
                filters: Chain::default(),
                error_pages: None,
                max_body_bytes: None,
                body_timeout: None,
                keepalive_timeout: None,
            },
        );
        for (i, r) in self.routes.iter_mut().enumerate() {
            r.index = i;
        }
    }

    /// The routes, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Route> {
        self.routes.iter()
    }

    /// The route at `index`.
    pub fn get(&self, index: usize) -> Option<&Route> {
        self.routes.get(index)
    }

    /// Finds the route for a request from `client` (asked only by routes that match on it), on
    /// a connection whose TLS handshake settled `tls`.
    pub fn route(
        &self,
        req: &RequestHead,
        tls: Option<&crate::tls::TlsInfo>,
        client: &dyn Fn() -> std::net::IpAddr,
    ) -> Routed<'_> {
        let mut allowed: Option<Vec<&Method>> = None;
        for r in &self.routes {
            if !r.matcher.matches(req, tls, client) {
                continue;
            }
            match &r.methods {
                // A site's own 404 after a route that took the path but not the method: 405.
                None if allowed.is_some() && matches!(r.action, Action::NotFound) => break,
                None => return Routed::Found(r),
                Some(m) if m.contains(&req.method) => return Routed::Found(r),
                Some(m) => allowed.get_or_insert_with(Vec::new).extend(m.iter()),
            }
        }
        match allowed {
            None => Routed::NotFound,
            Some(mut m) => {
                m.sort_by_key(|m| m.as_str().to_string());
                m.dedup();
                let names: Vec<&str> = m.iter().map(|m| m.as_str()).collect();
                Routed::MethodNotAllowed(Bytes::from(names.join(", ")))
            }
        }
    }
}

fn join_methods(m: &[Method]) -> String {
    m.iter().map(Method::as_str).collect::<Vec<_>>().join(", ")
}
