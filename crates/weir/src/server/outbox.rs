//! What a multiplexed stream (an HTTP/2 or HTTP/3 request stream) queued to send, in order:
//! heads, body bytes, trailers, and whether its body has ended. The pipeline writes into it
//! through `Downstream` (`send_head`, `send_data`, `send_trailers`, `end_body`) and asks
//! [`Outbox::should_flush`]; each protocol drains it its own way: HTTP/2's driver turns it into
//! frames within the peer's windows (`h2/slots.rs`), an HTTP/3 stream hands it to `h3`
//! (`h3/stream.rs`). A leaf: it knows neither protocol.
//!
//! `H` is a protocol's encoded head (an HPACK block, an `http::Response`), `T` its trailers.

use std::collections::VecDeque;

use bytes::Bytes;

/// Queued body bytes past which the pipeline should flush.
pub(crate) const FLUSH_AT: usize = 64 * 1024;

/// One thing queued.
#[derive(Debug)]
pub(crate) enum Out<H, T> {
    /// A head: an interim (1xx) one, or the response's.
    Head {
        head: H,
        interim: bool,
    },
    Data(Bytes),
    /// Trailers: they end the stream.
    Trailers(T),
}

/// A stream's queue.
#[derive(Debug)]
pub(crate) struct Outbox<H, T = H> {
    items: VecDeque<Out<H, T>>,
    /// Body bytes queued.
    queued: usize,
    /// `end_body`: the stream ends after what is queued.
    ended: bool,
}

impl<H, T> Default for Outbox<H, T> {
    fn default() -> Self {
        Outbox {
            items: VecDeque::new(),
            queued: 0,
            ended: false,
        }
    }
}

impl<H, T> Outbox<H, T> {
    pub(crate) fn head(&mut self, head: H, interim: bool) {
        self.items.push_back(Out::Head { head, interim });
    }

    /// Queues body bytes (nothing for none).
    pub(crate) fn data(&mut self, data: Bytes) {
        if !data.is_empty() {
            self.queued += data.len();
            self.items.push_back(Out::Data(data));
        }
    }

    pub(crate) fn trailers(&mut self, trailers: T) {
        self.items.push_back(Out::Trailers(trailers));
    }

    pub(crate) fn end(&mut self) {
        self.ended = true;
    }

    pub(crate) fn ended(&self) -> bool {
        self.ended
    }

    /// Body bytes queued.
    pub(crate) fn queued(&self) -> usize {
        self.queued
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub(crate) fn should_flush(&self) -> bool {
        self.queued >= FLUSH_AT
    }

    /// The front item is the stream's last: the body has ended and nothing follows it.
    pub(crate) fn front_is_last(&self) -> bool {
        self.ended && self.items.len() == 1
    }

    pub(crate) fn front_mut(&mut self) -> Option<&mut Out<H, T>> {
        self.items.front_mut()
    }

    /// Counts `n` bytes of the front `Data` as sent (taken out of it in place).
    pub(crate) fn sent(&mut self, n: usize) {
        self.queued -= n;
    }

    pub(crate) fn pop_front(&mut self) -> Option<Out<H, T>> {
        let item = self.items.pop_front();
        if let Some(Out::Data(d)) = &item {
            self.queued -= d.len();
        }
        item
    }

    /// Forgets everything queued (a reset stream, or a reply replaced by an error's).
    pub(crate) fn clear(&mut self) {
        self.items.clear();
        self.queued = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queued_bytes_follow_data_in_and_out() {
        let mut o: Outbox<&str> = Outbox::default();
        o.head("200", false);
        o.data(Bytes::new());
        o.data(Bytes::from(vec![0; FLUSH_AT - 1]));
        assert!(!o.should_flush(), "one byte short of the flush mark");
        o.data(Bytes::from_static(b"x"));
        assert!(o.should_flush());
        o.trailers("grpc-status: 0");
        o.end();
        assert!(matches!(
            o.pop_front(),
            Some(Out::Head { interim: false, .. })
        ));
        // Part of the front DATA is taken in place, then the rest is popped.
        if let Some(Out::Data(d)) = o.front_mut() {
            let piece = d.split_to(10);
            o.sent(piece.len());
        }
        assert_eq!(o.queued(), FLUSH_AT - 10);
        assert!(matches!(o.pop_front(), Some(Out::Data(d)) if d.len() == FLUSH_AT - 11));
        assert!(matches!(o.pop_front(), Some(Out::Data(_))));
        assert_eq!(o.queued(), 0);
        assert!(
            o.front_is_last(),
            "the trailers are the last item of an ended body"
        );
        o.clear();
        assert!(o.is_empty() && o.ended());
    }
}
