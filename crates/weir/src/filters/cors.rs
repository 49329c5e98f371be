//! `cors`: Cross-Origin Resource Sharing (Fetch standard, CORS protocol). Preflights
//! (`OPTIONS` with `Origin` and `Access-Control-Request-Method`) are answered here, in the
//! request phase; other requests from an allowed origin get their `Access-Control-Allow-*`
//! fields in the response phase, which runs after the cache lookup: a stored response never
//! carries one client's `Access-Control-Allow-Origin` to another. Every response of the route
//! says `Vary: Origin` (what it carries depends on the request's Origin).
//!
//! Origins: exact (`https://app.example`), a `*.` suffix (`https://*.example.com`: any
//! subdomain, any port not included), a regular expression (`~^https://[a-z]+\.example$`), or
//! `*` (any; with `credentials` the request's own origin is echoed, as `*` cannot carry
//! credentials). Private Network Access: with `private_network`, a preflight that asks
//! (`Access-Control-Request-Private-Network: true`) is allowed.

use bytes::{Bytes, BytesMut};
use weir_http::{Method, Reply};

use super::registry::{plain, Build, Built, Cx};
use super::{Answer, Caps, Flow, Phases, Req, State};
use crate::config::{model, CompileError};

#[derive(Debug)]
enum Origin {
    Any,
    Exact(String),
    /// `scheme://` and the domain after `*.`.
    Suffix(String, String),
    Regex(regex::Regex),
}

#[derive(Debug)]
pub struct Cors {
    origins: Vec<Origin>,
    methods: Vec<String>,
    /// Allowed request fields, lowercase; `*`: any.
    headers: Vec<String>,
    any_header: bool,
    /// `Access-Control-Expose-Headers: ...\r\n`, or empty.
    expose_line: Bytes,
    credentials: bool,
    max_age: u64,
    private_network: bool,
}

/// The origin a request came from, when allowed: what its response echoes.
#[derive(Debug)]
struct Allowed(Bytes);

/// This request was a preflight, answered by this filter with its own `Vary`.
#[derive(Debug)]
struct Preflight;

impl Build<&Cx<'_>> for model::CorsRule {
    type Output = Built;

    fn build(self, cx: &Cx<'_>) -> Built {
        plain(Cors::compile(self, cx.path)?)
    }
}

impl Cors {
    pub(crate) fn compile(c: model::CorsRule, path: &str) -> Result<Cors, CompileError> {
        if c.origins.is_empty() {
            return Err((format!("{path}.origins"), "give at least one origin".into()));
        }
        if c.credentials && c.origins.iter().any(|o| o == "*") {
            return Err((
                format!("{path}.credentials"),
                "credentials: true with origins: [\"*\"] lets every site read responses with the user's cookies: list the origins (or a ~regex of them)".into(),
            ));
        }
        let mut origins = Vec::new();
        for (i, o) in c.origins.iter().enumerate() {
            let key = format!("{path}.origins[{i}]");
            origins.push(if o == "*" {
                Origin::Any
            } else if let Some(re) = o.strip_prefix('~') {
                Origin::Regex(
                    regex::Regex::new(re).map_err(|e| (key, format!("invalid regex: {e}")))?,
                )
            } else if let Some((scheme, rest)) = o.split_once("://") {
                match rest.strip_prefix("*.") {
                    Some(domain) => Origin::Suffix(
                        format!("{scheme}://"),
                        format!(".{}", domain.to_ascii_lowercase()),
                    ),
                    None => Origin::Exact(o.to_ascii_lowercase()),
                }
            } else {
                return Err((
                    key,
                    format!("{o:?}: write scheme://host[:port], *, or ~regex"),
                ));
            });
        }
        let headers: Vec<String> = c.headers.iter().map(|h| h.to_ascii_lowercase()).collect();
        for h in c.headers.iter().chain(&c.expose) {
            if h != "*" {
                crate::config::check_header_name(h).map_err(|m| (format!("{path}.headers"), m))?;
            }
        }
        let expose_line = if c.expose.is_empty() {
            Bytes::new()
        } else {
            Bytes::from(format!(
                "Access-Control-Expose-Headers: {}\r\n",
                c.expose.join(", ")
            ))
        };
        Ok(Cors {
            origins,
            methods: c.methods.iter().map(|m| m.to_ascii_uppercase()).collect(),
            any_header: headers.iter().any(|h| h == "*"),
            headers,
            expose_line,
            credentials: c.credentials,
            max_age: c.max_age.0.as_secs(),
            private_network: c.private_network,
        })
    }

    fn allows(&self, origin: &[u8]) -> bool {
        let Ok(o) = std::str::from_utf8(origin) else {
            return false;
        };
        let lower = o.to_ascii_lowercase();
        self.origins.iter().any(|rule| match rule {
            Origin::Any => true,
            Origin::Exact(e) => *e == lower,
            Origin::Suffix(scheme, domain) => lower
                .strip_prefix(scheme.as_str())
                .is_some_and(|host| host.ends_with(domain.as_str()) && !host.contains(':')),
            Origin::Regex(re) => re.is_match(o),
        })
    }

    /// `Access-Control-Allow-Origin` (and `-Credentials`) for `origin`, as field lines.
    fn allow_origin(&self, origin: &[u8], out: &mut BytesMut) {
        let any = self.origins.iter().any(|o| matches!(o, Origin::Any));
        if any && !self.credentials {
            out.extend_from_slice(b"Access-Control-Allow-Origin: *\r\n");
        } else {
            weir_http::response::put_header(out, b"Access-Control-Allow-Origin", origin);
        }
        if self.credentials {
            out.extend_from_slice(b"Access-Control-Allow-Credentials: true\r\n");
        }
    }

    fn preflight(&self, req: &Req<'_>, origin: &[u8], method: &[u8]) -> Flow {
        let head = req.head;
        let method_ok = self
            .methods
            .iter()
            .any(|m| m.as_bytes().eq_ignore_ascii_case(method.trim_ascii()));
        let asked: Vec<&[u8]> = head
            .header("access-control-request-headers")
            .map(|v| {
                v.split(|b| *b == b',')
                    .map(|h| h.trim_ascii())
                    .filter(|h| !h.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        let headers_ok = self.any_header
            || asked.iter().all(|h| {
                self.headers
                    .iter()
                    .any(|a| a.as_bytes().eq_ignore_ascii_case(h))
            });
        let pna_asked = head
            .header("access-control-request-private-network")
            .is_some_and(|v| v.eq_ignore_ascii_case(b"true"));
        let vary = (
            Bytes::from_static(b"Vary"),
            Bytes::from_static(
                b"Origin, Access-Control-Request-Method, Access-Control-Request-Headers",
            ),
        );
        if !self.allows(origin) || !method_ok || !headers_ok || (pna_asked && !self.private_network)
        {
            return Flow::Respond(Answer {
                status: 403,
                fields: vec![vary],
                body: Bytes::from_static(b"CORS preflight refused\n"),
            });
        }
        let mut lines = BytesMut::new();
        self.allow_origin(origin, &mut lines);
        let mut fields = vec![vary];
        for line in lines[..].split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if let Some(i) = line.iter().position(|b| *b == b':') {
                fields.push((
                    Bytes::copy_from_slice(&line[..i]),
                    Bytes::copy_from_slice(line[i + 1..].trim_ascii()),
                ));
            }
        }
        fields.push((
            Bytes::from_static(b"Access-Control-Allow-Methods"),
            Bytes::from(self.methods.join(", ")),
        ));
        if !asked.is_empty() {
            // Echo what was asked (all of it is allowed): `*` is not a wildcard with credentials.
            fields.push((
                Bytes::from_static(b"Access-Control-Allow-Headers"),
                Bytes::from(asked.join(&b", "[..])),
            ));
        }
        if self.max_age > 0 {
            fields.push((
                Bytes::from_static(b"Access-Control-Max-Age"),
                Bytes::from(self.max_age.to_string()),
            ));
        }
        if pna_asked {
            fields.push((
                Bytes::from_static(b"Access-Control-Allow-Private-Network"),
                Bytes::from_static(b"true"),
            ));
        }
        Flow::Respond(Answer {
            status: 204,
            fields,
            body: Bytes::new(),
        })
    }
}

impl super::Filter for Cors {
    fn phases(&self) -> Phases {
        Phases::REQUEST | Phases::RESPONSE
    }

    fn caps(&self) -> Caps {
        Caps::STATE
    }

    fn request(&self, req: &Req<'_>, state: &mut State, _: &mut Option<usize>) -> Flow {
        let Some(origin) = req.head.header_bytes("origin") else {
            return Flow::Continue;
        };
        if req
            .head
            .headers()
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case(b"origin"))
            .nth(1)
            .is_some()
        {
            // Which one the browser meant cannot be told (RFC 6454 §7: one field).
            return Flow::Respond(Answer {
                status: 400,
                fields: Vec::new(),
                body: Bytes::from_static(b"more than one Origin field\n"),
            });
        }
        if req.head.method == Method::Options {
            if let Some(m) = req.head.header("access-control-request-method") {
                *state = Some(Box::new(Preflight));
                return self.preflight(req, &origin, m);
            }
        }
        if self.allows(&origin) {
            *state = Some(Box::new(Allowed(origin.clone())));
        }
        Flow::Continue
    }

    fn response<'a>(&'a self, reply: &mut Reply<'a>, state: &mut State, lines: &mut BytesMut) {
        if state.as_ref().is_some_and(|s| s.is::<Preflight>()) {
            return; // this filter's own preflight answer (allowed or refused) has its Vary
        }
        reply.add_lines(b"Vary: Origin\r\n");
        if let Some(Allowed(origin)) = state.as_ref().and_then(|s| s.downcast_ref()) {
            self.allow_origin(origin, lines);
            reply.add_lines(&self.expose_line);
        }
    }
}
