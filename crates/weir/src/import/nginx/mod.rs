//! nginx directives to a weir config. `server` blocks become listeners (one per `listen`
//! address; several servers on one address become its `sites`, the `default_server` the
//! default site), `location`s become routes in nginx's order of precedence (exact `=`, then
//! `^~` prefixes longest first, then regexes in order, then other prefixes longest first), and
//! the common directives map to their weir forms: `proxy_pass`, `return`, `rewrite ...
//! permanent|redirect`, `root`/`alias`/`index`/`try_files`, `upstream`, `proxy_cache*`,
//! `limit_req*`, `auth_basic*`, `gzip*`, `add_header`, `proxy_set_header`, `error_page`,
//! `ssl_certificate*`, `client_max_body_size`, `keepalive_timeout`, `worker_processes`;
//! `fastcgi_pass` and `fastcgi_param*` as FastCGI upstreams (`fastcgi.rs`), and `try_files`
//! falling back to a named location or a PHP front controller as the static action's `@app`
//! (`files.rs`).
//!
//! Every other directive is listed with its file and line and why (never dropped silently);
//! a few that weir does on its own (`sendfile`, `tcp_nopush`, ...) are listed as such.

use std::collections::{BTreeMap, BTreeSet};

use serde_yaml::{Mapping, Value};

use http::{cache_path, inherited, limit_req_zone, upstream, Scope};
use parse::Directive;
use server::{listeners, server};

mod actions;
mod content;
mod fastcgi;
mod files;
mod http;
mod location;
mod maps;
pub mod parse;
mod precedence;
mod refuse;
mod script;
mod server;
#[cfg(test)]
mod tests;

/// The key of a route's note in the converted mapping (`__weir_import_note__N: N`);
/// [`Converted::notes`] holds its text.
pub const NOTE_KEY: &str = "__weir_import_note__";

/// The converted config and what could not be translated.
#[derive(Debug, Default)]
pub struct Converted {
    pub config: Mapping,
    /// Why routes refuse: `NOTE_KEY: N` in `config` stands for comment `N`.
    pub notes: Vec<String>,
    /// `file:line: directive: why`.
    pub skipped: Vec<String>,
    /// Directives translated.
    pub translated: usize,
}

struct Ctx {
    out: Converted,
    /// Why a route refuses, by the number its `__weir_import_note__` key holds: written as a
    /// YAML comment in its place ([`crate::import::nginx`]'s caller).
    notes: Vec<String>,
    upstreams: Mapping,
    filters: Mapping,
    zones: Mapping,
    /// `limit_req_zone` name → (rate per second or minute, key).
    limit_zones: BTreeMap<String, (u32, &'static str, String)>,
    /// Error page files → the URI nginx would redirect to (`error_page 404 /x.html`), to check
    /// that no other location serves that URI (`server.rs`).
    page_uris: BTreeMap<String, String>,
    /// The current server's named locations (`files.rs`), and the scope they inherit.
    named: files::NamedTable,
    named_scope: Scope,
    /// `upstream` blocks a `fastcgi_pass` named, and those a `proxy_pass` did: a block only
    /// FastCGI used is not left as an HTTP upstream.
    fastcgi_blocks: BTreeSet<String>,
    proxied_blocks: BTreeSet<String>,
    /// FastCGI upstreams made from an `upstream` block: (block, upstream), to take the block's
    /// name when the block goes.
    from_blocks: Vec<(String, String)>,
    /// nginx's prefix (`-p`): what a relative `root`, `alias` or page is relative to.
    prefix: String,
    /// The current server's first name (`$server_name` in a `return`).
    server_name: Option<String>,
}

/// The prefix Debian's and Ubuntu's nginx is built with (`nginx -V`: `--prefix=/usr/share/nginx`):
/// a relative path is under it when `weir import --prefix` does not say otherwise.
pub const DEFAULT_PREFIX: &str = "/usr/share/nginx";
fn s(v: &str) -> Value {
    Value::String(v.to_string())
}
fn map(pairs: Vec<(&str, Value)>) -> Value {
    let mut m = Mapping::new();
    for (k, v) in pairs {
        m.insert(s(k), v);
    }
    Value::Mapping(m)
}
impl Ctx {
    fn skip(&mut self, d: &Directive, why: &str) {
        // A word that is no directive name (an included file that is not a configuration:
        // `DB_PASSWORD=x;`) is not echoed.
        let plausible = d.name.len() <= 48
            && !d.name.is_empty()
            && d.name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        let name = if plausible {
            d.name.as_str()
        } else {
            "(a word that is no directive name)"
        };
        self.out.skipped.push(format!("{}: {name}: {why}", d.at()));
    }

    /// A route key that becomes the comment `# weir import: WHY` in the output.
    fn note(&mut self, why: String) -> (Value, Value) {
        self.notes.push(why);
        let n = self.notes.len() - 1;
        // Keys of one mapping are unique: each note has its own.
        (
            s(&format!("{NOTE_KEY}{n}")),
            Value::Number((n as u64).into()),
        )
    }

    fn done(&mut self) {
        self.out.translated += 1;
    }

    /// A path as nginx reads it: a relative one is under the prefix (said once per path, as
    /// nginx's own build decides where that is).
    fn absolute(&mut self, d: &Directive, p: &str) -> String {
        if p.starts_with('/') || p.starts_with('$') || p.is_empty() {
            return p.to_string();
        }
        let abs = format!("{}/{p}", self.prefix);
        self.out.skipped.push(format!(
            "{}: {}: the relative path {p:?} is {abs:?} (under nginx's prefix; `weir import --prefix DIR` as `nginx -p DIR`)",
            d.at(),
            d.name
        ));
        abs
    }
}
/// Converts a parsed nginx configuration.
pub fn convert(top: &[Directive]) -> Converted {
    convert_in(top, DEFAULT_PREFIX)
}

/// Converts a parsed nginx configuration whose relative paths are under `prefix` (nginx's
/// `-p`).
pub fn convert_in(top: &[Directive], prefix: &str) -> Converted {
    maps::reset();
    let mut cx = Ctx {
        prefix: prefix.trim_end_matches('/').to_string(),
        server_name: None,
        out: Converted::default(),
        notes: Vec::new(),
        page_uris: BTreeMap::new(),
        upstreams: Mapping::new(),
        filters: Mapping::new(),
        zones: Mapping::new(),
        limit_zones: BTreeMap::new(),
        named: BTreeMap::new(),
        named_scope: Scope::default(),
        fastcgi_blocks: BTreeSet::new(),
        proxied_blocks: BTreeSet::new(),
        from_blocks: Vec::new(),
    };
    let mut servers = Vec::new();
    let mut scope = Scope::default();
    let mut root_keys = Mapping::new();
    // A file of server blocks (sites-available/default) converts as if inside `http`.
    let (http, bare): (Vec<&Directive>, Vec<&Directive>) =
        top.iter().partition(|d| d.name == "http");
    for d in &bare {
        match d.name.as_str() {
            "worker_processes" => {
                let v = d.args.first().cloned().unwrap_or_default();
                root_keys.insert(
                    s("workers"),
                    match v.parse::<u64>() {
                        Ok(n) => Value::Number(n.into()),
                        Err(_) => s("auto"),
                    },
                );
                cx.done();
            }
            "events" => {
                for e in d.children() {
                    cx.skip(e, "weir sizes its event loop itself (limits.max_connections caps connections)");
                }
            }
            "user"
            | "pid"
            | "error_log"
            | "load_module"
            | "worker_rlimit_nofile"
            | "daemon"
            | "master_process"
            | "pcre_jit" => cx.skip(
                d,
                "process setting with no weir equivalent here (see docs/config.md)",
            ),
            _ => {}
        }
    }
    let http_level: Vec<&Directive> = http
        .iter()
        .flat_map(|h| h.children().iter())
        .chain(bare.iter().copied().filter(|d| {
            !matches!(
                d.name.as_str(),
                "worker_processes"
                    | "events"
                    | "user"
                    | "pid"
                    | "error_log"
                    | "load_module"
                    | "worker_rlimit_nofile"
                    | "daemon"
                    | "master_process"
                    | "pcre_jit"
            )
        }))
        .collect();
    // First what servers refer to: upstreams, zones, and `http`-level inheritance.
    for d in &http_level {
        if d.name != "server" {
            http_directive(&mut cx, d, &mut scope, &mut root_keys);
        }
    }
    for d in &http_level {
        if d.name == "server" {
            servers.push(server(&mut cx, d, scope.clone()));
        }
    }
    let mut listeners = listeners(&mut cx, servers);
    // An `upstream` block only `fastcgi_pass` used is not an HTTP upstream: its FastCGI
    // upstream takes its name.
    for name in cx.fastcgi_blocks.difference(&cx.proxied_blocks) {
        cx.upstreams.shift_remove(s(name));
    }
    for (block, made) in std::mem::take(&mut cx.from_blocks) {
        if cx.upstreams.contains_key(s(&block)) {
            continue;
        }
        if cx.upstreams.contains_key(s(&made)) {
            cx.upstreams = std::mem::take(&mut cx.upstreams)
                .into_iter()
                .map(|(k, v)| {
                    if k.as_str() == Some(&made) {
                        (s(&block), v)
                    } else {
                        (k, v)
                    }
                })
                .collect();
            for l in &mut listeners {
                rename_upstream(l, &made, &block);
            }
        }
    }
    let mut config = Mapping::new();
    for (k, v) in root_keys {
        config.insert(k, v);
    }
    if !cx.upstreams.is_empty() {
        config.insert(s("upstreams"), Value::Mapping(cx.upstreams.clone()));
    }
    if !cx.zones.is_empty() {
        config.insert(s("cache_zones"), Value::Mapping(cx.zones.clone()));
    }
    if !cx.filters.is_empty() {
        config.insert(s("filters"), Value::Mapping(cx.filters.clone()));
    }
    config.insert(s("listeners"), Value::Sequence(listeners));
    cx.out.config = config;
    cx.out.notes = std::mem::take(&mut cx.notes);
    cx.out
}
/// Every `upstream: FROM` under `v` made `upstream: TO`.
fn rename_upstream(v: &mut Value, from: &str, to: &str) {
    match v {
        Value::Mapping(m) => {
            for (k, x) in m.iter_mut() {
                if k.as_str() == Some("upstream") && x.as_str() == Some(from) {
                    *x = s(to);
                } else {
                    rename_upstream(x, from, to);
                }
            }
        }
        Value::Sequence(items) => {
            for x in items {
                rename_upstream(x, from, to);
            }
        }
        _ => {}
    }
}
/// An `http`-level directive.
fn http_directive(cx: &mut Ctx, d: &Directive, scope: &mut Scope, root: &mut Mapping) {
    match d.name.as_str() {
        "upstream" => upstream(cx, d),
        "limit_req_zone" => limit_req_zone(cx, d),
        "map" => {
            if let Some(m) = maps::map_block(cx, d) {
                let list = root
                    .entry(s("maps"))
                    .or_insert_with(|| Value::Sequence(Vec::new()));
                if let Value::Sequence(l) = list {
                    l.push(m);
                }
            }
        }
        "proxy_cache_path" => cache_path(cx, d),
        "client_max_body_size" => {
            if let Some(v) = d.args.first() {
                let mut limits = Mapping::new();
                // nginx's 0 is "no limit": the largest weir takes.
                let v = if v == "0" {
                    "1024g".to_string()
                } else {
                    v.to_ascii_lowercase()
                };
                limits.insert(s("max_body_bytes"), s(&v));
                root.insert(s("limits"), Value::Mapping(limits));
                cx.done();
            }
        }
        "keepalive_timeout" => {
            if let Some(v) = d.args.first() {
                let v = if v.chars().all(|c| c.is_ascii_digit()) {
                    format!("{v}s")
                } else {
                    v.clone()
                };
                root.insert(s("timeouts"), map(vec![("keepalive", s(&v))]));
                cx.done();
            }
        }
        _ => {
            if !inherited(cx, d, scope) {
                cx.skip(d, not_translated(&d.name));
            }
        }
    }
}
/// Why a directive is listed: weir does it itself, or has no such setting.
fn not_translated(name: &str) -> &'static str {
    match name {
        "sendfile"
        | "tcp_nopush"
        | "tcp_nodelay"
        | "types_hash_max_size"
        | "server_names_hash_bucket_size"
        | "open_file_cache"
        | "aio"
        | "directio" => "weir decides this itself",
        "include" => {
            "the file it names was not found, or a directory part of it is a glob (not followed)"
        }
        "types" | "default_type" => "weir types files by their extension itself",
        "access_log" | "log_format" => {
            "write the access log as weir's `access_log:` (docs/config.md#access_log)"
        }
        "ssl_protocols"
        | "ssl_ciphers"
        | "ssl_prefer_server_ciphers"
        | "ssl_session_cache"
        | "ssl_session_timeout"
        | "ssl_dhparam"
        | "ssl_session_tickets" => {
            "weir's TLS defaults apply (tls.protocols, tls.ciphers: docs/config.md#tls)"
        }
        "if" | "set" => "conditional rewriting is not translated",
        "fastcgi_pass" => "a second fastcgi_pass is not translated: the location answers 503",
        "uwsgi_pass" | "scgi_pass" | "grpc_pass" | "memcached_pass" => {
            "weir has no such upstream protocol here: the location answers 503"
        }
        _ => "not translated",
    }
}
/// The first `$variable` in `value` weir does not know (nginx's `map` results, say).
fn unknown_variable(value: &str) -> Option<String> {
    let b = value.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'$' {
            let braced = b.get(i + 1) == Some(&b'{');
            let start = i + 1 + usize::from(braced);
            let mut end = start;
            while end < b.len() && (b[end].is_ascii_alphanumeric() || b[end] == b'_') {
                end += 1;
            }
            let name = &value[start..end];
            // `$1` and friends: regex captures, which redirects take.
            if !name.is_empty()
                && !name.bytes().all(|c| c.is_ascii_digit())
                && crate::vars::variable(name).is_err()
                && !maps::defined(name)
            {
                return Some(name.to_string());
            }
            i = end.max(i + 1);
        } else {
            i += 1;
        }
    }
    None
}
/// One `server` block, converted.
#[derive(Debug)]
struct Server {
    listens: Vec<Listen>,
    names: Vec<String>,
    cert: Option<(String, String)>,
    routes: Vec<Value>,
    error_pages: BTreeMap<String, String>,
}
#[derive(Debug, Clone)]
struct Listen {
    addr: String,
    ssl: bool,
    default: bool,
}
