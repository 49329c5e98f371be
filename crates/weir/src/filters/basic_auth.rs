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
//!
//! A check that is not remembered runs on tokio's blocking threads, at most [`HASHERS`] at
//! once per process and [`HASH_QUEUE`] waiting (beyond, 503 with `Retry-After`), at most
//! [`PER_CLIENT`] per client address (beyond, 429), never on a worker: 4 clients guessing one user's password took an unrelated route's p50 from 0.3 ms to
//! 196 ms when bcrypt ran on the worker (issue 33 §4). A user the file does not have is
//! checked against another user's hash all the same, so the answer's timing does not tell
//! which names exist.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Instant, SystemTime};

use base64::Engine;
use bytes::Bytes;

use super::htpasswd::{self, Users};
use super::registry::{plain, Build, Built, Cx};
use super::remember::Remembered;
use super::{Answer, Caps, Client, Flow, Identity, Phases, Req, State};
use crate::config::{model_auth, BaseDir, CompileError};

/// Password checks running at once, per process (the machine's cores are the workers').
pub const HASHERS: usize = 2;
/// Checks waiting for a hasher before new ones are refused with 503.
pub const HASH_QUEUE: usize = 256;

/// Checks one client may have waiting or running at once: beyond, 429 at once, so that one
/// client cannot fill the queue in front of everyone else's logins.
pub const PER_CLIENT: u32 = 4;

static HASHING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(HASHERS);
static PENDING: std::sync::LazyLock<Mutex<std::collections::HashMap<std::net::IpAddr, u32>>> =
    std::sync::LazyLock::new(Default::default);

/// One check a client has pending; given back when dropped (done, or the request gone).
struct Pending(std::net::IpAddr);

impl Pending {
    fn take(ip: std::net::IpAddr) -> Option<Pending> {
        let mut map = PENDING.lock().unwrap_or_else(|p| p.into_inner());
        let n = map.entry(ip).or_insert(0);
        if *n >= PER_CLIENT {
            return None;
        }
        *n += 1;
        Some(Pending(ip))
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let mut map = PENDING.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = map.get_mut(&self.0) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.0);
            }
        }
    }
}
static WAITING: AtomicUsize = AtomicUsize::new(0);
static BUSY_LOG: crate::logs::Limited = crate::logs::Limited::new();

#[derive(Debug)]
pub struct BasicAuth {
    file: PathBuf,
    users: RwLock<Arc<Users>>,
    /// When the file was last looked at, and its modification time then.
    checked: Mutex<(Instant, Option<SystemTime>)>,
    challenge: Bytes,
    verified: Arc<Remembered<()>>,
    forward: bool,
    /// The costliest hash of the users last read, and which set it is of.
    costliest: Mutex<Option<(Arc<Users>, htpasswd::Hash)>>,
}

/// What a credential needs before it is known good or bad.
#[derive(Debug)]
pub(crate) enum Check {
    /// Verified (now, or remembered).
    Good(String),
    /// Malformed, or no user to check against.
    Bad,
    /// A hash to compute: `user` with `password` against `hash`, which is another user's when
    /// `known` is false (the answer is then no, after the same work).
    Hash {
        user: String,
        password: String,
        hash: htpasswd::Hash,
        known: bool,
        key: Option<u64>,
    },
}

fn modified(p: &std::path::Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

fn read(p: &std::path::Path) -> Result<Users, String> {
    let text =
        std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
    htpasswd::parse(&text).map_err(|e| format!("{}: {e}", p.display()))
}

impl Build<&Cx<'_>> for model_auth::BasicAuth {
    type Output = Built;

    fn build(self, cx: &Cx<'_>) -> Built {
        plain(BasicAuth::compile(self, cx.path, cx.base)?)
    }
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
            verified: Arc::new(Remembered::new(b.cache.0, b.cache_size)),
            forward: b.forward_credentials,
            costliest: Mutex::new(None),
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

    /// What `authorization` needs: known good (remembered), bad, or a hash to compute.
    pub(crate) fn check(&self, authorization: &[u8], now: Instant) -> Check {
        let Some((scheme, b64)) = split_scheme(authorization) else {
            return Check::Bad;
        };
        if !scheme.eq_ignore_ascii_case(b"basic") {
            return Check::Bad;
        }
        let Some(text) = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .ok()
            .and_then(|d| String::from_utf8(d).ok())
        else {
            return Check::Bad;
        };
        let Some((user, password)) = text.split_once(':') else {
            return Check::Bad;
        };
        let users = self.users(now);
        let Some(hash) = users.get(user) else {
            // The file's costliest hash, so that an unknown name costs what the slowest known
            // one does (an arbitrary one once told `{SHA}` users from the others).
            return match self.costliest(&users) {
                Some(h) => Check::Hash {
                    user: user.to_string(),
                    password: password.to_string(),
                    hash: h.clone(),
                    known: false,
                    key: None,
                },
                None => Check::Bad,
            };
        };
        let key = self.verified.enabled().then(|| {
            self.verified
                .key(&[user.as_bytes(), password.as_bytes(), hash.stored()])
        });
        if let Some(k) = key {
            if self.verified.get(k, now).is_some() {
                return Check::Good(user.to_string());
            }
        }
        Check::Hash {
            user: user.to_string(),
            password: password.to_string(),
            hash: hash.clone(),
            known: true,
            key,
        }
    }

    /// The costliest hash of `users`, found once per set of users read.
    fn costliest(&self, users: &Arc<Users>) -> Option<htpasswd::Hash> {
        let mut cached = self.costliest.lock().unwrap_or_else(|p| p.into_inner());
        match &*cached {
            Some((of, h)) if Arc::ptr_eq(of, users) => Some(h.clone()),
            _ => {
                let h = users.values().max_by_key(|h| h.work())?.clone();
                *cached = Some((users.clone(), h.clone()));
                Some(h)
            }
        }
    }

    fn denied(&self) -> Flow {
        Flow::Respond(Answer {
            status: 401,
            fields: vec![(
                Bytes::from_static(b"WWW-Authenticate"),
                self.challenge.clone(),
            )],
            body: Bytes::from_static(b"Unauthorized\n"),
        })
    }
}

/// An answer telling the client to come back in a second.
fn retry_later(status: u16, body: &'static [u8]) -> Flow {
    Flow::Respond(Answer {
        status,
        fields: vec![(Bytes::from_static(b"Retry-After"), Bytes::from_static(b"1"))],
        body: Bytes::from_static(body),
    })
}

fn authenticated(user: String) -> Flow {
    Flow::Authenticated(Arc::new(Identity {
        consumer: user,
        claims: Default::default(),
        upstream_fields: Default::default(),
    }))
}

/// Runs `hash.verify(password)` on a blocking thread, at most [`HASHERS`] at once: `None` when
/// too many checks wait already.
async fn verify_off_worker(hash: htpasswd::Hash, password: String) -> Option<bool> {
    if WAITING.fetch_add(1, Ordering::Relaxed) >= HASH_QUEUE {
        WAITING.fetch_sub(1, Ordering::Relaxed);
        return None;
    }
    let permit = HASHING.acquire().await;
    WAITING.fetch_sub(1, Ordering::Relaxed);
    let _permit = permit.ok()?;
    tokio::task::spawn_blocking(move || hash.verify(&password))
        .await
        .ok()
}

/// `Scheme credentials` → (scheme, credentials), spaces trimmed.
pub(crate) fn split_scheme(v: &[u8]) -> Option<(&[u8], &[u8])> {
    let v = v.trim_ascii();
    let i = v.iter().position(|b| *b == b' ')?;
    Some((&v[..i], v[i + 1..].trim_ascii()))
}

impl super::Filter for BasicAuth {
    fn phases(&self) -> Phases {
        match self.forward {
            true => Phases::REQUEST,
            false => Phases::REQUEST | Phases::DROPS_UPSTREAM,
        }
    }

    fn caps(&self) -> Caps {
        Caps::IDENTITY
    }

    fn request(&self, req: &Req<'_>, _: &mut State, _: &mut Option<usize>) -> Flow {
        let Some(v) = req.head.header("authorization") else {
            return self.denied();
        };
        match self.check(v, Instant::now()) {
            Check::Good(u) => authenticated(u),
            Check::Bad => self.denied(),
            Check::Hash {
                user,
                password,
                hash,
                known,
                key,
            } => {
                let Some(pending) = Pending::take(req.client.ip) else {
                    return retry_later(429, b"too many password checks from this client\n");
                };
                let (verified, denied) = (self.verified.clone(), self.denied());
                Flow::Wait(Box::pin(async move {
                    let _pending = pending;
                    match verify_off_worker(hash, password).await {
                        Some(true) if known => {
                            if let Some(k) = key {
                                verified.put(k, (), Instant::now());
                            }
                            authenticated(user)
                        }
                        Some(_) => denied,
                        None => {
                            if let Some(suppressed) = BUSY_LOG.admit() {
                                tracing::warn!(suppressed, "basic_auth: {HASH_QUEUE} password checks waiting: answering 503");
                            }
                            retry_later(503, b"too many password checks waiting\n")
                        }
                    }
                }))
            }
        }
    }

    fn drops_upstream(&self, _: &Client, name: &[u8]) -> bool {
        name.eq_ignore_ascii_case(b"authorization")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`BasicAuth::check`] with its hash computed here, as the filter's wait does.
    fn check_now(b: &BasicAuth, auth: &[u8], t: Instant) -> Option<String> {
        match b.check(auth, t) {
            Check::Good(u) => Some(u),
            Check::Bad => None,
            Check::Hash {
                user,
                password,
                hash,
                known,
                key,
            } => {
                if !(hash.verify(&password) && known) {
                    return None;
                }
                if let Some(k) = key {
                    b.verified.put(k, (), t);
                }
                Some(user)
            }
        }
    }

    /// A verified password is remembered (no second bcrypt); a wrong one never is, and a
    /// remembered one stops working when the stored hash changes. An unknown user is
    /// checked against another user's hash (the same work), and refused.
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
        assert_eq!(
            check_now(&b, b"Basic ZGVtbzp3cm9uZw==", t),
            None,
            "demo:wrong"
        );
        assert!(b.verified.is_empty());
        assert_eq!(
            check_now(&b, b"basic  ZGVtbzpkZW1v ", t).as_deref(),
            Some("demo")
        );
        assert_eq!(b.verified.len(), 1);
        assert!(
            matches!(b.check(b"Basic ZGVtbzpkZW1v", t), Check::Good(_)),
            "remembered"
        );
        // nobody:demo: the same hash work as demo's, then no.
        match b.check(b"Basic bm9ib2R5OmRlbW8=", t) {
            Check::Hash {
                known: false, hash, ..
            } => assert!(matches!(hash, htpasswd::Hash::Bcrypt(_))),
            other => panic!("{other:?}"),
        }
        assert_eq!(check_now(&b, b"Basic bm9ib2R5OmRlbW8=", t), None);
        // The same password under another stored hash is another key.
        *b.users.write().unwrap() =
            Arc::new(htpasswd::parse("demo:$apr1$ab$RieuZkC7MNZo71UI4mVva0\n").unwrap());
        assert_eq!(check_now(&b, b"Basic ZGVtbzpkZW1v", t), None);
        std::fs::remove_dir_all(&dir).ok();
    }
}
