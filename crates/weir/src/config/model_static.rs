//! The `static` action as written in the config file: a directory, its index file, fallbacks
//! (`try_files`), directory listings and caching fields by file pattern. Re-exported from
//! `model.rs`.

use serde::Deserialize;

use super::units::Dur;

/// Files from a directory.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Static {
    /// Directory to serve (relative to the config file's directory).
    pub root: String,
    /// File served for a directory request; a list is tried in order (nginx `index a b`); an
    /// empty list serves none (a directory is listed, or 403).
    #[serde(default = "default_index")]
    pub index: super::model::OneOrMany,
    /// Remove the route's `path_prefix` from the request path before mapping it to a file
    /// (nginx `alias`); `false` maps the full path under root (nginx `root`).
    #[serde(default = "default_true")]
    pub strip_prefix: bool,
    /// nginx `try_files`: candidates tried in order (`$uri`, `$uri/` for a directory's index,
    /// a fixed `/path`); the last one is the fallback, a path, `=404`, or `@app` (the request
    /// goes to `app`). A single-page app: `["$uri", "$uri/", "/index.html"]`; files, else the
    /// application: `["$uri", "$uri/", "@app"]`.
    #[serde(default)]
    pub try_files: Vec<String>,
    /// The application `try_files` falls back to with `@app` (nginx's `try_files ... @app` and
    /// `try_files $uri $uri/ /index.php?$args`): a `proxy` action (any upstream, FastCGI too),
    /// which may rewrite the path (`regex_replace`) to the application's front script.
    pub app: Option<super::model::Proxy>,
    /// A listing for a directory without an index file: `off` (the default: 403), `html` or
    /// `json` (nginx `autoindex`).
    #[serde(default = "default_off")]
    pub autoindex: String,
    /// `Cache-Control` (and `Expires`) on files whose name matches, the first rule that matches.
    #[serde(default)]
    pub cache_control: Vec<CacheControlRule>,
    /// Paths with a segment that starts with `.` (`/.git/config`, `/.env`, `/.htpasswd`):
    /// `deny` (the default) answers 404, except under `/.well-known/`; `allow` serves them.
    #[serde(default)]
    pub dotfiles: Dotfiles,
}

/// Whether `static` serves names that start with a dot.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dotfiles {
    /// 404 for any path segment starting with `.`, but `.well-known` (RFC 8615).
    #[default]
    Deny,
    /// Served like any other file.
    Allow,
}

/// Caching fields for the files a pattern matches.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheControlRule {
    /// File names: `*.css`, `app-*.js`, `index.html`; one `*` at most, matched against the
    /// file's name (not its directory).
    pub pattern: String,
    /// The `Cache-Control` value, as written (`public, max-age=31536000, immutable`).
    pub value: Option<String>,
    /// nginx `expires`: `Cache-Control: max-age=N` and an `Expires` date that far ahead;
    /// `max` as nginx's (ten years, and the date 31 Dec 2037). With `value` too, both fields.
    pub expires: Option<Expires>,
}

/// `expires`: a duration, or `max`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Expires {
    After(Dur),
    Max,
}

impl<'de> Deserialize<'de> for Expires {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Expires;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a duration (30d, 1h30m) or max")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Expires, E> {
                if v == "max" {
                    return Ok(Expires::Max);
                }
                v.parse::<Dur>().map(Expires::After).map_err(E::custom)
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Expires, E> {
                v.to_string()
                    .parse::<Dur>()
                    .map(Expires::After)
                    .map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

fn default_index() -> super::model::OneOrMany {
    super::model::OneOrMany::One("index.html".into())
}

fn default_off() -> String {
    "off".into()
}

fn default_true() -> bool {
    true
}
