//! What every stream of an HTTP/3 connection shares ([`ConnShared`]), apart from the
//! connection's task (`conn.rs`) and its streams (`stream.rs`), so that neither imports the
//! other for it.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;

use futures_util::FutureExt;

use crate::runtime::ListenerId;
use crate::server::state::WorkerState;
use crate::tls::TlsInfo;

/// What every stream of a connection shares.
pub(super) struct ConnShared {
    pub peer: SocketAddr,
    pub(super) conn: quinn::Connection,
    /// What the handshake settled, once it completed (a client certificate is known only
    /// then: requests in 0-RTT early data read it without one).
    pub(super) tls: RefCell<Option<Rc<TlsInfo>>>,
    pub state: Rc<WorkerState>,
    pub listener_id: ListenerId,
    /// Resolves when the handshake completes, while requests may still be 0-RTT early data
    /// (`http3.early_data`); `None` once it has.
    pub(super) early: RefCell<Option<quinn::ZeroRttAccepted>>,
}

impl ConnShared {
    /// The client's address on the connection's current path (it changes when the client
    /// migrates), as an IPv4 address when it is IPv4-mapped.
    pub(super) fn current_peer(&self) -> SocketAddr {
        let a = self.conn.remote_address();
        match a {
            SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
                Some(v4) => SocketAddr::new(v4.into(), v6.port()),
                None => a,
            },
            SocketAddr::V4(_) => a,
        }
    }
}

impl std::fmt::Debug for ConnShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnShared")
            .field("peer", &self.peer)
            .field("early", &self.early.borrow().is_some())
            .finish_non_exhaustive()
    }
}

impl ConnShared {
    /// Whether a request read now came in 0-RTT early data: the handshake is not complete.
    /// (quinn signals completion while it processes the client's Finished, before it hands
    /// over anything the client sent after it.)
    /// What the handshake settled, for a request read now (`early`: before it completed).
    pub fn tls(&self, early: bool) -> Rc<TlsInfo> {
        if early {
            return Rc::new(tls_info(&self.conn));
        }
        self.tls
            .borrow_mut()
            .get_or_insert_with(|| Rc::new(tls_info(&self.conn)))
            .clone()
    }

    /// Whether the handshake is still in progress (0-RTT), without consuming anything.
    pub(super) fn handshaking(&self) -> bool {
        self.early()
    }

    pub fn early(&self) -> bool {
        let mut h = self.early.borrow_mut();
        match h.as_mut().map(|f| f.now_or_never()) {
            Some(None) => true,
            Some(Some(_)) => {
                *h = None;
                false
            }
            None => false,
        }
    }
}

/// What the QUIC handshake settled (QUIC is TLS 1.3; quinn does not say which cipher suite
/// the handshake chose, so `$ssl_cipher` is `-` over HTTP/3).
pub(super) fn tls_info(conn: &quinn::Connection) -> TlsInfo {
    let data = conn
        .handshake_data()
        .and_then(|d| d.downcast::<quinn::crypto::rustls::HandshakeData>().ok());
    let client_subject = conn
        .peer_identity()
        .and_then(|p| {
            p.downcast::<Vec<rustls_pki_types::CertificateDer<'static>>>()
                .ok()
        })
        .and_then(|certs| certs.first().and_then(|c| crate::tls::certs::subject(c)))
        .map(Into::into);
    TlsInfo {
        sni: data
            .and_then(|d| d.server_name.clone())
            .map(|s| s.to_ascii_lowercase().into()),
        protocol: "TLSv1.3",
        cipher: "-",
        client_subject,
        resumed: false,
    }
}
