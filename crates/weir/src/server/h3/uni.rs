//! The client's unidirectional streams before `h3` sees them (`guard.rs`): their types read
//! here, and its QPACK streams, which `h3` never reads, read and checked by a task each
//! ([`watch_qpack`]). weir advertises no dynamic table, so the encoder stream may only set a
//! capacity of 0 (QPACK_ENCODER_STREAM_ERROR otherwise), the decoder stream may only cancel
//! streams (QPACK_DECODER_STREAM_ERROR for an Insert Count Increment or a Section
//! Acknowledgment), and neither may end (H3_CLOSED_CRITICAL_STREAM): RFC 9204 §4.

use h3::quic;

/// Connection errors (RFC 9114 §8.1, RFC 9204 §6).
pub(super) const CLOSED_CRITICAL_STREAM: u64 = 0x104;
const QPACK_ENCODER_STREAM_ERROR: u64 = 0x201;
const QPACK_DECODER_STREAM_ERROR: u64 = 0x202;

/// Closes `conn` with error `code` (a connection error the client caused).
pub(super) fn close(conn: &quinn::Connection, code: u64) {
    tracing::debug!(code, "HTTP/3 connection error from the client's streams");
    conn.close(
        quinn::VarInt::from_u64(code).unwrap_or(quinn::VarInt::MAX),
        b"",
    );
}

/// A client unidirectional stream whose type is not yet known: the bytes read so far.
pub(super) struct Typing {
    pub(super) stream: h3_quinn::RecvStream,
    pub(super) read: Vec<u8>,
}

/// Which QPACK stream of the client's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum QpackKind {
    Encoder,
    Decoder,
}

/// One of the client's QPACK streams, read and checked by [`watch_qpack`] (`h3` never reads
/// them).
pub(super) struct Qpack {
    pub(super) stream: h3_quinn::RecvStream,
    pub(super) kind: QpackKind,
    /// In a decoder instruction's integer (its continuation bytes).
    pub(super) in_integer: bool,
    /// Continuation bytes of that integer so far: a 62-bit value takes 9 at most (RFC 9204
    /// §4.1.1 lets a decoder bound it; an endless one was read to its end before).
    pub(super) integer_bytes: u8,
}

impl Qpack {
    /// Checks the instructions in `data`: with no dynamic table advertised, the encoder may
    /// only set its capacity to 0, and the decoder may only cancel streams.
    pub(super) fn check(&mut self, data: &[u8]) -> Result<(), u64> {
        for &b in data {
            match self.kind {
                // Set Dynamic Table Capacity 0 (RFC 9204 §4.3.1): `001` and five 0 bits.
                QpackKind::Encoder if b == 0x20 => {}
                QpackKind::Encoder => return Err(QPACK_ENCODER_STREAM_ERROR),
                QpackKind::Decoder if self.in_integer => {
                    self.integer_bytes += 1;
                    if self.integer_bytes > 9 {
                        return Err(QPACK_DECODER_STREAM_ERROR);
                    }
                    self.in_integer = b & 0x80 != 0;
                }
                // Stream Cancellation (§4.4.2), its 6-bit prefix full: continuation follows.
                QpackKind::Decoder if b & 0xC0 == 0x40 => {
                    self.in_integer = b & 0x3F == 0x3F;
                    self.integer_bytes = 0;
                }
                // A Section Acknowledgment (no section ever referred to the table) or an
                // Insert Count Increment (nothing was ever inserted; zero is an error anyway).
                QpackKind::Decoder => return Err(QPACK_DECODER_STREAM_ERROR),
            }
        }
        Ok(())
    }
}

/// The client's unidirectional streams while their types are read, and which QPACK streams it
/// opened.
#[derive(Default)]
pub(super) struct UniStreams {
    pub(super) typing: Vec<Typing>,
    pub(super) encoder: bool,
    pub(super) decoder: bool,
}

/// Reads a QPACK stream of the client's to its end, closing the connection at the first
/// instruction weir cannot allow, or when the stream ends (it is critical); a stream error
/// after the connection closed closes nothing more.
pub(super) async fn watch_qpack(mut q: Qpack, conn: quinn::Connection) {
    loop {
        let read = std::future::poll_fn(|cx| quic::RecvStream::poll_data(&mut q.stream, cx)).await;
        match read {
            Ok(Some(data)) => {
                if let Err(code) = q.check(&data) {
                    close(&conn, code);
                    return;
                }
            }
            Ok(None) | Err(_) => {
                if conn.close_reason().is_none() {
                    close(&conn, CLOSED_CRITICAL_STREAM);
                }
                return;
            }
        }
    }
}

/// A QUIC variable-length integer at the start of `b`, when it is all there.
pub(super) fn varint(b: &[u8]) -> Option<u64> {
    let first = *b.first()?;
    let len = varint_len(b);
    let bytes = b.get(..len)?;
    let mut v = u64::from(first & 0x3f);
    for x in &bytes[1..] {
        v = (v << 8) | u64::from(*x);
    }
    Some(v)
}

/// The length of the variable-length integer starting `b` (1 for an empty `b`).
pub(super) fn varint_len(b: &[u8]) -> usize {
    b.first().map_or(1, |f| 1usize << (f >> 6))
}
