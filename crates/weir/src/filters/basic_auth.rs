//! `basic_auth`: HTTP Basic (RFC 7617) against an htpasswd file ([`super::htpasswd`]), as nginx's
//! `auth_basic_user_file`. A request without valid credentials gets `401` with
//! `WWW-Authenticate: Basic realm="..."`; an accepted one goes on as its user (`$consumer`, the
//! access log's `$remote_user`), and its `Authorization` is not sent upstream unless
//! `forward_credentials`.
//!
//! The file is read at load (a reload re-reads it) and again when its modification time
//! changes, looked at once a second at most; a file that no longer parses keeps the users read
//! last, and says so in the log. bcrypt costs milliseconds a check, so a verified user and
//! password are remembered for `cache` ([`super::remember`]), keyed by a keyed hash of the
//! user, the password and the stored hash (a changed password is a new key).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Instant, SystemTime};

use base64::Engine;
use bytes::Bytes;

use super::htpasswd::{self, Users};
use super::remember::Remembered;
use super::{phase, Answer, Client, Flow, Identity, Req, State};
use crate::config::{model_auth, BaseDir, CompileError};

#[derive(Debug)]
pub struct BasicAuth {
    file: PathBuf,
    users: RwLock<Arc<Users>>,
    /// When the file was last looked at, and its modification time then.
    checked: Mutex<(Instant, Option<SystemTime>)>,
    challenge: Bytes,
    verified: Remembered<()>,
    forward: bool,
}

fn modified(p: &std::path::Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

fn read(p: &std::path::Path) -> Result<Users, String> {
    let text =
        std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
    htpasswd::parse(&text).map_err(|e| format!("{}: {e}", p.display()))
}

impl BasicAuth {
    pub(crate) fn compile(
        b: model_auth::BasicAuth,
        path: &str,
        base: &BaseDir,
    ) -> Result<BasicAuth, CompileError> {
        let file = base.0.join(&b.file);
        let users = read(&file).map_err(|e| (format!("{path}.file"), e))?;
        if b.realm.contains(['"', '\\']) || !crate::vars::field_safe(b.realm.as_bytes()) {
            return Err((
                format!("{path}.realm"),
                "no quotes, backslashes or control characters".into(),
            ));
        }
        Ok(BasicAuth {
            checked: Mutex::new((Instant::now(), modified(&file))),
            file,
            users: RwLock::new(Arc::new(users)),
            challenge: Bytes::from(format!("Basic realm=\"{}\", charset=\"UTF-8\"", b.realm)),
            verified: Remembered::new(b.cache.0, b.cache_size),
            forward: b.forward_credentials,
        })
    }

    /// The users, re-read when the file changed (looked at once a second at most).
    fn users(&self, now: Instant) -> Arc<Users> {
        {
            let mut checked = self.checked.lock().unwrap_or_else(|p| p.into_inner());
            if now.saturating_duration_since(checked.0).as_secs() >= 1 {
                checked.0 = now;
                let m = modified(&self.file);
                if m != checked.1 {
                    checked.1 = m;
                    match read(&self.file) {
                        Ok(users) => {
                            tracing::info!(file = %self.file.display(), users = users.len(), "basic_auth: users re-read");
                            *self.users.write().unwrap_or_else(|p| p.into_inner()) =
                                Arc::new(users);
                        }
                        Err(e) => tracing::warn!("basic_auth: keeping the users read last: {e}"),
                    }
                }
            }
        }
        self.users.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The user, when `authorization` holds a valid Basic credential.
    pub fn check(&self, authorization: &[u8], now: Instant) -> Option<String> {
        let (scheme, b64) = split_scheme(authorization)?;
        if !scheme.eq_ignore_ascii_case(b"basic") {
            return None;
        }
        let decoded = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
        let text = String::from_utf8(decoded).ok()?;
        let (user, password) = text.split_once(':')?;
        let users = self.users(now);
        let hash = users.get(user)?;
        let key = self.verified.enabled().then(|| {
            self.verified
                .key(&[user.as_bytes(), password.as_bytes(), hash.stored()])
        });
        if let Some(k) = key {
            if self.verified.get(k, now).is_some() {
                return Some(user.to_string());
            }
        }
        if !hash.verify(password) {
            return None;
        }
        if let Some(k) = key {
            self.verified.put(k, (), now);
        }
        Some(user.to_string())
    }
}

/// `Scheme credentials` → (scheme, credentials), spaces trimmed.
pub(crate) fn split_scheme(v: &[u8]) -> Option<(&[u8], &[u8])> {
    let v = v.trim_ascii();
    let i = v.iter().position(|b| *b == b' ')?;
    Some((&v[..i], v[i + 1..].trim_ascii()))
}

impl super::Filter for BasicAuth {
    fn phases(&self) -> u16 {
        let drops = if self.forward {
            0
        } else {
            phase::DROPS_UPSTREAM
        };
        phase::REQUEST | phase::IDENTITY | drops
    }

    fn request(&self, req: &Req<'_>, _: &mut State, _: &mut Option<usize>) -> Flow {
        let user = req
            .head
            .header("authorization")
            .and_then(|v| self.check(v, Instant::now()));
        match user {
            Some(u) => Flow::Authenticated(Arc::new(Identity {
                consumer: u,
                claims: Default::default(),
                upstream_fields: Default::default(),
            })),
            None => Flow::Respond(Answer {
                status: 401,
                fields: vec![(
                    Bytes::from_static(b"WWW-Authenticate"),
                    self.challenge.clone(),
                )],
                body: Bytes::from_static(b"Unauthorized\n"),
            }),
        }
    }

    fn drops_upstream(&self, _: &Client, name: &[u8]) -> bool {
        name.eq_ignore_ascii_case(b"authorization")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A verified password is remembered (no second bcrypt); a wrong one never is, and a
    /// remembered one stops working when the stored hash changes.
    #[test]
    fn verified_credentials_are_remembered_by_hash() {
        let dir = std::env::temp_dir().join(format!("weir-basic-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("u"),
            "demo:$2y$04$bw/DjbZ7pnZEvEo1e.JXwu0kKPu44mWSeL5zCJW0eGFoTHAXCI5X6\n",
        )
        .unwrap();
        let m: model_auth::BasicAuth = serde_yaml::from_str("{file: u}").unwrap();
        let b = BasicAuth::compile(m, "f", &BaseDir(dir.clone())).unwrap();
        let t = Instant::now();
        assert_eq!(b.check(b"Basic ZGVtbzp3cm9uZw==", t), None, "demo:wrong");
        assert!(b.verified.is_empty());
        assert_eq!(b.check(b"basic  ZGVtbzpkZW1v ", t).as_deref(), Some("demo"));
        assert_eq!(b.verified.len(), 1);
        assert_eq!(b.check(b"Basic ZGVtbzpkZW1v", t).as_deref(), Some("demo"));
        assert_eq!(b.verified.len(), 1, "the second check was a hit");
        // The same password under another stored hash is another key.
        *b.users.write().unwrap() =
            Arc::new(htpasswd::parse("demo:$apr1$ab$RieuZkC7MNZo71UI4mVva0\n").unwrap());
        assert_eq!(b.check(b"Basic ZGVtbzpkZW1v", t), None);
        std::fs::remove_dir_all(&dir).ok();
    }
}
