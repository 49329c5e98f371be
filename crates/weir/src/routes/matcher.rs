//! The conditions of one route, precompiled: lowercased host patterns, a path matcher and
//! header requirements. Matching allocates nothing.

use bytes::Bytes;
use weir_http::{Method, RequestHead};

use crate::config::model;
use crate::config::{check_header_name, CompileError};
use crate::tls::TlsInfo;

/// All conditions of a route.
#[derive(Debug)]
pub struct Matcher {
    hosts: Vec<HostPattern>,
    sni: Vec<HostPattern>,
    client_subject: Option<regex::Regex>,
    pub path: PathMatch,
    headers: Vec<(String, Bytes)>,
    /// Query arguments, cookies, the client's address (`conditions.rs`).
    extra: Option<Box<super::conditions::Extra>>,
    /// The scheme and variables' values (`values.rs`).
    values: Option<Box<super::values::Values>>,
}

/// A host condition.
#[derive(Debug)]
pub enum HostPattern {
    /// `example.com` (compared case-insensitively, port ignored).
    Exact(String),
    /// `*.example.com`: any name ending in `.example.com` (not `example.com` itself).
    Suffix(String),
}

/// A path condition.
#[derive(Debug)]
pub enum PathMatch {
    Any,
    Exact(Bytes),
    Prefix(Bytes),
    Regex(regex::bytes::Regex),
    /// `path_prefix` and `path_regex` together: both must hold (a regex location nested in a
    /// prefix location, from `weir import`).
    PrefixRegex(Bytes, regex::bytes::Regex),
}

impl Matcher {
    pub(crate) fn compile(
        m: model::Match,
        path: &str,
    ) -> Result<(Matcher, Option<Vec<Method>>), CompileError> {
        let extra = super::conditions::Extra::compile(&m.query, &m.cookies, &m.client, path)?;
        let values = super::values::Values::compile(m.scheme.as_deref(), &m.vars, path)?;
        let hosts = host_patterns(m.host.into_vec(), &format!("{path}.host"))?;
        let sni = host_patterns(m.sni.into_vec(), &format!("{path}.sni"))?;
        let client_subject = match &m.client_subject {
            Some(r) => Some(regex::Regex::new(r).map_err(|e| {
                (
                    format!("{path}.client_subject"),
                    format!("bad regular expression: {e}"),
                )
            })?),
            None => None,
        };
        let given = [
            m.path.is_some(),
            m.path_prefix.is_some(),
            m.path_regex.is_some(),
        ];
        if given.iter().filter(|g| **g).count() > 1 && m.path.is_some() {
            return Err((
                path.to_string(),
                "give only one of path, path_prefix and path_regex (or path_prefix with path_regex: both must hold)".into(),
            ));
        }
        let check_slash = |key: &str, p: &str| {
            if !p.starts_with('/') {
                return Err((format!("{path}.{key}"), format!("{p:?} must start with /")));
            }
            // Paths are compared as clients send them: a space or a non-ASCII letter arrives
            // percent-encoded, so written as such it could never match.
            if p.bytes().any(|b| !b.is_ascii_graphic()) {
                return Err((
                    format!("{path}.{key}"),
                    format!("{p:?}: percent-encode spaces and non-ASCII letters (%20, %D0%BF...), as requests send them"),
                ));
            }
            Ok(())
        };
        let regex = |r: &str| {
            regex::bytes::Regex::new(r)
                .map_err(|e| (format!("{path}.path_regex"), format!("invalid regex: {e}")))
        };
        let path_match = match (m.path, m.path_prefix, m.path_regex) {
            (Some(p), _, _) => {
                check_slash("path", &p)?;
                PathMatch::Exact(Bytes::from(p))
            }
            (None, Some(p), Some(r)) => {
                check_slash("path_prefix", &p)?;
                PathMatch::PrefixRegex(Bytes::from(p), regex(&r)?)
            }
            (None, Some(p), None) => {
                check_slash("path_prefix", &p)?;
                PathMatch::Prefix(Bytes::from(p))
            }
            (None, None, Some(r)) => PathMatch::Regex(regex(&r)?),
            (None, None, None) => PathMatch::Any,
        };
        let mut headers = Vec::new();
        for (name, value) in m.headers {
            check_header_name(&name).map_err(|e| (format!("{path}.headers.{name}"), e))?;
            headers.push((name.to_ascii_lowercase(), Bytes::from(value)));
        }
        let methods = if m.methods.is_empty() {
            None
        } else {
            let mut out = Vec::new();
            for (i, name) in m.methods.iter().enumerate() {
                let upper = name.trim().to_ascii_uppercase();
                if upper.is_empty()
                    || !upper
                        .bytes()
                        .all(|b| b.is_ascii_alphabetic() || b == b'-' || b == b'_')
                {
                    return Err((
                        format!("{path}.methods[{i}]"),
                        format!("{name:?} is not a method"),
                    ));
                }
                let method = Method::from_bytes(upper.as_bytes());
                // Like nginx's limit_except: allowing GET allows HEAD.
                if method == Method::Get
                    && !m.methods.iter().any(|x| x.eq_ignore_ascii_case("HEAD"))
                {
                    out.push(Method::Head);
                }
                out.push(method);
            }
            Some(out)
        };
        Ok((
            Matcher {
                hosts,
                sni,
                client_subject,
                path: path_match,
                headers,
                extra,
                values,
            },
            methods,
        ))
    }

    /// Whether the request from `client`, on a connection whose TLS handshake settled `tls`,
    /// satisfies every condition except the method.
    pub fn matches(
        &self,
        req: &RequestHead,
        tls: Option<&TlsInfo>,
        client: &dyn Fn() -> std::net::IpAddr,
    ) -> bool {
        let path = req.path();
        let path_ok = match &self.path {
            PathMatch::Any => true,
            PathMatch::Exact(p) => path == &p[..],
            PathMatch::Prefix(p) => path.starts_with(p),
            PathMatch::Regex(r) => r.is_match(path),
            PathMatch::PrefixRegex(p, r) => path.starts_with(p) && r.is_match(path),
        };
        if !path_ok {
            return false;
        }
        if !self.hosts.is_empty() {
            let Some(host) = req.host() else { return false };
            if !any_host(&self.hosts, host) {
                return false;
            }
        }
        if !self.sni.is_empty() {
            let Some(name) = tls.and_then(|t| t.sni.as_deref()) else {
                return false;
            };
            if !any_host(&self.sni, name.as_bytes()) {
                return false;
            }
        }
        if let Some(re) = &self.client_subject {
            let Some(subject) = tls.and_then(|t| t.client_subject.as_deref()) else {
                return false;
            };
            if !re.is_match(subject) {
                return false;
            }
        }
        if let Some(values) = &self.values {
            if !values.matches(req, tls.is_some(), client) {
                return false;
            }
        }
        if let Some(extra) = &self.extra {
            if !extra.matches(req, client) {
                return false;
            }
        }
        self.headers.iter().all(|(name, value)| {
            req.fields()
                .iter()
                .any(|(n, v)| n.eq_ignore_ascii_case(name.as_bytes()) && v == value)
        })
    }

    /// The conditions in one line, as the dashboard's route table shows them: `host a.com
    /// path /api/*` (`any` when there are none).
    pub fn describe(&self) -> String {
        let hosts = |h: &[HostPattern]| {
            h.iter()
                .map(|p| match p {
                    HostPattern::Exact(n) => n.clone(),
                    HostPattern::Suffix(n) => format!("*{n}"),
                })
                .collect::<Vec<_>>()
                .join(",")
        };
        let mut parts = Vec::new();
        if !self.hosts.is_empty() {
            parts.push(format!("host {}", hosts(&self.hosts)));
        }
        if !self.sni.is_empty() {
            parts.push(format!("sni {}", hosts(&self.sni)));
        }
        match &self.path {
            PathMatch::Any => {}
            PathMatch::Exact(p) => parts.push(format!("path {}", String::from_utf8_lossy(p))),
            PathMatch::Prefix(p) => parts.push(format!("path {}*", String::from_utf8_lossy(p))),
            PathMatch::Regex(r) => parts.push(format!("path ~ {}", r.as_str())),
            PathMatch::PrefixRegex(p, r) => parts.push(format!(
                "path {}* ~ {}",
                String::from_utf8_lossy(p),
                r.as_str()
            )),
        }
        for (name, value) in &self.headers {
            parts.push(format!("{name}: {}", String::from_utf8_lossy(value)));
        }
        if let Some(re) = &self.client_subject {
            parts.push(format!("client ~ {}", re.as_str()));
        }
        if let Some(extra) = &self.extra {
            extra.describe(&mut parts);
        }
        if let Some(values) = &self.values {
            values.describe(&mut parts);
        }
        if parts.is_empty() {
            "any".into()
        } else {
            parts.join(" ")
        }
    }

    /// The prefix a `static` action strips, if the route matches by prefix.
    pub fn prefix(&self) -> Option<&[u8]> {
        match &self.path {
            PathMatch::Prefix(p) | PathMatch::PrefixRegex(p, _) => Some(p),
            _ => None,
        }
    }
}

/// Compiles host names (`example.com`, `*.example.com`) given at key `key`.
pub(crate) fn host_patterns(
    names: Vec<String>,
    key: &str,
) -> Result<Vec<HostPattern>, CompileError> {
    let mut out = Vec::new();
    for h in names {
        let h = h.trim().to_ascii_lowercase();
        if h.starts_with('~') {
            // nginx's `server_name ~^api\.`: looks valid, never matched as a literal name.
            return Err((
                key.to_string(),
                format!("{h:?}: host regexes are not supported; name the hosts (exact, or *.example.com)"),
            ));
        }
        let host_byte = |c: char| {
            c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | ':' | '[' | ']' | '*')
        };
        if h.is_empty() || !h.chars().all(host_byte) {
            return Err((key.to_string(), format!("{h:?} is not a host name")));
        }
        if h.starts_with('.') {
            return Err((
                key.to_string(),
                format!("{h:?}: a leading dot is nginx's shorthand; write both names (example.com and *.example.com)"),
            ));
        }
        // Compared as requests are: without a trailing dot, without a port.
        let h = match h.strip_suffix('.') {
            Some(bare) if !bare.is_empty() => bare.to_string(),
            _ => h,
        };
        if h.contains(':') && !(h.starts_with('[') && h.ends_with(']')) {
            return Err((
                key.to_string(),
                format!("{h:?}: a host name without a port (the port is not compared)"),
            ));
        }
        if h.matches('*').count() > usize::from(h.starts_with("*.")) {
            return Err((
                key.to_string(),
                "wildcards must look like *.example.com".into(),
            ));
        }
        out.push(match h.strip_prefix('*') {
            Some(rest) if rest.starts_with('.') && rest.len() > 1 => {
                HostPattern::Suffix(rest.to_string())
            }
            Some(_) => {
                return Err((
                    key.to_string(),
                    "wildcards must look like *.example.com".into(),
                ))
            }
            None => HostPattern::Exact(h),
        });
    }
    Ok(out)
}

/// Whether `host` matches one of `patterns` (case-insensitively).
pub(crate) fn any_host(patterns: &[HostPattern], host: &[u8]) -> bool {
    patterns.iter().any(|h| match h {
        HostPattern::Exact(e) => host.eq_ignore_ascii_case(e.as_bytes()),
        HostPattern::Suffix(s) => {
            host.len() > s.len() && host[host.len() - s.len()..].eq_ignore_ascii_case(s.as_bytes())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;

    fn req(s: &str) -> RequestHead {
        let mut b = BytesMut::from(s.as_bytes());
        weir_http::parse_request(&mut b, &Default::default())
            .unwrap()
            .unwrap()
    }

    impl Matcher {
        fn matches_tls(&self, r: &RequestHead, tls: Option<&TlsInfo>) -> bool {
            self.matches(r, tls, &|| std::net::IpAddr::from([127, 0, 0, 1]))
        }

        fn matches_plain(&self, r: &RequestHead) -> bool {
            self.matches(r, None, &|| std::net::IpAddr::from([127, 0, 0, 1]))
        }
    }

    #[test]
    fn sni_and_client_subject_need_tls() {
        let m = matcher("sni: '*.example.com'\nclient_subject: '^CN=alice,'");
        let r = req("GET / HTTP/1.1\r\nHost: other\r\n\r\n");
        let tls = |sni: Option<&str>, subject: Option<&str>| TlsInfo {
            sni: sni.map(Into::into),
            client_subject: subject.map(Into::into),
            ..Default::default()
        };
        assert!(m.matches_tls(&r, Some(&tls(Some("a.example.com"), Some("CN=alice,O=X")))));
        assert!(!m.matches_tls(&r, Some(&tls(Some("example.com"), Some("CN=alice,O=X")))));
        assert!(!m.matches_tls(&r, Some(&tls(Some("a.example.com"), Some("CN=bob,O=X")))));
        assert!(!m.matches_tls(&r, Some(&tls(Some("a.example.com"), None))));
        assert!(!m.matches_tls(&r, Some(&tls(None, Some("CN=alice,O=X")))));
        assert!(!m.matches_plain(&r));
    }

    fn matcher(yaml: &str) -> Matcher {
        let m: model::Match = serde_yaml::from_str(yaml).unwrap();
        Matcher::compile(m, "m").unwrap().0
    }

    #[test]
    fn hosts() {
        let m = matcher("host: ['example.com', '*.example.org']");
        assert!(m.matches_plain(&req("GET / HTTP/1.1\r\nHost: EXAMPLE.com:8080\r\n\r\n")));
        assert!(m.matches_plain(&req("GET / HTTP/1.1\r\nHost: a.b.example.org\r\n\r\n")));
        assert!(!m.matches_plain(&req("GET / HTTP/1.1\r\nHost: example.org\r\n\r\n")));
        assert!(!m.matches_plain(&req("GET / HTTP/1.1\r\nHost: badexample.com\r\n\r\n")));
    }

    #[test]
    fn paths_and_headers() {
        let m = matcher("path_regex: '^/api/v[0-9]+/'\nheaders: {x-tenant: blue}");
        assert!(m.matches_plain(&req(
            "GET /api/v2/x?q HTTP/1.1\r\nHost: a\r\nX-Tenant: blue\r\n\r\n"
        )));
        assert!(!m.matches_plain(&req(
            "GET /api/v2/x HTTP/1.1\r\nHost: a\r\nX-Tenant: red\r\n\r\n"
        )));
        assert!(!m.matches_plain(&req(
            "GET /api/vx/ HTTP/1.1\r\nHost: a\r\nX-Tenant: blue\r\n\r\n"
        )));
        let m = matcher("path: /hello");
        assert!(m.matches_plain(&req("GET /hello?x=1 HTTP/1.1\r\nHost: a\r\n\r\n")));
        assert!(!m.matches_plain(&req("GET /hello/ HTTP/1.1\r\nHost: a\r\n\r\n")));
        let m = matcher("path_prefix: /static/");
        assert!(m.matches_plain(&req("GET /static/a/b HTTP/1.1\r\nHost: a\r\n\r\n")));
    }

    /// Patterns are compared as requests are (no trailing dot, no port): a pattern that could
    /// never match is refused rather than kept.
    #[test]
    fn host_patterns_that_could_never_match_are_refused() {
        let m = matcher("host: 'DB.Example.'");
        assert!(m.matches_plain(&req("GET / HTTP/1.1\r\nHost: db.example\r\n\r\n")));
        for bad in ["db.example:443", "db.*", "*.*.example", "a*.example", "*"] {
            assert!(
                host_patterns(vec![bad.into()], "k").is_err(),
                "{bad} should be refused"
            );
        }
        assert!(host_patterns(vec!["[::1]".into(), "*.example".into()], "k").is_ok());
    }
}
