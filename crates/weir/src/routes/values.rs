//! A route's conditions on the scheme and on variables' values (`match: { scheme: https, vars:
//! { $name: value } }`): the `if` idioms of nginx configs as route matches (`if ($scheme =
//! http)`, `if ($http_x_forwarded_proto != https)`, `if ($host ~ ^www\.)`, `if ($mobile)`).
//! Kept apart and boxed, as the rarer conditions are (`conditions.rs`): a route without them
//! pays one `None` check.
//!
//! A value is compared as rendered: `value` exactly, `!value` not equal, `~regex` matching,
//! `!~regex` not matching; `""` is empty (an unset variable), `"!"` not empty.

use std::net::IpAddr;

use weir_http::RequestHead;

use crate::config::CompileError;
use crate::vars::{Env, Template};

#[derive(Debug)]
pub struct Values {
    /// `Some(true)`: only over TLS; `Some(false)`: only without.
    https: Option<bool>,
    vars: Vec<(String, Template, Want)>,
}

#[derive(Debug)]
enum Want {
    Equal(Vec<u8>, bool),
    Regex(regex::bytes::Regex, bool),
}

impl Values {
    /// `None` when neither is given.
    pub fn compile(
        scheme: Option<&str>,
        vars: &std::collections::BTreeMap<String, String>,
        path: &str,
    ) -> Result<Option<Box<Values>>, CompileError> {
        if scheme.is_none() && vars.is_empty() {
            return Ok(None);
        }
        let https = match scheme {
            None => None,
            Some("https") => Some(true),
            Some("http") => Some(false),
            Some(other) => {
                return Err((
                    format!("{path}.scheme"),
                    format!("{other:?}: http or https"),
                ))
            }
        };
        let mut out = Vec::new();
        for (name, want) in vars {
            let key = format!("{path}.vars.{name}");
            let t = Template::parse(name).map_err(|e| (key.clone(), e))?;
            if t.literal().is_some() {
                return Err((key, "the key is a value with variables: `$name`".into()));
            }
            let (negate, rest) = match want.strip_prefix('!') {
                Some(r) => (true, r),
                None => (false, want.as_str()),
            };
            let w = match rest.strip_prefix('~') {
                Some(re) => Want::Regex(
                    // Bytes and ASCII classes, as nginx's PCRE: `\d` is 0-9 only, `(?i)`
                    // folds ASCII only (the review of issue 53: Arabic digits passed `^\d+$`).
                    regex::bytes::RegexBuilder::new(re)
                        .unicode(false)
                        .build()
                        .map_err(|e| (key.clone(), e.to_string()))?,
                    negate,
                ),
                None => Want::Equal(rest.as_bytes().to_vec(), negate),
            };
            out.push((name.clone(), t, w));
        }
        Ok(Some(Box::new(Values { https, vars: out })))
    }

    /// Whether `req` (over TLS when `tls`) meets every condition.
    pub fn matches(&self, req: &RequestHead, tls: bool, client: &dyn Fn() -> IpAddr) -> bool {
        if self.https.is_some_and(|h| h != tls) {
            return false;
        }
        if self.vars.is_empty() {
            return true;
        }
        let env = Env {
            head: req,
            scheme: if tls { "https" } else { "http" },
            client: client(),
            route: "",
            regex: None,
            identity: None,
        };
        let mut buf = Vec::new();
        self.vars.iter().all(|(_, t, want)| {
            buf.clear();
            t.render(&env, &mut buf);
            match want {
                Want::Equal(v, negate) => (buf == *v) != *negate,
                Want::Regex(re, negate) => re.is_match(&buf) != *negate,
            }
        })
    }

    /// The conditions in words, for the dashboard.
    pub fn describe(&self, parts: &mut Vec<String>) {
        if let Some(h) = self.https {
            parts.push(if h { "https".into() } else { "http".into() });
        }
        for (name, _, _) in &self.vars {
            parts.push(format!("{name} condition"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regexes over bytes with ASCII classes, as nginx's PCRE: `\d` is 0-9 only and `(?i)`
    /// folds ASCII only (the review of issue 53 passed `^\d+$` with Arabic digits and
    /// `(?i)^key$` with the Kelvin sign).
    #[test]
    fn regexes_are_ascii_as_pcre() {
        let vars: std::collections::BTreeMap<String, String> = [
            ("$http_x_id".to_string(), "~^\\d+$".to_string()),
            ("$http_x_key".to_string(), "~(?i)^key$".to_string()),
        ]
        .into();
        let v = Values::compile(None, &vars, "m").unwrap().unwrap();
        let head = |id: &str, key: &str| {
            let raw = format!("GET / HTTP/1.1\r\nHost: a\r\nX-Id: {id}\r\nX-Key: {key}\r\n\r\n");
            let mut b = bytes::BytesMut::from(raw.as_bytes());
            weir_http::parse_request(&mut b, &Default::default())
                .unwrap()
                .unwrap()
        };
        let client = || IpAddr::from([127, 0, 0, 1]);
        assert!(v.matches(&head("12", "KEY"), false, &client));
        assert!(!v.matches(&head("١٢", "KEY"), false, &client));
        assert!(!v.matches(&head("12", "\u{212A}ey"), false, &client));
    }
}
