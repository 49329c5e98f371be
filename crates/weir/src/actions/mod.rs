//! Route actions: what a matched route does with the request. Each action is compiled at config
//! load into a form that leaves as little as possible for request time.
//!
//! * [`respond`]: a fixed response from config (nginx `return`, Easegress Mock); the head is
//!   pre-encoded, so serving it is three buffer copies and a `Date`.
//! * [`static_files`]: files under a root directory, with validators, conditionals and ranges.
//! * [`echo`]: the request itself back, as text or JSON (the echo backend of seed 003).
//! * `health`: a load balancer's check, answered from the upstreams' health (`admin::ready`).
//! * `proxy`: forward to an upstream pool ([`crate::proxy::route::ProxyRoute`]).

pub mod autoindex;
pub mod echo;
pub mod error_pages;
pub mod respond;
pub mod static_caching;
pub mod static_files;

use std::sync::Arc;

use bytes::Bytes;
use weir_http::Method;

use crate::config::{model, BaseDir, CompileError};

/// Names other parts of the config that actions refer to, resolved to indices.
#[derive(Debug)]
pub(crate) struct Refs<'a> {
    pub upstreams: &'a std::collections::HashMap<String, usize>,
    /// Zone name → (index, bytes one shard holds: the largest object it can store).
    pub zones: &'a std::collections::HashMap<String, (usize, u64)>,
    /// Access logs, compiled as routes name them.
    pub logs: &'a crate::access_log::LogCompiler<'a>,
    /// Filters: the named definitions, and where inline ones are compiled.
    pub filters: &'a crate::filters::compile::Compiler,
    /// Key-value stores by name.
    pub kv: &'a std::collections::HashMap<String, Arc<crate::kv::KvStore>>,
}

/// A compiled action.
#[derive(Debug)]
pub enum Action {
    Respond(respond::Respond),
    Static(static_files::StaticFiles),
    Echo(echo::Echo),
    /// Boxed: by far the largest variant, and the table is read, not copied.
    Proxy(Box<crate::proxy::route::ProxyRoute>),
    /// The admin API (only on the admin listener).
    Admin,
    /// A load balancer's health check: the upstreams that must have a server up (`None`: all).
    Health(Option<Vec<usize>>),
    /// A key-value store.
    Kv(Arc<crate::kv::KvStore>),
    /// ACME HTTP-01 answers (`/.well-known/acme-challenge/TOKEN`), placed first on plain-HTTP
    /// listeners when some listener obtains certificates by HTTP-01 (`tls/acme.rs`).
    AcmeChallenge(Arc<crate::tls::acme::Challenges>),
    /// 404 for a site's names that none of its routes took (placed after a site's routes,
    /// `routes/sites.rs`), so that another site's routes never answer them.
    NotFound,
}

/// The answer to an HTTP-01 request for `path`: the key authorization, or 404.
pub fn acme_answer(c: &crate::tls::acme::Challenges, path: &[u8]) -> (u16, String) {
    let token = path
        .strip_prefix(b"/.well-known/acme-challenge/")
        .and_then(|t| std::str::from_utf8(t).ok());
    match token.and_then(|t| c.http_answer(t)) {
        Some(key_auth) => (200, key_auth),
        None => (404, "no such ACME challenge\n".into()),
    }
}

/// The action keys a route gave (exactly one must be set).
#[derive(Debug)]
pub(crate) struct Given {
    pub respond: Option<model::Respond>,
    pub redirect: Option<model::Redirect>,
    pub static_files: Option<model::Static>,
    pub echo: Option<model::Echo>,
    pub health: Option<model::HealthRoute>,
    pub proxy: Option<model::Proxy>,
    pub cache: Option<model::Cache>,
    pub kv: Option<model::KvRoute>,
}

/// Where an action is compiled: its route and what the route knows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Site<'a> {
    /// The route's `path_prefix`, if it has one.
    pub prefix: Option<&'a [u8]>,
    /// The route's key path in the config (`listeners[0].routes[2]`).
    pub path: &'a str,
    pub base: &'a BaseDir,
    /// The `Server` header value, if one is sent.
    pub server: Option<&'a Bytes>,
    /// The route's name and `path_regex` (for `$route` and `$1`..`$9`).
    pub name: &'a str,
    pub regex: Option<&'a regex::bytes::Regex>,
}

impl Action {
    /// Compiles a route's action; a proxy takes the route's `filters` into its chain (the
    /// other actions leave them to the route).
    pub(crate) fn compile(
        given: Given,
        site: Site<'_>,
        refs: &Refs<'_>,
        filters: &mut Vec<Arc<dyn crate::filters::Filter>>,
    ) -> Result<Action, CompileError> {
        let Site {
            prefix: route_prefix,
            path,
            base,
            server,
            name,
            regex,
        } = site;
        let route = (name, regex);
        let Given {
            respond,
            redirect,
            static_files,
            echo,
            health,
            proxy,
            cache,
            kv,
        } = given;
        if cache.is_some() && proxy.is_none() {
            return Err((
                format!("{path}.cache"),
                "a cache stage needs a proxy action on the same route".into(),
            ));
        }
        let set = [
            respond.is_some(),
            redirect.is_some(),
            static_files.is_some(),
            echo.is_some(),
            health.is_some(),
            proxy.is_some(),
            kv.is_some(),
        ];
        if set.iter().filter(|g| **g).count() != 1 {
            return Err((
                path.to_string(),
                "a route needs exactly one action: respond, redirect, static, echo, health, proxy or kv"
                    .into(),
            ));
        }
        if let Some(p) = proxy {
            let mut route = crate::proxy::route::ProxyRoute::compile(
                p,
                &format!("{path}.proxy"),
                refs.upstreams,
                std::mem::take(filters),
                route,
            )?;
            if let Some(c) = cache {
                let authenticates = route.filters.can(crate::filters::Caps::IDENTITY);
                route.cache = Some(crate::cache::CacheRoute::compile(
                    c,
                    &format!("{path}.cache"),
                    refs.zones,
                    authenticates,
                )?);
            }
            return Ok(Action::Proxy(Box::new(route)));
        }
        if let Some(r) = respond {
            let r = respond::Respond::compile(r, &format!("{path}.respond"), base, server)?;
            check_captures(&r, path, route.1)?;
            return Ok(Action::Respond(r));
        }
        if let Some(r) = redirect {
            let (to, status) = match r {
                model::Redirect::To(to) => (to, 301),
                model::Redirect::Full(f) => (f.to, f.status),
            };
            let r = respond::Respond::redirect(&to, status, &format!("{path}.redirect"), server)?;
            check_captures(&r, path, route.1)?;
            return Ok(Action::Respond(r));
        }
        if let Some(mut s) = static_files {
            let prefix = if s.strip_prefix {
                route_prefix.map(Bytes::copy_from_slice)
            } else {
                None
            };
            // The application behind `try_files ... @app`: a proxy with the route's filters
            // (which also stay the route's, for the files it answers itself).
            let app = match s.app.take() {
                Some(p) => Some(crate::proxy::route::ProxyRoute::compile(
                    p,
                    &format!("{path}.static.app"),
                    refs.upstreams,
                    filters.clone(),
                    route,
                )?),
                None => None,
            };
            return static_files::StaticFiles::compile(
                s,
                prefix,
                &format!("{path}.static"),
                base,
                app,
            )
            .map(Action::Static);
        }
        if let Some(k) = kv {
            let store = refs.kv.get(&k.store).ok_or_else(|| {
                let mut known: Vec<&String> = refs.kv.keys().collect();
                known.sort();
                (
                    format!("{path}.kv.store"),
                    format!("no kv store named {:?} (defined: {known:?})", k.store),
                )
            })?;
            return Ok(Action::Kv(store.clone()));
        }
        if let Some(h) = health {
            let only = h
                .upstreams
                .map(|names| {
                    names
                        .iter()
                        .enumerate()
                        .map(|(i, n)| {
                            refs.upstreams.get(n).copied().ok_or_else(|| {
                                (
                                    format!("{path}.health.upstreams[{i}]"),
                                    format!("no upstream named {n:?}"),
                                )
                            })
                        })
                        .collect::<Result<Vec<_>, _>>()
                })
                .transpose()?;
            return Ok(Action::Health(only));
        }
        Ok(Action::Echo(echo::Echo::compile(echo.unwrap_or_default())))
    }

    /// Methods the action itself can answer (`None` = any).
    pub fn methods(&self) -> Option<&'static [Method]> {
        match self {
            // Files, else the application: any method may go to the application (nginx's
            // `try_files ... @app` passes them); a file answers GET and HEAD only.
            Action::Static(s) if s.has_app() => None,
            Action::Static(_) | Action::Health(_) | Action::AcmeChallenge(_) => {
                Some(&[Method::Get, Method::Head])
            }
            Action::Kv(_) => Some(&[
                Method::Get,
                Method::Head,
                Method::Put,
                Method::Post,
                Method::Delete,
            ]),
            Action::Respond(_)
            | Action::Echo(_)
            | Action::Proxy(_)
            | Action::Admin
            | Action::NotFound => None,
        }
    }

    /// Whether the action needs the request body collected (others discard it; the proxy
    /// streams it itself).
    pub fn wants_body(&self) -> bool {
        matches!(self, Action::Echo(_))
    }
}

/// `$1`..`$9` in a response need a `path_regex` with that many groups.
fn check_captures(
    r: &respond::Respond,
    path: &str,
    regex: Option<&regex::bytes::Regex>,
) -> Result<(), CompileError> {
    let used = r.captures();
    let groups = regex.map_or(0, |re| re.captures_len() - 1);
    if used > groups {
        return Err((
            path.to_string(),
            format!(
                "${used} needs a match.path_regex with {used} capture groups (it has {groups})"
            ),
        ));
    }
    Ok(())
}
