//! A connection's header blocks (split from `conn.rs`, one concern): a whole block decoded
//! (always: the HPACK table must stay in step) into a request, trailers or a stream error, and
//! the blocks of closed or reset streams decoded for the table alone.

use super::{Conn, Event, FieldSink, Reason, State};
use crate::frame;
use crate::hpack::decoder::{Outcome, Sink};
use crate::request::Checked;
use crate::stream::{Event as On, Recv};

/// A header block arriving over CONTINUATION frames.
#[derive(Debug)]
pub(super) struct Block {
    pub(super) stream: u32,
    pub(super) end_stream: bool,
    pub(super) bytes: Vec<u8>,
    /// The stream was refused (over SETTINGS_MAX_CONCURRENT_STREAMS): decoded for the table
    /// only, then RST_STREAM REFUSED_STREAM.
    pub(super) refused: bool,
    /// The stream is closed or reset already: decoded for the table only, nothing said.
    pub(super) discard: bool,
}

/// Takes whatever it is given, keeps nothing.
struct Discard;

impl Sink for Discard {
    fn field(&mut self, _: &[u8], _: &[u8], _: bool) -> Result<(), crate::hpack::HpackError> {
        Ok(())
    }
}

impl<S: FieldSink> Conn<S> {
    /// A whole header block: decoded (always: the table must stay in step), then a request,
    /// trailers, or a stream error.
    pub(super) fn block_done(
        &mut self,
        stream: u32,
        end_stream: bool,
        refused: bool,
        bytes: &[u8],
        out: &mut Vec<u8>,
        events: &mut Vec<Event<S>>,
    ) -> Result<(), Reason> {
        let s = self.streams.iter().position(|s| s.id == stream);
        let trailers = s.is_some_and(|i| self.streams[i].state != State::Idle);
        let mut fields = S::default();
        let max_list = self.local.max_header_list_size.unwrap_or(u32::MAX) as usize;
        let (outcome, checked) = {
            let mut c = Checked::new(&mut fields, trailers);
            let outcome = self
                .decoder
                .decode(bytes, max_list, &mut c)
                .map_err(|_| Reason::CompressionError)?;
            (outcome, c.finish())
        };
        if refused {
            frame::put_rst_stream(out, stream, Reason::RefusedStream);
            // Its DATA in flight is then ignored, as any stream's this side reset.
            self.remember_reset(stream);
            return Ok(());
        }
        let Some(i) = s else {
            return Ok(());
        };
        let on = On::Headers { end_stream };
        let next = match self.streams[i].state.recv(on) {
            Recv::To(next) => next,
            r => return self.on_refusal(r, stream, out),
        };
        if outcome == Outcome::ListTooLarge {
            if trailers {
                // No answer can follow a request already being answered: the stream ends.
                self.reset_stream(stream, Reason::ProtocolError, out);
                return Ok(());
            }
            self.streams[i].state = next;
            events.push(Event::TooLarge { stream });
            return Ok(());
        }
        let pseudo = match checked {
            Ok(p) => p,
            Err(_) => {
                self.reset_stream(stream, Reason::ProtocolError, out);
                return Ok(());
            }
        };
        if trailers && !end_stream {
            // §8.1: trailers end the stream.
            self.reset_stream(stream, Reason::ProtocolError, out);
            return Ok(());
        }
        self.streams[i].state = next;
        events.push(if trailers {
            Event::Trailers { stream, fields }
        } else {
            Event::Request {
                stream,
                pseudo,
                fields,
                end_stream,
            }
        });
        self.forget_if_done(i);
        Ok(())
    }

    /// A header block on a stream that is closed or reset: decoded for the table (whole, or
    /// once its CONTINUATIONs are in), then dropped.
    pub(super) fn decode_only(
        &mut self,
        block: &[u8],
        end_headers: bool,
        stream: u32,
        end_stream: bool,
    ) -> Result<(), Reason> {
        if end_headers {
            return self.discard_block(block);
        }
        self.block = Some(Block {
            stream,
            end_stream,
            bytes: block.to_vec(),
            refused: false,
            discard: true,
        });
        Ok(())
    }

    /// Decodes `block` for the table's sake alone: no field is copied (a list bound of 0
    /// passes none to the sink), so a block of references to a large entry costs its parse,
    /// not copies of the entry.
    pub(super) fn discard_block(&mut self, block: &[u8]) -> Result<(), Reason> {
        self.decoder
            .decode(block, 0, &mut Discard)
            .map_err(|_| Reason::CompressionError)?;
        Ok(())
    }
}
