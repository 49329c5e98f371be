//! A client connection's header blocks (split from `client.rs`, one concern): a whole block
//! decoded (always: the HPACK table must stay in step) and checked as a response head, an
//! interim head or trailers (RFC 9113 §8.3.2, §8.2), or a stream error.

use super::{Client, Event};
use crate::conn::Fields;
use crate::hpack::decoder::Sink;
use crate::hpack::HpackError;
use crate::stream::{Event as On, Recv};
use crate::Reason;

impl Client {
    /// A whole header block: decoded (always: the table must stay in step), then a head, an
    /// interim head, trailers, or a stream error.
    pub(super) fn block_done(
        &mut self,
        stream: u32,
        end_stream: bool,
        discard: bool,
        bytes: &[u8],
        out: &mut Vec<u8>,
        events: &mut Vec<Event>,
    ) -> Result<(), Reason> {
        let max_list = match discard {
            true => 0,
            false => self.local.max_header_list_size.unwrap_or(u32::MAX) as usize,
        };
        let mut head = Head::default();
        let outcome = self
            .decoder
            .decode(bytes, max_list, &mut head)
            .map_err(|_| Reason::CompressionError)?;
        if discard {
            return Ok(());
        }
        let Some(i) = self.index(stream) else {
            return Ok(());
        };
        let too_large = outcome == crate::hpack::decoder::Outcome::ListTooLarge;
        let trailers = self.streams[i].answered;
        let status = head.status;
        let well_formed = !head.bad
            && !too_large
            && match trailers {
                // §8.1: trailers end the stream and carry no pseudo-field.
                true => end_stream && status.is_none(),
                // §8.6: no 101 in HTTP/2; an interim head does not end the stream.
                false => {
                    status.is_some_and(|s| s != 101 && !(end_stream && (100..200).contains(&s)))
                }
            };
        if !well_formed {
            self.reset_for_error(stream, Reason::ProtocolError, out, events);
            return Ok(());
        }
        let status = status.unwrap_or(0);
        if !trailers && (100..200).contains(&status) {
            self.streams[i].interims += 1;
            if self.streams[i].interims > super::MAX_INTERIM {
                self.reset_for_error(stream, Reason::ProtocolError, out, events);
                return Ok(());
            }
            events.push(Event::Interim {
                stream,
                status,
                fields: head.fields,
            });
            return Ok(());
        }
        match self.streams[i].state.recv(On::Headers { end_stream }) {
            Recv::To(next) => self.streams[i].state = next,
            r => return self.refused(r, stream, out, events),
        }
        self.streams[i].answered = true;
        events.push(match trailers {
            true => Event::Trailers {
                stream,
                fields: head.fields,
            },
            false => Event::Head {
                stream,
                status,
                fields: head.fields,
                end_stream,
            },
        });
        self.forget_if_done(i);
        Ok(())
    }
}

/// A response head or trailer section as it decodes (§8.3.2, §8.2).
#[derive(Debug, Default)]
struct Head {
    status: Option<u16>,
    fields: Fields,
    /// A regular field came: no pseudo-field may follow.
    regular: bool,
    bad: bool,
}

impl Sink for Head {
    fn field(&mut self, name: &[u8], value: &[u8], _: bool) -> Result<(), HpackError> {
        if name.first() == Some(&b':') {
            let digits = value.len() == 3 && value.iter().all(u8::is_ascii_digit);
            if self.regular || name != b":status" || self.status.is_some() || !digits {
                self.bad = true;
                return Ok(());
            }
            let n = value.iter().fold(0u16, |n, d| n * 10 + u16::from(d - b'0'));
            if n < 100 {
                self.bad = true;
            }
            self.status = Some(n);
            return Ok(());
        }
        self.regular = true;
        if crate::request::regular_malformed(name, value).is_some() {
            self.bad = true;
            return Ok(());
        }
        self.fields.push((name.to_vec(), value.to_vec()));
        Ok(())
    }
}
