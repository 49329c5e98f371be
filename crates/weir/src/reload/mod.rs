//! One reload path for every config source: SIGHUP, `POST /reload`, a watched file or
//! directory, etcd, and a change of cluster membership all end in [`Reloader::reload`]: read
//! every text (the file, its includes, the config source's fragments), skip the rebuild when
//! the content is what runs already (unless asked to force it: SIGHUP and `POST /reload` also
//! re-read certificates and key files, which are not part of the text), compile against the
//! running registry, swap. A text that does not compile changes nothing: the running config
//! stays and the error is logged with its file, line and key.
//!
//! The sources only say "something changed" ([`Trigger`]); debouncing and coalescing happen in
//! the caller's loop (`cli/`), which owns the one task that reloads, so two sources never
//! rebuild at once.

pub mod watch;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::config::assemble::Fragment;
use crate::config::{self, ConfigError};
use crate::runtime::{self, RuntimeConfig};
use crate::server::ServerHandle;

/// Why a reload was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    Signal,
    Admin,
    Files,
    Etcd,
    Members,
    Kubernetes,
}

impl Why {
    fn as_str(self) -> &'static str {
        match self {
            Why::Signal => "SIGHUP",
            Why::Admin => "POST /reload",
            Why::Files => "a watched file changed",
            Why::Etcd => "etcd",
            Why::Members => "cluster membership changed",
            Why::Kubernetes => "the Kubernetes API",
        }
    }

    /// Whether this source rebuilds even when the texts are unchanged.
    fn forces(self) -> bool {
        matches!(self, Why::Signal | Why::Admin | Why::Members)
    }
}

/// What a reload did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Applied,
    /// The texts are what runs already: nothing rebuilt.
    Unchanged,
}

/// The config's texts, where to re-read them, and what the running config was built from.
pub struct Reloader {
    /// The config file (`None`: the built-in config).
    path: Option<PathBuf>,
    /// The digest of the texts the running config was built from.
    digest: u64,
    /// The directories those texts came from.
    pub dirs: Vec<PathBuf>,
    /// A config source's fragments (etcd's), merged after the file's includes.
    pub fragments: Arc<Mutex<Vec<Fragment>>>,
    /// A provider's fragments (`providers.kubernetes`), merged after etcd's.
    pub provided: Arc<Mutex<Vec<Fragment>>>,
    /// Applies a new log level.
    apply_log: Box<dyn Fn(&str)>,
}

impl std::fmt::Debug for Reloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloader")
            .field("path", &self.path)
            .field("digest", &self.digest)
            .finish()
    }
}

/// Reads the config's texts: the file (or the built-in config) and `fragments`.
pub fn read(path: Option<&Path>, fragments: &[Fragment]) -> Result<config::Source, ConfigError> {
    match path {
        Some(p) => config::load_file_with(p, fragments),
        None => config::load_str_with(
            config::DEFAULT_CONFIG,
            Path::new("."),
            |v| std::env::var(v).ok(),
            fragments,
        ),
    }
}

impl Reloader {
    /// A reloader for the config file `path`.
    /// `texts`: the digest and directories of the texts the running config was built from.
    pub fn new(
        path: Option<PathBuf>,
        (digest, dirs): (u64, Vec<PathBuf>),
        fragments: Arc<Mutex<Vec<Fragment>>>,
        apply_log: Box<dyn Fn(&str)>,
    ) -> Reloader {
        Reloader {
            path,
            digest,
            dirs,
            fragments,
            provided: Arc::new(Mutex::new(Vec::new())),
            apply_log,
        }
    }

    /// The config file, if there is one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Re-reads, compiles and swaps in the config when its texts changed (always, for a
    /// source that [forces](Why::forces)). On any error the running config stays.
    pub fn reload(&mut self, handle: &ServerHandle, why: Why) -> Result<Outcome, String> {
        let from = self
            .path
            .as_ref()
            .map_or("the built-in config".to_string(), |p| {
                p.display().to_string()
            });
        let result = self.try_reload(handle, why);
        match &result {
            Ok(Outcome::Applied) => {
                tracing::info!(config = %from, reason = why.as_str(), "reloaded")
            }
            Ok(Outcome::Unchanged) => {
                tracing::debug!(config = %from, reason = why.as_str(), "config unchanged")
            }
            Err(e) => tracing::error!(
                config = %from, reason = why.as_str(), error = %e,
                "reload failed, the running config stays"
            ),
        }
        result
    }

    fn try_reload(&mut self, handle: &ServerHandle, why: Why) -> Result<Outcome, String> {
        let mut fragments = self
            .fragments
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        fragments.extend(
            self.provided
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .cloned(),
        );
        let source = read(self.path.as_deref(), &fragments).map_err(|e| e.to_string())?;
        if source.digest == self.digest && !why.forces() {
            return Ok(Outcome::Unchanged);
        }
        let (digest, dirs) = (source.digest, source.dirs.clone());
        let cfg: RuntimeConfig =
            runtime::compile(source, &handle.registry()).map_err(|mut e| {
                if e.file.is_none() {
                    e.file = self.path.as_ref().map(|p| p.display().to_string());
                }
                e.to_string()
            })?;
        let level = cfg.log.level.clone();
        handle.reload(cfg).map_err(|e| e.to_string())?;
        (self.apply_log)(&level);
        self.digest = digest;
        self.dirs = dirs;
        Ok(Outcome::Applied)
    }
}
