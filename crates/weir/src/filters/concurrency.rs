//! `concurrency`: requests in flight per key (nginx `limit_conn`). A request over the limit is
//! answered with `status` (503 by default, as nginx); one admitted holds a slot until it ends,
//! however it ends: the slot is the filter's per-request state, released when the request's
//! context is dropped (after the log phase, or when the connection fails halfway).
//!
//! Process-wide like the rate limit: one table behind 16 sharded mutexes, bounded by
//! `max_keys` (a key with nothing in flight is removed at once, so the table holds only keys
//! with requests running; over the bound, new keys are refused rather than old ones forgotten).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use super::compile::{Compiled, Kind};
use super::registry::{Build, Built, Cx};
use super::{Answer, Caps, Flow, Phases, Req, State};
use crate::config::{model, CompileError};
use crate::vars::Template;

const SHARDS: usize = 16;

#[derive(Debug)]
pub struct Concurrency {
    pub name: String,
    max: u32,
    key: Template,
    status: u16,
    pub table: Arc<Table>,
}

#[derive(Debug)]
pub struct Table {
    map: super::keyed::Sharded<u32>,
    max_keys: usize,
    len: AtomicUsize,
    pub rejected: AtomicU64,
}

impl Table {
    pub fn new(max_keys: usize) -> Table {
        Table {
            map: super::keyed::Sharded::new(SHARDS),
            max_keys,
            len: AtomicUsize::new(0),
            rejected: AtomicU64::new(0),
        }
    }

    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The table's hash of a key.
    fn hash(&self, key: &[u8]) -> u64 {
        self.map.hash(key)
    }

    /// Takes a slot for key hash `h` if fewer than `max` are held.
    fn acquire(&self, h: u64, max: u32) -> bool {
        let mut map = self.map.shard(h);
        match map.get_mut(&h) {
            Some(n) if *n >= max => false,
            Some(n) => {
                *n += 1;
                true
            }
            None if self.len() >= self.max_keys => false,
            None => {
                map.insert(h, 1);
                self.len.fetch_add(1, Ordering::Relaxed);
                true
            }
        }
    }

    fn release(&self, h: u64) {
        let mut map = self.map.shard(h);
        if let Some(n) = map.get_mut(&h) {
            *n -= 1;
            if *n == 0 {
                map.remove(&h);
                self.len.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

/// A held slot: released on drop.
#[derive(Debug)]
struct Slot {
    table: Arc<Table>,
    key: u64,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.table.release(self.key);
    }
}

/// Its table kept across reloads under a key of its name and size.
impl Build<&Cx<'_>> for model::Concurrency {
    type Output = Built;

    fn build(self, cx: &Cx<'_>) -> Built {
        let key = format!("concurrency/{}/{}", cx.name, self.max_keys);
        let max_keys = self.max_keys.max(1);
        let table = cx.kept(&key, || Arc::new(Table::new(max_keys)));
        let f = Arc::new(Concurrency::compile(cx.name, self, cx.path, table)?);
        Ok(Compiled {
            filter: f.clone(),
            kind: Kind::Concurrency(f),
            state_key: Some(key),
        })
    }
}

impl Concurrency {
    pub(crate) fn compile(
        name: &str,
        c: model::Concurrency,
        path: &str,
        table: Option<Arc<Table>>,
    ) -> Result<Concurrency, CompileError> {
        if c.max == 0 {
            return Err((format!("{path}.max"), "must be at least 1".into()));
        }
        if !(400..=599).contains(&c.status) {
            return Err((format!("{path}.status"), "must be 400-599".into()));
        }
        Ok(Concurrency {
            name: name.to_string(),
            max: c.max,
            key: Template::parse(&c.key).map_err(|m| (format!("{path}.key"), m))?,
            status: c.status,
            table: table.unwrap_or_else(|| Arc::new(Table::new(c.max_keys.max(1)))),
        })
    }
}

impl super::Filter for Concurrency {
    fn phases(&self) -> Phases {
        Phases::REQUEST
    }

    fn caps(&self) -> Caps {
        Caps::STATE
    }

    fn request(&self, req: &Req<'_>, state: &mut State, _: &mut Option<usize>) -> Flow {
        let key = self.table.hash(&self.key.to_vec(&req.env()));
        if self.table.acquire(key, self.max) {
            *state = Some(Box::new(Slot {
                table: self.table.clone(),
                key,
            }));
            Flow::Continue
        } else {
            self.table.rejected.fetch_add(1, Ordering::Relaxed);
            Flow::Respond(Answer {
                status: self.status,
                fields: Vec::new(),
                body: Bytes::from_static(b"Too many requests in flight\n"),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_counted_and_released() {
        let t = Arc::new(Table::new(2));
        let (a, b, c) = (t.hash(b"a"), t.hash(b"b"), t.hash(b"c"));
        assert!(t.acquire(a, 2));
        assert!(t.acquire(a, 2));
        assert!(!t.acquire(a, 2));
        assert!(t.acquire(b, 2));
        assert!(!t.acquire(c, 2), "the table holds 2 keys at most");
        let s = Slot {
            table: t.clone(),
            key: a,
        };
        drop(s);
        assert!(t.acquire(a, 2));
        t.release(b);
        assert_eq!(t.len(), 1);
    }
}
