//! Stream states (RFC 9113 §5.1), for either side of a connection: what each frame sent or
//! received does to a stream, and the error when a frame may not arrive in the state it finds.
//!
//! ```text
//!                          +--------+
//!                  send H /|  idle  |\ recv H
//!                        / +--------+ \
//!                       v              v
//!        +----------+  send ES    +--------+  recv ES  +----------+
//!        |   half   |<------------|  open  |---------->|   half   |
//!        |  closed  |             +--------+           |  closed  |
//!        | (local)  |                 | R               | (remote) |
//!        +----------+                 v                 +----------+
//!             | recv ES / R      +--------+     send ES / R  |
//!             +----------------->| closed |<-----------------+
//!                                +--------+
//! ```
//!
//! (PUSH_PROMISE's reserved states are not here: weir never pushes, and refuses a peer's push
//! by SETTINGS_ENABLE_PUSH = 0.) A closed stream remembers how it closed, for §5.1's
//! distinction between a stream the peer reset (frames already in flight are ignored) and one
//! that ended normally (more frames are a STREAM_CLOSED error).

use crate::Reason;

/// A stream's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Idle,
    Open,
    /// This side sent END_STREAM; the peer may still send.
    HalfClosedLocal,
    /// The peer sent END_STREAM; this side may still send.
    HalfClosedRemote,
    Closed(Ending),
}

/// How a stream closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Both sides sent END_STREAM.
    Ended,
    /// This side sent RST_STREAM: frames the peer sent before seeing it are ignored.
    ResetLocal,
    /// The peer sent RST_STREAM.
    ResetRemote,
}

/// A frame as far as stream states care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// HEADERS (a request or response head, or trailers), and whether it ends the stream.
    Headers {
        end_stream: bool,
    },
    Data {
        end_stream: bool,
    },
    RstStream,
    /// WINDOW_UPDATE or PRIORITY: allowed in most states, changing none.
    Control {
        window_update: bool,
    },
}

/// What a received frame does: its new state, or the error to answer with (connection-wide
/// or for this stream alone), or that it is to be ignored (a frame in flight on a stream this
/// side reset).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recv {
    To(State),
    Ignore,
    StreamError(Reason),
    ConnectionError(Reason),
}

impl State {
    /// The state after receiving `e` (RFC 9113 §5.1's rules for the receiving side).
    pub fn recv(self, e: Event) -> Recv {
        use Event::*;
        use State::*;
        match (self, e) {
            // §5.1 idle: HEADERS opens; PRIORITY is allowed; anything else is a connection
            // error of type PROTOCOL_ERROR.
            (Idle, Headers { end_stream: false }) => Recv::To(Open),
            (Idle, Headers { end_stream: true }) => Recv::To(HalfClosedRemote),
            (
                Idle,
                Control {
                    window_update: false,
                },
            ) => Recv::To(Idle),
            (Idle, _) => Recv::ConnectionError(Reason::ProtocolError),
            (Open, Headers { end_stream } | Data { end_stream }) => {
                Recv::To(if end_stream { HalfClosedRemote } else { Open })
            }
            (Open, RstStream) => Recv::To(Closed(Ending::ResetRemote)),
            (Open | HalfClosedLocal, Control { .. }) => Recv::To(self),
            (HalfClosedLocal, Headers { end_stream } | Data { end_stream }) => {
                Recv::To(if end_stream {
                    Closed(Ending::Ended)
                } else {
                    HalfClosedLocal
                })
            }
            (HalfClosedLocal, RstStream) => Recv::To(Closed(Ending::ResetRemote)),
            // §5.1 half-closed (remote): WINDOW_UPDATE, PRIORITY and RST_STREAM only; other
            // frames are a stream error of type STREAM_CLOSED.
            (HalfClosedRemote, Control { .. }) => Recv::To(self),
            (HalfClosedRemote, RstStream) => Recv::To(Closed(Ending::ResetRemote)),
            (HalfClosedRemote, Headers { .. } | Data { .. }) => {
                Recv::StreamError(Reason::StreamClosed)
            }
            // §5.1 closed: PRIORITY always; WINDOW_UPDATE and RST_STREAM "for a short period";
            // after this side's RST_STREAM, whatever was in flight is ignored.
            (Closed(_), Control { .. } | RstStream) => Recv::Ignore,
            (Closed(Ending::ResetLocal), _) => Recv::Ignore,
            // After the peer's RST_STREAM or both END_STREAMs, DATA or HEADERS is a stream
            // error of type STREAM_CLOSED (§5.1 closed; §6.1, §6.2 for DATA and HEADERS).
            (Closed(_), Headers { .. } | Data { .. }) => Recv::StreamError(Reason::StreamClosed),
        }
    }

    /// The state after sending `e`; `None` when this side may not send it (a bug of the
    /// caller's, not the peer's).
    pub fn send(self, e: Event) -> Option<State> {
        use Event::*;
        use State::*;
        match (self, e) {
            (Idle, Headers { end_stream }) => Some(if end_stream { HalfClosedLocal } else { Open }),
            (Open, Headers { end_stream } | Data { end_stream }) => {
                Some(if end_stream { HalfClosedLocal } else { Open })
            }
            (HalfClosedRemote, Headers { end_stream } | Data { end_stream }) => {
                Some(if end_stream {
                    Closed(Ending::Ended)
                } else {
                    HalfClosedRemote
                })
            }
            (Idle | Open | HalfClosedLocal | HalfClosedRemote, RstStream) => {
                Some(Closed(Ending::ResetLocal))
            }
            (s, Control { .. }) if s != Idle => Some(s),
            _ => None,
        }
    }

    /// Whether the stream counts against SETTINGS_MAX_CONCURRENT_STREAMS (§5.1.2: open or
    /// half-closed).
    pub fn is_active(self) -> bool {
        matches!(
            self,
            State::Open | State::HalfClosedLocal | State::HalfClosedRemote
        )
    }

    /// Whether the peer may still send DATA on it.
    pub fn peer_may_send(self) -> bool {
        matches!(self, State::Open | State::HalfClosedLocal)
    }

    /// Whether this side may still send on it.
    pub fn may_send(self) -> bool {
        matches!(self, State::Open | State::HalfClosedRemote)
    }
}

/// Stream identifiers a server receives (§5.1.1): odd, each new one above every earlier one.
/// The last one opened, for GOAWAY's last-stream field.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PeerIds {
    last: u32,
    /// Ranges of ids skipped over (never opened: a client may jump ahead), the latest few,
    /// so that a frame on one of them is told from one on a stream closed long ago.
    skipped: [(u32, u32); SKIPPED],
    next: usize,
}

/// Skipped ranges remembered: clients number streams in order, and the rare jump is recent.
const SKIPPED: usize = 4;

impl PeerIds {
    /// Whether `id` may open a new stream: a client's (odd), greater than any before. A lower
    /// or even one is a connection error of type PROTOCOL_ERROR (§5.1.1).
    pub fn open(&mut self, id: u32) -> Result<(), Reason> {
        if id.is_multiple_of(2) || id <= self.last {
            return Err(Reason::ProtocolError);
        }
        let first = if self.last == 0 { 1 } else { self.last + 2 };
        if id > first {
            self.skipped[self.next % SKIPPED] = (first, id - 2);
            self.next += 1;
        }
        self.last = id;
        Ok(())
    }

    /// Whether `id`, below the last stream opened, was skipped over (never opened itself), as
    /// far as the latest skips tell.
    pub fn never_opened(&self, id: u32) -> bool {
        id.is_multiple_of(2)
            || self
                .skipped
                .iter()
                .any(|&(a, b)| a <= id && id <= b && a > 0)
    }

    /// Whether `id` was never opened (its implied state is idle) rather than closed long ago.
    pub fn is_idle(&self, id: u32) -> bool {
        id > self.last
    }

    /// The highest stream the peer opened.
    pub fn last(&self) -> u32 {
        self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Event::*;

    #[test]
    fn a_request_without_a_body_and_its_response() {
        let s = State::Idle.recv(Headers { end_stream: true });
        assert_eq!(s, Recv::To(State::HalfClosedRemote));
        let s = State::HalfClosedRemote.send(Headers { end_stream: false });
        assert_eq!(s, Some(State::HalfClosedRemote));
        let s = State::HalfClosedRemote.send(Data { end_stream: true });
        assert_eq!(s, Some(State::Closed(Ending::Ended)));
    }

    #[test]
    fn a_request_with_a_body() {
        let mut s = match State::Idle.recv(Headers { end_stream: false }) {
            Recv::To(s) => s,
            r => panic!("{r:?}"),
        };
        assert_eq!(s, State::Open);
        for end_stream in [false, false, true] {
            s = match s.recv(Data { end_stream }) {
                Recv::To(s) => s,
                r => panic!("{r:?}"),
            };
        }
        assert_eq!(s, State::HalfClosedRemote);
        assert!(s.may_send() && !s.peer_may_send() && s.is_active());
    }

    /// h2spec 5.1: DATA on an idle stream is a connection error; DATA or HEADERS after the
    /// peer's END_STREAM a stream error STREAM_CLOSED; after its RST_STREAM, STREAM_CLOSED.
    #[test]
    fn frames_in_the_wrong_state_are_the_errors_rfc_9113_names() {
        assert_eq!(
            State::Idle.recv(Data { end_stream: false }),
            Recv::ConnectionError(Reason::ProtocolError)
        );
        assert_eq!(
            State::Idle.recv(RstStream),
            Recv::ConnectionError(Reason::ProtocolError)
        );
        assert_eq!(
            State::Idle.recv(Control {
                window_update: true
            }),
            Recv::ConnectionError(Reason::ProtocolError)
        );
        // PRIORITY on an idle stream is fine (§5.1).
        assert_eq!(
            State::Idle.recv(Control {
                window_update: false
            }),
            Recv::To(State::Idle)
        );
        assert_eq!(
            State::HalfClosedRemote.recv(Data { end_stream: false }),
            Recv::StreamError(Reason::StreamClosed)
        );
        assert_eq!(
            State::HalfClosedRemote.recv(Headers { end_stream: true }),
            Recv::StreamError(Reason::StreamClosed)
        );
        assert_eq!(
            State::Closed(Ending::ResetRemote).recv(Data { end_stream: false }),
            Recv::StreamError(Reason::StreamClosed)
        );
        assert_eq!(
            State::Closed(Ending::Ended).recv(Headers { end_stream: false }),
            Recv::StreamError(Reason::StreamClosed)
        );
        // Frames in flight after this side's reset are ignored, as are late control frames.
        assert_eq!(
            State::Closed(Ending::ResetLocal).recv(Data { end_stream: true }),
            Recv::Ignore
        );
        assert_eq!(State::Closed(Ending::Ended).recv(RstStream), Recv::Ignore);
        assert_eq!(
            State::Closed(Ending::Ended).recv(Control {
                window_update: true
            }),
            Recv::Ignore
        );
    }

    #[test]
    fn this_side_never_sends_what_the_state_forbids() {
        assert_eq!(State::Idle.send(Data { end_stream: false }), None);
        assert_eq!(State::HalfClosedLocal.send(Data { end_stream: true }), None);
        assert_eq!(State::Closed(Ending::Ended).send(RstStream), None);
        assert_eq!(
            State::Open.send(RstStream),
            Some(State::Closed(Ending::ResetLocal))
        );
    }

    /// §5.1.1: a client's streams are odd and rise; a reused or lower one, or an even one, is a
    /// connection error (h2spec 5.1.1/1, 5.1.1/2).
    #[test]
    fn stream_ids_are_odd_and_rise() {
        let mut ids = PeerIds::default();
        assert!(ids.open(1).is_ok());
        assert!(ids.open(5).is_ok());
        assert_eq!(ids.open(3), Err(Reason::ProtocolError));
        assert_eq!(ids.open(5), Err(Reason::ProtocolError));
        assert_eq!(ids.open(6), Err(Reason::ProtocolError));
        assert!(ids.is_idle(7) && !ids.is_idle(3));
        assert_eq!(ids.last(), 5);
    }
}
