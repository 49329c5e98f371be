//! `sticky`: session persistence by a signed cookie naming the server (Tempesta FW's stateless
//! sticky cookies are the model: nothing is stored at the gateway, any worker and any node with
//! the secret can check a cookie).
//!
//! The cookie's value is `<server>.<expires>.<mac>`: the server's id (a hash of its name, so it
//! survives reloads that reorder servers), when the cookie expires (Unix seconds), and the first
//! 16 bytes of HMAC-SHA256(secret, "<server>.<expires>"), all hex. A request with a valid cookie
//! goes to that server while it is up; an invalid, expired or missing cookie, or a server that is
//! down, falls back to the upstream's balancer, and the response names the server that answered
//! in a new cookie. The `Set-Cookie` is added in the response phase, after the cache: a cached
//! route never stores it, and hits (no server answered) get none.

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::registry::{plain, Build, Built, Cx};
use super::{Caps, Flow, Phases, Req, State};
use crate::config::{model, CompileError};

#[derive(Debug)]
pub struct Sticky {
    cookie: Bytes,
    secret: Vec<u8>,
    max_age: u64,
    /// `; Path=/; Max-Age=...; HttpOnly; SameSite=Lax` and `Secure` when asked.
    attributes: String,
    /// Each server's id, by index, per upstream the route may use.
    ids: Vec<Vec<u64>>,
}

/// What a request carried, for its response.
#[derive(Debug)]
struct Seen {
    /// The server its valid cookie named, if any.
    server: Option<u64>,
}

/// A server's id: FNV-1a of its name (stable across reloads and processes).
pub fn server_id(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Cookies name the servers of the upstreams.
impl Build<&Cx<'_>> for model::StickyRule {
    type Output = Built;

    fn build(self, cx: &Cx<'_>) -> Built {
        let names: Vec<Vec<String>> = cx.upstream_info.iter().map(|u| u.servers.clone()).collect();
        plain(Sticky::compile(self, cx.path, &names)?)
    }
}

impl Sticky {
    pub(crate) fn compile(
        s: model::StickyRule,
        path: &str,
        upstream_names: &[Vec<String>],
    ) -> Result<Sticky, CompileError> {
        let secret = match (&s.secret_env, &s.secret_file) {
            (Some(v), None) => std::env::var(v).map_err(|_| {
                (
                    format!("{path}.secret_env"),
                    format!("the environment has no {v}"),
                )
            })?,
            (None, Some(f)) => std::fs::read_to_string(f)
                .map_err(|e| {
                    (
                        format!("{path}.secret_file"),
                        format!("cannot read {f}: {e}"),
                    )
                })?
                .trim()
                .to_string(),
            _ => {
                return Err((
                    path.to_string(),
                    "give secret_env or secret_file (the HMAC key, 32 characters or more)".into(),
                ))
            }
        };
        if secret.len() < 32 {
            return Err((
                path.to_string(),
                "the secret must be 32 characters or more".into(),
            ));
        }
        if s.cookie.is_empty()
            || !s
                .cookie
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err((
                format!("{path}.cookie"),
                "letters, digits, _ and - only".into(),
            ));
        }
        let max_age = s.max_age.0.as_secs().max(1);
        let mut attributes = format!("; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Lax");
        if s.secure {
            attributes.push_str("; Secure");
        }
        Ok(Sticky {
            cookie: Bytes::from(s.cookie),
            secret: secret.into_bytes(),
            max_age,
            attributes,
            ids: upstream_names
                .iter()
                .map(|names| names.iter().map(|n| server_id(n)).collect())
                .collect(),
        })
    }

    fn mac(&self, text: &[u8]) -> [u8; 16] {
        let mut m =
            Hmac::<Sha256>::new_from_slice(&self.secret).expect("HMAC takes any key length");
        m.update(text);
        let full = m.finalize().into_bytes();
        let mut out = [0u8; 16];
        out.copy_from_slice(&full[..16]);
        out
    }

    /// A cookie value for server `id`, valid until `expires`.
    pub fn value(&self, id: u64, expires: u64) -> String {
        let text = format!("{id:016x}.{expires:x}");
        let mac = self.mac(text.as_bytes());
        format!("{text}.{}", hex(&mac))
    }

    /// The server a cookie value names, if its MAC is right and it has not expired.
    pub fn check(&self, value: &[u8], now: u64) -> Option<u64> {
        let text = std::str::from_utf8(value).ok()?;
        let (signed, mac) = text.rsplit_once('.')?;
        let (id, expires) = signed.split_once('.')?;
        let want = hex(&self.mac(signed.as_bytes()));
        // Constant time: a timing difference must not reveal how much of a forged MAC matched.
        let same = want.len() == mac.len()
            && want
                .bytes()
                .zip(mac.bytes())
                .fold(0u8, |a, (x, y)| a | (x ^ y))
                == 0;
        if !same {
            return None;
        }
        let expires = u64::from_str_radix(expires, 16).ok()?;
        (expires > now).then(|| u64::from_str_radix(id, 16).ok())?
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl super::Filter for Sticky {
    fn phases(&self) -> Phases {
        Phases::REQUEST | Phases::RESPONSE
    }

    fn caps(&self) -> Caps {
        Caps::STATE | Caps::UPSTREAM_CHOICE | Caps::SERVER_CHOICE
    }

    fn request(&self, req: &Req<'_>, state: &mut State, _: &mut Option<usize>) -> Flow {
        let server = crate::vars::cookie(req.head, &self.cookie).and_then(|v| self.check(v, now()));
        *state = Some(Box::new(Seen { server }));
        Flow::Continue
    }

    fn prefer(&self, state: &State, upstream: usize) -> Option<usize> {
        let id = state.as_ref()?.downcast_ref::<Seen>()?.server?;
        self.ids.get(upstream)?.iter().position(|s| *s == id)
    }

    fn served(&self, state: &mut State, upstream: usize, server: usize, lines: &mut BytesMut) {
        let Some(seen) = state.as_ref().and_then(|s| s.downcast_ref::<Seen>()) else {
            return;
        };
        let Some(id) = self
            .ids
            .get(upstream)
            .and_then(|ids| ids.get(server))
            .copied()
        else {
            return;
        };
        if seen.server == Some(id) {
            return;
        }
        let value = self.value(id, now() + self.max_age);
        let field = format!(
            "{}={value}{}",
            String::from_utf8_lossy(&self.cookie),
            self.attributes
        );
        weir_http::response::put_header(lines, b"Set-Cookie", field.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sticky() -> Sticky {
        Sticky {
            cookie: Bytes::from_static(b"s"),
            secret: b"0123456789abcdef0123456789abcdef".to_vec(),
            max_age: 60,
            attributes: String::new(),
            ids: vec![vec![server_id("a:1"), server_id("b:2")]],
        }
    }

    #[test]
    fn cookies_are_signed_and_expire() {
        let s = sticky();
        let v = s.value(server_id("b:2"), 1000);
        assert_eq!(s.check(v.as_bytes(), 999), Some(server_id("b:2")));
        assert_eq!(s.check(v.as_bytes(), 1000), None, "expired");
        let forged = v.replacen(
            &format!("{:016x}", server_id("b:2")),
            &format!("{:016x}", server_id("a:1")),
            1,
        );
        assert_eq!(
            s.check(forged.as_bytes(), 0),
            None,
            "another server under the same MAC"
        );
        let mut other = sticky();
        other.secret = b"another secret, 32 characters...".to_vec();
        assert_eq!(other.check(v.as_bytes(), 0), None, "another secret");
        assert_eq!(s.check(b"garbage", 0), None);
    }
}
