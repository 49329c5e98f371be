//! `split` and `canary`: which upstream a proxy route's request goes to.
//!
//! * `split`: a weighted random choice between upstreams (`{a: 90, b: 10}`), per request.
//! * `canary` (Easegress's candidate pools): requests carrying one of the given field or cookie
//!   values, or whose verified token has one of the given claim values (routing by claim, after
//!   a `jwt` filter), and `percent` of the others, go to the candidate upstream; the rest to the
//!   route's own (or to what a `split` before it chose).
//!
//! The choice is the request's (`Run::upstream`), read by the proxy when it picks a server; on a
//! cached route it does not enter the cache key, so put these filters on routes without a cache
//! or on content the pools serve alike.

use std::collections::HashMap;

use bytes::Bytes;

use super::registry::{plain, Build, Built, Cx};
use super::{Caps, Flow, Phases, Req, State};
use crate::config::{model, CompileError};

#[derive(Debug)]
pub struct Split {
    /// (upstream, cumulative weight).
    choices: Vec<(usize, u32)>,
    total: u32,
}

pub(crate) fn upstream(
    name: &str,
    key: String,
    upstreams: &HashMap<String, usize>,
) -> Result<usize, CompileError> {
    upstreams.get(name).copied().ok_or_else(|| {
        let mut known: Vec<&String> = upstreams.keys().collect();
        known.sort();
        (
            key,
            format!("no upstream named {name:?} (defined: {known:?})"),
        )
    })
}

impl Build<&Cx<'_>> for model::Split {
    type Output = Built;

    fn build(self, cx: &Cx<'_>) -> Built {
        plain(Split::compile(self, cx.path, cx.upstreams)?)
    }
}

impl Split {
    pub(crate) fn compile(
        s: model::Split,
        path: &str,
        upstreams: &HashMap<String, usize>,
    ) -> Result<Split, CompileError> {
        let mut choices = Vec::new();
        let mut total = 0u32;
        for (name, w) in &s.upstreams {
            let i = upstream(name, format!("{path}.upstreams.{name}"), upstreams)?;
            if *w == 0 {
                continue;
            }
            total = total.checked_add(*w).ok_or_else(|| {
                (
                    format!("{path}.upstreams.{name}"),
                    "weights too large".to_string(),
                )
            })?;
            choices.push((i, total));
        }
        if total == 0 {
            return Err((
                format!("{path}.upstreams"),
                "give at least one weight above 0".into(),
            ));
        }
        Ok(Split { choices, total })
    }

    fn pick(&self) -> usize {
        let r = fastrand::u32(0..self.total);
        self.choices
            .iter()
            .find(|(_, c)| r < *c)
            .map_or(self.choices[0].0, |(u, _)| *u)
    }
}

impl super::Filter for Split {
    fn phases(&self) -> Phases {
        Phases::REQUEST
    }

    fn caps(&self) -> Caps {
        Caps::UPSTREAM_CHOICE
    }

    fn request(&self, _: &Req<'_>, _: &mut State, up: &mut Option<usize>) -> Flow {
        *up = Some(self.pick());
        Flow::Continue
    }
}

#[derive(Debug)]
pub struct Canary {
    upstream: usize,
    /// Out of 1,000,000.
    share: u32,
    headers: Vec<(String, Bytes)>,
    cookies: Vec<(Bytes, Bytes)>,
    claims: Vec<(String, String)>,
}

impl Build<&Cx<'_>> for model::Canary {
    type Output = Built;

    fn build(self, cx: &Cx<'_>) -> Built {
        plain(Canary::compile(self, cx.path, cx.upstreams)?)
    }
}

impl Canary {
    pub(crate) fn compile(
        c: model::Canary,
        path: &str,
        upstreams: &HashMap<String, usize>,
    ) -> Result<Canary, CompileError> {
        if !(0.0..=100.0).contains(&c.percent) {
            return Err((format!("{path}.percent"), "must be 0-100".into()));
        }
        Ok(Canary {
            upstream: upstream(&c.upstream, format!("{path}.upstream"), upstreams)?,
            share: (c.percent * 10_000.0).round() as u32,
            headers: c
                .headers
                .into_iter()
                .map(|(n, v)| (n.to_ascii_lowercase(), Bytes::from(v)))
                .collect(),
            cookies: c
                .cookies
                .into_iter()
                .map(|(n, v)| (Bytes::from(n), Bytes::from(v)))
                .collect(),
            claims: c.claims.into_iter().collect(),
        })
    }

    fn chosen(&self, req: &Req<'_>) -> bool {
        let head = req.head;
        self.headers.iter().any(|(n, v)| {
            head.headers().iter().any(|h| {
                h.name.eq_ignore_ascii_case(n.as_bytes()) && h.value.trim_ascii() == &v[..]
            })
        }) || self
            .cookies
            .iter()
            .any(|(n, v)| crate::vars::cookie(head, n) == Some(&v[..]))
            || self.claims.iter().any(|(n, v)| {
                req.identity
                    .and_then(|id| id.claims.get(n))
                    .is_some_and(|c| claim_is(c, v))
            })
            || (self.share > 0 && fastrand::u32(0..1_000_000) < self.share)
    }
}

/// Whether a claim's value is `want` (a string equal to it, a number or boolean whose JSON is
/// it, or a list holding one of those).
fn claim_is(c: &serde_json::Value, want: &str) -> bool {
    match c {
        serde_json::Value::String(s) => s == want,
        serde_json::Value::Array(items) => items.iter().any(|i| claim_is(i, want)),
        serde_json::Value::Null | serde_json::Value::Object(_) => false,
        serde_json::Value::Bool(b) => want == if *b { "true" } else { "false" },
        serde_json::Value::Number(n) => want.parse::<serde_json::Number>().ok().as_ref() == Some(n),
    }
}

impl super::Filter for Canary {
    fn phases(&self) -> Phases {
        Phases::REQUEST
    }

    fn caps(&self) -> Caps {
        Caps::UPSTREAM_CHOICE
    }

    fn request(&self, req: &Req<'_>, _: &mut State, up: &mut Option<usize>) -> Flow {
        if self.chosen(req) {
            *up = Some(self.upstream);
        }
        Flow::Continue
    }
}
