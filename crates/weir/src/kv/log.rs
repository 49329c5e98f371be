//! A key-value store's log on disk: every PUT and DELETE appended as a checksummed record
//! (`weir_cache::disk::record`, in the same segment files as the cache's disk tier) by one
//! writer thread, which answers each change once it is written (and, with `sync: true`, synced:
//! group commit, one `fdatasync` for the changes queued together). At start the segments are
//! replayed in order (a torn tail cut); when the log holds more than twice the live bytes, the
//! live values are written again into a new segment and the older segments dropped.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::oneshot;
use weir_cache::disk::codec::{In, Out};
use weir_cache::disk::log::Log;
use weir_cache::disk::record::{self, Kind};

use super::{KvStore, Value};

/// Where and how (`kv_stores.NAME.disk`).
#[derive(Debug, Clone, PartialEq)]
pub struct LogSettings {
    pub path: PathBuf,
    /// Sync before answering (group commit); otherwise written (a weir crash loses nothing, a
    /// power loss may lose the last writes).
    pub sync: bool,
}

/// Resolves to whether the change is on disk.
pub type Ack = oneshot::Receiver<bool>;

enum Msg {
    Put(Bytes, std::sync::Arc<Value>, oneshot::Sender<bool>),
    Delete(Bytes, oneshot::Sender<bool>),
    Stop,
}

/// Bytes of changes waiting for the writer before writes are refused (503).
const QUEUE_BYTES: u64 = 64 << 20;

/// The log of one store.
#[derive(Debug)]
pub struct KvLog {
    tx: Mutex<Option<Sender<Msg>>>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
    queued: std::sync::Arc<AtomicU64>,
}

fn encode_value(v: &Value) -> Vec<u8> {
    let mut o = Out(Vec::with_capacity(v.body.len() + v.content_type.len() + 32));
    o.u64(v.version);
    o.u64(v.modified);
    o.u64(v.expires);
    o.bytes(&v.content_type);
    o.bytes(&v.body);
    o.0
}

fn decode_value(payload: &[u8]) -> Option<Value> {
    let mut i = In { b: payload };
    let (version, modified, expires) = (i.u64()?, i.u64()?, i.u64()?);
    let content_type = Bytes::copy_from_slice(i.bytes()?);
    let body = Bytes::copy_from_slice(i.bytes()?);
    Some(Value::new(body, content_type, version, modified, expires))
}

impl KvLog {
    /// Opens the log and starts its writer, which takes the directory's lock, replays the log
    /// into `store` and marks it ready.
    pub fn open(settings: LogSettings, store: Weak<KvStore>) -> std::io::Result<KvLog> {
        let log = Log::open(&settings.path, 64 << 20)?;
        let (tx, rx) = std::sync::mpsc::channel();
        let queued = std::sync::Arc::new(AtomicU64::new(0));
        let q = queued.clone();
        let writer = std::thread::Builder::new()
            .name("weir-kv-writer".into())
            .spawn(move || run(&settings, &log, &store, &rx, &q))?;
        Ok(KvLog {
            tx: Mutex::new(Some(tx)),
            writer: Mutex::new(Some(writer)),
            queued,
        })
    }

    pub fn has_room(&self) -> bool {
        self.queued.load(Ordering::Relaxed) < QUEUE_BYTES
    }

    fn send(&self, msg: Msg, cost: u64) {
        self.queued.fetch_add(cost, Ordering::Relaxed);
        let tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(Err(_)) = tx.as_ref().map(|t| t.send(msg)) {
            self.queued.fetch_sub(cost, Ordering::Relaxed);
        }
    }

    pub fn put(&self, key: &[u8], value: &std::sync::Arc<Value>) -> Ack {
        let (done, ack) = oneshot::channel();
        let cost = (key.len() + value.body.len()) as u64;
        self.send(
            Msg::Put(Bytes::copy_from_slice(key), value.clone(), done),
            cost,
        );
        ack
    }

    pub fn delete(&self, key: &[u8]) -> Ack {
        let (done, ack) = oneshot::channel();
        self.send(
            Msg::Delete(Bytes::copy_from_slice(key), done),
            key.len() as u64,
        );
        ack
    }

    /// Writes what is queued, then unlocks the directory. Blocking.
    pub fn close(&self) {
        if let Some(tx) = self.tx.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = tx.send(Msg::Stop);
        }
        if let Some(w) = self.writer.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = w.join();
        }
    }
}

fn run(
    settings: &LogSettings,
    log: &Log,
    store: &Weak<KvStore>,
    rx: &Receiver<Msg>,
    queued: &AtomicU64,
) {
    let _lock = loop {
        if let Ok(Some(l)) = weir_cache::disk::log::lock_dir(&settings.path) {
            break l;
        }
        // The previous process (a binary upgrade) still has it; requests wait meanwhile.
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => return,
            Ok(Msg::Put(_, _, done) | Msg::Delete(_, done)) => {
                let _ = done.send(false);
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
    };
    let Some(s) = store.upgrade() else { return };
    replay(log, &s);
    s.ready.send_replace(true);
    drop(s);
    let mut waiting: Vec<oneshot::Sender<bool>> = Vec::new();
    let mut unsynced = false;
    let mut seq = 1u64;
    loop {
        let msg = match rx.try_recv() {
            Ok(m) => Ok(m),
            Err(TryRecvError::Empty) => {
                commit(settings, log, &mut waiting, &mut unsynced);
                rx.recv_timeout(Duration::from_secs(1))
            }
            Err(TryRecvError::Disconnected) => Err(RecvTimeoutError::Disconnected),
        };
        let (rec, done, cost) = match msg {
            Ok(Msg::Put(key, value, done)) => {
                let cost = (key.len() + value.body.len()) as u64;
                seq += 1;
                (
                    record::encode(Kind::Value, seq, 0, &key, &encode_value(&value)),
                    done,
                    cost,
                )
            }
            Ok(Msg::Delete(key, done)) => {
                seq += 1;
                let cost = key.len() as u64;
                (record::encode(Kind::Deleted, seq, 0, &key, b""), done, cost)
            }
            Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => {
                commit(settings, log, &mut waiting, &mut unsynced);
                let _ = log.sync();
                return;
            }
            Err(RecvTimeoutError::Timeout) => continue,
        };
        queued.fetch_sub(cost, Ordering::Relaxed);
        match log.append(&rec) {
            Ok(_) => {
                unsynced = true;
                waiting.push(done);
            }
            Err(e) => {
                tracing::error!(path = %settings.path.display(), error = %e, "kv log write failed");
                let _ = done.send(false);
            }
        }
        if let Some(s) = store.upgrade() {
            if log.bytes() > 2 * s.usage().1 + (16 << 20) {
                commit(settings, log, &mut waiting, &mut unsynced);
                compact(log, &s, &mut seq);
            }
        }
    }
}

/// Answers the changes written so far (syncing first when asked).
fn commit(
    settings: &LogSettings,
    log: &Log,
    waiting: &mut Vec<oneshot::Sender<bool>>,
    unsynced: &mut bool,
) {
    let ok = !(settings.sync && *unsynced) || log.sync().is_ok();
    *unsynced = false;
    for done in waiting.drain(..) {
        let _ = done.send(ok);
    }
}

/// Writes every live value into a new segment, synced, then drops the older segments.
fn compact(log: &Log, store: &KvStore, seq: &mut u64) {
    let Ok(first) = log.roll() else { return };
    for (key, value) in store.all() {
        *seq += 1;
        let rec = record::encode(Kind::Value, *seq, 0, &key, &encode_value(&value));
        if log.append(&rec).is_err() {
            return;
        }
    }
    if log.sync().is_ok() {
        log.drop_before(first);
    }
}

/// Replays every segment into the store, oldest first; cuts torn tails.
fn replay(log: &Log, store: &KvStore) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    for (id, len) in log.segments() {
        let end = log.scan(id, 0, |_, bytes| {
            let Some(r) = record::decode(bytes) else {
                return;
            };
            let key = Bytes::copy_from_slice(r.key);
            match r.kind {
                Kind::Value => {
                    let v = decode_value(r.payload).filter(|v| v.live(now));
                    store.restore(key, v);
                }
                Kind::Deleted => store.restore(key, None),
                _ => {}
            }
        });
        if let Ok(end) = end {
            if end < len {
                tracing::warn!(segment = id, at = end, "kv log: torn tail cut");
                let _ = log.truncate(id, end);
            }
        }
    }
}
