//! `api_key`: a key in a request field (`x-api-key` by default) or a query parameter, each key
//! naming its consumer (APISIX's `key-auth`, Kong's `key-auth`). Keys come inline (with
//! `${VAR}` for the environment) or from a file of `consumer:key` lines read at load (a reload
//! re-reads it). A missing or unknown key gets `401`; an accepted request goes on as its
//! consumer (`$consumer`, the access log, rate-limit keys), and the key is not sent upstream
//! (neither the field nor the parameter) unless `forward_credentials`.
//!
//! Keys are looked up by a SHA-256 of the key, so the table holds no key and a lookup's time
//! does not depend on how much of a guess matches a real key.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use sha2::{Digest, Sha256};

use super::registry::{plain, Build, Built, Cx};
use super::{Answer, Caps, Client, Flow, Identity, Phases, Req, State};
use crate::config::{model_auth, BaseDir, CompileError};

#[derive(Debug)]
pub struct ApiKey {
    /// The field's lowercase name, if the key may come in one.
    header: Option<String>,
    query: Option<String>,
    /// SHA-256 of each key → its consumer.
    keys: HashMap<[u8; 32], Arc<Identity>>,
    forward: bool,
}

fn digest(key: &[u8]) -> [u8; 32] {
    Sha256::digest(key).into()
}

impl Build<&Cx<'_>> for model_auth::ApiKey {
    type Output = Built;

    fn build(self, cx: &Cx<'_>) -> Built {
        plain(ApiKey::compile(self, cx.path, cx.base)?)
    }
}

impl ApiKey {
    pub(crate) fn compile(
        a: model_auth::ApiKey,
        path: &str,
        base: &BaseDir,
    ) -> Result<ApiKey, CompileError> {
        let header = match (&a.header, &a.query) {
            (Some(h), _) => {
                crate::config::check_header_name(h).map_err(|e| (format!("{path}.header"), e))?;
                Some(h.to_ascii_lowercase())
            }
            (None, Some(_)) => None,
            (None, None) => Some("x-api-key".to_string()),
        };
        let mut pairs: Vec<(String, String, String)> = a
            .keys
            .into_iter()
            .map(|(c, k)| (c.clone(), k, format!("{path}.keys.{c}")))
            .collect();
        if let Some(f) = &a.file {
            let p = base.0.join(f);
            let text = std::fs::read_to_string(&p).map_err(|e| {
                (
                    format!("{path}.file"),
                    format!("cannot read {}: {e}", p.display()),
                )
            })?;
            for (n, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                let (c, k) = line.split_once(':').ok_or_else(|| {
                    (
                        format!("{path}.file"),
                        format!("{}:{}: not `consumer:key`", p.display(), n + 1),
                    )
                })?;
                pairs.push((
                    c.trim().to_string(),
                    k.trim().to_string(),
                    format!("{path}.file ({}:{})", p.display(), n + 1),
                ));
            }
        }
        if pairs.is_empty() {
            return Err((path.to_string(), "no keys: give `keys` or `file`".into()));
        }
        let mut keys = HashMap::new();
        for (consumer, key, at) in pairs {
            if key.len() < 8 {
                return Err((at, "a key of at least 8 characters".into()));
            }
            let id = Arc::new(Identity {
                consumer,
                claims: Default::default(),
                upstream_fields: Default::default(),
            });
            if keys.insert(digest(key.as_bytes()), id).is_some() {
                return Err((at, "the same key twice".into()));
            }
        }
        Ok(ApiKey {
            header,
            query: a.query,
            keys,
            forward: a.forward_credentials,
        })
    }

    fn given<'r>(&self, req: &'r Req<'_>) -> Option<&'r [u8]> {
        if let Some(h) = &self.header {
            if let Some(v) = req.head.header(h) {
                return Some(v.trim_ascii());
            }
        }
        let q = self.query.as_ref()?;
        crate::vars::arg(req.head.query()?, q.as_bytes())
    }
}

impl super::Filter for ApiKey {
    fn phases(&self) -> Phases {
        match self.forward {
            true => Phases::REQUEST,
            false => Phases::REQUEST | Phases::DROPS_UPSTREAM | Phases::DROPS_ARG,
        }
    }

    fn caps(&self) -> Caps {
        Caps::IDENTITY
    }

    fn request(&self, req: &Req<'_>, _: &mut State, _: &mut Option<usize>) -> Flow {
        match self
            .given(req)
            .filter(|k| !k.is_empty())
            .and_then(|k| self.keys.get(&digest(k)))
        {
            Some(id) => Flow::Authenticated(id.clone()),
            None => Flow::Respond(Answer {
                status: 401,
                fields: Vec::new(),
                body: Bytes::from_static(b"a valid API key is required\n"),
            }),
        }
    }

    fn drops_upstream(&self, _: &Client, name: &[u8]) -> bool {
        self.header
            .as_ref()
            .is_some_and(|h| name.eq_ignore_ascii_case(h.as_bytes()))
    }

    fn drops_arg(&self, name: &[u8]) -> bool {
        self.query.as_ref().is_some_and(|q| name == q.as_bytes())
    }
}
