//! From config to filters: the named definitions (compiled once, shared by every route that
//! names them, state included), and the lists of listeners and routes. Each filter is built by
//! its own code, found through the registry (`registry.rs`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::breaker::Breaker;
use super::concurrency::Concurrency;
use super::rate_limit::RateLimit;
use super::registry::Cx;
use super::{Caps, Filter};
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
        let cx = Cx {
            name,
            path,
            upstreams,
            upstream_info: &self.upstreams,
            base,
            route,
            state: self.state.as_deref(),
            shield: self.shield.as_ref(),
            cluster: self.cluster.as_ref(),
        };
        let compiled = super::registry::build(spec, cx)?;
        self.all.borrow_mut().push(compiled.clone());
        Ok(compiled)
    }

    /// Every filter compiled, each once (named ones are shared).
    pub fn into_all(self) -> Vec<Compiled> {
        self.all.into_inner()
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
            .position(|f| f.caps().has(Caps::UPSTREAM_CHOICE))
        {
            return Err((
                format!("{path}.filters[{i}]"),
                "split, canary, sticky, mirror and a breaker's fallback choose an upstream: the route needs a proxy action".into(),
            ));
        }
    }
    Ok(())
}
