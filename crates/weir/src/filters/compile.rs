//! From config to filters: the named definitions (compiled once, shared by every route that
//! names them, state included), and the lists of listeners and routes.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::breaker::Breaker;
use super::concurrency::Concurrency;
use super::header_edit::{HeaderEdit, HeaderEdits};
use super::ip_filter::IpFilter;
use super::rate_limit::RateLimit;
use super::split::{Canary, Split};
use super::{phase, Filter};
use crate::config::model::{FilterRef, FilterSpec};
use crate::config::{BaseDir, CompileError};

/// A compiled filter, with handles on the ones that report state (metrics, admin API).
#[derive(Debug, Clone)]
pub struct Compiled {
    pub filter: Arc<dyn Filter>,
    pub kind: Kind,
    /// Where its state is kept across reloads (`Registry::filter_state`), if it has any.
    pub state_key: Option<String>,
}

/// What /metrics and the admin API read.
#[derive(Debug, Clone)]
pub enum Kind {
    RateLimit(Arc<RateLimit>),
    Concurrency(Arc<Concurrency>),
    Breaker(Arc<Breaker>),
    Mirror(Arc<super::mirror::Mirror>),
    Other,
}

/// What filters need of an upstream: its servers' names (sticky cookies name them) and where
/// a mirror sends copies (`None`: it cannot be a shadow).
#[derive(Debug, Default)]
pub struct UpstreamInfo {
    pub servers: Vec<String>,
    pub shadow: Option<Arc<dyn super::mirror::Shadow>>,
}

/// The filters of one config.
#[derive(Debug, Default)]
pub struct Compiler {
    named: HashMap<String, Compiled>,
    /// What filters need of each upstream, by index.
    upstreams: Vec<UpstreamInfo>,
    /// Every filter compiled, named or inline, for /metrics and the admin API.
    pub all: std::cell::RefCell<Vec<Compiled>>,
    /// Where state that outlives a config is kept.
    state: Option<Arc<super::state::FilterState>>,
    /// The shield, for filters that report violations to it (`shape`).
    shield: Option<Arc<crate::shield::Shield>>,
    /// The cluster, for rate limits across it.
    cluster: Option<Arc<crate::cluster::Cluster>>,
}

impl Compiler {
    /// Compiles the top-level definitions.
    pub(crate) fn new(
        defs: BTreeMap<String, FilterSpec>,
        upstreams: &HashMap<String, usize>,
        compiled: Vec<UpstreamInfo>,
        state: Arc<super::state::FilterState>,
        (shield, cluster): (
            Option<Arc<crate::shield::Shield>>,
            Option<Arc<crate::cluster::Cluster>>,
        ),
        base: &BaseDir,
    ) -> Result<Compiler, CompileError> {
        let c = Compiler {
            upstreams: compiled,
            state: Some(state),
            shield,
            cluster,
            ..Compiler::default()
        };
        let mut named = HashMap::new();
        for (name, spec) in defs {
            let compiled = c.spec(
                &name,
                spec,
                &format!("filters.{name}"),
                upstreams,
                base,
                None,
            )?;
            named.insert(name, compiled);
        }
        Ok(Compiler { named, ..c })
    }

    /// A list of references (`filters:` of a listener or route) at `path`. `route` is the
    /// route's name and path regex, when the list is a route's.
    pub(crate) fn list(
        &self,
        refs: Vec<FilterRef>,
        path: &str,
        upstreams: &HashMap<String, usize>,
        base: &BaseDir,
        route: Option<(&str, Option<&regex::bytes::Regex>)>,
    ) -> Result<Vec<Arc<dyn Filter>>, CompileError> {
        let mut out = Vec::with_capacity(refs.len());
        for (i, r) in refs.into_iter().enumerate() {
            let key = format!("{path}.filters[{i}]");
            let f = match r {
                FilterRef::Name(n) => match self.named.get(&n) {
                    Some(c) => c.filter.clone(),
                    None => {
                        let mut known: Vec<&String> = self.named.keys().collect();
                        known.sort();
                        return Err((key, format!("no filter named {n:?} (defined: {known:?})")));
                    }
                },
                FilterRef::Inline(spec) => {
                    let name = match route {
                        Some((r, _)) => format!("{r}#{i}"),
                        None => key.clone(),
                    };
                    self.spec(&name, *spec, &key, upstreams, base, route)?
                        .filter
                }
            };
            out.push(f);
        }
        Ok(out)
    }

    fn spec(
        &self,
        name: &str,
        spec: FilterSpec,
        path: &str,
        upstreams: &HashMap<String, usize>,
        base: &BaseDir,
        route: Option<(&str, Option<&regex::bytes::Regex>)>,
    ) -> Result<Compiled, CompileError> {
        let FilterSpec {
            rate_limit,
            concurrency,
            ip,
            circuit_breaker,
            split,
            canary,
            headers,
            no_store,
            sticky,
            mirror,
            replace,
            cors,
            basic_auth,
            api_key,
            jwt,
            forward_auth,
            compress,
            shape,
        } = spec;
        let given = [
            rate_limit.is_some(),
            concurrency.is_some(),
            ip.is_some(),
            circuit_breaker.is_some(),
            split.is_some(),
            canary.is_some(),
            headers.is_some(),
            no_store.is_some(),
            sticky.is_some(),
            mirror.is_some(),
            replace.is_some(),
            cors.is_some(),
            basic_auth.is_some(),
            api_key.is_some(),
            jwt.is_some(),
            forward_auth.is_some(),
            compress.is_some(),
            shape.is_some(),
        ];
        if given.iter().filter(|g| **g).count() != 1 {
            return Err((
                path.to_string(),
                "a filter is exactly one of rate_limit, concurrency, ip, circuit_breaker, split, canary, headers, no_store, sticky, mirror, replace, cors, basic_auth, api_key, jwt, forward_auth, compress, shape".into(),
            ));
        }
        // State that outlives a config (a reload keeps it): under a key of kind, name and the
        // settings that shape it.
        let kept = |key: &str| self.state.as_ref().map(|r| (key.to_string(), r));
        let compiled = if let Some(r) = rate_limit {
            let (f, key) = self.rate_limit(name, r, path)?;
            let f = Arc::new(f);
            Compiled {
                filter: f.clone(),
                kind: Kind::RateLimit(f),
                state_key: Some(key),
            }
        } else if let Some(c) = concurrency {
            let key = format!("concurrency/{name}/{}", c.max_keys);
            let max_keys = c.max_keys.max(1);
            let table = kept(&key).map(|(k, reg)| {
                reg.get_or(&k, || Arc::new(super::concurrency::Table::new(max_keys)))
            });
            let f = Arc::new(Concurrency::compile(
                name,
                c,
                &format!("{path}.concurrency"),
                table,
            )?);
            Compiled {
                filter: f.clone(),
                kind: Kind::Concurrency(f),
                state_key: Some(key),
            }
        } else if let Some(r) = ip {
            plain(IpFilter::compile(r, &format!("{path}.ip"), base)?)
        } else if let Some(b) = circuit_breaker {
            let key = format!("circuit_breaker/{name}/{}/{}", b.window, b.window_size);
            let shared = kept(&key)
                .map(|(k, reg)| reg.get_or(&k, || Arc::new(super::breaker::Shared::default())));
            let f = Arc::new(Breaker::compile(
                name,
                b,
                &format!("{path}.circuit_breaker"),
                shared,
                upstreams,
            )?);
            Compiled {
                filter: f.clone(),
                kind: Kind::Breaker(f),
                state_key: Some(key),
            }
        } else if let Some(s) = split {
            plain(Split::compile(s, &format!("{path}.split"), upstreams)?)
        } else if let Some(c) = canary {
            plain(Canary::compile(c, &format!("{path}.canary"), upstreams)?)
        } else if let Some(b) = basic_auth {
            plain(super::basic_auth::BasicAuth::compile(
                b,
                &format!("{path}.basic_auth"),
                base,
            )?)
        } else if let Some(a) = api_key {
            plain(super::api_key::ApiKey::compile(
                a,
                &format!("{path}.api_key"),
                base,
            )?)
        } else if let Some(j) = jwt {
            plain(super::jwt::Jwt::compile(
                j,
                &format!("{path}.jwt"),
                base,
                upstreams,
            )?)
        } else if let Some(f) = forward_auth {
            plain(super::forward_auth::ForwardAuth::compile(
                f,
                &format!("{path}.forward_auth"),
                upstreams,
            )?)
        } else if let Some(c) = compress {
            plain(super::compress::Compress::compile(
                c,
                &format!("{path}.compress"),
            )?)
        } else if let Some(s) = shape {
            plain(super::shape::Shape::compile(
                s,
                &format!("{path}.shape"),
                self.shield.clone(),
            )?)
        } else if let Some(c) = cors {
            plain(super::cors::Cors::compile(c, &format!("{path}.cors"))?)
        } else if let Some(r) = replace {
            plain(super::replace::Replace::compile(
                r,
                &format!("{path}.replace"),
            )?)
        } else if let Some(m) = mirror {
            let f = Arc::new(super::mirror::Mirror::compile(
                name,
                m,
                &format!("{path}.mirror"),
                upstreams,
                &self
                    .upstreams
                    .iter()
                    .map(|u| u.shadow.clone())
                    .collect::<Vec<_>>(),
            )?);
            Compiled {
                filter: f.clone(),
                kind: Kind::Mirror(f),
                state_key: None,
            }
        } else if let Some(s) = sticky {
            let names: Vec<Vec<String>> =
                self.upstreams.iter().map(|u| u.servers.clone()).collect();
            plain(super::sticky::Sticky::compile(
                s,
                &format!("{path}.sticky"),
                &names,
            )?)
        } else if let Some(n) = no_store {
            plain(super::no_store::NoStore::compile(
                n,
                &format!("{path}.no_store"),
            )?)
        } else {
            let h = headers.unwrap_or_default();
            plain(HeaderEdit {
                request: HeaderEdits::compile(h.request, &format!("{path}.headers.request"))?,
                response: HeaderEdits::compile(h.response, &format!("{path}.headers.response"))?,
                route: route.map_or_else(String::new, |r| r.0.to_string()),
                regex: route.and_then(|r| r.1.cloned()),
            })
        };
        self.all.borrow_mut().push(compiled.clone());
        Ok(compiled)
    }

    /// A rate limit and the key its state is kept under across reloads (the name and the
    /// settings that shape the state: a reload that changes them starts afresh).
    fn rate_limit(
        &self,
        name: &str,
        r: crate::config::model::RateLimit,
        path: &str,
    ) -> Result<(RateLimit, String), CompileError> {
        use crate::config::model::ClusterLimit;
        let max_keys = r.max_keys;
        let mode = r.cluster;
        let cluster = match (mode, &self.cluster) {
            (None, _) => None,
            (Some(_), Some(c)) => Some(c.clone()),
            (Some(_), None) => {
                return Err((
                    format!("{path}.rate_limit.cluster"),
                    "needs a `cluster:` section (the node's name and etcd)".into(),
                ))
            }
        };
        let key = format!("rate_limit/{name}/{max_keys}");
        if let (Some(ClusterLimit::Redis), Some(c)) = (mode, cluster.clone()) {
            let Some(url) = c.redis.clone() else {
                return Err((
                    format!("{path}.rate_limit.cluster"),
                    "`redis` needs `cluster.redis` (Redis's host:port)".into(),
                ));
            };
            let l = RateLimit::compile(name, r, &format!("{path}.rate_limit"), None)?;
            let key = format!("{key}/redis/{url}/{}/{:?}", l.interval(), c.redis_sync);
            let make = || {
                let settings = (url.as_str(), c.redis_sync, c.prefix.as_str());
                super::rate_limit_redis::Shared::new(
                    name,
                    settings,
                    l.interval(),
                    max_keys,
                    &c.state,
                )
                .map(Arc::new)
                .map_err(|e| ("cluster.redis".to_string(), e))
            };
            let shared = match &self.state {
                Some(reg) => reg.try_get_or(&key, make)?,
                None => make()?,
            };
            return Ok((l.counted_in(shared, c), key));
        }
        let table = self
            .state
            .as_ref()
            .map(|reg| reg.get_or(&key, || Arc::new(super::rate_limit::Table::new(max_keys))));
        let l = RateLimit::compile(name, r, &format!("{path}.rate_limit"), table)?;
        Ok((l.divided_by(cluster), key))
    }

    /// Every filter compiled, each once (named ones are shared).
    pub fn into_all(self) -> Vec<Compiled> {
        self.all.into_inner()
    }
}

/// A filter without state to report or keep.
fn plain(f: impl Filter + 'static) -> Compiled {
    Compiled {
        filter: Arc::new(f),
        kind: Kind::Other,
        state_key: None,
    }
}

/// Checks a route's chain against its action: choosing an upstream needs a proxy.
pub(crate) fn check_chain(
    filters: &[Arc<dyn Filter>],
    is_proxy: bool,
    path: &str,
) -> Result<(), CompileError> {
    if !is_proxy {
        if let Some(i) = filters
            .iter()
            .position(|f| f.phases() & phase::UPSTREAM_CHOICE != 0)
        {
            return Err((
                format!("{path}.filters[{i}]"),
                "split, canary, sticky, mirror and a breaker's fallback choose an upstream: the route needs a proxy action".into(),
            ));
        }
    }
    Ok(())
}
