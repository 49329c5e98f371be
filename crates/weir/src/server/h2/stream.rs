//! One HTTP/2 stream as a `pipeline::Downstream`: the request body comes from the stream's
//! DATA frames, the response goes out as HEADERS and DATA. Body bytes are handed to `h2` as
//! the `Bytes` producers give (a cache hit's stored body is not copied), within the flow
//! control windows: [`H2Stream::flush`] waits for window (bounded by `timeouts.write` per
//! stall) rather than buffer a large body.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::rc::Rc;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{RecvStream, SendStream};
use weir_http::{Persistence, Reply, RequestHead, Version};

use super::{convert, ConnShared};
use crate::error::{Error, ErrorKind};
use crate::pipeline::downstream::Downstream;
use crate::runtime::WorkerRuntime;

/// Queued body bytes past which the pipeline should flush.
const FLUSH_AT: usize = 64 * 1024;
/// A complete body up to this size is handed to `h2` at once, without waiting for window
/// first: `h2` sends it as the window allows, and the head and body of a small response leave
/// in the connection's next write. Waiting for window for each one cost a wake-up and a
/// `writev` per response (`strace -c`: 10 writes per read with 10 streams). Larger or
/// unfinished bodies wait for window, which bounds what a slow client makes weir buffer.
const DIRECT: usize = 64 * 1024;

/// One stream being answered.
#[derive(Debug)]
pub(crate) struct H2Stream {
    shared: Rc<ConnShared>,
    rt: Rc<WorkerRuntime>,
    /// This stream's listener in `rt`'s config.
    listener: usize,
    body: Option<RecvStream>,
    body_read: u64,
    /// A route's `shape` cap below `limits.max_body_bytes` (`u64::MAX`: none).
    body_cap: u64,
    /// The route's wait between body bytes, over `timeouts.body`.
    body_wait: Option<std::time::Duration>,
    respond: SendResponse<Bytes>,
    /// The response head, queued until the first flush (so that a body-less response goes
    /// out as one HEADERS frame with END_STREAM).
    head: Option<http::Response<()>>,
    send: Option<SendStream<Bytes>>,
    queued: VecDeque<Bytes>,
    queued_len: usize,
    /// `end_body` was called: the stream ends after what is queued.
    ended: bool,
    /// END_STREAM was sent.
    finished: bool,
    /// Trailer fields, sent in place of the END_STREAM data frame.
    trailers: Option<http::HeaderMap>,
    /// The request's trailers, once its body ended.
    request_trailers: Vec<weir_http::Header>,
}

/// Answers one stream through the pipeline.
pub(crate) async fn serve(
    request: http::Request<RecvStream>,
    respond: SendResponse<Bytes>,
    shared: Rc<ConnShared>,
) {
    let mut rt = shared.state.cached();
    shared.state.refresh(&mut rt);
    let Some(listener) = rt.cfg.listener_index(&shared.listener_id) else {
        let mut respond = respond;
        respond.send_reset(h2::Reason::REFUSED_STREAM);
        return;
    };
    let (parts, body) = request.into_parts();
    let has_body = !body.is_end_stream();
    let mut d = H2Stream {
        shared,
        rt: rt.clone(),
        listener,
        body: has_body.then_some(body),
        body_read: 0,
        body_cap: u64::MAX,
        body_wait: None,
        respond,
        head: None,
        send: None,
        queued: VecDeque::new(),
        queued_len: 0,
        ended: false,
        finished: false,
        trailers: None,
        request_trailers: Vec::new(),
    };
    let result = match convert::request_head(&parts, has_body, &rt.cfg.limits.head) {
        Ok(head) => match crate::pipeline::limits::check_declared_length(&head, &rt.cfg.limits) {
            Ok(()) => crate::pipeline::handle(&mut d, rt.clone(), listener, &head).await,
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    if let Err(e) = result {
        tracing::debug!(peer = %d.shared.peer, reason = %e, "HTTP/2 stream failed");
        match e.status() {
            Some(status) if d.send.is_none() => d.send_canned(status),
            _ => {
                d.reset(h2::Reason::INTERNAL_ERROR);
                return;
            }
        }
    }
    d.ended = true;
    if d.flush().await.is_err() {
        d.reset(h2::Reason::CANCEL);
    }
}

impl H2Stream {
    fn reset(&mut self, reason: h2::Reason) {
        match &mut self.send {
            Some(s) => s.send_reset(reason),
            None => self.respond.send_reset(reason),
        }
    }

    /// The canned response for `status`, when nothing was sent yet.
    fn send_canned(&mut self, status: u16) {
        let body = crate::error::canned_body(status);
        let reply = crate::error::canned(status, body.len(), &self.rt.cfg.server_line);
        let head = convert::response_head(&reply);
        drop(reply);
        self.queued.clear();
        self.queued_len = 0;
        self.head = Some(head);
        self.send_data(&Bytes::from(body));
        self.ended = true;
    }

    /// Sends `data` within the stream's window, waiting for window as needed.
    async fn send_windowed(&mut self, mut data: Bytes, last: bool) -> Result<(), Error> {
        let stall = self.rt.cfg.timeouts.write;
        let Some(send) = self.send.as_mut() else {
            return Ok(());
        };
        if data.is_empty() {
            return send.send_data(data, last).map_err(h2_error);
        }
        while !data.is_empty() {
            send.reserve_capacity(data.len());
            let mut room = send.capacity();
            while room == 0 {
                let wait = std::future::poll_fn(|cx| send.poll_capacity(cx));
                match tokio::time::timeout(stall, wait).await {
                    Err(_) => return Err(Error::new(ErrorKind::WriteTimeout)),
                    Ok(None) => return Err(Error::new(ErrorKind::ClientClosed)),
                    Ok(Some(Err(e))) => return Err(h2_error(e)),
                    Ok(Some(Ok(n))) => room = n,
                }
            }
            let piece = data.split_to(room.min(data.len()));
            send.send_data(piece, last && data.is_empty())
                .map_err(h2_error)?;
        }
        Ok(())
    }
}

/// An `h2` stream error as the pipeline sees it: the client went away.
fn h2_error(e: h2::Error) -> Error {
    Error::with(ErrorKind::ClientClosed, e)
}

impl Downstream for H2Stream {
    fn peer(&self) -> SocketAddr {
        self.shared.peer
    }

    fn version(&self) -> Version {
        // Chunked framing and 1xx are available, as with HTTP/1.1.
        Version::Http11
    }

    fn protocol(&self) -> &'static str {
        "HTTP/2.0"
    }

    fn via_version(&self) -> &'static str {
        "2"
    }

    fn persistence(&self, _head: &RequestHead) -> Persistence {
        Persistence::KeepAlive
    }

    fn shutting_down(&self) -> bool {
        self.shared.state.shutting_down.get()
    }

    fn tls(&self) -> Option<&crate::tls::TlsInfo> {
        self.shared.tls.as_deref()
    }

    fn cap_body(&mut self, max: u64) {
        self.body_cap = self.body_cap.min(max);
    }

    fn body_timeout(&mut self, wait: std::time::Duration) {
        self.body_wait = Some(wait);
    }

    async fn body_chunk(&mut self) -> Result<Option<Bytes>, Error> {
        let limit = self.rt.cfg.limits.body_ceiling.min(self.body_cap);
        let wait = self.body_wait.unwrap_or(self.rt.cfg.timeouts.body);
        let Some(body) = self.body.as_mut() else {
            return Ok(None);
        };
        match tokio::time::timeout(wait, body.data()).await {
            Err(_) => Err(Error::new(ErrorKind::BodyTimeout)),
            Ok(None) => {
                let trailers = tokio::time::timeout(wait, body.trailers()).await;
                if let Ok(Ok(Some(map))) = trailers {
                    self.request_trailers = map
                        .iter()
                        .map(|(n, v)| weir_http::Header {
                            name: Bytes::copy_from_slice(n.as_str().as_bytes()),
                            value: Bytes::copy_from_slice(v.as_bytes()),
                        })
                        .collect();
                }
                self.body = None;
                Ok(None)
            }
            Ok(Some(Err(e))) => Err(h2_error(e)),
            Ok(Some(Ok(chunk))) => {
                let _ = body.flow_control().release_capacity(chunk.len());
                self.body_read += chunk.len() as u64;
                if self.body_read > limit {
                    return Err(weir_http::ParseError::BodyTooLarge.into());
                }
                Ok(Some(chunk))
            }
        }
    }

    fn request_trailers(&mut self) -> Vec<weir_http::Header> {
        std::mem::take(&mut self.request_trailers)
    }

    async fn send_interim(&mut self, reply: &Reply<'_>) -> Result<(), Error> {
        self.respond
            .send_informational(convert::response_head(reply))
            .map_err(h2_error)
    }

    fn send_head(&mut self, reply: &Reply<'_>, persistence: Persistence) -> Persistence {
        let mut head = convert::response_head(reply);
        if let Some(quic) = &self.rt.cfg.listeners[self.listener].quic {
            if let Some(value) = quic.alt_svc_value() {
                head.headers_mut().insert(http::header::ALT_SVC, value);
            }
        }
        self.head = Some(head);
        persistence
    }

    fn send_data(&mut self, data: &Bytes) {
        if !data.is_empty() {
            self.queued_len += data.len();
            self.queued.push_back(data.clone());
        }
    }

    fn send_trailers(&mut self, fields: &[weir_http::Header]) {
        let map = crate::proxy::h2_upstream::header_map(fields);
        if !map.is_empty() {
            self.trailers = Some(map);
        }
    }

    fn end_body(&mut self) {
        self.ended = true;
    }

    fn room_now(&mut self, want: usize) -> usize {
        if let Some(head) = self.head.take() {
            // The head goes now: the stream's window exists once it is open.
            match self.respond.send_response(head, false) {
                Ok(send) => self.send = Some(send),
                Err(_) => return want,
            }
        }
        match self.send.as_mut() {
            Some(send) => {
                send.reserve_capacity(want);
                send.capacity().min(want)
            }
            None => want,
        }
    }

    async fn room(&mut self, want: usize) -> Result<usize, Error> {
        let stall = self.rt.cfg.timeouts.write;
        let Some(send) = self.send.as_mut() else {
            return Ok(want);
        };
        send.reserve_capacity(want);
        loop {
            if send.capacity() > 0 {
                return Ok(send.capacity().min(want));
            }
            // Past `timeouts.write` without window the stream is reset (by `serve`, on the
            // error): a client that never opens its window holds nothing for long.
            let wait = std::future::poll_fn(|cx| send.poll_capacity(cx));
            match tokio::time::timeout(stall, wait).await {
                Err(_) => return Err(Error::new(ErrorKind::WriteTimeout)),
                Ok(None) => return Err(Error::new(ErrorKind::ClientClosed)),
                Ok(Some(Err(e))) => return Err(h2_error(e)),
                Ok(Some(Ok(n))) if n > 0 => return Ok(n.min(want)),
                Ok(Some(Ok(_))) => {}
            }
        }
    }

    fn should_flush(&self) -> bool {
        self.queued_len >= FLUSH_AT
    }

    async fn flush(&mut self) -> Result<(), Error> {
        if self.finished {
            return Ok(());
        }
        if let Some(head) = self.head.take() {
            let end = self.ended && self.queued.is_empty() && self.trailers.is_none();
            let send = self.respond.send_response(head, end).map_err(h2_error)?;
            if end {
                self.finished = true;
                return Ok(());
            }
            self.send = Some(send);
        }
        let direct = self.ended && self.queued_len <= DIRECT;
        while let Some(data) = self.queued.pop_front() {
            self.queued_len -= data.len();
            let last = self.ended && self.queued.is_empty() && self.trailers.is_none();
            match (direct, self.send.as_mut()) {
                (true, Some(send)) => send.send_data(data, last).map_err(h2_error)?,
                _ => self.send_windowed(data, last).await?,
            }
            self.finished = last;
        }
        if self.ended && !self.finished {
            if let Some(send) = self.send.as_mut() {
                match self.trailers.take() {
                    Some(t) => send.send_trailers(t).map_err(h2_error)?,
                    None => self.send_windowed(Bytes::new(), true).await?,
                }
                self.finished = true;
            }
        }
        Ok(())
    }

    async fn tunnel(
        &mut self,
        _upstream: &mut crate::proxy::tls::UpStream,
        _early: &[u8],
    ) -> Result<(), Error> {
        // Upgrades do not exist in HTTP/2 (RFC 9113 §8.6); the proxy strips `Upgrade`.
        Err(Error::with(
            ErrorKind::UpstreamAborted,
            "upstream switched protocols on an HTTP/2 stream",
        ))
    }
}
