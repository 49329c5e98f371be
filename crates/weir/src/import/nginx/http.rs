//! `http`-level blocks (`upstream`, `limit_req_zone`, `proxy_cache_path`) and the settings a
//! location inherits from `http` and its server ([`Scope`]).

use std::collections::BTreeMap;

use serde_yaml::{Mapping, Value};

use super::parse::Directive;
use super::{map, s, unknown_variable, Ctx};

/// What a location inherits from its server and `http` (nginx's inheritance).
#[derive(Debug, Clone, Default)]
pub(super) struct Scope {
    pub(super) root: Option<String>,
    pub(super) index: Vec<String>,
    pub(super) gzip: bool,
    /// `client_max_body_size` set in a `server` or `location` (a route's `limits`).
    pub(super) client_max_body_size: Option<String>,
    /// `client_body_timeout` and `keepalive_timeout` there (the route's `limits`), as weir
    /// durations.
    pub(super) client_body_timeout: Option<String>,
    pub(super) keepalive_timeout: Option<String>,
    /// `expires` in seconds for files (`static.cache_control`), `u64::MAX` for `max`; `None`:
    /// none, or `off`.
    pub(super) expires: Option<u64>,
    /// `gzip_min_length`, as written.
    pub(super) gzip_min_length: Option<String>,
    pub(super) gzip_types: Vec<String>,
    pub(super) add_header: Vec<(String, String)>,
    pub(super) proxy_set_header: Vec<(String, String)>,
    /// Whether this level wrote an `add_header` / `proxy_set_header` of its own: nginx
    /// inherits a level's list only when the level has none (the review of issue 53: they
    /// were added together, and a server's `Upgrade` reached a location that set its own).
    pub(super) add_header_own: bool,
    pub(super) proxy_set_header_own: bool,
    pub(super) error_pages: BTreeMap<String, String>,
    /// `error_page CODE [=] @name`: the named location, and whether `=` lets it say the status.
    pub(super) error_named: BTreeMap<String, (String, bool)>,
    pub(super) auth_basic: Option<(String, Option<String>)>,
    pub(super) limit_req: Vec<(String, u32, bool)>,
    pub(super) proxy_cache: Option<String>,
    pub(super) proxy_cache_valid: Vec<(String, String)>,
    /// `allow`/`deny` rules in order (`true`: allow), and whether this level set its own
    /// (nginx inherits them only into a level that has none).
    pub(super) access: Vec<(bool, String)>,
    pub(super) access_own: bool,
    /// An access control weir cannot translate (`internal`, `auth_request`, ...): every route
    /// under it answers 403 rather than open what nginx closed.
    pub(super) fail_closed: Option<String>,
    /// The server's first `server_name` as written (nginx's `$server_name`).
    pub(super) server_name: Option<String>,
    /// What a `fastcgi_pass` location uses (`fastcgi.rs`).
    pub(super) fastcgi: FastCgiScope,
}

/// The FastCGI settings a location inherits.
#[derive(Debug, Clone, Default)]
pub(super) struct FastCgiScope {
    /// `fastcgi_param`s in order, and whether this level set its own (nginx inherits them only
    /// into a level that has none).
    pub(super) params: Vec<Param>,
    pub(super) params_own: bool,
    pub(super) index: Option<String>,
    /// `fastcgi_split_path_info` and where it was written.
    pub(super) split: Option<(String, String)>,
    /// `fastcgi_connect_timeout`, `fastcgi_read_timeout` (weir durations).
    pub(super) connect_timeout: Option<String>,
    pub(super) read_timeout: Option<String>,
    pub(super) keep_conn: bool,
}

/// One `fastcgi_param NAME VALUE [if_not_empty]`, and where it was written.
#[derive(Debug, Clone)]
pub(super) struct Param {
    pub(super) name: String,
    pub(super) value: String,
    pub(super) if_not_empty: bool,
    pub(super) at: String,
}

impl Scope {
    /// The scope a nested level (server, location) starts from.
    pub(super) fn nested(&self) -> Scope {
        let mut s = self.clone();
        s.access_own = false;
        s.fastcgi.params_own = false;
        s.add_header_own = false;
        s.proxy_set_header_own = false;
        s
    }
}
/// Directives inherited down to locations; `false` when `d` is none of them.
pub(super) fn inherited(cx: &mut Ctx, d: &Directive, scope: &mut Scope) -> bool {
    let a = |i: usize| d.args.get(i).cloned().unwrap_or_default();
    match d.name.as_str() {
        "root" => scope.root = Some(cx.absolute(d, &a(0))),
        // A server's or location's own body limit: the route's `limits.max_body_bytes`
        // (nginx's 0 is "no limit": the largest weir takes).
        "client_max_body_size" if d.args.len() == 1 => {
            let v = a(0).to_ascii_lowercase();
            scope.client_max_body_size = Some(if v == "0" { "1024g".into() } else { v });
        }
        // nginx's time (`60`, `75s`, `1m`) as weir's duration; `keepalive_timeout 0` (no
        // keep-alive) is not taken per route.
        "client_body_timeout" | "keepalive_timeout" if !d.args.is_empty() => {
            let v = a(0);
            let dur = if v.bytes().all(|b| b.is_ascii_digit()) {
                format!("{v}s")
            } else {
                v.clone()
            };
            let ok = dur
                .parse::<crate::config::units::Dur>()
                .is_ok_and(|x| !x.0.is_zero());
            if !ok {
                return false;
            }
            if d.name == "client_body_timeout" {
                scope.client_body_timeout = Some(dur);
            } else {
                if d.args.len() > 1 {
                    cx.skip(d, "the second value (the Keep-Alive header's) is not sent");
                }
                scope.keepalive_timeout = Some(dur);
            }
        }
        "index" => {
            // `index ... /index.php$request_uri` (Nextcloud): an entry with a path or a
            // variable is an internal redirect in nginx, not a file name: left out, and said
            // (the corpus of issue 53: copied, it made the config fail `weir check`).
            let (names, other): (Vec<String>, Vec<String>) = d
                .args
                .iter()
                .cloned()
                .partition(|a| !a.contains(['/', '$']));
            if !other.is_empty() {
                cx.skip(
                    d,
                    &format!("{other:?}: an index entry that is a path or has a variable is not translated (nginx redirects to it)"),
                );
            }
            scope.index = names;
        }
        "gzip" => scope.gzip = a(0) == "on",
        "gzip_types" => scope.gzip_types = d.args.clone(),
        "gzip_min_length" if d.args.len() == 1 => scope.gzip_min_length = Some(a(0)),
        // `expires 30d`, `max` (ten years, nginx's max-age) or `off`, on files; `epoch`, a
        // negative time and `modified` are listed.
        "expires" => match expires_secs(&d.args) {
            Some(secs) => scope.expires = secs,
            None => {
                cx.skip(d, "only `expires TIME`, `max` or `off` is translated (as files' Cache-Control and Expires)");
                return true;
            }
        },
        "add_header" => {
            if d.args.len() < 2 {
                return false;
            }
            if let Some(v) = unknown_variable(&a(1)) {
                cx.skip(d, &format!("${v} is not a weir variable (an nginx `map`?)"));
                return true;
            }
            if !scope.add_header_own {
                scope.add_header.clear();
                scope.add_header_own = true;
            }
            scope.add_header.push((a(0), a(1)));
        }
        "proxy_set_header" => {
            if d.args.len() < 2 {
                return false;
            }
            if !scope.proxy_set_header_own {
                scope.proxy_set_header.clear();
                scope.proxy_set_header_own = true;
            }
            scope.proxy_set_header.push((a(0), a(1)));
        }
        "error_page" => {
            let Some(uri) = d.args.last() else {
                return false;
            };
            if let Some(name) = uri.strip_prefix('@') {
                // `error_page 404 = @app` (the app's answer) or `error_page 502 @page`: what
                // the named location is decides (`files.rs`, `server.rs`); `=CODE` is not taken.
                let codes = &d.args[..d.args.len() - 1];
                if codes.iter().any(|x| x.starts_with('=') && x != "=") {
                    return false;
                }
                let eq = codes.iter().any(|x| x == "=");
                for code in codes.iter().filter(|x| *x != "=") {
                    scope
                        .error_named
                        .insert(code.clone(), (name.to_string(), eq));
                }
                return true;
            }
            if d.args.len() < 2 || d.args.iter().any(|x| x.starts_with('=')) {
                return false;
            }
            if !uri.starts_with('/') {
                cx.skip(
                    d,
                    "only a page by path (`/50x.html`) or a named location is translated, not a URL",
                );
                return true;
            }
            for code in &d.args[..d.args.len() - 1] {
                scope.error_pages.insert(code.clone(), uri.clone());
            }
        }
        "auth_basic" => {
            if a(0) == "off" {
                scope.auth_basic = None;
            } else {
                let file = scope.auth_basic.as_ref().and_then(|x| x.1.clone());
                scope.auth_basic = Some((a(0), file));
            }
        }
        "auth_basic_user_file" => {
            let realm = scope
                .auth_basic
                .as_ref()
                .map_or_else(|| "Restricted".to_string(), |x| x.0.clone());
            scope.auth_basic = Some((realm, Some(a(0))));
        }
        "limit_req" => {
            let mut zone = None;
            let (mut burst, mut nodelay) = (0, false);
            for arg in &d.args {
                if let Some(z) = arg.strip_prefix("zone=") {
                    zone = Some(z.to_string());
                } else if let Some(b) = arg.strip_prefix("burst=") {
                    burst = b.parse().unwrap_or(0);
                } else if arg == "nodelay" {
                    nodelay = true;
                }
            }
            let Some(zone) = zone else { return false };
            if !cx.limit_zones.contains_key(&zone) {
                return false;
            }
            scope.limit_req.push((zone, burst, nodelay));
        }
        "allow" | "deny" => {
            if !scope.access_own {
                scope.access.clear();
                scope.access_own = true;
            }
            scope.access.push((d.name == "allow", a(0)));
        }
        "internal"
        | "auth_request"
        | "ssl_verify_client"
        | "secure_link"
        | "valid_referers"
        | "satisfy"
        | "auth_jwt"
        | "auth_delay"
        | "auth_basic_user_file_off" => {
            if d.name == "ssl_verify_client" && a(0) == "off" {
                return true;
            }
            scope.fail_closed = Some(d.name.clone());
            cx.skip(d, "access control not translated: the routes under it answer 403 (closed, as nginx would be to most clients)");
            return true;
        }
        "fastcgi_param" => {
            if !(2..=3).contains(&d.args.len()) {
                return false;
            }
            let f = &mut scope.fastcgi;
            if !f.params_own {
                f.params.clear();
                f.params_own = true;
            }
            f.params.push(Param {
                name: a(0),
                value: a(1),
                if_not_empty: a(2) == "if_not_empty",
                at: d.at(),
            });
        }
        "fastcgi_index" => scope.fastcgi.index = Some(a(0)),
        "fastcgi_split_path_info" => scope.fastcgi.split = Some((a(0), d.at())),
        "fastcgi_keep_conn" => scope.fastcgi.keep_conn = a(0) == "on",
        "fastcgi_connect_timeout" | "fastcgi_read_timeout" => {
            // nginx's bare number is seconds; weir takes ms, s, m, h.
            let v = a(0);
            let v = if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
                format!("{v}s")
            } else {
                v
            };
            if v.parse::<crate::config::units::Dur>().is_err() {
                return false;
            }
            if d.name == "fastcgi_connect_timeout" {
                scope.fastcgi.connect_timeout = Some(v);
            } else {
                scope.fastcgi.read_timeout = Some(v);
            }
        }
        "proxy_cache" => {
            scope.proxy_cache = match a(0).as_str() {
                "off" => None,
                z => Some(z.to_string()),
            }
        }
        "proxy_cache_valid" => {
            let Some(time) = d.args.last() else {
                return false;
            };
            let codes: Vec<String> = if d.args.len() == 1 {
                vec!["200".into(), "301".into(), "302".into()]
            } else {
                d.args[..d.args.len() - 1].to_vec()
            };
            for c in codes {
                let c = if c == "any" { "200".to_string() } else { c };
                scope.proxy_cache_valid.push((c, time.clone()));
            }
        }
        _ => return false,
    }
    cx.done();
    true
}
pub(super) fn upstream(cx: &mut Ctx, d: &Directive) {
    let Some(name) = d.args.first() else {
        return cx.skip(d, "an upstream without a name");
    };
    let mut servers = Vec::new();
    let mut up = Mapping::new();
    for x in d.children() {
        match x.name.as_str() {
            "server" => {
                let Some(addr) = x.args.first() else { continue };
                let mut weight = 1;
                let mut backup = false;
                for f in &x.args[1..] {
                    if let Some(w) = f.strip_prefix("weight=") {
                        weight = w.parse().unwrap_or(1);
                    } else if f == "backup" {
                        backup = true;
                    } else {
                        cx.skip(x, &format!("server flag {f:?} not translated"));
                    }
                }
                let addr = if addr.starts_with("unix:") || addr.contains(':') {
                    addr.clone()
                } else {
                    format!("{addr}:80")
                };
                servers.push(if weight == 1 && !backup {
                    s(&addr)
                } else {
                    map(vec![
                        ("address", s(&addr)),
                        ("weight", Value::Number(weight.into())),
                        ("backup", Value::Bool(backup)),
                    ])
                });
                cx.done();
            }
            "least_conn" => {
                up.insert(s("policy"), s("least_conn"));
                cx.done();
            }
            "ip_hash" => {
                up.insert(s("policy"), s("ip_hash"));
                cx.done();
            }
            "random" => {
                up.insert(s("policy"), s("random"));
                cx.done();
            }
            "keepalive" => {
                if let Some(n) = x.args.first().and_then(|n| n.parse::<u64>().ok()) {
                    up.insert(
                        s("keepalive"),
                        map(vec![("max_idle", Value::Number(n.into()))]),
                    );
                    cx.done();
                }
            }
            _ => cx.skip(x, "not translated"),
        }
    }
    up.insert(s("servers"), Value::Sequence(servers));
    cx.upstreams.insert(s(name), Value::Mapping(up));
    cx.done();
}
pub(super) fn limit_req_zone(cx: &mut Ctx, d: &Directive) {
    let mut zone = None;
    let mut rate = None;
    for a in &d.args {
        if let Some(z) = a.strip_prefix("zone=") {
            zone = z.split(':').next().map(String::from);
        } else if let Some(r) = a.strip_prefix("rate=") {
            rate = r
                .strip_suffix("r/s")
                .map(|n| (n, "1s"))
                .or_else(|| r.strip_suffix("r/m").map(|n| (n, "1m")))
                .and_then(|(n, per)| n.parse::<u32>().ok().map(|n| (n, per)));
        }
    }
    let key = match d.args.first().map(String::as_str) {
        Some("$binary_remote_addr" | "$remote_addr") => "$remote_addr".to_string(),
        Some(k) if k.starts_with('$') => k.to_string(),
        _ => return cx.skip(d, "key not translated"),
    };
    match (zone, rate) {
        (Some(z), Some((n, per))) => {
            cx.limit_zones.insert(z, (n, per, key));
            cx.done();
        }
        _ => cx.skip(d, "zone or rate not understood"),
    }
}
pub(super) fn cache_path(cx: &mut Ctx, d: &Directive) {
    let mut name = None;
    let mut max = "256m".to_string();
    for a in &d.args[1..] {
        if let Some(z) = a.strip_prefix("keys_zone=") {
            name = z.split(':').next().map(String::from);
        } else if let Some(m) = a.strip_prefix("max_size=") {
            max = m.to_ascii_lowercase();
        }
    }
    let Some(name) = name else {
        return cx.skip(d, "no keys_zone");
    };
    let path = d.args.first().cloned().unwrap_or_default();
    cx.zones.insert(
        s(&name),
        map(vec![
            ("max_size", s("256m")),
            ("disk", map(vec![("path", s(&path)), ("max_size", s(&max))])),
        ]),
    );
    cx.done();
}

/// `expires`'s seconds: `Some(Some(n))` for a time or `max`, `Some(None)` for `off`, `None` for
/// what is not translated (`epoch`, negative, `modified`, `@time`).
fn expires_secs(args: &[String]) -> Option<Option<u64>> {
    let [v] = args else { return None };
    match v.as_str() {
        "off" => return Some(None),
        // Written `max`: nginx's fixed date, not ten years from now.
        "max" => return Some(Some(u64::MAX)),
        _ => {}
    }
    // nginx's time: units ms s m h d w M y, in any combination (`1h30m`).
    let mut total = 0u64;
    let mut num = String::new();
    let mut chars = v.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            num.push(c);
            continue;
        }
        let n: u64 = num.parse().ok()?;
        num.clear();
        let unit = if c == 'm' && chars.peek() == Some(&'s') {
            chars.next();
            return None;
        } else {
            match c {
                's' => 1,
                'm' => 60,
                'h' => 3_600,
                'd' => 86_400,
                'w' => 604_800,
                'M' => 2_592_000,
                'y' => 31_536_000,
                _ => return None,
            }
        };
        total = total.checked_add(n.checked_mul(unit)?)?;
    }
    if !num.is_empty() {
        total = total.checked_add(num.parse().ok()?)?;
    }
    (total > 0).then_some(Some(total))
}
