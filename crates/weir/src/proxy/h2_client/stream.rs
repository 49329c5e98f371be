//! One request's stream on a shared HTTP/2 connection ([`super::conn::H2Conn`]): the request's
//! body and trailers out as the windows allow, the answer's head, body and trailers in, and
//! RST_STREAM CANCEL when it is dropped before both sides ended (the caller gave up).

use std::rc::Rc;
use std::time::Duration;

use super::conn::{stream_ended, Failure, H2Conn, Slot};

/// What arrives on a stream.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// An interim (1xx) head (not relayed: the pipe's phase has its own).
    Interim,
    /// The final head; `true`: no body follows.
    Head(u16, weir_h2::conn::Fields, bool),
    /// Body octets; `true`: the last.
    Data(Vec<u8>, bool),
    /// The trailer section (the end).
    Trailers(weir_h2::conn::Fields),
}

/// A request's stream.
pub(crate) struct ClientStream {
    conn: Rc<H2Conn>,
    id: u32,
}

impl ClientStream {
    /// Opens a stream on `conn` (which has room) with the request head.
    pub(crate) fn open<'a>(
        conn: Rc<H2Conn>,
        pseudo: (&[u8], &[u8], &[u8], &[u8]),
        fields: impl Iterator<Item = (&'a [u8], &'a [u8])>,
        end_stream: bool,
    ) -> ClientStream {
        let id = {
            let mut inner = conn.inner.borrow_mut();
            let super::conn::Inner { client, out, .. } = &mut *inner;
            let id = client.open(pseudo, fields, end_stream, out);
            inner.slots.push(Slot {
                id,
                events: Default::default(),
                failed: None,
                waker: None,
            });
            id
        };
        conn.writer.notify_one();
        ClientStream { conn, id }
    }

    /// The next thing the server sent on the stream; `Err` when the stream failed (reset,
    /// not processed, the connection gone).
    pub(crate) async fn next(&self) -> Result<Incoming, Failure> {
        std::future::poll_fn(|cx| {
            let mut inner = self.conn.inner.borrow_mut();
            let dead = inner.dead.clone();
            let Some(slot) = inner.slots.iter_mut().find(|s| s.id == self.id) else {
                return std::task::Poll::Ready(Err(Failure::Gone("stream ended".into())));
            };
            if let Some(e) = slot.events.pop_front() {
                return std::task::Poll::Ready(Ok(e));
            }
            if let Some(f) = &slot.failed {
                return std::task::Poll::Ready(Err(f.clone()));
            }
            if let Some(why) = dead {
                return std::task::Poll::Ready(Err(Failure::Gone(why)));
            }
            slot.waker = Some(cx.waker().clone());
            std::task::Poll::Pending
        })
        .await
    }

    /// What already arrived, without waiting: `None` when nothing did.
    pub(crate) fn try_next(&self) -> Option<Result<Incoming, Failure>> {
        let mut inner = self.conn.inner.borrow_mut();
        let slot = inner.slots.iter_mut().find(|s| s.id == self.id)?;
        slot.events.pop_front().map(Ok)
    }

    /// Gives the stream up (RST_STREAM CANCEL): a request body that is not one.
    pub(crate) fn cancel(&self) {
        let mut inner = self.conn.inner.borrow_mut();
        let super::conn::Inner { client, out, .. } = &mut *inner;
        client.cancel(self.id, out);
        drop(inner);
        self.conn.writer.notify_one();
    }

    /// Whether this stream may still send: not when the connection died, the stream failed,
    /// or the server answered and ended it (the rest is not wanted).
    fn may_send(&self, inner: &super::conn::Inner) -> Result<(), SendError> {
        if let Some(why) = &inner.dead {
            return Err(SendError::Failed(Failure::Gone(why.clone())));
        }
        if let Some(f) = inner
            .slots
            .iter()
            .find(|s| s.id == self.id)
            .and_then(|s| s.failed.clone())
        {
            return Err(SendError::Failed(f));
        }
        match inner.client.has(self.id) {
            true => Ok(()),
            false => Err(SendError::Closed),
        }
    }

    /// Sends what the windows allow of `data` now, without waiting (none while the server
    /// owes the writer past [`super::conn::OUT_HIGH`]): the octets taken. Wait on
    /// [`ClientStream::writable`] (made before this call) for more room.
    pub(crate) fn try_send(&self, data: &[u8]) -> Result<usize, SendError> {
        let mut inner = self.conn.inner.borrow_mut();
        self.may_send(&inner)?;
        let super::conn::Inner { client, out, .. } = &mut *inner;
        if out.len() >= super::conn::OUT_HIGH {
            return Ok(0);
        }
        let n = client.data(self.id, data, false, out);
        drop(inner);
        if n > 0 {
            self.conn.writer.notify_one();
        }
        Ok(n)
    }

    /// Ready when the windows may have grown or the writer drained (or the connection
    /// failed): made, and enabled, before [`ClientStream::try_send`], so no wake-up is lost.
    pub(crate) fn writable(
        &self,
    ) -> (
        tokio::sync::futures::Notified<'_>,
        tokio::sync::futures::Notified<'_>,
    ) {
        (self.conn.windows.notified(), self.conn.drained.notified())
    }

    /// Sends `data` (the body's end with `end_stream`) as the windows allow, each wait for
    /// them bounded by `pause` (the upstream's `timeouts.send`).
    pub(crate) async fn send_data(
        &self,
        data: &[u8],
        end_stream: bool,
        pause: Duration,
    ) -> Result<(), SendError> {
        let mut at = 0;
        loop {
            if let Some(why) = &self.conn.inner.borrow().dead {
                return Err(SendError::Failed(Failure::Gone(why.clone())));
            }
            // A server that reads slowly: what is owed it drains first.
            if self.conn.inner.borrow().out.len() >= super::conn::OUT_HIGH {
                let drained = self.conn.drained.notified();
                if tokio::time::timeout(pause, drained).await.is_err() {
                    return Err(SendError::Stalled(pause));
                }
                continue;
            }
            let wait = self.conn.windows.notified();
            tokio::pin!(wait);
            wait.as_mut().enable();
            {
                let mut inner = self.conn.inner.borrow_mut();
                self.may_send(&inner)?;
                let super::conn::Inner { client, out, .. } = &mut *inner;
                let before = out.len();
                at += client.data(self.id, &data[at..], end_stream, out);
                let wrote = out.len() > before;
                // This side's end closed the stream (the server had ended): room for another.
                let closed = !client.has(self.id);
                drop(inner);
                if wrote {
                    self.conn.writer.notify_one();
                }
                if closed {
                    self.conn.room.notify_waiters();
                }
                if at == data.len() && (wrote || !end_stream || data.is_empty()) {
                    return Ok(());
                }
            }
            if tokio::time::timeout(pause, wait).await.is_err() {
                return Err(SendError::Stalled(pause));
            }
        }
    }

    /// Ends the request with `fields` as its trailers.
    pub(crate) fn send_trailers<'a>(&self, fields: impl Iterator<Item = (&'a [u8], &'a [u8])>) {
        let mut inner = self.conn.inner.borrow_mut();
        let super::conn::Inner { client, out, .. } = &mut *inner;
        client.trailers(self.id, fields, out);
        drop(inner);
        self.conn.writer.notify_one();
    }

    /// The caller took `n` octets of the answer's body: the windows open again when due.
    pub(crate) fn release(&self, n: usize) {
        let mut inner = self.conn.inner.borrow_mut();
        let super::conn::Inner { client, out, .. } = &mut *inner;
        let before = out.len();
        client.released(self.id, n as u32, out);
        let owed = out.len() > before;
        drop(inner);
        if owed {
            self.conn.writer.notify_one();
        }
    }
}

impl Drop for ClientStream {
    fn drop(&mut self) {
        stream_ended(&self.conn, self.id);
    }
}

/// Why a request's body did not go out.
#[derive(Debug)]
pub(crate) enum SendError {
    /// The stream failed.
    Failed(Failure),
    /// The server ended the stream (it answered without wanting the rest).
    Closed,
    /// The windows stayed shut for the whole pause.
    Stalled(Duration),
    /// What the client sent is not a body (the stream was reset).
    Bad(&'static str),
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::Failed(e) => e.fmt(f),
            SendError::Closed => f.write_str("the server ended the stream"),
            SendError::Bad(why) => f.write_str(why),
            SendError::Stalled(p) => write!(
                f,
                "the server's windows stayed shut for {p:?} (timeouts.send)"
            ),
        }
    }
}
