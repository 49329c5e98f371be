//! An HTTP/3 test client (quinn and h3, as `weir bench --h3`), verifying the server's
//! certificate against a test CA. Each client runs its own current-thread runtime, so tests
//! stay synchronous.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes};
use rustls::pki_types::CertificateDer;

/// A response read whole.
#[derive(Debug)]
pub struct H3Response {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Vec<u8>,
}

impl H3Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// The client's QUIC config: trusts `ca`, ALPN `h3`, session resumption (and 0-RTT when the
/// server allows it) on when `resume`.
pub fn client_config(ca: &CertificateDer<'static>, resume: bool) -> quinn::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone()).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"h3".to_vec()];
    if resume {
        cfg.enable_early_data = true;
    } else {
        cfg.resumption = rustls::client::Resumption::disabled();
    }
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(cfg).unwrap();
    quinn::ClientConfig::new(Arc::new(quic))
}

/// One client endpoint with its runtime; connections to a server are opened from it.
pub struct Client {
    pub rt: tokio::runtime::Runtime,
    pub endpoint: quinn::Endpoint,
}

impl Client {
    pub fn new(config: quinn::ClientConfig) -> Client {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut endpoint = {
            let _g = rt.enter();
            quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap()
        };
        endpoint.set_default_client_config(config);
        Client { rt, endpoint }
    }

    /// A QUIC connection to `addr` for server name `sni` (handshake complete).
    pub fn connect(&self, addr: SocketAddr, sni: &str) -> Result<quinn::Connection, String> {
        self.rt.block_on(async {
            let connecting = self
                .endpoint
                .connect(addr, sni)
                .map_err(|e| e.to_string())?;
            tokio::time::timeout(Duration::from_secs(10), connecting)
                .await
                .map_err(|_| "QUIC handshake timed out".to_string())?
                .map_err(|e| e.to_string())
        })
    }

    /// One request on a new connection.
    pub fn request(
        &self,
        addr: SocketAddr,
        sni: &str,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<H3Response, String> {
        let conn = self.connect(addr, sni)?;
        let r = self.rt.block_on(async {
            let mut send = session(&conn).await?;
            request(&mut send, sni, method, path, headers, body).await
        });
        conn.close(quinn::VarInt::from_u32(0x100), b"");
        r
    }

    pub fn get(&self, addr: SocketAddr, sni: &str, path: &str) -> H3Response {
        self.request(addr, sni, "GET", path, &[], b"").unwrap()
    }
}

/// The HTTP/3 session of a QUIC connection (its driver runs as a task on the current runtime).
pub async fn session(
    conn: &quinn::Connection,
) -> Result<h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>, String> {
    let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(conn.clone()))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
    });
    Ok(send)
}

/// One request over `send`, read whole (within 10 s).
pub async fn request(
    send: &mut h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>,
    authority: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<H3Response, String> {
    let work = async {
        let mut req = http::Request::builder()
            .method(method)
            .uri(format!("https://{authority}{path}"));
        for (n, v) in headers {
            req = req.header(*n, *v);
        }
        let req = req.body(()).map_err(|e| e.to_string())?;
        let mut stream = send.send_request(req).await.map_err(|e| e.to_string())?;
        if !body.is_empty() {
            stream
                .send_data(Bytes::copy_from_slice(body))
                .await
                .map_err(|e| e.to_string())?;
        }
        stream.finish().await.map_err(|e| e.to_string())?;
        let response = stream.recv_response().await.map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        while let Some(mut chunk) = stream.recv_data().await.map_err(|e| e.to_string())? {
            while chunk.has_remaining() {
                let c = chunk.chunk();
                out.extend_from_slice(c);
                let n = c.len();
                chunk.advance(n);
            }
        }
        Ok(H3Response {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            body: out,
        })
    };
    tokio::time::timeout(Duration::from_secs(10), work)
        .await
        .map_err(|_| "no HTTP/3 response within 10 s".to_string())?
}
