//! A FastCGI upstream's compiled settings (`fastcgi:` under an upstream with
//! `protocol: fastcgi`): the canonical document root, the index script, the path split and
//! the extra parameters.

use std::path::PathBuf;

use bytes::Bytes;

use crate::config::{model, BaseDir, CompileError};

/// nginx's usual `fastcgi_split_path_info`: the shortest prefix ending in `.php`, then the rest.
const DEFAULT_SPLIT: &str = r"^(.+?\.php)(/.*)$";

#[derive(Debug)]
pub struct FastCgi {
    /// Canonical document root.
    pub root: PathBuf,
    pub root_bytes: Bytes,
    pub index: Bytes,
    pub split: regex::bytes::Regex,
    pub require_file: bool,
    /// The script for a path that names none (`fastcgi.fallback`), as a path from the root.
    pub fallback: Option<Bytes>,
    /// A directory without its index script runs `fallback` (`directories: fallback`), rather
    /// than 403.
    pub directory_fallback: bool,
    /// `FCGI_KEEP_CONN` and pooled connections (`fastcgi.keep_conn`).
    pub keep_conn: bool,
    /// Pass `PATH_INFO` (`fastcgi.path_info`).
    pub path_info: bool,
    /// Endings a script's name must have (`fastcgi.extensions`).
    pub extensions: Vec<Bytes>,
    /// Extra or overriding parameters, names upper-cased as written.
    pub params: Vec<(Bytes, Bytes)>,
}

impl FastCgi {
    pub(crate) fn compile(
        f: &model::FastCgi,
        path: &str,
        base: &BaseDir,
    ) -> Result<FastCgi, CompileError> {
        let root = std::fs::canonicalize(base.0.join(&f.root)).map_err(|e| {
            (
                format!("{path}.root"),
                format!("cannot open directory {:?}: {e}", f.root),
            )
        })?;
        if !root.is_dir() {
            return Err((
                format!("{path}.root"),
                format!("{:?} is not a directory", f.root),
            ));
        }
        if f.index.is_empty() || f.index.contains('/') {
            return Err((
                format!("{path}.index"),
                "a script's file name (index.php), without `/`".into(),
            ));
        }
        let pattern = f.split_path_info.as_deref().unwrap_or(DEFAULT_SPLIT);
        let split = regex::bytes::Regex::new(pattern)
            .map_err(|e| (format!("{path}.split_path_info"), e.to_string()))?;
        if split.captures_len() != 3 {
            return Err((
                format!("{path}.split_path_info"),
                "needs exactly two captures: the script's name, then PATH_INFO".into(),
            ));
        }
        let mut params = Vec::new();
        for (name, value) in &f.params {
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err((
                    format!("{path}.params.{name}"),
                    "a parameter name is letters, digits and `_`".into(),
                ));
            }
            params.push((
                Bytes::copy_from_slice(name.as_bytes()),
                Bytes::copy_from_slice(value.as_bytes()),
            ));
        }
        let fallback = match &f.fallback {
            None => None,
            Some(p) if p.starts_with('/') && !p.split('/').any(|s| s == ".." || s == ".") => {
                Some(Bytes::copy_from_slice(p.as_bytes()))
            }
            Some(p) => {
                return Err((
                    format!("{path}.fallback"),
                    format!("{p:?}: a script's path from the root, starting with / (/index.php)"),
                ))
            }
        };
        let directory_fallback = match f.directories.as_str() {
            "403" => false,
            "fallback" if fallback.is_some() => true,
            "fallback" => {
                return Err((
                    format!("{path}.directories"),
                    "`fallback` needs a `fallback` script (/index.php)".into(),
                ))
            }
            other => {
                return Err((
                    format!("{path}.directories"),
                    format!("{other:?}: `403` or `fallback`"),
                ))
            }
        };
        if f.extensions.is_empty() || f.extensions.iter().any(|e| !e.starts_with('.')) {
            return Err((
                format!("{path}.extensions"),
                "endings that start with `.` ([.php])".into(),
            ));
        }
        let root_bytes = Bytes::copy_from_slice(root.as_os_str().as_encoded_bytes());
        Ok(FastCgi {
            root,
            root_bytes,
            index: Bytes::copy_from_slice(f.index.as_bytes()),
            split,
            require_file: f.require_file,
            fallback,
            directory_fallback,
            keep_conn: f.keep_conn,
            path_info: f.path_info,
            extensions: f
                .extensions
                .iter()
                .map(|e| Bytes::copy_from_slice(e.as_bytes()))
                .collect(),
            params,
        })
    }
}

/// The `fastcgi:` settings of upstream `u` at `path`: present exactly when its protocol is
/// `fastcgi`, which speaks neither TLS nor HTTP health checks.
pub(crate) fn compile_for(
    u: &model::Upstream,
    path: &str,
    base: &BaseDir,
    any_https: bool,
) -> Result<Option<std::sync::Arc<FastCgi>>, CompileError> {
    let is_fastcgi = u.protocol == "fastcgi";
    let f = match (&u.fastcgi, is_fastcgi) {
        (None, false) => return Ok(None),
        (Some(_), false) => {
            return Err((
                format!("{path}.fastcgi"),
                "only for an upstream with `protocol: fastcgi`".into(),
            ))
        }
        (None, true) => {
            return Err((
                format!("{path}.fastcgi"),
                "a FastCGI upstream needs `fastcgi: { root: DIR }` (where its scripts are)".into(),
            ))
        }
        (Some(f), true) => f,
    };
    if u.tls.is_some() || any_https {
        return Err((
            format!("{path}.protocol"),
            "FastCGI runs over TCP or a unix socket, not TLS".into(),
        ));
    }
    if u.active_health.as_ref().is_some_and(|a| !a.tcp) {
        return Err((
            format!("{path}.active_health"),
            "a FastCGI upstream is checked by connecting: `tcp: true`".into(),
        ));
    }
    FastCgi::compile(f, &format!("{path}.fastcgi"), base).map(|c| Some(std::sync::Arc::new(c)))
}
