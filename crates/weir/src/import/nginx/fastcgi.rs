//! `fastcgi_pass` locations as weir's FastCGI upstreams (issue 53): the application's address
//! (`host:port`, `unix:/path`, or an `upstream` block's servers), the location's `root`,
//! `fastcgi_index`, `fastcgi_split_path_info`, `try_files $uri =404` (weir's `require_file`), and
//! the `fastcgi_param`s. Those weir sets itself (nginx's `fastcgi_params` and `fastcgi.conf`)
//! are accepted, a constant becomes one of `params`, and any other keeps the location refusing
//! (503) as before. A location that passes no `SCRIPT_FILENAME` refuses too: php-fpm runs no
//! script for it (nginx answers php-fpm's 404 to every request).
//!
//! nginx opens a connection per request (without `fastcgi_keep_conn`), and php-fpm's pools are
//! sized for that: an idle kept connection holds one of its children, so the upstream keeps
//! none (`keepalive.max_idle: 0`, and weir's `keep_conn` off) unless nginx kept them.
//!
//! [`front`] makes the twin upstream a `try_files ... /index.php?$args` falls back to (`files.rs`).

use serde_yaml::{Mapping, Value};

use super::http::{Param, Scope};
use super::parse::Directive;
use super::{map, s, Ctx};

/// A split that never splits: the script is the whole path, as nginx's `$fastcgi_script_name`
/// without `fastcgi_split_path_info` (weir's default splits at `.php/`), and as `try_files $uri
/// =404` requires (the whole path a file).
const WHOLE_PATH: &str = r"(?s)^(.*)()$";

/// Why a FastCGI location is not translated: where, the directive, why.
pub(super) struct Untranslated {
    pub(super) at: String,
    pub(super) directive: String,
    pub(super) why: String,
}

fn untranslated(at: &str, directive: &str, why: impl Into<String>) -> Untranslated {
    Untranslated {
        at: at.to_string(),
        directive: directive.to_string(),
        why: why.into(),
    }
}

/// A translated FastCGI location: its proxy action, and which of the location's `set`s its
/// parameters used (Debian's `set $path_info $fastcgi_path_info`).
pub(super) struct Translated {
    pub(super) action: Vec<(Value, Value)>,
    pub(super) used_sets: Vec<usize>,
}

/// The location holding `pass` (`fastcgi_pass`) as a proxy route to a FastCGI upstream.
pub(super) fn location(
    cx: &mut Ctx,
    pass: &Directive,
    scope: &Scope,
    try_files: Option<&[String]>,
    alias: bool,
    sets: &[&Directive],
) -> Result<Translated, Untranslated> {
    let at = pass.at();
    let root = match (&scope.root, alias) {
        (_, true) => {
            return Err(untranslated(
                &at,
                "fastcgi_pass",
                "with `alias`, which is not translated here",
            ))
        }
        // nginx's own default, `root html` under its prefix.
        (None, _) => {
            let r = format!("{}/html", cx.prefix);
            cx.out.skipped.push(format!(
                "{at}: fastcgi_pass: no `root`: nginx's default, {r:?}, is the scripts' root"
            ));
            r
        }
        (Some(r), _) if r.contains('$') => {
            return Err(untranslated(
                &at,
                "fastcgi_pass",
                format!("with a root that has a variable ({r:?})"),
            ))
        }
        (Some(r), _) => r.clone(),
    };
    // `try_files $uri =404` wants the whole path to be a file; Debian's snippet checks the
    // script's name (weir's `require_file` checks that).
    // Laravel's `try_files $uri /index.php =404`: a script that is not there runs the front
    // controller (weir's `fallback`), the request's URI unchanged.
    let mut front: Option<String> = None;
    let whole = match try_files {
        None => false,
        Some([f, st]) if st == "=404" && f == "$uri" => true,
        Some([f, st]) if st == "=404" && f == "$fastcgi_script_name" => false,
        Some([f, fb, st])
            if st == "=404"
                && f == "$uri"
                && fb.starts_with('/')
                && fb.ends_with(".php")
                && !fb.contains(['$', '?']) =>
        {
            front = Some(fb.clone());
            true
        }
        Some(t) => {
            return Err(untranslated(
                &at,
                "try_files",
                format!("{:?} before fastcgi_pass is not translated (only `$uri =404`, `$uri /front.php =404` or `$fastcgi_script_name =404`)", t.join(" ")),
            ))
        }
    };
    let (params, by_filename, used_sets) = params(scope, &root, sets, &at)?;
    let split = match &scope.fastcgi.split {
        _ if whole || by_filename => WHOLE_PATH.to_string(),
        None => WHOLE_PATH.to_string(),
        Some((re, split_at)) => {
            let ok = regex::Regex::new(re).is_ok_and(|r| r.captures_len() == 3);
            if !ok {
                return Err(untranslated(
                    split_at,
                    "fastcgi_split_path_info",
                    format!("{re:?} is not a regex with two captures weir's engine takes"),
                ));
            }
            re.clone()
        }
    };
    let index = scope
        .fastcgi
        .index
        .clone()
        .unwrap_or_else(|| "index.php".into());
    if index.is_empty() || index.contains(['/', '$']) {
        return Err(untranslated(
            &at,
            "fastcgi_index",
            format!("{index:?} is not a script's file name"),
        ));
    }
    let mut up = servers(cx, pass, scope)?;
    up.insert(s("protocol"), s("fastcgi"));
    // Connections kept (FCGI_KEEP_CONN) only where nginx kept them (`keepalive` left).
    let kept = !matches!(
        up.get(s("keepalive")).and_then(|k| k.get(s("max_idle"))),
        Some(Value::Number(n)) if n.as_u64() == Some(0)
    );
    let mut f = vec![
        ("root", s(&root)),
        ("index", s(&index)),
        ("split_path_info", s(&split)),
        ("require_file", Value::Bool(true)),
    ];
    if kept {
        f.push(("keep_conn", Value::Bool(true)));
    }
    if let Some(fb) = &front {
        f.push(("fallback", s(fb)));
    }
    // nginx passes PATH_INFO only where a `fastcgi_param` says so (Debian's snippet does).
    if !scope.fastcgi.params.iter().any(|p| p.name == "PATH_INFO") {
        f.push(("path_info", Value::Bool(false)));
    }
    if !params.is_empty() {
        f.push(("params", Value::Mapping(params)));
    }
    up.insert(s("fastcgi"), map(f));
    let mut timeouts = Vec::new();
    if let Some(t) = &scope.fastcgi.connect_timeout {
        timeouts.push(("connect", s(t)));
    }
    if let Some(t) = &scope.fastcgi.read_timeout {
        // nginx's read timeout is between two reads: the head's wait and the body's pauses.
        timeouts.push(("response_header", s(t)));
        timeouts.push(("idle", s(t)));
    }
    if !timeouts.is_empty() {
        up.insert(s("timeouts"), map(timeouts));
    }
    let name = named_upstream(cx, "php", Value::Mapping(up));
    if let Some(block) = pass.args.first().filter(|b| cx.fastcgi_blocks.contains(*b)) {
        if !cx.from_blocks.iter().any(|(b, _)| b == block) {
            cx.from_blocks.push((block.clone(), name.clone()));
        }
    }
    cx.done();
    Ok(Translated {
        action: vec![(s("proxy"), map(vec![("upstream", s(&name))]))],
        used_sets,
    })
}

/// The upstream's servers (with an `upstream` block's policy), and its keepalive.
fn servers(cx: &mut Ctx, pass: &Directive, scope: &Scope) -> Result<Mapping, Untranslated> {
    let at = pass.at();
    let Some(addr) = pass.args.first() else {
        return Err(untranslated(&at, "fastcgi_pass", "without an address"));
    };
    let mut up = Mapping::new();
    let mut kept = false;
    if addr.contains('$') {
        return Err(untranslated(
            &at,
            "fastcgi_pass",
            "with a variable is not translated",
        ));
    } else if let Some(Value::Mapping(block)) = cx.upstreams.get(s(addr)).cloned() {
        for k in ["servers", "policy", "keepalive"] {
            if let Some(v) = block.get(s(k)) {
                up.insert(s(k), v.clone());
            }
        }
        kept = scope.fastcgi.keep_conn && block.contains_key(s("keepalive"));
        cx.fastcgi_blocks.insert(addr.clone());
    } else if addr.starts_with("unix:/") || addr.contains(':') {
        up.insert(s("servers"), Value::Sequence(vec![s(addr)]));
    } else {
        return Err(untranslated(
            &at,
            "fastcgi_pass",
            format!("{addr:?} is neither host:port, unix:/path nor an upstream"),
        ));
    }
    if !kept {
        up.insert(
            s("keepalive"),
            map(vec![("max_idle", Value::Number(0.into()))]),
        );
    }
    Ok(up)
}

/// `base`, or `base_2`, ...: a new upstream holding `up`, or the one that already does.
fn named_upstream(cx: &mut Ctx, base: &str, up: Value) -> String {
    if let Some((k, _)) = cx.upstreams.iter().find(|(_, v)| **v == up) {
        if let Some(k) = k.as_str() {
            return k.to_string();
        }
    }
    let mut name = base.to_string();
    let mut n = 1;
    while cx.upstreams.contains_key(s(&name)) {
        n += 1;
        name = format!("{base}_{n}");
    }
    cx.upstreams.insert(s(&name), up);
    name
}

/// What weir makes of one `fastcgi_param`.
#[derive(Debug, PartialEq)]
enum Kind {
    /// weir sets it so itself.
    Builtin,
    /// A constant: `params`.
    Const(String),
    /// Not sent by nginx either (`if_not_empty` with nothing), or never by weir (`HTTP_PROXY`).
    Drop,
    Unknown(String),
}

/// The parameters weir sets itself, and the nginx values it sets them to.
const BUILTIN: &[(&str, &[&str])] = &[
    ("QUERY_STRING", &["$query_string", "$args"]),
    ("REQUEST_METHOD", &["$request_method"]),
    ("CONTENT_TYPE", &["$content_type"]),
    ("CONTENT_LENGTH", &["$content_length"]),
    ("SCRIPT_NAME", &["$fastcgi_script_name"]),
    (
        "SCRIPT_FILENAME",
        &[
            "$document_root$fastcgi_script_name",
            "$realpath_root$fastcgi_script_name",
            "$request_filename",
        ],
    ),
    ("PATH_INFO", &["$fastcgi_path_info"]),
    ("REQUEST_URI", &["$request_uri"]),
    ("DOCUMENT_URI", &["$document_uri", "$uri"]),
    ("DOCUMENT_ROOT", &["$document_root", "$realpath_root"]),
    ("SERVER_PROTOCOL", &["$server_protocol"]),
    ("REQUEST_SCHEME", &["$scheme"]),
    ("HTTPS", &["$https"]),
    ("GATEWAY_INTERFACE", &["CGI/1.1"]),
    ("SERVER_SOFTWARE", &["nginx/$nginx_version", "nginx"]),
    ("REMOTE_ADDR", &["$remote_addr"]),
    ("REMOTE_PORT", &["$remote_port"]),
    // weir does not pass these two (listed in docs/config.md).
    ("REMOTE_USER", &["$remote_user"]),
    ("SERVER_ADDR", &["$server_addr"]),
    ("SERVER_PORT", &["$server_port"]),
    ("REDIRECT_STATUS", &["200"]),
    // Debian's fastcgi_params; weir passes the request's Host field.
    ("HTTP_HOST", &["$host", "$http_host"]),
];

/// The parameters weir derives the script from: a constant cannot replace them.
const SCRIPT: &[&str] = &[
    "SCRIPT_FILENAME",
    "SCRIPT_NAME",
    "PATH_INFO",
    "DOCUMENT_ROOT",
];

fn classify(p: &Param, value: &str, root: &str, server_name: Option<&str>) -> Kind {
    let name = p.name.as_str();
    let root = root.trim_end_matches('/');
    let known = BUILTIN
        .iter()
        .any(|(n, vs)| *n == name && vs.contains(&value))
        || (name == "SCRIPT_FILENAME" && value == format!("{root}$fastcgi_script_name"))
        || (name == "DOCUMENT_ROOT" && value.trim_end_matches('/') == root);
    if known {
        return Kind::Builtin;
    }
    if name == "SERVER_NAME" && value == "$server_name" {
        // nginx's `$server_name` is the server's first name, whatever the Host.
        return Kind::Const(server_name.unwrap_or_default().to_string());
    }
    if name.eq_ignore_ascii_case("HTTP_PROXY") && value.is_empty() {
        return Kind::Drop;
    }
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Kind::Unknown("is not a parameter name weir passes".into());
    }
    if value.contains('$') {
        return Kind::Unknown("has a value weir does not set".into());
    }
    if SCRIPT.contains(&name) {
        return Kind::Unknown("names the script, which weir finds from the path itself".into());
    }
    if p.if_not_empty && value.is_empty() {
        return Kind::Drop;
    }
    Kind::Const(value.to_string())
}

/// The location's parameters as weir's `params` (constants), whether `SCRIPT_FILENAME` is
/// `$request_filename` (the whole path, never split), and the `set`s they used.
fn params(
    scope: &Scope,
    root: &str,
    sets: &[&Directive],
    at: &str,
) -> Result<(Mapping, bool, Vec<usize>), Untranslated> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut filename = None;
    let mut used = Vec::new();
    for p in &scope.fastcgi.params {
        let value = canonical(&p.value, sets, &mut used);
        match classify(p, &value, root, scope.server_name.as_deref()) {
            Kind::Builtin => {
                out.retain(|(n, _)| *n != p.name);
                if p.name == "SCRIPT_FILENAME" {
                    filename = Some(value);
                }
            }
            Kind::Const(v) => {
                out.retain(|(n, _)| *n != p.name);
                out.push((p.name.clone(), v));
            }
            Kind::Drop => {}
            Kind::Unknown(why) => {
                return Err(untranslated(
                    &p.at,
                    "fastcgi_param",
                    format!("{} {:?} {why}", p.name, p.value),
                ))
            }
        }
    }
    let Some(filename) = filename else {
        return Err(untranslated(
            at,
            "fastcgi_pass",
            "without `fastcgi_param SCRIPT_FILENAME`: php-fpm runs no script (nginx answers its 404)",
        ));
    };
    let mut m = Mapping::new();
    for (k, v) in out {
        m.insert(s(&k), s(&v));
    }
    used.sort_unstable();
    used.dedup();
    Ok((m, filename == "$request_filename", used))
}

/// `value` with `${name}` written `$name`, and the location's `set` variables replaced by
/// their values (their indices in `used`).
fn canonical(value: &str, sets: &[&Directive], used: &mut Vec<usize>) -> String {
    let b = value.as_bytes();
    let mut out = String::with_capacity(value.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'$' {
            let c = value[i..].chars().next().unwrap_or(' ');
            out.push(c);
            i += c.len_utf8();
            continue;
        }
        let braced = b.get(i + 1) == Some(&b'{');
        let start = i + 1 + usize::from(braced);
        let mut end = start;
        while end < b.len() && (b[end].is_ascii_alphanumeric() || b[end] == b'_') {
            end += 1;
        }
        let name = &value[start..end];
        let set = sets.iter().position(|d| {
            d.args.len() == 2 && d.args[0].strip_prefix('$') == Some(name) && !name.is_empty()
        });
        match set {
            Some(k) => {
                used.push(k);
                out.push_str(&sets[k].args[1]);
            }
            None => {
                out.push('$');
                out.push_str(name);
            }
        }
        i = end + usize::from(braced && b.get(end) == Some(&b'}'));
    }
    out
}

/// The front controller twin of FastCGI upstream `name` for a static route of `root`: its
/// `fallback` the script `fallback`, and a split that names a directory's `index` script or
/// nothing (so a path names no other script: nginx reaches the front controller, or a
/// directory's index, and nothing else through `try_files`); `dir_candidate`: the
/// `try_files` has `$uri/` (else a directory runs the fallback, never 403). `None` when `name`
/// is no FastCGI upstream of that root.
pub(super) fn front(
    cx: &mut Ctx,
    name: &str,
    root: &str,
    fallback: &str,
    index: Option<&str>,
    dir_candidate: bool,
) -> Option<String> {
    let Some(Value::Mapping(mut up)) = cx.upstreams.get(s(name)).cloned() else {
        return None;
    };
    if up.get(s("protocol")).and_then(Value::as_str) != Some("fastcgi") {
        return None;
    }
    let Some(Value::Mapping(f)) = up.get_mut(s("fastcgi")) else {
        return None;
    };
    let same_root = f
        .get(s("root"))
        .and_then(Value::as_str)
        .is_some_and(|r| r.trim_end_matches('/') == root.trim_end_matches('/'));
    // An upstream already falling back elsewhere is not this front controller; one falling
    // back to the same script (Laravel's PHP location) is.
    let other = f
        .get(s("fallback"))
        .is_some_and(|v| v.as_str() != Some(fallback));
    if !same_root || other {
        return None;
    }
    let split = match index {
        Some(n) => format!(r"(?s)^(.*/{}$|)(.*)$", regex::escape(n)),
        None => r"(?s)^()(.*)$".to_string(),
    };
    if let Some(n) = index {
        f.insert(s("index"), s(n));
    }
    f.insert(s("split_path_info"), s(&split));
    f.insert(s("fallback"), s(fallback));
    if !dir_candidate {
        f.insert(s("directories"), s("fallback"));
    }
    Some(named_upstream(cx, "php_front", Value::Mapping(up)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param(name: &str, value: &str) -> Param {
        Param {
            name: name.into(),
            value: value.into(),
            if_not_empty: false,
            at: "x:1".into(),
        }
    }

    #[test]
    fn parameters_weir_sets_constants_and_the_rest() {
        let k = |n: &str, v: &str| classify(&param(n, v), v, "/srv/www/", Some("example.com"));
        assert_eq!(
            k("SCRIPT_FILENAME", "$document_root$fastcgi_script_name"),
            Kind::Builtin
        );
        assert_eq!(
            k("SCRIPT_FILENAME", "/srv/www$fastcgi_script_name"),
            Kind::Builtin
        );
        assert_eq!(
            k("SERVER_NAME", "$server_name"),
            Kind::Const("example.com".into())
        );
        assert_eq!(k("APP_ENV", "production"), Kind::Const("production".into()));
        assert_eq!(k("HTTP_PROXY", ""), Kind::Drop);
        assert!(matches!(
            k("PATH_TRANSLATED", "$document_root$fastcgi_path_info"),
            Kind::Unknown(_)
        ));
        assert!(matches!(
            k("SCRIPT_FILENAME", "/srv/app.php"),
            Kind::Unknown(_)
        ));
        assert!(matches!(k("X", "$cookie_a"), Kind::Unknown(_)));
    }

    #[test]
    fn braces_and_set_variables_are_resolved() {
        let set = Directive {
            name: "set".into(),
            args: vec!["$path_info".into(), "$fastcgi_path_info".into()],
            block: None,
            file: std::sync::Arc::new("f".into()),
            line: 1,
        };
        let mut used = Vec::new();
        assert_eq!(
            canonical("${document_root}$fastcgi_script_name", &[&set], &mut used),
            "$document_root$fastcgi_script_name"
        );
        assert!(used.is_empty());
        assert_eq!(
            canonical("$path_info", &[&set], &mut used),
            "$fastcgi_path_info"
        );
        assert_eq!(used, [0]);
    }

    #[test]
    fn the_front_split_names_a_directory_s_index_or_nothing() {
        let re = regex::Regex::new(r"(?s)^(.*/index\.php$|)(.*)$").unwrap();
        let name = |p: &str| re.captures(p).unwrap()[1].to_string();
        assert_eq!(name("/wp-admin/index.php"), "/wp-admin/index.php");
        assert_eq!(name("/index.php"), "/index.php");
        assert_eq!(name("/info.php/extra"), "");
        assert_eq!(name("/a/index.php/x"), "");
        assert_eq!(name("/.htaccess"), "");
        assert_eq!(name("/x\n/index.php"), "/x\n/index.php");
        let whole = regex::Regex::new(WHOLE_PATH).unwrap();
        assert_eq!(&whole.captures("/a.php/b.php").unwrap()[1], "/a.php/b.php");
    }
}
