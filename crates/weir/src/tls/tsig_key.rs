//! TSIG keys (RFC 8945) for `dns.rfc2136`: the HMAC algorithms, a key from the config's
//! `key_name` + `key_secret`, or from a file in bind's format (`tsig-keygen` output, `key "name" {
//! algorithm hmac-sha256; secret "base64"; };`), whose errors name the file and the line.

use super::error::TlsError;
use base64::Engine;
use hickory_proto::rr::rdata::tsig::TsigAlgorithm;

use crate::config::model::Rfc2136;

/// The HMACs TSIG signs with here: RFC 8945's required hmac-sha256 and the two longer ones
/// (hickory-proto computes no other; hmac-sha1 and hmac-md5 keys are refused with that reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Algorithm {
    Sha256,
    Sha384,
    Sha512,
}

impl Algorithm {
    pub(crate) const NAMES: &'static str = "hmac-sha256, hmac-sha384, hmac-sha512";

    /// From its name (`hmac-sha256`, any case, a trailing dot allowed).
    pub(crate) fn from_name(name: &str) -> Result<Algorithm, TlsError> {
        Ok(
            match name.trim_end_matches('.').to_ascii_lowercase().as_str() {
                "hmac-sha256" => Algorithm::Sha256,
                "hmac-sha384" => Algorithm::Sha384,
                "hmac-sha512" => Algorithm::Sha512,
                _ => {
                    return Err(TlsError::config(format_args!(
                        "TSIG algorithm {name:?} is not supported; supported: {}",
                        Algorithm::NAMES
                    )))
                }
            },
        )
    }

    /// Its name, as bind writes it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Algorithm::Sha256 => "hmac-sha256",
            Algorithm::Sha384 => "hmac-sha384",
            Algorithm::Sha512 => "hmac-sha512",
        }
    }

    pub(crate) fn hickory(self) -> TsigAlgorithm {
        match self {
            Algorithm::Sha256 => TsigAlgorithm::HmacSha256,
            Algorithm::Sha384 => TsigAlgorithm::HmacSha384,
            Algorithm::Sha512 => TsigAlgorithm::HmacSha512,
        }
    }
}

/// A TSIG key.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Key {
    /// Lowercase, without the root's dot.
    pub name: String,
    pub algorithm: Algorithm,
    pub secret: Vec<u8>,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key")
            .field("name", &self.name)
            .field("algorithm", &self.algorithm)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// The key of an `rfc2136:` section, its file read now (paths already resolved). The error
/// names the section's key at fault (`key_file`, `key_secret`...) and what is wrong.
pub(crate) fn from_settings(s: &Rfc2136) -> Result<Key, (&'static str, String)> {
    let algorithm = match &s.algorithm {
        Some(a) => Some(Algorithm::from_name(a).map_err(|m| ("algorithm", m.to_string()))?),
        None => None,
    };
    match (&s.key_secret, &s.key_file) {
        (Some(secret), None) => {
            let Some(name) = s.key_name.as_deref() else {
                return Err(("key_name", "name the key (as the DNS server knows it)".into()));
            };
            Ok(Key {
                name: key_name(name).map_err(|m| ("key_name", m.to_string()))?,
                algorithm: algorithm.unwrap_or(Algorithm::Sha256),
                secret: secret_bytes(secret).map_err(|m| ("key_secret", m.to_string()))?,
            })
        }
        (None, Some(file)) => {
            let text = std::fs::read_to_string(file)
                .map_err(|e| ("key_file", format!("{file}: {e}")))?;
            let keys = parse_key_file(&text).map_err(|m| ("key_file", format!("{file}:{m}")))?;
            let key = match &s.key_name {
                Some(want) => {
                    let want = key_name(want).map_err(|m| ("key_name", m.to_string()))?;
                    keys.into_iter().find(|k| k.name == want).ok_or_else(|| {
                        ("key_name", format!("{file} has no key {want:?}"))
                    })?
                }
                None if keys.len() == 1 => keys.into_iter().next().expect("one key"),
                None => {
                    return Err((
                        "key_name",
                        format!("{file} has {} keys: name the one to use", keys.len()),
                    ))
                }
            };
            match algorithm {
                Some(a) if a != key.algorithm => Err((
                    "algorithm",
                    format!(
                        "{} differs from the {} of {file}",
                        a.name(),
                        key.algorithm.name()
                    ),
                )),
                _ => Ok(key),
            }
        }
        (Some(_), Some(_)) => Err((
            "key_secret",
            "give `key_secret` or `key_file`, not both".into(),
        )),
        (None, None) => Err((
            "key_secret",
            "give the TSIG key: `key_name` and `key_secret` (base64), or `key_file` (bind's format, as `tsig-keygen` writes it)".into(),
        )),
    }
}

/// A key's name checked and made canonical (lowercase, no final dot).
fn key_name(name: &str) -> Result<String, TlsError> {
    let n = name.trim_end_matches('.').to_ascii_lowercase();
    hickory_proto::rr::Name::from_ascii(&n)
        .ok()
        .filter(|_| !n.is_empty() && !n.contains(['\\', ' ']))
        .ok_or_else(|| TlsError::config(format_args!("{name:?} is not a key name (a DNS name)")))?;
    Ok(n)
}

fn secret_bytes(b64: &str) -> Result<Vec<u8>, TlsError> {
    let compact: String = b64.split_whitespace().collect();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(&compact)
        .map_err(|e| TlsError::config(format_args!("not base64: {e}")))?;
    if bytes.is_empty() {
        return Err(TlsError::config("the secret is empty"));
    }
    Ok(bytes)
}

/// A token of the key file as an error may show it: the words and signs of bind's syntax as
/// they are, anything else (a secret, perhaps, in the wrong place) by its length only.
fn shown(tok: &str) -> String {
    const SYNTAX: &[&str] = &[
        "key",
        "algorithm",
        "secret",
        "zone",
        "options",
        "server",
        "acl",
        "controls",
        "include",
        "view",
        "{",
        "}",
        ";",
    ];
    if SYNTAX.contains(&tok) {
        format!("{tok:?}")
    } else {
        format!("a token of {} characters", tok.chars().count())
    }
}

/// The keys of a bind key file: `key "name" { algorithm NAME; secret "BASE64"; };`, with
/// `#`, `//` and `/* */` comments. The error starts with the line number (`3: ...`).
pub(crate) fn parse_key_file(text: &str) -> Result<Vec<Key>, TlsError> {
    let mut t = Cursor {
        tokens: tokens(text)?,
        at: 0,
    };
    let mut keys = Vec::new();
    while let Some((kw, line)) = t.peek() {
        if kw != "key" {
            return Err(TlsError::config(format_args!(
                "{line}: expected \"key\", found {}",
                shown(&kw)
            )));
        }
        t.at += 1;
        let (name, name_line) = t.next()?;
        let name = key_name(unquote(&name))
            .map_err(|m| TlsError::config(format_args!("{name_line}: {m}")))?;
        t.want("{")?;
        let (mut algorithm, mut secret) = (None, None);
        loop {
            let (field, at) = t.next()?;
            match field.as_str() {
                "}" => break,
                "algorithm" => {
                    let (a, at) = t.next()?;
                    let a = unquote(&a);
                    algorithm = Some(
                        Algorithm::from_name(a)
                            .map_err(|m| TlsError::config(format_args!("{at}: {m}")))?,
                    );
                }
                "secret" => {
                    let (s, at) = t.next()?;
                    secret = Some(
                        secret_bytes(unquote(&s))
                            .map_err(|m| TlsError::config(format_args!("{at}: {m}")))?,
                    );
                }
                other => {
                    return Err(TlsError::config(format_args!(
                        "{at}: expected \"algorithm\", \"secret\" or \"}}\", found {}",
                        shown(other)
                    )))
                }
            }
            t.want(";")?;
        }
        t.want(";")?;
        let (Some(algorithm), Some(secret)) = (algorithm, secret) else {
            return Err(TlsError::config(format_args!(
                "{line}: key {name:?} needs both `algorithm` and `secret`"
            )));
        };
        keys.push(Key {
            name,
            algorithm,
            secret,
        });
    }
    if keys.is_empty() {
        return Err(TlsError::config("1: no `key` statement"));
    }
    Ok(keys)
}

/// The key file's tokens, read one by one.
struct Cursor {
    tokens: Vec<(String, usize)>,
    at: usize,
}

impl Cursor {
    fn peek(&self) -> Option<(String, usize)> {
        self.tokens.get(self.at).cloned()
    }

    fn next(&mut self) -> Result<(String, usize), TlsError> {
        let t = self.peek().ok_or_else(|| {
            let line = self.tokens.last().map_or(1, |t| t.1);
            TlsError::config(format_args!(
                "{line}: the file ends inside a `key` statement"
            ))
        })?;
        self.at += 1;
        Ok(t)
    }

    fn want(&mut self, what: &str) -> Result<(), TlsError> {
        if self.peek().is_none() {
            let line = self.tokens.last().map_or(1, |t| t.1);
            return Err(TlsError::config(format_args!(
                "{line}: expected {what:?}, found the end of the file"
            )));
        }
        match self.next()? {
            (tok, _) if tok == what => Ok(()),
            (tok, line) => Err(TlsError::config(format_args!(
                "{line}: expected {what:?}, found {}",
                shown(&tok)
            ))),
        }
    }
}

fn unquote(s: &str) -> &str {
    s.strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or(s)
}

/// Words, quoted strings (kept with their quotes), `{`, `}` and `;`, each with its line.
fn tokens(text: &str) -> Result<Vec<(String, usize)>, TlsError> {
    let mut out = Vec::new();
    let mut line = 1;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' => line += 1,
            c if c.is_whitespace() => {}
            '#' => skip_line(&mut chars, &mut line),
            '/' if chars.peek() == Some(&'/') => skip_line(&mut chars, &mut line),
            '/' if chars.peek() == Some(&'*') => {
                let start = line;
                chars.next();
                let mut prev = ' ';
                loop {
                    match chars.next() {
                        Some('/') if prev == '*' => break,
                        Some(c) => {
                            if c == '\n' {
                                line += 1;
                            }
                            prev = c;
                        }
                        None => {
                            return Err(TlsError::config(format_args!(
                                "{start}: unterminated /* comment"
                            )))
                        }
                    }
                }
            }
            '{' | '}' | ';' => out.push((c.to_string(), line)),
            '"' => {
                let start = line;
                let mut s = String::from('"');
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\n') | None => {
                            return Err(TlsError::config(format_args!(
                                "{start}: unterminated string"
                            )))
                        }
                        Some(c) => s.push(c),
                    }
                }
                s.push('"');
                out.push((s, start));
            }
            c => {
                let mut w = String::from(c);
                while let Some(&n) = chars.peek() {
                    if n.is_whitespace() || matches!(n, '{' | '}' | ';' | '"' | '#') {
                        break;
                    }
                    w.push(n);
                    chars.next();
                }
                out.push((w, line));
            }
        }
    }
    Ok(out)
}

fn skip_line(chars: &mut std::iter::Peekable<std::str::Chars<'_>>, line: &mut usize) {
    for c in chars.by_ref() {
        if c == '\n' {
            *line += 1;
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `tsig-keygen -a hmac-sha256 weir-acme` wrote (bind 9.18).
    const KEYGEN: &str = "key \"weir-acme\" {\n\talgorithm hmac-sha256;\n\tsecret \"U2NNRaXrhyYTcMDOMAL+kzOnraQeav1AKoBrblwEm7A=\";\n};\n";

    #[test]
    fn tsig_keygen_output_parses() {
        let keys = parse_key_file(KEYGEN).unwrap();
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0].name, "weir-acme");
        assert_eq!(keys[0].algorithm, Algorithm::Sha256);
        assert_eq!(keys[0].secret.len(), 32);
        assert!(
            !format!("{:?}", keys[0]).contains("U2NN"),
            "secret redacted"
        );
    }

    #[test]
    fn key_files_with_comments_and_several_keys() {
        let text = "# made by hand\nkey other. { algorithm \"HMAC-SHA512\"; secret \"c2VjcmV0\"; };\n/* the one\n weir uses */\nkey \"Weir-Acme\" {\n  algorithm hmac-sha384; // longer\n  secret \"c2VjcmV0\";\n};\n";
        let keys = parse_key_file(text).unwrap();
        assert_eq!(
            keys.iter()
                .map(|k| (k.name.as_str(), k.algorithm))
                .collect::<Vec<_>>(),
            [
                ("other", Algorithm::Sha512),
                ("weir-acme", Algorithm::Sha384)
            ]
        );
        assert_eq!(keys[1].secret, b"secret");
    }

    #[test]
    fn key_file_errors_name_the_line() {
        for (text, want) in [
            ("", "1: no `key` statement"),
            ("zone \"x\" {};", "1: expected \"key\", found \"zone\""),
            (
                "key \"k\" {\n algorithm hmac-sha256;\n secret \"c2VjcmV0\"\n};",
                "4: expected \";\", found \"}\"",
            ),
            (
                "key \"k\" {\n algorithm hmac-md5;\n secret \"c2VjcmV0\";\n};",
                "2: TSIG algorithm \"hmac-md5\" is not supported",
            ),
            (
                "key \"k\" {\n algorithm hmac-sha256;\n secret \"not base64!\";\n};",
                "3: not base64",
            ),
            (
                "key \"k\" {\n secret \"c2VjcmV0\";\n};",
                "1: key \"k\" needs both",
            ),
            ("key \"k\" {\n secret \"c2Vj", "2: unterminated string"),
            (
                "key \"k\" {\n algorithm hmac-sha256;",
                "2: the file ends inside",
            ),
            (
                "key \"k\" {\n algorithm hmac-sha256;\n secret \"c2VjcmV0\";\n}\n",
                "4: expected \";\", found the end of the file",
            ),
            ("/* never closed\nkey", "1: unterminated /* comment"),
        ] {
            let e = parse_key_file(text).unwrap_err().to_string();
            assert!(e.starts_with(want), "{text:?}: {e}");
        }
    }

    fn settings() -> Rfc2136 {
        Rfc2136 {
            server: "127.0.0.1".into(),
            zone: None,
            key_name: Some("weir-acme.".into()),
            key_secret: Some("c2VjcmV0".into()),
            key_file: None,
            algorithm: None,
        }
    }

    #[test]
    fn a_key_from_the_settings() {
        let k = from_settings(&settings()).unwrap();
        assert_eq!(
            (k.name.as_str(), k.algorithm),
            ("weir-acme", Algorithm::Sha256)
        );
        let k = from_settings(&Rfc2136 {
            algorithm: Some("hmac-sha512".into()),
            ..settings()
        })
        .unwrap();
        assert_eq!(k.algorithm, Algorithm::Sha512);
        for (s, field, want) in [
            (
                Rfc2136 {
                    key_secret: Some("c2Vj!".into()),
                    ..settings()
                },
                "key_secret",
                "not base64",
            ),
            (
                Rfc2136 {
                    key_secret: Some(String::new()),
                    ..settings()
                },
                "key_secret",
                "empty",
            ),
            (
                Rfc2136 {
                    key_name: None,
                    ..settings()
                },
                "key_name",
                "name the key",
            ),
            (
                Rfc2136 {
                    algorithm: Some("hmac-md5".into()),
                    ..settings()
                },
                "algorithm",
                "is not supported; supported: hmac-sha256",
            ),
            (
                Rfc2136 {
                    key_file: Some("/nonexistent/k.key".into()),
                    ..settings()
                },
                "key_secret",
                "not both",
            ),
            (
                Rfc2136 {
                    key_secret: None,
                    ..settings()
                },
                "key_secret",
                "give the TSIG key",
            ),
            (
                Rfc2136 {
                    key_secret: None,
                    key_file: Some("/nonexistent/k.key".into()),
                    ..settings()
                },
                "key_file",
                "/nonexistent/k.key: No such file",
            ),
        ] {
            let (f, m) = from_settings(&s).unwrap_err();
            assert_eq!(f, field, "{m}");
            assert!(m.contains(want), "{m}");
        }
    }

    #[test]
    fn a_key_from_a_file() {
        let dir = std::env::temp_dir().join(format!("weir-tsig-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("k.key");
        std::fs::write(&file, KEYGEN).unwrap();
        let s = Rfc2136 {
            key_secret: None,
            key_name: None,
            key_file: Some(file.display().to_string()),
            ..settings()
        };
        assert_eq!(from_settings(&s).unwrap().name, "weir-acme");
        let (f, m) = from_settings(&Rfc2136 {
            key_name: Some("other".into()),
            ..s.clone()
        })
        .unwrap_err();
        assert_eq!(f, "key_name");
        assert!(m.contains("has no key \"other\""), "{m}");
        let (f, m) = from_settings(&Rfc2136 {
            algorithm: Some("hmac-sha512".into()),
            ..s.clone()
        })
        .unwrap_err();
        assert_eq!(f, "algorithm");
        assert!(
            m.contains("hmac-sha512 differs from the hmac-sha256"),
            "{m}"
        );
        std::fs::write(
            &file,
            "key \"k\" {\n algorithm hmac-sha256;\n secret \"%%\";\n};\n",
        )
        .unwrap();
        let (f, m) = from_settings(&s).unwrap_err();
        assert_eq!(f, "key_file");
        assert!(
            m.starts_with(&format!("{}:3: not base64", file.display())),
            "{m}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
