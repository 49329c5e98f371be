//! The error log: `tracing` to stderr, plain text (no colours unless stderr is a terminal) or
//! JSON. The level comes from `--log-level`, else `WEIR_LOG`, else the config's `log.level`;
//! a reload applies a changed `log.level` unless one of the first two set it.

use std::io::IsTerminal;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Registry};

/// Where the level came from, and how to change it on reload.
#[derive(Debug)]
pub struct Logging {
    handle: Option<reload::Handle<EnvFilter, Registry>>,
    /// `--log-level` or `WEIR_LOG` fixed the level: the config's is ignored.
    overridden: bool,
}

impl Logging {
    /// Installs the subscriber. `flag`: `--log-level`; `config`: `log.level` (already valid).
    pub fn init(flag: Option<&str>, config: &str, json: bool) -> Result<Logging, String> {
        let env = std::env::var("WEIR_LOG").ok().filter(|v| !v.is_empty());
        let (spec, overridden) = match (flag, env.as_deref()) {
            (Some(f), _) => (f, true),
            (None, Some(e)) => (e, true),
            (None, None) => (config, false),
        };
        let filter = crate::config::log_filter(spec).map_err(|e| match (flag, env.is_some()) {
            (Some(_), _) => format!("--log-level: {e}"),
            (None, true) => format!("WEIR_LOG: {e}"),
            _ => e,
        })?;
        let (filter, handle) = reload::Layer::new(filter);
        let stderr_tty = std::io::stderr().is_terminal();
        let registry = tracing_subscriber::registry().with(filter);
        let done = if json {
            registry
                .with(
                    tracing_subscriber::fmt::layer()
                        .json()
                        .with_writer(std::io::stderr),
                )
                .try_init()
        } else {
            registry
                .with(
                    tracing_subscriber::fmt::layer()
                        .with_ansi(stderr_tty)
                        .with_writer(std::io::stderr),
                )
                .try_init()
        };
        Ok(Logging {
            handle: done.is_ok().then_some(handle),
            overridden,
        })
    }

    /// Applies the reloaded config's `log.level`, unless a flag or `WEIR_LOG` set the level.
    pub fn apply(&self, level: &str) {
        if self.overridden {
            return;
        }
        if let (Some(h), Ok(f)) = (&self.handle, crate::config::log_filter(level)) {
            let _ = h.reload(f);
        }
    }
}
