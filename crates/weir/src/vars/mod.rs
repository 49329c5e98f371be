//! Request variables: `$host`, `$request_uri`, `$arg_page`, `$http_x_api_key`, `$cookie_session`,
//! ... in config values (a `respond`'s status, fields and body, `redirect`, header edits,
//! rate-limit and concurrency keys). nginx's names and meanings, so a `return 301
//! https://$host$request_uri;` reads the same here.
//!
//! A value is compiled once at config load into literal and variable pieces ([`Template`]); an
//! unknown name is a config error that names the key (and so the line). Rendering is a walk over
//! the pieces into a caller's buffer. A value without a `$` compiles to one literal and callers
//! keep their pre-encoded fast path for it ([`Template::literal`]).
//!
//! Syntax: `$name` where the name starts with a lowercase letter or `_` and runs over ASCII
//! letters, digits and `_` (`$arg_Page` keeps its case); `$1`..`$9` are the captures of the
//! route's `path_regex`. `${...}` is taken by environment interpolation before YAML is read;
//! write `$${name}` for a variable followed by a letter (`$${host}name`). A `$` followed by
//! anything else (`$0`, `US$`, `$HOME`) is literal text.
//!
//! The access log's templates (`access_log/format.rs`) are scanned by the same [`scan`], with
//! their own names (they also see the response and timings).
//!
//! After an authentication filter accepted a request, `$consumer` is who it is (the API key's
//! consumer, the Basic user, the token's `sub`) and `$jwt_claim_NAME` a claim of the verified
//! token ([`Identity`]); both are empty before, or on routes without one.

pub mod map;

use std::net::IpAddr;

use weir_http::RequestHead;

/// One piece of a scanned template: text, or a variable of the caller's kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece<V> {
    Text(Vec<u8>),
    Var(V),
}

/// Splits `t` into text and `$variables`, naming each variable with `name` (which says what
/// is wrong with an unknown one). `${name}` (after `$${` in a config file) delimits a name.
pub fn scan<V>(t: &str, name: impl Fn(&str) -> Result<V, String>) -> Result<Vec<Piece<V>>, String> {
    let mut pieces = Vec::new();
    let mut text = Vec::new();
    let mut rest = t;
    while let Some(i) = rest.find('$') {
        text.extend_from_slice(&rest.as_bytes()[..i]);
        let after_dollar = &rest[i + 1..];
        let (found, after) = if let Some(inner) = after_dollar.strip_prefix('{') {
            let end = inner
                .find('}')
                .ok_or_else(|| format!("unclosed ${{ in {t:?}"))?;
            (&inner[..end], &inner[end + 1..])
        } else {
            let starts = after_dollar
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_lowercase() || b == b'_' || (b'1'..=b'9').contains(&b));
            if !starts {
                text.push(b'$');
                rest = after_dollar;
                continue;
            }
            let end = if after_dollar.as_bytes()[0].is_ascii_digit() {
                1
            } else {
                after_dollar
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(after_dollar.len())
            };
            (&after_dollar[..end], &after_dollar[end..])
        };
        if found.is_empty() {
            return Err(format!("an empty ${{}} in {t:?}"));
        }
        if !text.is_empty() {
            pieces.push(Piece::Text(std::mem::take(&mut text)));
        }
        pieces.push(Piece::Var(name(found)?));
        rest = after;
    }
    text.extend_from_slice(rest.as_bytes());
    if !text.is_empty() {
        pieces.push(Piece::Text(text));
    }
    Ok(pieces)
}

/// A request variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Var {
    /// The host, normalised, without the port.
    Host,
    /// `http` or `https`.
    Scheme,
    /// The target as sent: path and query.
    RequestUri,
    /// The path.
    Uri,
    /// The query, without `?`.
    Args,
    /// `?` when there is a query, else nothing.
    IsArgs,
    /// One query parameter's value, as sent (first occurrence).
    Arg(String),
    /// A request field (lowercase, `-` for `_`); several are joined with `, `.
    Http(String),
    /// One cookie's value.
    Cookie(String),
    RemoteAddr,
    Method,
    /// The route's name.
    Route,
    /// A capture of the route's `path_regex` (1-9).
    Capture(usize),
    /// Who an authentication filter said the client is.
    Consumer,
    /// A claim of the verified token: strings as they are, other values as JSON.
    Claim(String),
    /// A `maps:` entry's value (`map.rs`).
    Map(std::sync::Arc<map::Map>),
}

/// Who a request is, once an authentication filter accepted it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Identity {
    /// The consumer (API key), user (Basic) or subject (JWT `sub`).
    pub consumer: String,
    /// A verified token's claims (empty for other kinds).
    pub claims: serde_json::Map<String, serde_json::Value>,
    /// Field lines (`Name: value\r\n`) the authenticator adds to the upstream request (an
    /// auth service's `X-User-Id`).
    pub upstream_fields: bytes::Bytes,
}

impl Identity {
    /// Appends claim `name` to `out`: a string as it is, another value as JSON.
    pub fn claim(&self, name: &str, out: &mut Vec<u8>) {
        match self.claims.get(name) {
            None | Some(serde_json::Value::Null) => {}
            Some(serde_json::Value::String(s)) => out.extend_from_slice(s.as_bytes()),
            Some(v) => out.extend_from_slice(v.to_string().as_bytes()),
        }
    }
}

const NAMES: &[(&str, Var)] = &[
    ("host", Var::Host),
    ("scheme", Var::Scheme),
    ("request_uri", Var::RequestUri),
    ("uri", Var::Uri),
    ("args", Var::Args),
    ("query_string", Var::Args),
    ("is_args", Var::IsArgs),
    ("remote_addr", Var::RemoteAddr),
    ("request_method", Var::Method),
    ("route", Var::Route),
    ("consumer", Var::Consumer),
];

/// The variable called `name`, or why there is none.
pub fn variable(name: &str) -> Result<Var, String> {
    if let Some((_, v)) = NAMES.iter().find(|(n, _)| *n == name) {
        return Ok(v.clone());
    }
    let rest = |p: &str| name.strip_prefix(p).filter(|n| !n.is_empty());
    if let Some(n) = rest("arg_") {
        return Ok(Var::Arg(n.to_string()));
    }
    if let Some(n) = rest("http_") {
        return Ok(Var::Http(n.replace('_', "-").to_ascii_lowercase()));
    }
    if let Some(n) = rest("cookie_") {
        return Ok(Var::Cookie(n.to_string()));
    }
    if let Some(n) = rest("jwt_claim_") {
        return Ok(Var::Claim(n.to_string()));
    }
    if let Ok(n) = name.parse::<usize>() {
        if (1..=9).contains(&n) {
            return Ok(Var::Capture(n));
        }
    }
    if let Some(m) = map::lookup(name) {
        return Ok(Var::Map(m));
    }
    let known: Vec<&str> = NAMES.iter().map(|(n, _)| *n).collect();
    Err(format!(
        "unknown variable ${name}; known: {}, arg_NAME, http_NAME, cookie_NAME, jwt_claim_NAME, 1-9 (path_regex captures), and the names of `maps:` defined",
        known.join(", ")
    ))
}

/// What variables are rendered from: one request.
#[derive(Debug, Clone, Copy)]
pub struct Env<'a> {
    pub head: &'a RequestHead,
    pub scheme: &'static str,
    pub client: IpAddr,
    pub route: &'a str,
    /// The route's `path_regex`, for `$1`..`$9`.
    pub regex: Option<&'a regex::bytes::Regex>,
    /// Who the client is, once an authentication filter said so.
    pub identity: Option<&'a Identity>,
}

/// A compiled value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pieces: Vec<Piece<Var>>,
    /// The largest capture used (0: none).
    captures: usize,
}

impl Template {
    /// Compiles `t`; the error says what is wrong (the caller adds the key).
    pub fn parse(t: &str) -> Result<Template, String> {
        let pieces = scan(t, variable)?;
        let captures = pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Var(Var::Capture(n)) => Some(*n),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        Ok(Template { pieces, captures })
    }

    /// The text, when the value has no variable.
    pub fn literal(&self) -> Option<&[u8]> {
        match &self.pieces[..] {
            [] => Some(b""),
            [Piece::Text(t)] => Some(t),
            _ => None,
        }
    }

    /// The largest `$N` capture the value uses (0: none): a route needs a `path_regex` with at
    /// least that many groups.
    pub fn captures(&self) -> usize {
        self.captures
    }

    /// Whether the value uses `v`.
    pub fn uses(&self, v: &Var) -> bool {
        self.pieces.iter().any(|p| p == &Piece::Var(v.clone()))
    }

    /// Appends the value for `env` to `out`.
    pub fn render(&self, env: &Env<'_>, out: &mut Vec<u8>) {
        let caps = match (self.captures, env.regex) {
            (0, _) | (_, None) => None,
            (_, Some(re)) => re.captures(env.head.path()),
        };
        for p in &self.pieces {
            match p {
                Piece::Text(t) => out.extend_from_slice(t),
                Piece::Var(Var::Capture(n)) => {
                    if let Some(m) = caps.as_ref().and_then(|c| c.get(*n)) {
                        out.extend_from_slice(m.as_bytes());
                    }
                }
                Piece::Var(v) => value(v, env, out),
            }
        }
    }

    /// The value for `env` as a new buffer.
    pub fn to_vec(&self, env: &Env<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        self.render(env, &mut out);
        out
    }
}

pub(crate) fn value(v: &Var, env: &Env<'_>, out: &mut Vec<u8>) {
    let head = env.head;
    match v {
        Var::Host => out.extend_from_slice(head.host().unwrap_or(b"")),
        Var::Scheme => out.extend_from_slice(env.scheme.as_bytes()),
        Var::RequestUri => {
            out.extend_from_slice(head.path());
            if let Some(q) = head.query() {
                out.push(b'?');
                out.extend_from_slice(q);
            }
        }
        Var::Uri => out.extend_from_slice(head.path()),
        Var::Args => out.extend_from_slice(head.query().unwrap_or(b"")),
        Var::IsArgs => {
            if head.query().is_some() {
                out.push(b'?');
            }
        }
        Var::Arg(name) => {
            if let Some(v) = arg(head.query().unwrap_or(b""), name.as_bytes()) {
                out.extend_from_slice(v);
            }
        }
        Var::Http(name) => {
            let mut first = true;
            for h in head
                .headers()
                .iter()
                .filter(|h| h.name.eq_ignore_ascii_case(name.as_bytes()))
            {
                if !first {
                    out.extend_from_slice(if name == "cookie" { b"; " } else { b", " });
                }
                out.extend_from_slice(&h.value);
                first = false;
            }
        }
        Var::Cookie(name) => {
            if let Some(v) = cookie(head, name.as_bytes()) {
                out.extend_from_slice(v);
            }
        }
        Var::RemoteAddr => {
            let mut buf = [0u8; 64];
            out.extend_from_slice(format_ip(env.client, &mut buf));
        }
        Var::Method => out.extend_from_slice(head.method.as_str().as_bytes()),
        Var::Route => out.extend_from_slice(env.route.as_bytes()),
        Var::Consumer => {
            if let Some(id) = env.identity {
                out.extend_from_slice(id.consumer.as_bytes());
            }
        }
        Var::Claim(name) => {
            if let Some(id) = env.identity {
                id.claim(name, out);
            }
        }
        Var::Capture(_) => {}
        Var::Map(m) => m.render(env, out),
    }
}

/// Whether a rendered value can go in a field as it is: no control bytes but tab (a request's
/// values have none, but a template's text could be joined into something a field must not be).
pub fn field_safe(v: &[u8]) -> bool {
    v.iter().all(|b| *b == b'\t' || *b >= b' ' && *b != 0x7f)
}

/// Writes an IP address into `buf` without allocating; returns the text. IPv4 by hand: the
/// `fmt` machinery cost ~500 instructions per proxied request (callgrind).
pub fn format_ip(ip: std::net::IpAddr, buf: &mut [u8; 64]) -> &[u8] {
    match ip {
        // A unix socket's client (`runtime::UNIX_PEER`), written as nginx writes it.
        std::net::IpAddr::V4(a) if a.is_unspecified() => b"unix:",
        std::net::IpAddr::V4(a) => {
            // Each octet's digits written straight (itoa's buffer and copy per octet cost
            // ~170 instructions per proxied request, callgrind 2026-11-27).
            let mut n = 0;
            for (i, &octet) in a.octets().iter().enumerate() {
                if i > 0 {
                    buf[n] = b'.';
                    n += 1;
                }
                if octet >= 100 {
                    buf[n] = b'0' + octet / 100;
                    n += 1;
                }
                if octet >= 10 {
                    buf[n] = b'0' + octet / 10 % 10;
                    n += 1;
                }
                buf[n] = b'0' + octet % 10;
                n += 1;
            }
            &buf[..n]
        }
        std::net::IpAddr::V6(_) => {
            use std::io::Write as _;
            let mut cur = std::io::Cursor::new(&mut buf[..]);
            let _ = write!(cur, "{ip}");
            let n = cur.position() as usize;
            &buf[..n]
        }
    }
}

/// The first value of query parameter `name` in `query` (`a=1&b=2`), as sent. The name is
/// matched without regard to ASCII case, as nginx's `$arg_NAME` (the review of issue 53: an
/// `if ($arg_debug)` deny let `?DEBUG=1` through).
pub fn arg<'q>(query: &'q [u8], name: &[u8]) -> Option<&'q [u8]> {
    query.split(|b| *b == b'&').find_map(|pair| {
        let (k, v) = match pair.iter().position(|b| *b == b'=') {
            Some(i) => (&pair[..i], &pair[i + 1..]),
            None => (pair, &b""[..]),
        };
        k.eq_ignore_ascii_case(name).then_some(v)
    })
}

/// The value of cookie `name` in the request's `Cookie` fields.
pub fn cookie<'h>(head: &'h RequestHead, name: &[u8]) -> Option<&'h [u8]> {
    head.headers()
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case(b"cookie"))
        .find_map(|h| cookie_in(&h.value, name))
}

/// The value of cookie `name` in one `Cookie` field value (`a=1; b=2`); the name matched
/// without regard to ASCII case, as nginx's `$cookie_NAME`.
pub fn cookie_in<'v>(value: &'v [u8], name: &[u8]) -> Option<&'v [u8]> {
    value.split(|b| *b == b';').find_map(|pair| {
        let pair = pair.trim_ascii();
        let i = pair.iter().position(|b| *b == b'=')?;
        pair[..i]
            .trim_ascii()
            .eq_ignore_ascii_case(name)
            .then(|| pair[i + 1..].trim_ascii())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(raw: &str) -> RequestHead {
        let mut b = bytes::BytesMut::from(raw.as_bytes());
        weir_http::parse_request(&mut b, &Default::default())
            .unwrap()
            .unwrap()
    }

    fn render(t: &str, raw: &str) -> String {
        let h = head(raw);
        let re = regex::bytes::Regex::new("^/old/(.*)$").unwrap();
        let env = Env {
            head: &h,
            scheme: "https",
            client: "192.0.2.7".parse().unwrap(),
            route: "r1",
            regex: Some(&re),
            identity: None,
        };
        String::from_utf8(Template::parse(t).unwrap().to_vec(&env)).unwrap()
    }

    #[test]
    fn variables_table() {
        let raw = "GET /old/a/b?x=1&page=2&e HTTP/1.1\r\nHost: Example.COM:8080\r\nCookie: a=1; sid=xyz\r\nX-Api-Key: k1\r\nX-Api-Key: k2\r\n\r\n";
        let table = [
            (
                "https://$host$request_uri",
                "https://example.com/old/a/b?x=1&page=2&e",
            ),
            (
                "$scheme|$uri|$args|$is_args",
                "https|/old/a/b|x=1&page=2&e|?",
            ),
            ("$arg_page|$arg_e|$arg_missing|", "2|||"),
            // Names without regard to ASCII case, as nginx's.
            ("$arg_PAGE|$arg_X|$cookie_SID", "2|1|xyz"),
            ("$http_x_api_key", "k1, k2"),
            ("$cookie_sid/$cookie_a/$cookie_none", "xyz/1/"),
            ("$remote_addr $route $request_method", "192.0.2.7 r1 GET"),
            ("/new/$1$is_args$args", "/new/a/b?x=1&page=2&e"),
            (
                "$${host}name costs US$0 or $HOME $",
                "example.comname costs US$0 or $HOME $",
            ),
            ("plain", "plain"),
        ];
        for (t, want) in table {
            let t = t.replace("$${", "${");
            assert_eq!(render(&t, raw), want, "{t}");
        }
    }

    #[test]
    fn unknown_names_and_literals() {
        assert!(Template::parse("$nope")
            .unwrap_err()
            .contains("unknown variable $nope"));
        assert!(Template::parse("${host").unwrap_err().contains("unclosed"));
        assert_eq!(
            Template::parse("a $0").unwrap().literal(),
            Some(&b"a $0"[..])
        );
        assert_eq!(Template::parse("").unwrap().literal(), Some(&b""[..]));
        assert_eq!(Template::parse("$host").unwrap().literal(), None);
        assert_eq!(Template::parse("$2-$1").unwrap().captures(), 2);
    }
}
