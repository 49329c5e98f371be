//! An HTTP/2 origin for tests: the `h2` crate's server (an implementation other than weir's),
//! prior knowledge, on its own thread.
#![allow(dead_code, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;

/// An HTTP/2 server (prior knowledge) on its own thread, `builder`'s settings: `handle` answers
/// each stream. Returns its address and a count of the connections it accepted.
pub fn h2_server<F, Fut>(builder: h2::server::Builder, handle: F) -> (SocketAddr, Arc<AtomicUsize>)
where
    F: Fn(http::Request<h2::RecvStream>, h2::server::SendResponse<Bytes>) -> Fut
        + Send
        + Sync
        + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let count = connections.clone();
    let handle = Arc::new(handle);
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                count.fetch_add(1, Ordering::SeqCst);
                let (builder, handle) = (builder.clone(), handle.clone());
                tokio::spawn(async move {
                    let mut conn = builder.handshake::<_, Bytes>(tcp).await.unwrap();
                    while let Some(Ok((req, respond))) = conn.accept().await {
                        tokio::spawn(handle(req, respond));
                    }
                });
            }
        });
    });
    (addr, connections)
}
