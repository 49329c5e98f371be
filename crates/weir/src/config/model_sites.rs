//! Sites (virtual hosts) on a listener, as written in the config file: nginx `server` blocks,
//! Caddy's site blocks. Re-exported from `model.rs`.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::model::{OneOrMany, Route};
use super::model_filters::FilterRef;
use super::model_ops::AccessLogSetting;
use super::model_tls::{Acme, Certificate};

/// One site: its host names and what they get. Its routes match only those names (they name
/// no `host` of their own); the `default` site takes every other name.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Site {
    /// Host names: exact (`example.com`) or wildcard (`*.example.com`); one or a list.
    #[serde(default)]
    pub hosts: OneOrMany,
    /// The site for names no other site has (at most one per listener, without `hosts`).
    #[serde(default)]
    pub default: bool,
    /// Routes, tried in order.
    #[serde(default)]
    pub routes: Vec<Route>,
    /// Filters every route of the site runs (after the listener's, before the route's).
    #[serde(default)]
    pub filters: Vec<FilterRef>,
    /// Error pages of the site's routes (a route's own come first).
    #[serde(default)]
    pub error_pages: BTreeMap<String, String>,
    /// The site's access log (else the listener's).
    pub access_log: Option<AccessLogSetting>,
    /// The site's certificates on a TLS listener: files, or ACME for its names.
    pub tls: Option<SiteTls>,
    /// Limits of the site's routes (a route's own come first): nginx's `client_max_body_size`
    /// in a `server`.
    pub limits: Option<super::model::RouteLimits>,
}

/// A site's certificates.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SiteTls {
    /// Certificate files, chosen for the site's names (unless they list their own).
    #[serde(default)]
    pub certificates: Vec<Certificate>,
    /// A certificate from an ACME CA for the site's names (`names` defaults to `hosts`).
    pub acme: Option<Acme>,
}
