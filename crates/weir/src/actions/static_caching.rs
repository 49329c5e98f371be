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
struct Fields {
    /// `Cache-Control: max-age=N` and `Expires`; `None` for the date: nginx's `max`.
    expires: Option<(Duration, Option<&'static str>)>,
    /// A `Cache-Control` field as written (after the max-age one when both are given).
    value: Option<String>,
}

/// nginx's `expires max`: ten years of max-age, and this date.
const MAX_AGE: Duration = Duration::from_secs(315_360_000);
const MAX_DATE: &str = "Thu, 31 Dec 2037 23:55:55 GMT";

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
        if let Some(v) = &r.value {
            crate::config::check_header_value(v).map_err(|m| (format!("{key}.value"), m))?;
        }
        let expires = r.expires.map(|e| match e {
            model::Expires::After(d) => (d.0, None),
            model::Expires::Max => (MAX_AGE, Some(MAX_DATE)),
        });
        if r.value.is_none() && expires.is_none() {
            return Err((
                key.to_string(),
                "give `value` (the Cache-Control field), `expires` (a duration or max), or both"
                    .into(),
            ));
        }
        let what = Fields {
            expires,
            value: r.value.clone(),
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
    if let Some((d, date)) = &rule.what.expires {
        let value = format!("max-age={}", d.as_secs());
        put_header(lines, b"Cache-Control", value.as_bytes());
        match date {
            Some(fixed) => put_header(lines, b"Expires", fixed.as_bytes()),
            None => {
                let at = httpdate::fmt_http_date(SystemTime::now() + *d);
                put_header(lines, b"Expires", at.as_bytes());
            }
        }
    }
    if let Some(v) = &rule.what.value {
        put_header(lines, b"Cache-Control", v.as_bytes());
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
                expires: expires.map(|s| model::Expires::After(Dur(Duration::from_secs(s)))),
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
            ("*.css", Some("bad\r\nvalue"), None),
        ] {
            let r = model::CacheControlRule {
                pattern: pattern.into(),
                value: value.map(String::from),
                expires: expires.map(model::Expires::After),
            };
            assert!(CacheRule::compile(&r, "r").is_err(), "{pattern}");
        }
    }

    /// nginx's `expires max` with `add_header Cache-Control public`: both fields, nginx's date.
    #[test]
    fn max_and_a_value_give_both_fields_as_nginx() {
        let r = CacheRule::compile(
            &model::CacheControlRule {
                pattern: "*".into(),
                value: Some("public".into()),
                expires: Some(model::Expires::Max),
            },
            "r",
        )
        .unwrap();
        let mut lines = BytesMut::new();
        add_fields(&[r], b"a.css", &mut lines);
        assert_eq!(
            &lines[..],
            b"Cache-Control: max-age=315360000\r\nExpires: Thu, 31 Dec 2037 23:55:55 GMT\r\nCache-Control: public\r\n"
        );
        let y: model::CacheControlRule =
            serde_yaml::from_str("{ pattern: '*', expires: max }").unwrap();
        assert_eq!(y.expires, Some(model::Expires::Max));
        let y: model::CacheControlRule =
            serde_yaml::from_str("{ pattern: '*', expires: 1h }").unwrap();
        assert_eq!(
            y.expires,
            Some(model::Expires::After(Dur(Duration::from_secs(3600))))
        );
    }
}
