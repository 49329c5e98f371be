//! Configuration, as text: YAML → `${VAR}` interpolation → serde model (unknown keys rejected)
//! → [`Source`]. A leaf module: it knows nothing of routes, proxies or caches. `runtime::compile`
//! turns a `Source` into the `RuntimeConfig` the server runs on; `weir check` runs exactly that
//! path and serves nothing.
//!
//! Every error names the file, the line and the key path (`listeners[0].routes[2].match.path`).
//! Serde errors carry their own position; errors found while compiling look the path up in a
//! [`locate::LineIndex`] built from the same text.
//!
//! `serde_yaml` in this crate is `serde_yaml_ng` (renamed in the workspace's Cargo.toml): the
//! maintained fork of the deprecated `serde_yaml` 0.9, with the same API and the same error
//! positions, so nothing here changed with the swap (a 3,000-route file loads in the same time:
//! the figures are in the issue 36 note).

pub mod assemble;
mod checks;
pub use checks::log_filter;
pub(crate) use checks::{check_header_name, check_header_value, trusted_peers};
pub mod interpolate;
pub mod kubernetes;
pub mod locate;
pub mod model;
pub mod model_auth;
pub mod model_cluster;
pub mod model_filters;
pub mod model_http3;
pub mod model_limits;
pub mod model_maps;
pub mod model_ops;
pub mod model_providers;
pub mod model_proxy;
pub mod model_shield;
pub mod model_sites;
pub mod model_static;
pub mod model_tcp;
pub mod model_tls;
pub mod model_upstream;
pub mod units;

use std::path::{Path, PathBuf};

/// An error found while compiling a part of the config: `(key path, message)`. The caller adds
/// the line ([`Source::error`]).
pub(crate) type CompileError = (String, String);

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

/// A parsed config: the serde model, where each key path came from (to name the file and line
/// of a key found wrong later) and the directory relative paths resolve against.
/// `runtime::compile` turns it into a `RuntimeConfig`.
#[derive(Debug)]
pub struct Source {
    pub file: model::File,
    pub(crate) base: BaseDir,
    pub(crate) locator: assemble::Locator,
    /// Values from the environment, kept out of error messages.
    pub(crate) secrets: interpolate::Secrets,
    /// A digest of every text the config was assembled from: equal digests, equal configs
    /// (a reload of unchanged content is skipped).
    pub digest: u64,
    /// The directories the texts were read from (to watch).
    pub dirs: Vec<PathBuf>,
    /// The config as loaded: variables substituted, includes merged (`weir check --print`).
    pub text: String,
}

impl Source {
    /// [`Source::text`] with the values of variables whose names say they are secret
    /// (`TOKEN`, `SECRET`, `PASSWORD`, `KEY`) put back as `${NAME}`.
    pub fn printable(&self) -> String {
        self.secrets.mask_sensitive(&self.text)
    }
}

/// Reads and parses a config file, interpolating from the process environment.
pub fn load_file(path: &Path) -> Result<Source, ConfigError> {
    load_file_with(path, &[])
}

/// [`load_file`], with `extra` fragments (a config source's) merged after its includes.
pub fn load_file_with(path: &Path, extra: &[assemble::Fragment]) -> Result<Source, ConfigError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        file: Some(name.clone()),
        line: None,
        path: None,
        message: format!("cannot read config file: {e}"),
    })?;
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    load_str_with(&text, &base, |v| std::env::var(v).ok(), extra).map_err(|mut e| {
        e.file.get_or_insert(name);
        e
    })
}

/// The embedded default config served by `weir run` without `-c`.
pub const DEFAULT_CONFIG: &str = include_str!("default.yaml");

/// Parses config text. `base` resolves relative file paths in the config.
pub fn load_str(
    text: &str,
    base: &Path,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Source, ConfigError> {
    load_str_with(text, base, env, &[])
}

/// [`load_str`], then its `include:`s and `extra` merged (`assemble.rs`).
pub fn load_str_with(
    text: &str,
    base: &Path,
    env: impl Fn(&str) -> Option<String>,
    extra: &[assemble::Fragment],
) -> Result<Source, ConfigError> {
    use std::hash::{Hash, Hasher};
    let (text, secrets) = interpolate::interpolate_tracked(text, &env)?;
    let file = deserialize(&text).map_err(|e| secrets.redact(e))?;
    let index = locate::LineIndex::build(&text);
    let mut digest = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut digest);
    if file.include.is_empty() && extra.is_empty() {
        return Ok(Source {
            file,
            base: BaseDir(base.to_path_buf()),
            locator: assemble::Locator::single(index),
            secrets,
            digest: digest.finish(),
            dirs: vec![base.to_path_buf()],
            text,
        });
    }
    let included = assemble::read_includes(&file.include, base, &index)?;
    let mut fragments = included.fragments;
    fragments.extend_from_slice(extra);
    for f in &fragments {
        (&f.name, &f.text).hash(&mut digest);
    }
    let a = assemble::assemble((&text, index), &fragments, env, secrets)?;
    Ok(Source {
        file: a.file,
        base: BaseDir(base.to_path_buf()),
        locator: a.locator,
        secrets: a.secrets,
        digest: digest.finish(),
        dirs: included.dirs,
        text: a.text,
    })
}

/// Checks a fragment's text on its own: a whole config but for `listeners`, which it may omit.
pub(crate) fn load_str_partial(text: &str) -> Result<model::File, ConfigError> {
    let has_listeners = matches!(
        serde_yaml::from_str::<serde_yaml::Value>(text),
        Ok(serde_yaml::Value::Mapping(ref m)) if m.contains_key("listeners")
    );
    if has_listeners {
        return deserialize(text);
    }
    if text.trim_start().starts_with('{') {
        // A flow mapping: close it with the key (lines stay as they were).
        let t = text.trim_end();
        let inner = t.strip_suffix('}').unwrap_or(t);
        let sep = if inner.trim_end().ends_with('{') {
            ""
        } else {
            ", "
        };
        return deserialize(&format!("{inner}{sep}listeners: []}}"));
    }
    deserialize(&format!("{text}\nlisteners: []\n"))
}

/// Deserializes interpolated text into the model; errors carry their line and key path.
pub(crate) fn deserialize(text: &str) -> Result<model::File, ConfigError> {
    let de = serde_yaml::Deserializer::from_str(text);
    let parsed: Result<model::File, _> = serde_path_to_error::deserialize(de);
    parsed.map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let mut line = inner.location().map(|l| l.line());
        let message = strip_location(&inner.to_string());
        // serde_yaml starts some messages with the path of the mapping at fault; that path is
        // the more precise one (for an unknown field, the mapping that lacks it), and printing
        // both would name the key twice.
        let (path, message) = match message.split_once(": ") {
            Some((p, m)) if is_key_path(p) => (p.to_string(), m.to_string()),
            _ => (path, message),
        };
        // A duplicate key is reported at its mapping's start: find the second occurrence.
        if let Some(key) = message
            .strip_prefix("duplicate field `")
            .and_then(|m| m.split('`').next())
        {
            line = duplicate_line(text, line.unwrap_or(1), key).or(line);
        }
        ConfigError {
            file: None,
            line,
            path: (path != ".").then_some(path),
            message,
        }
    })
}

/// Directory relative paths in the config are resolved against.
#[derive(Debug)]
pub(crate) struct BaseDir(pub PathBuf);

/// Whether `p` looks like a key path (`listeners[0].routes[1].respond`), not prose.
fn is_key_path(p: &str) -> bool {
    !p.is_empty()
        && p.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.[]-".contains(c))
}

/// The line of the second `key:` at or after line `from` (1-based), in block or flow style.
fn duplicate_line(text: &str, from: usize, key: &str) -> Option<usize> {
    let mut seen = 0;
    for (i, line) in text.lines().enumerate().skip(from.saturating_sub(1)) {
        let mut rest = line;
        while let Some(at) = rest.find(key) {
            let before = rest[..at].trim_end();
            let after = &rest[at + key.len()..];
            let starts = before.is_empty() || before.ends_with(['-', '{', ',']);
            if starts && after.trim_start().starts_with(':') {
                seen += 1;
                if seen == 2 {
                    return Some(i + 1);
                }
            }
            rest = after;
        }
    }
    None
}

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

    #[test]
    fn unknown_key_names_path_and_line() {
        let e = load_str(
            "listeners:\n  - address: 127.0.0.1:0\n    routes:\n      - echo: {}\n        mtach: {}\n",
            Path::new("."),
            |_| None,
        )
        .unwrap_err();
        assert_eq!(e.line, Some(5), "{e}");
        assert!(e.to_string().contains("listeners[0].routes[0]"), "{e}");
        assert!(e.message.contains("mtach"), "{e}");
    }

    #[test]
    fn errors_name_the_key_once_and_duplicates_at_their_line() {
        let load = |t: &str| load_str(t, Path::new("."), |_| None).unwrap_err();
        let e = load(
            "listeners:\n  - address: 127.0.0.1:0\n    routes:\n      - respond: { stauts: 200 }\n",
        );
        assert_eq!(
            e.to_string(),
            "config:4: listeners[0].routes[0].respond: unknown field `stauts`, expected one of `status`, `headers`, `body`, `body_file`"
        );
        let e = load("listeners:\n  - address: 127.0.0.1:0\n    routes:\n      - respond: { status: 200 }\n        respond: { status: 201 }\n");
        assert_eq!(e.line, Some(5), "{e}");
        assert_eq!(
            e.to_string().matches("listeners[0].routes[0]").count(),
            1,
            "{e}"
        );
        let e = load("workers: 1\nworkers: 2\nlisteners: []\n");
        assert_eq!(e.line, Some(2), "{e}");
        let e = load("listeners: [\n");
        assert!(e.line.is_some(), "a YAML syntax error has its line: {e}");
    }

    #[test]
    fn bad_units_are_errors() {
        let e = load_str(
            "timeouts: {header: 10 years}\nlisteners: []\n",
            Path::new("."),
            |_| None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("timeouts.header"), "{e}");
    }

    /// A filter is one key of the table: none, two or an unknown one is an error naming the
    /// filter's path and line (and, for an unknown one, the known keys); an error inside its
    /// settings names the key under it.
    #[test]
    fn filter_errors_name_the_key_and_line() {
        let load = |t: &str| load_str(t, Path::new("."), |_| None).unwrap_err();
        let route = |f: &str| {
            format!("listeners:\n  - address: 127.0.0.1:0\n    routes:\n      - filters:\n{f}        respond: {{}}\n")
        };
        let e = load("filters:\n  f:\n    rate_limt: {rate: 1}\nlisteners: []\n");
        assert_eq!(
            (e.line, e.path.as_deref()),
            (Some(3), Some("filters.f")),
            "{e}"
        );
        assert!(
            e.message.starts_with(
                "unknown field `rate_limt`, expected one of `rate_limit`, `concurrency`"
            ) && e.message.ends_with("`compress`, `shape`"),
            "{e}"
        );
        let e = load(&route("          - corz: {}\n"));
        assert_eq!(e.line, Some(5), "{e}");
        assert!(e.to_string().contains("listeners[0].routes[0].filters[0]: unknown field `corz`, expected one of `rate_limit`"), "{e}");
        let e = load(
            "filters:\n  f:\n    rate_limit: {rate: 1}\n    concurrency: {max: 1}\nlisteners: []\n",
        );
        assert_eq!(e.path.as_deref(), Some("filters.f"), "{e}");
        assert!(
            e.message
                .starts_with("a filter is exactly one of rate_limit, concurrency, ip,"),
            "{e}"
        );
        assert!(
            e.message.ends_with("(given: rate_limit and concurrency)"),
            "{e}"
        );
        let e = load(&route("          - {}\n"));
        assert_eq!(
            e.path.as_deref(),
            Some("listeners[0].routes[0].filters[0]"),
            "{e}"
        );
        assert!(
            e.message.starts_with("a filter is exactly one of")
                && e.message.ends_with("(none given)"),
            "{e}"
        );
        let e =
            load("filters:\n  f:\n    rate_limit:\n      rate: 1\n      bogus: 2\nlisteners: []\n");
        assert_eq!(
            (e.line, e.path.as_deref()),
            (Some(5), Some("filters.f.rate_limit")),
            "{e}"
        );
        assert!(e.message.starts_with("unknown field `bogus`"), "{e}");
        let e = load(&route("          - cors: { origins: 5 }\n"));
        assert_eq!(
            (e.line, e.path.as_deref()),
            (
                Some(5),
                Some("listeners[0].routes[0].filters[0].cors.origins")
            ),
            "{e}"
        );
    }
}
