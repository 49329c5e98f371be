//! `Cache-Control` and `Expires` on static files by name pattern (nginx `expires` in a
//! `location ~* \.css$`; Caddy's `header` matchers). The first rule whose pattern matches the
//! served file's name gives the fields; none: the response carries neither (as before).

use std::time::{Duration, SystemTime};

use bytes::BytesMut;
use weir_http::response::put_header;

use crate::config::{model, CompileError};

/// One compiled rule.
#[derive(Debug)]
pub struct CacheRule {
    /// Before and after the pattern's `*` (the whole name when it has none).
    prefix: String,
    suffix: Option<String>,
    what: Fields,
}

#[derive(Debug)]
enum Fields {
    Value(String),
    Expires(Duration),
}

impl CacheRule {
    pub fn compile(r: &model::CacheControlRule, key: &str) -> Result<CacheRule, CompileError> {
        let p = &r.pattern;
        if p.is_empty() || p.contains('/') || p.matches('*').count() > 1 {
            return Err((
                format!("{key}.pattern"),
                format!("{p:?}: a file name with at most one * (*.css, app-*.js, index.html)"),
            ));
        }
        let (prefix, suffix) = match p.split_once('*') {
            Some((a, b)) => (a.to_string(), Some(b.to_string())),
            None => (p.clone(), None),
        };
        let what = match (&r.value, r.expires) {
            (Some(v), None) => {
                crate::config::check_header_value(v).map_err(|m| (format!("{key}.value"), m))?;
                Fields::Value(v.clone())
            }
            (None, Some(d)) => Fields::Expires(d.0),
            _ => {
                return Err((
                    key.to_string(),
                    "give `value` (the Cache-Control field) or `expires` (a duration), one of them"
                        .into(),
                ))
            }
        };
        Ok(CacheRule {
            prefix,
            suffix,
            what,
        })
    }

    fn matches(&self, name: &[u8]) -> bool {
        match &self.suffix {
            None => name == self.prefix.as_bytes(),
            Some(s) => {
                name.len() >= self.prefix.len() + s.len()
                    && name.starts_with(self.prefix.as_bytes())
                    && name.ends_with(s.as_bytes())
            }
        }
    }
}

/// Adds the fields of the first rule matching file `name` to `lines`.
pub fn add_fields(rules: &[CacheRule], name: &[u8], lines: &mut BytesMut) {
    let Some(rule) = rules.iter().find(|r| r.matches(name)) else {
        return;
    };
    match &rule.what {
        Fields::Value(v) => put_header(lines, b"Cache-Control", v.as_bytes()),
        Fields::Expires(d) => {
            let value = format!("max-age={}", d.as_secs());
            put_header(lines, b"Cache-Control", value.as_bytes());
            let at = httpdate::fmt_http_date(SystemTime::now() + *d);
            put_header(lines, b"Expires", at.as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::units::Dur;

    fn rule(pattern: &str, value: Option<&str>, expires: Option<u64>) -> CacheRule {
        CacheRule::compile(
            &model::CacheControlRule {
                pattern: pattern.into(),
                value: value.map(String::from),
                expires: expires.map(|s| Dur(Duration::from_secs(s))),
            },
            "r",
        )
        .unwrap()
    }

    #[test]
    fn the_first_matching_rule_gives_the_fields() {
        let rules = [
            rule("index.html", Some("no-cache"), None),
            rule("*.html", Some("max-age=60"), None),
            rule("app-*.js", None, Some(86400)),
        ];
        let cases: [(&str, Option<&str>); 5] = [
            ("index.html", Some("Cache-Control: no-cache\r\n")),
            ("about.html", Some("Cache-Control: max-age=60\r\n")),
            (
                "app-1f3e.js",
                Some("Cache-Control: max-age=86400\r\nExpires: "),
            ),
            ("vendor.js", None),
            ("app-.j", None),
        ];
        for (name, want) in cases {
            let mut lines = BytesMut::new();
            add_fields(&rules, name.as_bytes(), &mut lines);
            let got = String::from_utf8_lossy(&lines).into_owned();
            match want {
                Some(w) => assert!(got.starts_with(w), "{name}: {got:?}"),
                None => assert!(got.is_empty(), "{name}: {got:?}"),
            }
        }
    }

    #[test]
    fn bad_rules_are_refused() {
        for (pattern, value, expires) in [
            ("a/*.css", Some("x"), None),
            ("*.*", Some("x"), None),
            ("*.css", None, None),
            ("*.css", Some("x"), Some(Dur(Duration::from_secs(1)))),
            ("*.css", Some("bad\r\nvalue"), None),
        ] {
            let r = model::CacheControlRule {
                pattern: pattern.into(),
                value: value.map(String::from),
                expires,
            };
            assert!(CacheRule::compile(&r, "r").is_err(), "{pattern}");
        }
    }
}
