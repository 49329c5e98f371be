//! The rarer conditions of a route's `match`: query arguments, cookies and the client's address
//! (nginx `map $arg_…`/`$cookie_…` and `allow`/`deny` as routing, Traefik's `Query`,
//! `ClientIP` and `HeaderRegexp` matchers). Kept apart from the common ones (host, path, method,
//! fields: `matcher.rs`) and boxed, so that a route without them pays one `None` check.
//!
//! A value matches exactly; `"*"` matches any value of an argument or cookie that is present.
//! Query arguments are compared percent-decoded (`?q=a%20b` is `a b`), `+` read as a space, as
//! forms send it; a name given twice matches when any of its values does.

use std::net::IpAddr;

use bytes::Bytes;
use weir_http::RequestHead;

use crate::config::CompileError;
use crate::shield::nets::Nets;

/// The compiled conditions.
#[derive(Debug)]
pub struct Extra {
    query: Vec<(String, Want)>,
    cookies: Vec<(String, Want)>,
    client: Option<Nets>,
}

#[derive(Debug)]
enum Want {
    Any,
    Exactly(Bytes),
}

impl Want {
    fn of(v: &str) -> Want {
        if v == "*" {
            Want::Any
        } else {
            Want::Exactly(Bytes::copy_from_slice(v.as_bytes()))
        }
    }

    fn accepts(&self, v: &[u8]) -> bool {
        match self {
            Want::Any => true,
            Want::Exactly(e) => v == &e[..],
        }
    }
}

impl Extra {
    /// `None` when no such condition is given.
    pub fn compile(
        query: &std::collections::BTreeMap<String, String>,
        cookies: &std::collections::BTreeMap<String, String>,
        client: &[String],
        path: &str,
    ) -> Result<Option<Box<Extra>>, CompileError> {
        if query.is_empty() && cookies.is_empty() && client.is_empty() {
            return Ok(None);
        }
        for (key, names) in [("query", query), ("cookies", cookies)] {
            if let Some(bad) = names.keys().find(|n| {
                n.is_empty()
                    || n.bytes()
                        .any(|b| b.is_ascii_control() || matches!(b, b' ' | b'=' | b';' | b'&'))
            }) {
                return Err((format!("{path}.{key}.{bad}"), "not a name".into()));
            }
        }
        let client = if client.is_empty() {
            None
        } else {
            Some(crate::shield::nets::compile(
                client,
                &format!("{path}.client"),
            )?)
        };
        Ok(Some(Box::new(Extra {
            query: query
                .iter()
                .map(|(n, v)| (n.clone(), Want::of(v)))
                .collect(),
            cookies: cookies
                .iter()
                .map(|(n, v)| (n.clone(), Want::of(v)))
                .collect(),
            client,
        })))
    }

    /// Whether `req` from `client` meets every condition.
    pub fn matches(&self, req: &RequestHead, client: &dyn Fn() -> IpAddr) -> bool {
        if let Some(nets) = &self.client {
            // An IPv4 client behind an IPv6 PROXY header (`::ffff:a.b.c.d`) is an IPv4 one.
            let ip = match client() {
                IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
                v4 => v4,
            };
            if !nets.contains(ip) {
                return false;
            }
        }
        let cookies_ok = self
            .cookies
            .iter()
            .all(|(name, want)| req.cookie(name).is_some_and(|v| want.accepts(v)));
        cookies_ok
            && self.query.iter().all(|(name, want)| {
                let q = req.query().unwrap_or(b"");
                q.split(|b| *b == b'&').any(|pair| {
                    let (n, v) = match pair.iter().position(|b| *b == b'=') {
                        Some(i) => (&pair[..i], &pair[i + 1..]),
                        None => (pair, &b""[..]),
                    };
                    decoded(n) == name.as_bytes() && want.accepts(&decoded(v))
                })
            })
    }

    /// The conditions in words, for the dashboard.
    pub fn describe(&self, parts: &mut Vec<String>) {
        let show = |w: &Want| match w {
            Want::Any => "*".to_string(),
            Want::Exactly(v) => String::from_utf8_lossy(v).into_owned(),
        };
        for (n, w) in &self.query {
            parts.push(format!("?{n}={}", show(w)));
        }
        for (n, w) in &self.cookies {
            parts.push(format!("cookie {n}={}", show(w)));
        }
        if self.client.is_some() {
            parts.push("client in list".into());
        }
    }
}

/// A query name or value, percent-decoded, `+` as a space.
fn decoded(b: &[u8]) -> Vec<u8> {
    let plus: Vec<u8> = b
        .iter()
        .map(|c| if *c == b'+' { b' ' } else { *c })
        .collect();
    percent_encoding::percent_decode(&plus).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use std::collections::BTreeMap;

    fn req(s: &str) -> RequestHead {
        let mut b = BytesMut::from(s.as_bytes());
        weir_http::parse_request(&mut b, &Default::default())
            .unwrap()
            .unwrap()
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn query_cookie_and_client_conditions() {
        let e = Extra::compile(
            &map(&[("q", "a b"), ("debug", "*")]),
            &map(&[("beta", "1")]),
            &["10.0.0.0/8".to_string()],
            "m",
        )
        .unwrap()
        .unwrap();
        let inside = || IpAddr::from([10, 1, 2, 3]);
        let outside = || IpAddr::from([192, 0, 2, 1]);
        let cases: [(&str, &dyn Fn() -> IpAddr, bool); 7] = [
            (
                "GET /?q=a+b&debug HTTP/1.1\r\nHost: a\r\nCookie: x=1; beta=1\r\n\r\n",
                &inside,
                true,
            ),
            (
                "GET /?debug=0&q=a%20b HTTP/1.1\r\nHost: a\r\nCookie: beta=1\r\n\r\n",
                &inside,
                true,
            ),
            (
                "GET /?q=a+b&debug HTTP/1.1\r\nHost: a\r\nCookie: beta=1\r\n\r\n",
                &outside,
                false,
            ),
            (
                "GET /?q=a+b HTTP/1.1\r\nHost: a\r\nCookie: beta=1\r\n\r\n",
                &inside,
                false,
            ),
            (
                "GET /?q=ab&debug HTTP/1.1\r\nHost: a\r\nCookie: beta=1\r\n\r\n",
                &inside,
                false,
            ),
            (
                "GET /?q=a+b&debug HTTP/1.1\r\nHost: a\r\nCookie: beta=2\r\n\r\n",
                &inside,
                false,
            ),
            (
                "GET /?q=a+b&debug HTTP/1.1\r\nHost: a\r\n\r\n",
                &inside,
                false,
            ),
        ];
        for (raw, client, want) in cases {
            assert_eq!(e.matches(&req(raw), client), want, "{raw}");
        }
        // An IPv4 client named by an IPv6 PROXY header is the IPv4 one.
        let mapped = || IpAddr::from(std::net::Ipv4Addr::new(10, 1, 2, 3).to_ipv6_mapped());
        let raw = "GET /?q=a+b&debug HTTP/1.1\r\nHost: a\r\nCookie: beta=1\r\n\r\n";
        assert!(e.matches(&req(raw), &mapped));
    }

    #[test]
    fn nothing_given_compiles_to_nothing_and_bad_input_is_refused() {
        let none = BTreeMap::new();
        assert!(Extra::compile(&none, &none, &[], "m").unwrap().is_none());
        assert!(Extra::compile(&map(&[("a b", "1")]), &none, &[], "m").is_err());
        assert!(Extra::compile(&none, &none, &["10.0.0.0/33".into()], "m").is_err());
    }
}
