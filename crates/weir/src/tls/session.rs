//! A TLS connection's state without its socket (`tls/stream.rs`): the buffers of ciphertext
//! read, plaintext not yet read and records not yet sent, and the engine that seals and opens
//! records — rustls' unbuffered connection until the first park, `tls/records.rs` after it.
//! [`Session::process`] runs the engine over what was read and does what the caller asks;
//! `tls/stream.rs` moves bytes between these buffers and the socket.

use std::io;

use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::{ConnectionState, EncodeError, EncryptError};
use tokio::io::ReadBuf;

use crate::tls::records::{self, Opened, Records, Reply};

/// Bytes a record adds to its plaintext: header (5), content type (1) and AEAD tag (16).
pub(super) const RECORD_OVERHEAD: usize = 22;
/// Largest plaintext per record.
pub(super) const RECORD: usize = 16 * 1024;

/// Who seals and opens the records.
// rustls' session inline: every connection starts with it, and boxing it would cost each
// handshake an allocation; our record layer is boxed, one allocation per wake-up.
#[allow(clippy::large_enum_variant)]
pub(super) enum Engine {
    /// rustls, from the handshake until the connection first parks.
    Rustls(UnbufferedServerConnection),
    /// Our record layer, once rustls handed the keys over (`tls/records.rs`).
    Own(Box<Records>),
}

/// Everything but the socket.
pub(super) struct Session {
    pub(super) conn: Engine,
    /// Ciphertext read and not yet processed.
    pub(super) incoming: Vec<u8>,
    /// Decrypted bytes not yet read: `plain[taken..]`.
    pub(super) plain: Vec<u8>,
    pub(super) taken: usize,
    /// Records to send: `out[sent..filled]`. `out` keeps its length (zeroed once, when it
    /// grows) so that encrypting into it writes no zeros first; it is let go when drained
    /// past [`KEEP_OUT`].
    pub(super) out: Vec<u8>,
    pub(super) sent: usize,
    pub(super) filled: usize,
    /// The client sent `close_notify`: nothing more will be read.
    pub(super) peer_closed: bool,
    /// The socket reached its end.
    pub(super) eof: bool,
    /// rustls failed the connection.
    pub(super) failed: bool,
    /// `close_notify` is queued.
    pub(super) close_queued: bool,
    /// rustls took records after the handshake since it last encrypted application data: a
    /// `KeyUpdate` it answers waits in it for that next write (rustls queues it outside what
    /// it has to send, and `dangerous_into_kernel_connection` would drop it), so the connection
    /// must not park.
    pub(super) read_since_write: bool,
    /// Several slices joined into one run of records (reused).
    pub(super) scratch: Vec<u8>,
    /// The server name from the ClientHello.
    pub(super) sni: Option<String>,
}

/// What the caller wants done when rustls may write.
#[derive(Clone, Copy)]
pub(super) enum Send<'a> {
    Nothing,
    Data(&'a [u8]),
    CloseNotify,
}

/// Where processing stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// rustls may write application data (and did what was asked).
    Writable,
    /// The handshake needs more bytes from the client.
    Blocked,
    /// Both sides sent `close_notify`.
    Closed,
}

pub(super) fn tls_error(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

impl Session {
    pub(super) fn new(conn: Engine, incoming: Vec<u8>, sni: Option<String>) -> Session {
        Session {
            conn,
            incoming,
            plain: Vec::new(),
            taken: 0,
            out: Vec::new(),
            sent: 0,
            filled: 0,
            peer_closed: false,
            eof: false,
            failed: false,
            close_queued: false,
            read_since_write: false,
            scratch: Vec::new(),
            sni,
        }
    }

    pub(super) fn plain_left(&self) -> usize {
        self.plain.len() - self.taken
    }

    pub(super) fn out_left(&self) -> usize {
        self.filled - self.sent
    }

    /// Room for `n` more bytes after what waits in the outgoing buffer: its start (`filled`).
    pub(super) fn out_room(
        out: &mut Vec<u8>,
        sent: &mut usize,
        filled: &mut usize,
        n: usize,
    ) -> usize {
        if *sent == *filled {
            *sent = 0;
            *filled = 0;
        }
        if out.len() < *filled + n {
            out.resize(*filled + n, 0);
        }
        *filled
    }

    /// Runs rustls over the unprocessed ciphertext until it needs more bytes or may write;
    /// delivers plaintext into `dst` first and keeps the rest; does what `send` asks once
    /// rustls may write.
    pub(super) fn process(
        &mut self,
        mut dst: Option<&mut ReadBuf<'_>>,
        mut send: Send<'_>,
    ) -> io::Result<Step> {
        if self.failed {
            return Err(tls_error("TLS connection failed earlier"));
        }
        if matches!(self.conn, Engine::Own(_)) {
            return self.process_own(dst, send);
        }
        loop {
            let Engine::Rustls(conn) = &mut self.conn else {
                return Err(tls_error("TLS engine changed"));
            };
            let status = conn.process_tls_records(&mut self.incoming);
            let discard = status.discard;
            let mut step = None;
            let mut failure = None;
            match status.state {
                Err(e) => failure = Some(tls_error(e)),
                Ok(ConnectionState::ReadTraffic(mut r)) => {
                    while let Some(record) = r.next_record() {
                        match record {
                            Ok(record) => {
                                let mut payload = record.payload;
                                if let Some(dst) = dst.as_deref_mut() {
                                    let n = payload.len().min(dst.remaining());
                                    dst.put_slice(&payload[..n]);
                                    payload = &payload[n..];
                                }
                                if self.taken == self.plain.len() {
                                    self.plain.clear();
                                    self.taken = 0;
                                }
                                self.plain.extend_from_slice(payload);
                            }
                            Err(e) => {
                                failure = Some(tls_error(e));
                                break;
                            }
                        }
                    }
                }
                Ok(ConnectionState::EncodeTlsData(mut e)) => {
                    let mut want = 512;
                    loop {
                        let start =
                            Self::out_room(&mut self.out, &mut self.sent, &mut self.filled, want);
                        match e.encode(&mut self.out[start..]) {
                            Ok(n) => {
                                self.filled += n;
                                break;
                            }
                            Err(EncodeError::InsufficientSize(s)) => want = s.required_size,
                            Err(EncodeError::AlreadyEncoded) => break,
                        }
                    }
                }
                Ok(ConnectionState::TransmitTlsData(t)) => t.done(),
                Ok(ConnectionState::WriteTraffic(_)) if matches!(send, Send::Nothing) => {
                    step = Some(Step::Writable);
                }
                Ok(ConnectionState::WriteTraffic(mut w)) => {
                    let mut want = match send {
                        Send::Data(d) => d.len() + (d.len() / RECORD + 1) * RECORD_OVERHEAD,
                        _ => 64,
                    };
                    loop {
                        let start =
                            Self::out_room(&mut self.out, &mut self.sent, &mut self.filled, want);
                        let done = match send {
                            Send::Nothing => Ok(0),
                            Send::Data(d) => w.encrypt(d, &mut self.out[start..]),
                            Send::CloseNotify => w.queue_close_notify(&mut self.out[start..]),
                        };
                        match done {
                            Ok(n) => {
                                self.filled += n;
                                if matches!(send, Send::Data(d) if !d.is_empty()) {
                                    self.read_since_write = false;
                                }
                                break;
                            }
                            Err(EncryptError::InsufficientSize(s)) => want = s.required_size,
                            Err(e) => {
                                failure = Some(tls_error(e));
                                break;
                            }
                        }
                    }
                    send = Send::Nothing;
                    step = Some(Step::Writable);
                }
                Ok(ConnectionState::BlockedHandshake) => step = Some(Step::Blocked),
                Ok(ConnectionState::PeerClosed) => self.peer_closed = true,
                Ok(ConnectionState::Closed) => {
                    self.peer_closed = true;
                    step = Some(Step::Closed);
                }
                // Early data is never accepted on TCP (`max_early_data_size` is 0 there).
                Ok(_) => failure = Some(tls_error("unexpected TLS state")),
            }
            // Bytes read once the handshake is done may hold a KeyUpdate rustls answers only
            // with the next record it sends; that counts the call that completed the handshake
            // too (issue 52: a KeyUpdate in the Finished's segment was owed, lost at the hand-off
            // to our own records, and the connection died on bad MACs).
            let done = matches!(&self.conn, Engine::Rustls(c) if !c.is_handshaking());
            self.read_since_write |= done && discard > 0;
            self.discard(discard);
            if let Some(e) = failure {
                self.fail();
                return Err(e);
            }
            if let Some(step) = step {
                return Ok(step);
            }
        }
    }

    pub(super) fn discard(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        if n >= self.incoming.len() {
            self.incoming.clear();
        } else {
            self.incoming.drain(..n);
        }
    }

    /// After rustls failed the connection: queues the alert it has for the client (sent with
    /// what is left), and refuses everything from now on. One call: rustls hands out its queued
    /// alert before it looks at the incoming bytes again; a second call would decrypt the
    /// failed record again and queue a second fatal alert (a debug assertion in rustls).
    pub(super) fn fail(&mut self) {
        self.failed = true;
        let Engine::Rustls(conn) = &mut self.conn else {
            return;
        };
        let status = conn.process_tls_records(&mut self.incoming);
        let discard = status.discard;
        if let Ok(ConnectionState::EncodeTlsData(mut e)) = status.state {
            let start = Self::out_room(&mut self.out, &mut self.sent, &mut self.filled, 64);
            if let Ok(n) = e.encode(&mut self.out[start..]) {
                self.filled += n;
            }
        }
        self.discard(discard);
    }

    /// [`Self::process`] on our record layer: opens every whole record buffered (plaintext
    /// into `dst` first, the rest kept; replies to key updates and renegotiations queued), then
    /// seals what `send` asks. A fatal condition queues its alert and fails the connection.
    pub(super) fn process_own(
        &mut self,
        mut dst: Option<&mut ReadBuf<'_>>,
        send: Send<'_>,
    ) -> io::Result<Step> {
        let Engine::Own(r) = &mut self.conn else {
            return Err(tls_error("TLS engine changed"));
        };
        let mut at = 0;
        let mut failure = None;
        while !self.peer_closed {
            let opened = match r.open(&mut self.incoming[at..]) {
                Ok(o) => o,
                Err(f) => {
                    failure = Some(f);
                    break;
                }
            };
            let reply = match opened {
                Opened::Need => break,
                Opened::Data { start, end, used } => {
                    let mut payload = &self.incoming[at + start..at + end];
                    if let Some(dst) = dst.as_deref_mut() {
                        let n = payload.len().min(dst.remaining());
                        dst.put_slice(&payload[..n]);
                        payload = &payload[n..];
                    }
                    if !payload.is_empty() {
                        if self.taken == self.plain.len() {
                            self.plain.clear();
                            self.taken = 0;
                        }
                        self.plain.extend_from_slice(payload);
                    }
                    at += used;
                    continue;
                }
                Opened::Closed { used } => {
                    // Answered with ours when the connection is dropped (`server/http1`).
                    at += used;
                    self.peer_closed = true;
                    continue;
                }
                Opened::Control { used, reply } => {
                    at += used;
                    reply
                }
            };
            let Reply::Warning(desc) = reply else {
                continue;
            };
            let start = Self::out_room(
                &mut self.out,
                &mut self.sent,
                &mut self.filled,
                r.sealed_len(2),
            );
            match r.seal_alert(1, desc, &mut self.out[start..]) {
                Ok(n) => self.filled += n,
                Err(f) => {
                    failure = Some(f);
                    break;
                }
            }
        }
        if failure.is_none() {
            let sealed = match send {
                Send::Nothing => Ok(0),
                Send::Data(_) if self.close_queued => {
                    self.discard(at);
                    return Err(io::ErrorKind::BrokenPipe.into());
                }
                Send::Data(d) => {
                    let start = Self::out_room(
                        &mut self.out,
                        &mut self.sent,
                        &mut self.filled,
                        r.sealed_len(d.len()),
                    );
                    r.seal_data(d, &mut self.out[start..])
                }
                Send::CloseNotify => {
                    let start = Self::out_room(
                        &mut self.out,
                        &mut self.sent,
                        &mut self.filled,
                        r.sealed_len(2),
                    );
                    r.seal_alert(1, records::CLOSE_NOTIFY, &mut self.out[start..])
                }
            };
            match sealed {
                Ok(n) => self.filled += n,
                Err(f) => failure = Some(f),
            }
        }
        if let Some(f) = failure {
            // The alert goes out under the send key, which no failure to open touched.
            self.failed = true;
            if let Some(desc) = f.alert {
                let start = Self::out_room(
                    &mut self.out,
                    &mut self.sent,
                    &mut self.filled,
                    r.sealed_len(2),
                );
                if let Ok(n) = r.seal_alert(2, desc, &mut self.out[start..]) {
                    self.filled += n;
                }
            }
            self.discard(at);
            return Err(tls_error(f.why));
        }
        self.discard(at);
        Ok(if self.peer_closed && self.close_queued {
            Step::Closed
        } else {
            Step::Writable
        })
    }

    /// The handshake is not done yet.
    pub(super) fn handshaking(&self) -> bool {
        match &self.conn {
            Engine::Rustls(c) => c.is_handshaking(),
            Engine::Own(_) => false,
        }
    }

    /// Moves queued plaintext into `dst`.
    pub(super) fn take_plain(&mut self, dst: &mut ReadBuf<'_>) {
        let n = self.plain_left().min(dst.remaining());
        dst.put_slice(&self.plain[self.taken..self.taken + n]);
        self.taken += n;
        if self.taken == self.plain.len() {
            self.plain.clear();
            self.taken = 0;
        }
    }
}
