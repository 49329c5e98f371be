//! `no_store`: keeps some upstream responses out of the cache (nginx `proxy_no_cache`), in the
//! before-store phase: those with a listed status, or carrying one of the listed fields (say
//! `x-debug`, or `set-cookie` on a route that shares them otherwise). They are still relayed;
//! their `Cache-Status` says `detail=filter`.

use weir_http::ResponseHead;

use super::registry::{plain, Build, Built, Cx};
use super::Phases;
use crate::config::{check_header_name, model, CompileError};

#[derive(Debug)]
pub struct NoStore {
    statuses: Vec<u16>,
    fields: Vec<String>,
}

impl Build<&Cx<'_>> for model::NoStoreRule {
    type Output = Built;

    fn build(self, cx: &Cx<'_>) -> Built {
        plain(NoStore::compile(self, cx.path)?)
    }
}

impl NoStore {
    pub(crate) fn compile(n: model::NoStoreRule, path: &str) -> Result<NoStore, CompileError> {
        if n.statuses.is_empty() && n.response_fields.is_empty() {
            return Err((path.to_string(), "give statuses or response_fields".into()));
        }
        for (i, f) in n.response_fields.iter().enumerate() {
            check_header_name(f).map_err(|m| (format!("{path}.response_fields[{i}]"), m))?;
        }
        Ok(NoStore {
            statuses: n.statuses,
            fields: n
                .response_fields
                .iter()
                .map(|f| f.to_ascii_lowercase())
                .collect(),
        })
    }
}

impl super::Filter for NoStore {
    fn phases(&self) -> Phases {
        Phases::BEFORE_STORE
    }

    fn before_store(&self, resp: &ResponseHead) -> bool {
        !(self.statuses.contains(&resp.status)
            || resp.headers().iter().any(|h| {
                self.fields
                    .iter()
                    .any(|f| h.name.eq_ignore_ascii_case(f.as_bytes()))
            }))
    }
}
