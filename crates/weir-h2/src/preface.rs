//! The start of a server connection (RFC 9113 §3.4): the client's preface, then its SETTINGS as
//! the first frame; weir's own SETTINGS go out at once, and the client's are acknowledged.
//! Anything else first is a connection error of type PROTOCOL_ERROR (h2spec 3.5).

use crate::frame::{self, Frame, FrameError, PREFACE};
use crate::settings::Settings;
use crate::Reason;

/// Where the start of a connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// Octets of the preface still expected.
    Preface(usize),
    /// The preface came; the client's SETTINGS must be the next frame.
    Settings,
    /// Both done: frames of any kind from here.
    Open,
}

/// What one step of the start did: octets taken from the input, and whether the start is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub taken: usize,
    pub open: bool,
}

impl Default for Start {
    fn default() -> Start {
        Start::Preface(PREFACE.len())
    }
}

impl Start {
    /// Takes what it can from `input`: the preface, then the client's first SETTINGS frame,
    /// applied to `peer`, with the acknowledgement written to `out`. `local` is what weir
    /// advertises (its MAX_FRAME_SIZE bounds the frame read). Call [`Start::greeting`] first.
    pub fn step(
        &mut self,
        input: &[u8],
        local: &Settings,
        peer: &mut Settings,
        out: &mut Vec<u8>,
    ) -> Result<Step, Reason> {
        let mut taken = 0;
        if let Start::Preface(left) = *self {
            let at = PREFACE.len() - left;
            let n = left.min(input.len());
            if input[..n] != PREFACE[at..at + n] {
                return Err(Reason::ProtocolError);
            }
            taken = n;
            *self = if n == left {
                Start::Settings
            } else {
                Start::Preface(left - n)
            };
        }
        if *self == Start::Settings {
            match frame::decode(&input[taken..], local.max_frame_size) {
                Ok(None) => {}
                Ok(Some((Frame::Settings { ack: false, params }, used))) => {
                    peer.apply(params)?;
                    frame::put_settings_ack(out);
                    taken += used;
                    *self = Start::Open;
                }
                Ok(Some(_)) => return Err(Reason::ProtocolError),
                Err(FrameError::Connection(r)) => return Err(r),
                Err(FrameError::Stream(..)) => return Err(Reason::ProtocolError),
            }
        }
        Ok(Step {
            taken,
            open: *self == Start::Open,
        })
    }

    /// weir's SETTINGS, sent before anything is read (§3.4: the server's preface).
    pub fn greeting(local: &Settings, out: &mut Vec<u8>) {
        local.put(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::setting;

    fn settings_frame(params: &[(u16, u32)]) -> Vec<u8> {
        let mut out = Vec::new();
        frame::put_settings(&mut out, params);
        out
    }

    #[test]
    fn preface_then_settings_in_pieces() {
        let local = Settings::default();
        let mut peer = Settings::default();
        let mut wire = PREFACE.to_vec();
        wire.extend(settings_frame(&[(setting::INITIAL_WINDOW_SIZE, 1 << 20)]));
        wire.extend(b"rest");
        let mut s = Start::default();
        let mut out = Vec::new();
        let mut at = 0;
        // Three octets at a time, as a slow client sends them.
        while s != Start::Open {
            let end = (at + 3).min(wire.len());
            let step = s.step(&wire[at..end], &local, &mut peer, &mut out).unwrap();
            at += step.taken;
            if step.taken == 0 {
                // The frame is not whole yet: the caller keeps the bytes and reads more.
                let step = s.step(&wire[at..], &local, &mut peer, &mut out).unwrap();
                at += step.taken;
            }
        }
        assert_eq!(&wire[at..], b"rest");
        assert_eq!(peer.initial_window_size, 1 << 20);
        // The acknowledgement.
        assert_eq!(out, [0, 0, 0, 4, 1, 0, 0, 0, 0]);
    }

    /// h2spec 3.5/2 and §3.4: a wrong preface, or a first frame other than SETTINGS.
    #[test]
    fn anything_else_first_is_a_protocol_error() {
        let local = Settings::default();
        let mut peer = Settings::default();
        let mut out = Vec::new();
        let mut s = Start::default();
        assert_eq!(
            s.step(
                b"INVALID CONNECTION PREFACE\r\n\r\n",
                &local,
                &mut peer,
                &mut out
            ),
            Err(Reason::ProtocolError)
        );
        let mut wire = PREFACE.to_vec();
        frame::put_ping(&mut wire, false, [0; 8]);
        let mut s = Start::default();
        assert_eq!(
            s.step(&wire, &local, &mut peer, &mut out),
            Err(Reason::ProtocolError)
        );
        let mut wire = PREFACE.to_vec();
        wire.extend(settings_frame(&[(setting::ENABLE_PUSH, 2)]));
        let mut s = Start::default();
        assert_eq!(
            s.step(&wire, &local, &mut peer, &mut out),
            Err(Reason::ProtocolError)
        );
    }
}
