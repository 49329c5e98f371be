//! Sending one OTLP export to the collector, on the exporter's thread (`export.rs`):
//!
//! - `http/protobuf`: `POST <endpoint>/v1/traces` with `Content-Type: application/x-protobuf`,
//!   through `hyper-util`'s client (already linked by `instant-acme`), its connections kept
//!   alive; `https://` through `hyper-rustls` with the system's roots (read only then);
//! - `grpc`: the unary call `opentelemetry.proto.collector.trace.v1.TraceService/Export`
//!   through `tonic`'s generic client, as `cluster/etcd_rpc.rs` calls etcd (h2c: `tonic` is
//!   built without TLS here, so an `https://` endpoint with `grpc` is refused at load), the
//!   message already encoded (`otlp.rs`) and passed through as bytes.
//!
//! Each export is bounded by `timeout`, connecting included.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use prost::Message;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::{Channel, Endpoint};

use super::otlp::ExportTraceServiceResponse;

/// The gRPC method.
const EXPORT: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
/// The most of an answer read (a partial success is a count and a message).
const MAX_ANSWER: usize = 64 * 1024;

/// Where and how exports go (from `tracing.otlp`).
#[derive(Debug, Clone)]
pub struct Destination {
    /// The full URL for `http/protobuf` (`…/v1/traces`), the endpoint for `grpc`.
    pub url: String,
    pub grpc: bool,
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
    pub timeout: Duration,
}

type Plain = Client<HttpConnector, Full<Bytes>>;
type Tls = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// A connection (pool) to the collector.
pub enum Transport {
    Http(Plain),
    Https(Tls),
    Grpc(tonic::client::Grpc<Channel>),
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Transport::Http(_) => "Transport::Http",
            Transport::Https(_) => "Transport::Https",
            Transport::Grpc(_) => "Transport::Grpc",
        })
    }
}

impl Transport {
    /// Made inside the exporter's runtime (the clients spawn their connections on it).
    pub fn new(dest: &Destination) -> Result<Transport, String> {
        if dest.grpc {
            let endpoint = Endpoint::from_shared(dest.url.clone())
                .map_err(|e| format!("endpoint {}: {e}", dest.url))?
                .connect_timeout(dest.timeout)
                .timeout(dest.timeout);
            return Ok(Transport::Grpc(tonic::client::Grpc::new(
                endpoint.connect_lazy(),
            )));
        }
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(dest.timeout));
        http.set_nodelay(true);
        let mut builder = Client::builder(hyper_util::rt::TokioExecutor::new());
        builder.pool_idle_timeout(Duration::from_secs(30));
        if !dest.url.starts_with("https:") {
            return Ok(Transport::Http(builder.build(http)));
        }
        http.enforce_http(false);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()
            .map_err(|e| format!("the system's TLS roots: {e}"))?
            .https_only()
            .enable_http1()
            .wrap_connector(http);
        Ok(Transport::Https(builder.build(https)))
    }

    /// Sends `req`: `Ok` with the spans the collector says it rejected (a partial success),
    /// `Err` with why none were taken.
    pub async fn send(&mut self, dest: &Destination, req: Bytes) -> Result<i64, String> {
        let run = async {
            match self {
                Transport::Http(client) => http_send(client, dest, req).await,
                Transport::Https(client) => http_send(client, dest, req).await,
                Transport::Grpc(grpc) => grpc_send(grpc, dest, req).await,
            }
        };
        tokio::time::timeout(dest.timeout, run)
            .await
            .map_err(|_| format!("no answer within {:?}", dest.timeout))?
    }
}

async fn http_send<C>(
    client: &Client<C, Full<Bytes>>,
    dest: &Destination,
    req: Bytes,
) -> Result<i64, String>
where
    C: hyper_util::client::legacy::connect::Connect + Clone + Send + Sync + 'static,
{
    let mut builder = http::Request::post(&dest.url)
        .header(http::header::CONTENT_TYPE, "application/x-protobuf")
        .header(
            http::header::USER_AGENT,
            concat!("weir/", env!("CARGO_PKG_VERSION")),
        );
    for (name, value) in &dest.headers {
        builder = builder.header(name, value);
    }
    let request = builder.body(Full::new(req)).map_err(|e| e.to_string())?;
    let resp = client.request(request).await.map_err(|e| {
        // hyper's error says "client error (Connect)"; its source says why.
        match std::error::Error::source(&e) {
            Some(cause) => format!("{e}: {cause}"),
            None => e.to_string(),
        }
    })?;
    let status = resp.status();
    let body = http_body_util::Limited::new(resp.into_body(), MAX_ANSWER)
        .collect()
        .await
        .map_err(|e| format!("reading the answer: {e}"))?
        .to_bytes();
    if !status.is_success() {
        let text = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
        return Err(format!("status {}: {text}", status.as_u16()));
    }
    // An empty body is a full success; a JSON one (a collector that ignored the type) too.
    Ok(ExportTraceServiceResponse::decode(&body[..])
        .ok()
        .and_then(|r| r.partial_success)
        .map_or(0, |p| p.rejected_spans))
}

async fn grpc_send(
    grpc: &mut tonic::client::Grpc<Channel>,
    dest: &Destination,
    req: Bytes,
) -> Result<i64, String> {
    grpc.ready().await.map_err(|e| format!("connecting: {e}"))?;
    let mut request = tonic::Request::new(req);
    for (name, value) in &dest.headers {
        if let (Ok(k), Ok(v)) = (
            tonic::metadata::MetadataKey::from_bytes(name.as_str().as_bytes()),
            tonic::metadata::MetadataValue::try_from(value.as_bytes()),
        ) {
            request.metadata_mut().insert(k, v);
        }
    }
    let resp: tonic::Response<Bytes> = grpc
        .unary(request, http::uri::PathAndQuery::from_static(EXPORT), Raw)
        .await
        .map_err(|s| format!("{:?}: {}", s.code(), s.message()))?;
    Ok(ExportTraceServiceResponse::decode(resp.into_inner())
        .ok()
        .and_then(|r| r.partial_success)
        .map_or(0, |p| p.rejected_spans))
}

/// A gRPC codec passing messages through as bytes: the export is encoded already.
#[derive(Debug, Clone, Copy, Default)]
struct Raw;

impl Codec for Raw {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = Raw;
    type Decoder = Raw;

    fn encoder(&mut self) -> Raw {
        Raw
    }

    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl Encoder for Raw {
    type Item = Bytes;
    type Error = tonic::Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        bytes::BufMut::put_slice(dst, &item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Bytes;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, tonic::Status> {
        let n = bytes::Buf::remaining(src);
        Ok(Some(bytes::Buf::copy_to_bytes(src, n)))
    }
}
