//! Filters' own requests (a JWKS fetch, a forward-auth call) through the one upstream phase:
//! [`Subrequests`] implements [`crate::filters::Fetcher`] over [`super::fetch::fetch_whole`]
//! and the config's bare route for the upstream (`RuntimeConfig::subrequests`), so a
//! subrequest has the upstream's balancing, health, TLS, timeouts, retries and caps, and a
//! request id of its own. It is made only for chains with a [`crate::filters::Caps::FETCH`]
//! filter.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;

use weir_http::RequestHead;

use super::RequestCtx;
use crate::filters::{Fetched, Fetcher};
use crate::runtime::WorkerRuntime;

/// A worker's way to send subrequests for one client request.
#[derive(Debug)]
pub(crate) struct Subrequests {
    rt: Rc<WorkerRuntime>,
    listener: usize,
    peer: SocketAddr,
}

impl Subrequests {
    pub(crate) fn new(ctx: &RequestCtx, peer: SocketAddr) -> Subrequests {
        Subrequests {
            rt: ctx.rt.clone(),
            listener: ctx.listener,
            peer,
        }
    }
}

impl Fetcher for Subrequests {
    fn fetch(
        &self,
        upstream: usize,
        head: RequestHead,
        max_body: usize,
    ) -> Pin<Box<dyn Future<Output = Fetched>>> {
        let rt = self.rt.clone();
        let (listener, peer) = (self.listener, self.peer);
        Box::pin(async move {
            let Some(route) = rt.cfg.subrequests.get(upstream) else {
                return Err(format!("no upstream {upstream}"));
            };
            let mut ctx = RequestCtx::new(rt.clone(), listener);
            // A subrequest is not the client's request: it is not logged as one.
            ctx.log = None;
            super::fetch::fetch_whole(&mut ctx, peer, &head, route, b"", max_body)
                .await
                .map_err(|e| e.to_string())
        })
    }
}
