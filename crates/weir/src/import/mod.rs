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

pub mod cluster;
pub mod gateway;
pub mod ingress;
pub mod nginx;

/// `body` with each `__weir_import_note__N: N` line replaced by the comment it stands for, at
/// the same indentation (a route that refuses says why where it is written).
fn with_notes(body: &str, notes: &[String]) -> String {
    let mut out = String::with_capacity(body.len());
    for line in body.lines() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        let note = trimmed
            .strip_prefix(nginx::NOTE_KEY)
            .and_then(|rest| rest.split_once(": "))
            .filter(|(k, v)| k == v)
            .and_then(|(_, n)| n.parse::<usize>().ok())
            .and_then(|n| notes.get(n));
        match note {
            Some(why) => {
                out.push_str(indent);
                out.push_str("# weir import: ");
                out.push_str(&why.replace(['\n', '\r'], " "));
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

use std::path::Path;

/// The converted config as YAML, and what could not be translated.
#[derive(Debug)]
pub struct Imported {
    pub yaml: String,
    pub skipped: Vec<String>,
    pub translated: usize,
}

/// A converted config as YAML: `${` kept from the environment, the notes as comments.
fn render(config: serde_yaml::Mapping, notes: &[String]) -> Result<String, String> {
    let body = serde_yaml::to_string(&serde_yaml::Value::Mapping(config))
        .map_err(|e| format!("cannot write YAML: {e}"))?;
    Ok(with_notes(&no_environment(&body), notes))
}

/// `weir import` of Kubernetes manifests (`ingress.rs`): the Ingress objects of `opts.class`.
pub fn kubernetes(path: &Path, opts: &ingress::Options) -> Result<Imported, String> {
    let c = ingress::convert_file(path, opts)?;
    // Only the listeners' own `address` lines: an annotation's value that happens to hold the
    // placeholder stays as written (attack review).
    let body: String = render(c.config, &c.notes)?
        .lines()
        .map(|l| {
            let t = l.trim_start();
            let indent = &l[..l.len() - t.len()];
            match t {
                _ if t == format!("address: {}", ingress::LISTEN_TLS)
                    || t == format!("- address: {}", ingress::LISTEN_TLS) =>
                {
                    format!(
                        "{indent}{}${{WEIR_LISTEN_TLS:-0.0.0.0:443}}\n",
                        &t[..t.len() - ingress::LISTEN_TLS.len()]
                    )
                }
                _ if t == format!("address: {}", ingress::LISTEN_PASSTHROUGH)
                    || t == format!("- address: {}", ingress::LISTEN_PASSTHROUGH) =>
                {
                    format!(
                        "{indent}{}${{WEIR_LISTEN_PASSTHROUGH:-0.0.0.0:8443}}\n",
                        &t[..t.len() - ingress::LISTEN_PASSTHROUGH.len()]
                    )
                }
                _ if t == format!("address: {}", ingress::LISTEN)
                    || t == format!("- address: {}", ingress::LISTEN) =>
                {
                    format!(
                        "{indent}{}${{WEIR_LISTEN:-0.0.0.0:80}}\n",
                        &t[..t.len() - ingress::LISTEN.len()]
                    )
                }
                _ => format!("{l}\n"),
            }
        })
        .collect();
    let yaml = format!(
        "# Converted from {} by `weir import`: {} paths, listeners and backends translated, {} notes on stderr.\n# Listeners: WEIR_LISTEN (default 0.0.0.0:80) and, with TLS, WEIR_LISTEN_TLS (0.0.0.0:443); TLSRoutes: WEIR_LISTEN_PASSTHROUGH (0.0.0.0:8443).\n{body}",
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

/// The weir config of a live cluster's `objects` (`providers.kubernetes`): the listeners on
/// `listen`, `listen_tls` and `listen_passthrough` (TLSRoutes), cluster values kept from the environment (`$${`), the notes as
/// comments. The conversion's facts (notes, Secrets used, the Gateway outcomes) come back
/// with it.
pub fn cluster_config(
    objects: Vec<serde_yaml::Value>,
    opts: &ingress::Options,
    (listen, listen_tls, listen_passthrough): (&str, &str, &str),
) -> Result<(String, ingress::Converted), String> {
    let mut c = ingress::convert_objects(objects, opts);
    if let Some(ls) = c
        .config
        .get_mut("listeners")
        .and_then(serde_yaml::Value::as_sequence_mut)
    {
        for l in ls {
            let address = match l["address"].as_str() {
                Some(ingress::LISTEN) => listen,
                Some(ingress::LISTEN_TLS) => listen_tls,
                Some(ingress::LISTEN_PASSTHROUGH) => listen_passthrough,
                _ => continue,
            };
            l["address"] = address.into();
        }
    }
    let yaml = render(std::mem::take(&mut c.config), &c.notes)?;
    Ok((yaml, c))
}

/// `${` in what nginx wrote (`${var}`, a map's value) is a variable of the request: in a weir
/// config file `${NAME}` is the environment's, so it is written `$${` (the review of issue 53:
/// a map's `"${http_y}z"` made the config fail, or take an environment variable's value).
fn no_environment(body: &str) -> String {
    let mut out = String::with_capacity(body.len());
    let mut prev = '\0';
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '$' && prev != '$' && chars.peek() == Some(&'{') {
            out.push_str("$$");
        } else {
            out.push(c);
        }
        prev = c;
    }
    out
}

/// Converts the nginx configuration at `path`.
pub fn nginx(path: &Path, prefix: Option<&str>) -> Result<Imported, String> {
    let tree = nginx::parse::parse_file(path)?;
    let c = nginx::convert_in(&tree, prefix.unwrap_or(nginx::DEFAULT_PREFIX));
    let body = render(c.config, &c.notes)?;
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
