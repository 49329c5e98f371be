//! `maps:` (variables chosen by another value, `vars/map.rs`) and what a route or site sets
//! over the top-level `limits`, as written in the config file. Re-exported from `model.rs`.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::units::{Dur, Size};

/// One `maps:` entry: the variable `$name`, chosen by the value of `from` (nginx's `map`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MapDef {
    /// The variable it defines (`connection_upgrade` for `$connection_upgrade`).
    pub name: String,
    /// What it keys on: a value with variables (`$http_upgrade`, `$host$uri`).
    pub from: String,
    /// Values for exact keys (`"": close`).
    #[serde(default)]
    pub exact: BTreeMap<String, String>,
    /// Values for keys starting with a prefix (the longest wins).
    #[serde(default)]
    pub prefix: BTreeMap<String, String>,
    /// Regexes tried in order after `exact` and `prefix`; a value may use their captures.
    #[serde(default)]
    pub regex: Vec<MapRegex>,
    /// The value when nothing matches (empty by default).
    #[serde(default)]
    pub default: String,
}

/// A regex entry of a map.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MapRegex {
    pub pattern: String,
    pub value: String,
}

/// What a route (or a site, for its routes) sets over the top-level `limits`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteLimits {
    /// Largest request body, above or below `limits.max_body_bytes` (413 beyond).
    pub max_body_bytes: Option<Size>,
    /// Longest wait between request body bytes, over `timeouts.body` (408 beyond; nginx's
    /// `client_body_timeout` in a `location`).
    pub body_timeout: Option<Dur>,
    /// How long an HTTP/1.1 connection waits for its next request after this route answered,
    /// instead of `timeouts.keepalive` (nginx's `keepalive_timeout` in a `location`).
    pub keepalive_timeout: Option<Dur>,
}
