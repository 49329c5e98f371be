//! How a filter is registered: the YAML key, the settings type and the code that builds the
//! filter from its settings, each said once.
//!
//! * The table (`filter_table!` in `config/model_filters.rs`): one line per filter,
//!   `"rate_limit" => RateLimit(RateLimit)`, its YAML key, its [`FilterSpec`] variant and its
//!   settings type. From it the macro makes the enum, [`FilterSpec::KEYS`] (the list an
//!   unknown key's error names), the deserializer that takes exactly one key (serde's
//!   externally tagged form, with errors at the key path and line inside the settings) and
//!   [`FilterSpec::build`], the dispatch. The table is in the config because the config may
//!   not depend on the filters; it names no filter code.
//! * The build (Envoy's `REGISTER_FACTORY`, beside the filter): in the filter's own file,
//!   `impl Build<&Cx<'_>> for model::Settings`, which checks the settings (errors by key path
//!   under [`Cx::path`]) and makes the filter, with state kept across reloads when it has any
//!   ([`Cx::kept`]). A table line whose settings have no `Build` does not compile.
//!
//! What a filter implements and needs is the filter's to say ([`super::Filter::phases`] and
//! [`super::Filter::caps`]): it often depends on its settings (a `jwt` that fetches keys, a
//! breaker with a fallback), so it is not in the table.
//!
//! Adding a filter (say `map`) touches:
//! 1. `filters/map.rs`: the filter, its `impl Filter` and its `impl Build`; and
//!    `pub mod map;` in `filters/mod.rs`.
//! 2. `config/model_filters.rs`: its settings struct (`#[serde(deny_unknown_fields)]`,
//!    defaults beside the fields) and one line in the table, `"map" => Map(MapRule),`.
//!
//! Nothing else in the code: not the compiler (`compile.rs`), not the chain, not the pipeline
//! (its docs are a section of docs/config.md). Only a filter whose state `/metrics` and the
//! admin API report adds a `compile::Kind` variant and reads it in `admin/scrape_filters.rs`.

use std::collections::HashMap;
use std::sync::Arc;

pub use crate::config::model_filters::Build;
use crate::config::model_filters::FilterSpec;
use crate::config::{BaseDir, CompileError};

use super::compile::{Compiled, Kind, UpstreamInfo};
use super::Filter;

/// What building a filter gives: the filter, or an error at a key path.
pub type Built = Result<Compiled, CompileError>;

/// What a filter's [`Build`] is given.
#[derive(Debug)]
pub struct Cx<'a> {
    /// The filter's name: its top-level definition's, or `route#i` (the route's name and the
    /// filter's place in its list) for one written inline.
    pub name: &'a str,
    /// The key path of its settings (`filters.NAME.rate_limit`,
    /// `listeners[0].routes[1].filters[0].cors`): errors name a key under it.
    pub path: &'a str,
    /// The config's upstreams by name: their indices.
    pub upstreams: &'a HashMap<String, usize>,
    /// What filters need of each upstream, by index.
    pub upstream_info: &'a [UpstreamInfo],
    pub(crate) base: &'a BaseDir,
    /// The route's name and path regex, when the filter is in a route's list.
    pub route: Option<(&'a str, Option<&'a regex::bytes::Regex>)>,
    /// Where state that outlives a config is kept.
    pub state: Option<&'a super::state::FilterState>,
    /// The shield, for filters that report violations to it (`shape`).
    pub shield: Option<&'a Arc<crate::shield::Shield>>,
    /// The cluster, for rate limits across it.
    pub cluster: Option<&'a Arc<crate::cluster::Cluster>>,
}

impl Cx<'_> {
    /// The state kept across reloads under `key` (a key of kind, name and the settings that
    /// shape the state, so that a reload changing them starts afresh), or `make()`'s.
    pub fn kept<T: std::any::Any + Send + Sync>(
        &self,
        key: &str,
        make: impl FnOnce() -> Arc<T>,
    ) -> Option<Arc<T>> {
        self.state.map(|s| s.get_or(key, make))
    }

    /// The key path of a key of the settings.
    pub fn at(&self, key: &str) -> String {
        format!("{}.{key}", self.path)
    }
}

/// Builds a filter from its spec; `cx.path` is the filter's key path (its settings are under
/// `PATH.KEY`, which their build is given).
pub(crate) fn build(spec: FilterSpec, cx: Cx<'_>) -> Built {
    let path = cx.at(spec.key());
    spec.build(&Cx { path: &path, ..cx })
}

/// A filter without state to report or keep.
pub fn plain(f: impl Filter + 'static) -> Built {
    Ok(Compiled {
        filter: Arc::new(f),
        kind: Kind::Other,
        state_key: None,
    })
}
