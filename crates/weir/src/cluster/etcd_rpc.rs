//! The part of etcd's v3 gRPC API that a node uses: range, put, lease grant / revoke /
//! keep-alive, and watch. Messages are declared here with `prost`'s derive, field numbers
//! copied from etcd's `api/etcdserverpb/rpc.proto` and `api/mvccpb/kv.proto` (v3.5; only the
//! fields weir reads or sets: protobuf skips the others), and calls go through `tonic`'s
//! generic client with the method paths etcd serves.
//!
//! Why not the `etcd-client` crate (which weir used before): its build script compiles
//! etcd's `.proto` files with a system `protoc`, so `cargo build` failed on a machine with
//! Rust alone (issue 33 §6). Seven messages and five methods are cheaper to declare by hand
//! than a build-time compiler is to require; the wire format is the same gRPC (HTTP/2,
//! `tonic`'s channel), and `tests/cluster.rs` runs it against a real etcd.

use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::mpsc;
use tonic::codec::Streaming;
use tonic::transport::{Channel, Endpoint};
use tonic_prost::ProstCodec;

/// A failed call: connection, status or a protocol surprise, as text for the log line.
pub type Error = String;

#[derive(Clone, PartialEq, prost::Message)]
pub struct ResponseHeader {
    #[prost(int64, tag = "3")]
    pub revision: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct KeyValue {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    #[prost(int64, tag = "3")]
    pub mod_revision: i64,
    #[prost(bytes = "vec", tag = "5")]
    pub value: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RangeRequest {
    #[prost(bytes = "vec", tag = "1")]
    key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    range_end: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RangeResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    #[prost(message, repeated, tag = "2")]
    pub kvs: Vec<KeyValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct PutRequest {
    #[prost(bytes = "vec", tag = "1")]
    key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
    #[prost(int64, tag = "3")]
    lease: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct PutResponse {
    #[prost(message, optional, tag = "1")]
    header: Option<ResponseHeader>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct LeaseGrantRequest {
    #[prost(int64, tag = "1")]
    ttl: i64,
    #[prost(int64, tag = "2")]
    id: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct LeaseGrantResponse {
    #[prost(int64, tag = "2")]
    id: i64,
    #[prost(int64, tag = "3")]
    ttl: i64,
    #[prost(string, tag = "4")]
    error: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct LeaseRevokeRequest {
    #[prost(int64, tag = "1")]
    id: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct LeaseRevokeResponse {
    #[prost(message, optional, tag = "1")]
    header: Option<ResponseHeader>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct LeaseKeepAliveRequest {
    #[prost(int64, tag = "1")]
    id: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaseKeepAliveResponse {
    #[prost(int64, tag = "2")]
    pub id: i64,
    #[prost(int64, tag = "3")]
    pub ttl: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct WatchCreateRequest {
    #[prost(bytes = "vec", tag = "1")]
    key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    range_end: Vec<u8>,
    #[prost(int64, tag = "3")]
    start_revision: i64,
    #[prost(bool, tag = "4")]
    progress_notify: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
struct WatchRequest {
    /// `oneof request_union { WatchCreateRequest create_request = 1; ... }`: weir only creates.
    #[prost(message, optional, tag = "1")]
    create_request: Option<WatchCreateRequest>,
}

/// `mvccpb.Event.EventType`: PUT = 0, DELETE = 1.
pub const EVENT_DELETE: i32 = 1;

#[derive(Clone, PartialEq, prost::Message)]
pub struct Event {
    #[prost(int32, tag = "1")]
    pub kind: i32,
    #[prost(message, optional, tag = "2")]
    pub kv: Option<KeyValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct WatchResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    #[prost(bool, tag = "4")]
    pub canceled: bool,
    #[prost(int64, tag = "5")]
    pub compact_revision: i64,
    #[prost(string, tag = "6")]
    pub cancel_reason: String,
    #[prost(message, repeated, tag = "11")]
    pub events: Vec<Event>,
}

/// The end of the range of keys starting with `prefix` (etcd's `WithPrefix`): the prefix with
/// its last byte below 0xff incremented, or `\0` (every key) when there is none.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// Timeouts of a connection to etcd.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// For the TCP connect and for each unary call.
    pub request: Duration,
    /// HTTP/2 PING interval and the time its answer may take.
    pub keep_alive: Duration,
}

/// One connection to an etcd member (the first of `endpoints` that accepts).
#[derive(Debug, Clone)]
pub struct Client {
    grpc: tonic::client::Grpc<Channel>,
}

/// The sending half of a bidirectional stream; dropping it ends the stream.
#[derive(Debug)]
pub struct Sender<T>(mpsc::UnboundedSender<T>);

fn path(p: &'static str) -> http::uri::PathAndQuery {
    http::uri::PathAndQuery::from_static(p)
}

fn status(what: &str, s: tonic::Status) -> Error {
    format!("{what}: {} ({:?})", s.message(), s.code())
}

impl Client {
    /// Connects to the first of `endpoints` (`http://host:port`) that accepts.
    pub async fn connect(endpoints: &[String], o: Options) -> Result<Client, Error> {
        let mut last = "no etcd endpoint configured".to_string();
        for e in endpoints {
            let endpoint = match Endpoint::from_shared(e.clone()) {
                Ok(ep) => ep
                    .connect_timeout(o.request)
                    .http2_keep_alive_interval(o.keep_alive)
                    .keep_alive_timeout(o.keep_alive)
                    .keep_alive_while_idle(true),
                Err(err) => {
                    last = format!("{e}: {err}");
                    continue;
                }
            };
            match endpoint.connect().await {
                Ok(ch) => {
                    return Ok(Client {
                        grpc: tonic::client::Grpc::new(ch),
                    })
                }
                Err(err) => last = format!("{e}: {err}"),
            }
        }
        Err(last)
    }

    async fn unary<Q, R>(
        &mut self,
        method: &'static str,
        req: Q,
        within: Duration,
    ) -> Result<R, Error>
    where
        Q: prost::Message + Send + Sync + 'static,
        R: prost::Message + Default + Send + Sync + 'static,
    {
        let call = async {
            self.grpc
                .ready()
                .await
                .map_err(|e| format!("{method}: {e}"))?;
            self.grpc
                .unary(
                    tonic::Request::new(req),
                    path(method),
                    ProstCodec::default(),
                )
                .await
                .map(tonic::Response::into_inner)
                .map_err(|s| status(method, s))
        };
        tokio::time::timeout(within, call)
            .await
            .map_err(|_| format!("{method}: no answer within {within:?}"))?
    }

    async fn bidi<Q, R>(
        &mut self,
        method: &'static str,
        first: Q,
        within: Duration,
    ) -> Result<(Sender<Q>, Streaming<R>), Error>
    where
        Q: prost::Message + Send + Sync + 'static,
        R: prost::Message + Default + Send + Sync + 'static,
    {
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = tx.send(first);
        let outbound =
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|m| (m, rx)) },
            )
            .boxed();
        let call = async {
            self.grpc
                .ready()
                .await
                .map_err(|e| format!("{method}: {e}"))?;
            self.grpc
                .streaming(
                    tonic::Request::new(outbound),
                    path(method),
                    ProstCodec::default(),
                )
                .await
                .map(tonic::Response::into_inner)
                .map_err(|s| status(method, s))
        };
        let inbound = tokio::time::timeout(within, call)
            .await
            .map_err(|_| format!("{method}: no answer within {within:?}"))??;
        Ok((Sender(tx), inbound))
    }

    /// Every key starting with `prefix`, at one revision.
    pub async fn get_prefix(
        &mut self,
        prefix: &[u8],
        within: Duration,
    ) -> Result<RangeResponse, Error> {
        let req = RangeRequest {
            key: prefix.to_vec(),
            range_end: prefix_end(prefix),
        };
        self.unary("/etcdserverpb.KV/Range", req, within).await
    }

    /// Writes `key` under `lease` (0: none).
    pub async fn put(
        &mut self,
        key: Vec<u8>,
        value: Vec<u8>,
        lease: i64,
        within: Duration,
    ) -> Result<(), Error> {
        let req = PutRequest { key, value, lease };
        self.unary::<_, PutResponse>("/etcdserverpb.KV/Put", req, within)
            .await
            .map(drop)
    }

    /// A new lease of `ttl` seconds: its id.
    pub async fn lease_grant(&mut self, ttl: i64, within: Duration) -> Result<i64, Error> {
        let req = LeaseGrantRequest { ttl, id: 0 };
        let r: LeaseGrantResponse = self
            .unary("/etcdserverpb.Lease/LeaseGrant", req, within)
            .await?;
        if !r.error.is_empty() {
            return Err(format!("lease grant: {}", r.error));
        }
        Ok(r.id)
    }

    /// Revokes `lease`, deleting the keys put under it.
    pub async fn lease_revoke(&mut self, id: i64, within: Duration) -> Result<(), Error> {
        self.unary::<_, LeaseRevokeResponse>(
            "/etcdserverpb.Lease/LeaseRevoke",
            LeaseRevokeRequest { id },
            within,
        )
        .await
        .map(drop)
    }

    /// Opens the keep-alive stream of `lease` (its first renewal sent): renew with
    /// [`Sender::keep_alive`], read the answers from the stream (TTL 0: the lease is gone).
    pub async fn lease_keep_alive(
        &mut self,
        id: i64,
        within: Duration,
    ) -> Result<(KeepAlive, Streaming<LeaseKeepAliveResponse>), Error> {
        let (tx, rx) = self
            .bidi(
                "/etcdserverpb.Lease/LeaseKeepAlive",
                LeaseKeepAliveRequest { id },
                within,
            )
            .await?;
        Ok((KeepAlive { tx, id }, rx))
    }

    /// Watches every key starting with `prefix` from `start_revision`, with progress
    /// notifications. The returned sender keeps the watch open.
    pub async fn watch_prefix(
        &mut self,
        prefix: &[u8],
        start_revision: i64,
        within: Duration,
    ) -> Result<(Watcher, Streaming<WatchResponse>), Error> {
        let req = WatchRequest {
            create_request: Some(WatchCreateRequest {
                key: prefix.to_vec(),
                range_end: prefix_end(prefix),
                start_revision,
                progress_notify: true,
            }),
        };
        let (tx, rx) = self.bidi("/etcdserverpb.Watch/Watch", req, within).await?;
        Ok((Watcher { _tx: tx }, rx))
    }
}

/// Renews one lease on its keep-alive stream.
#[derive(Debug)]
pub struct KeepAlive {
    tx: Sender<LeaseKeepAliveRequest>,
    id: i64,
}

impl KeepAlive {
    /// Sends one renewal; its answer arrives on the stream.
    pub fn keep_alive(&self) -> Result<(), Error> {
        self.tx
            .0
            .send(LeaseKeepAliveRequest { id: self.id })
            .map_err(|_| "keep-alive stream closed".to_string())
    }
}

/// Holds a watch stream's sending half open.
#[derive(Debug)]
pub struct Watcher {
    _tx: Sender<WatchRequest>,
}

/// The next message of a stream: `Ok(None)` when it ended.
pub async fn next<R>(s: &mut Streaming<R>, what: &str) -> Result<Option<R>, Error> {
    s.message().await.map_err(|e| status(what, e))
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn prefix_end_is_etcds_with_prefix() {
        assert_eq!(prefix_end(b"/weir/"), b"/weir0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
        assert_eq!(prefix_end(b""), vec![0]);
    }
}
