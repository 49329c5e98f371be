//! `weir import nginx.conf`: an nginx configuration turned into a weir config, for the many
//! operators porting nginx setups by hand (ingress-nginx was retired in March 2026).
//!
//! * [`nginx::parse`]: nginx's syntax, includes followed, each directive with its file and line.
//! * [`nginx`]: the directives weir has an answer for, mapped (`http.rs`: `http`-level blocks
//!   and inheritance, `server.rs`: servers and listeners, `location.rs`: locations); the rest
//!   listed with file:line and why, never dropped silently.
//!
//! The YAML goes to standard output and the list to standard error; the exit status is 0 when
//! something was converted. `weir check` the result before serving it: paths (roots,
//! certificates, htpasswd files) are kept as nginx had them.

pub mod nginx;

use std::path::Path;

/// The converted config as YAML, and what could not be translated.
#[derive(Debug)]
pub struct Imported {
    pub yaml: String,
    pub skipped: Vec<String>,
    pub translated: usize,
}

/// Converts the nginx configuration at `path`.
pub fn nginx(path: &Path) -> Result<Imported, String> {
    let tree = nginx::parse::parse_file(path)?;
    let c = nginx::convert(&tree);
    let body = serde_yaml::to_string(&serde_yaml::Value::Mapping(c.config))
        .map_err(|e| format!("cannot write YAML: {e}"))?;
    let yaml = format!(
        "# Converted from {} by `weir import`: {} directives translated, {} listed on stderr.\n{body}",
        path.display(),
        c.translated,
        c.skipped.len()
    );
    Ok(Imported {
        yaml,
        skipped: c.skipped,
        translated: c.translated,
    })
}
