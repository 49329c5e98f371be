//! Configuration: YAML text → `${VAR}` interpolation → serde model (unknown keys rejected) →
//! `compile` → [`RuntimeConfig`], the precomputed form the server runs on. `weir check` runs
//! exactly this path and serves nothing.
//!
//! Every error names the file, the line and the key path (`listeners[0].routes[2].match.path`).
//! Serde errors carry their own position; errors found while compiling look the path up in a
//! [`locate::LineIndex`] built from the same text.

mod compile;
pub(crate) use compile::{check_header_name, check_header_value, CompileError};
pub mod interpolate;
pub mod locate;
pub mod model;
pub mod units;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::routes::RouteTable;

/// The compiled, validated configuration.
#[derive(Debug)]
pub struct RuntimeConfig {
    /// Number of worker threads (resolved from `auto`).
    pub workers: usize,
    /// `Server` header value, if one is sent.
    pub server_header: Option<Bytes>,
    pub limits: Limits,
    pub timeouts: Timeouts,
    pub listeners: Vec<ListenerConfig>,
    /// Upstream pools, indexed by `ProxyRoute::upstream`.
    pub upstreams: Vec<Arc<crate::proxy::upstream::Upstream>>,
    /// Cache zones, indexed by `CacheRoute::zone`.
    pub cache_zones: Vec<Arc<crate::cache::CacheZone>>,
}

/// Compiled limits.
#[derive(Debug, Clone)]
pub struct Limits {
    pub head: weir_http::Limits,
    pub max_body_bytes: u64,
    pub max_connections: usize,
    pub max_requests_per_connection: u64,
    pub backlog: u32,
}

/// Compiled timeouts.
#[derive(Debug, Clone)]
pub struct Timeouts {
    pub header: Duration,
    pub body: Duration,
    pub keepalive: Duration,
    pub write: Duration,
    pub shutdown: Duration,
}

/// One listening socket and its routes.
#[derive(Debug)]
pub struct ListenerConfig {
    pub address: SocketAddr,
    /// TCP_DEFER_ACCEPT on the listening socket.
    pub defer_accept: bool,
    /// The admin listener (serves purges and stats, no user routes).
    pub admin: bool,
    pub routes: Arc<RouteTable>,
}

/// A config error: where and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file (or `<embedded>`), filled in by [`load_file`].
    pub file: Option<String>,
    pub line: Option<usize>,
    /// Key path such as `listeners[0].routes[1].respond.status`.
    pub path: Option<String>,
    pub message: String,
}

impl ConfigError {
    pub(crate) fn at_line(line: usize, message: impl Into<String>) -> ConfigError {
        ConfigError {
            file: None,
            line: Some(line),
            path: None,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.file.as_deref().unwrap_or("config"))?;
        if let Some(l) = self.line {
            write!(f, ":{l}")?;
        }
        f.write_str(": ")?;
        if let Some(p) = self.path.as_deref().filter(|p| !p.is_empty() && *p != ".") {
            write!(f, "{p}: ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Loads and compiles a config file, interpolating from the process environment.
pub fn load_file(path: &Path) -> Result<RuntimeConfig, ConfigError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        file: Some(name.clone()),
        line: None,
        path: None,
        message: format!("cannot read config file: {e}"),
    })?;
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    load_str(&text, &base, |v| std::env::var(v).ok()).map_err(|mut e| {
        e.file = Some(name);
        e
    })
}

/// The embedded default config served by `weir run` without `-c`.
pub const DEFAULT_CONFIG: &str = include_str!("default.yaml");

/// Loads and compiles config text. `base` resolves relative file paths in the config.
pub fn load_str(
    text: &str,
    base: &Path,
    env: impl Fn(&str) -> Option<String>,
) -> Result<RuntimeConfig, ConfigError> {
    let text = interpolate::interpolate(text, env)?;
    let de = serde_yaml::Deserializer::from_str(&text);
    let file: model::File = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let line = inner.location().map(|l| l.line());
        ConfigError {
            file: None,
            line,
            path: Some(path),
            message: strip_location(&inner.to_string()),
        }
    })?;
    let index = locate::LineIndex::build(&text);
    compile::compile(file, &BaseDir(base.to_path_buf())).map_err(|(path, message)| ConfigError {
        file: None,
        line: index.line_of(&path),
        path: Some(path),
        message,
    })
}

/// Directory relative paths in the config are resolved against.
#[derive(Debug)]
pub(crate) struct BaseDir(pub PathBuf);

/// serde_yaml appends " at line L column C"; we print the line ourselves.
fn strip_location(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<RuntimeConfig, ConfigError> {
        load_str(text, Path::new("."), |_| None)
    }

    #[test]
    fn embedded_default_compiles() {
        let c = load(DEFAULT_CONFIG).unwrap();
        assert_eq!(c.listeners[0].address.to_string(), "127.0.0.1:8080");
    }

    #[test]
    fn unknown_key_names_path_and_line() {
        let e = load("listeners:\n  - address: 127.0.0.1:0\n    routes:\n      - echo: {}\n        mtach: {}\n").unwrap_err();
        assert_eq!(e.line, Some(5), "{e}");
        assert!(e.to_string().contains("listeners[0].routes[0]"), "{e}");
        assert!(e.message.contains("mtach"), "{e}");
    }

    #[test]
    fn compile_errors_name_path_and_line() {
        let e = load("listeners:\n  - address: 127.0.0.1:0\n    routes:\n      - match:\n          path_regex: '('\n        echo: {}\n")
            .unwrap_err();
        assert_eq!(e.line, Some(5), "{e}");
        assert_eq!(
            e.path.as_deref(),
            Some("listeners[0].routes[0].match.path_regex")
        );
        let e =
            load("listeners:\n  - address: 127.0.0.1:0\n    routes:\n      - match: {path: /}\n")
                .unwrap_err();
        assert!(e.message.contains("exactly one action"), "{e}");
        assert_eq!(e.line, Some(4));
        let e = load("listeners:\n  - address: nowhere\n").unwrap_err();
        assert_eq!(e.path.as_deref(), Some("listeners[0].address"));
        let e = load("workers: 0\nlisteners: []\n").unwrap_err();
        assert!(e.to_string().contains("workers"), "{e}");
    }

    #[test]
    fn bad_units_are_errors() {
        let e = load("timeouts: {header: 10 years}\nlisteners: []\n").unwrap_err();
        assert!(e.to_string().contains("timeouts.header"), "{e}");
    }
}
