//! TLS records of our own, for connections woken from parking (`server/park.rs`).
//!
//! Why by hand: an idle TLS keep-alive connection parked with rustls' session kept 5.55 KiB of
//! RSS (`bench/idle_memory.sh`, idle-20261127-0347; malloc's in-use bytes 4.0 KiB per
//! connection), against the floors issue's target of 4: the session is 1.2 KiB, its two
//! AES-GCM contexts 590 bytes each, and rustls keeps 1 KiB more it allocated at the handshake.
//! None of it can be let go while rustls drives the connection. So the first time a connection
//! parks, its session is turned into what rustls' kernel-TLS interface gives
//! (`dangerous_into_kernel_connection`: the traffic keys, IVs and sequence numbers, plus
//! rustls' key schedule for key updates), and from then on this module seals and opens its
//! records with aws-lc's AEADs, the same primitives rustls calls. A parked connection then
//! keeps the keys' bytes and no cipher context; the contexts are made again when it wakes.
//! Handshakes, and every connection that never parks (HTTP/2, busy keep-alive), stay on rustls.
//! Measured: 2.84 KiB of RSS per parked TLS connection (idle-20261127-0651, nginx 15.24), and
//! a woken connection's requests cost 0.86× the instructions of rustls' (tls-woken-20261127-0656).
//!
//! What a connection past its handshake can receive, and what is done with it, as rustls does:
//! - application data: delivered;
//! - `close_notify`: the end; `user_canceled` (TLS 1.3) and warnings (TLS 1.2): ignored, at
//!   most 4 in a row; any other alert ends the connection;
//! - TLS 1.3 `KeyUpdate`: new receive keys from rustls' key schedule (at most 32 without
//!   application data between); when the client asks, our own `KeyUpdate` and new send keys
//!   before the next record we send, one however many asked (as rustls queues one);
//! - a TLS 1.2 renegotiation (`ClientHello`): refused with a `no_renegotiation` warning once,
//!   fatal the second time;
//! - empty records: at most 32 in a row (rustls' limit);
//! - anything else (`ChangeCipherSpec`, other handshake messages, unknown types, records too
//!   long, bad MACs, bad padding): a fatal alert, as RFC 8446 §5 and RFC 5246 §7.2 name it.
//!
//! Sending: application data in records of up to 16 KiB, and `close_notify`. A TLS 1.3 send key
//! that reaches its confidentiality limit (2^24 records for AES-GCM) is updated with a
//! `KeyUpdate` first; a TLS 1.2 connection there is ended, as rustls ends it.
//!
//! aws-lc's TLS-specific GCM contexts (which rustls uses) insist that the first record they
//! seal is number 0, so a context made after parking could not continue a sequence; the plain
//! AEAD (`LessSafeKey`) is used with the nonces built here, as RFC 8446 §5.3 and RFC 5288 §3
//! (rustls' construction of the explicit part) define them.

use aws_lc_rs::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use rustls::kernel::KernelConnection;
use rustls::server::ServerConnectionData;
use rustls::{ConnectionTrafficSecrets, ExtractedSecrets, ProtocolVersion};
use zeroize::Zeroize;

const CHANGE_CIPHER_SPEC: u8 = 20;
const ALERT: u8 = 21;
const HANDSHAKE: u8 = 22;
const APPLICATION_DATA: u8 = 23;

const HEADER: usize = 5;
const TAG: usize = 16;
/// Most plaintext in a record (RFC 8446 §5.1).
pub(crate) const MAX_PLAIN: usize = 16 * 1024;
/// Most record payload: TLS 1.3 (RFC 8446 §5.2) and TLS 1.2 (RFC 5246 §6.2.3).
const MAX_CIPHER_13: usize = MAX_PLAIN + 256;
const MAX_CIPHER_12: usize = MAX_PLAIN + 2048;
/// Bytes a sealed record can add to its plaintext (TLS 1.2 GCM: header, explicit nonce, tag).
pub(crate) const OVERHEAD: usize = HEADER + 8 + TAG;

// Alert descriptions (RFC 8446 §6).
pub(crate) const CLOSE_NOTIFY: u8 = 0;
const UNEXPECTED_MESSAGE: u8 = 10;
const BAD_RECORD_MAC: u8 = 20;
const RECORD_OVERFLOW: u8 = 22;
const ILLEGAL_PARAMETER: u8 = 47;
const DECODE_ERROR: u8 = 50;
const USER_CANCELED: u8 = 90;
const NO_RENEGOTIATION: u8 = 100;

const KEY_UPDATE: u8 = 24;
const CLIENT_HELLO: u8 = 1;

/// Allowances against a client forcing work (rustls' `TemperCounters`, after BoringSSL's).
const WARNINGS: u8 = 4;
const KEY_UPDATES: u8 = 32;
const RENEGOTIATIONS: u8 = 1;
/// Empty records in a row (rustls' `ALLOWED_CONSECUTIVE_EMPTY_FRAGMENTS_MAX`).
const EMPTY_RECORDS: u8 = 32;
/// rustls fails a connection whose receive sequence reaches this (`SEQ_HARD_LIMIT`).
const SEQ_HARD_LIMIT: u64 = 0xffff_ffff_ffff_fffe;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Tls13,
    /// TLS 1.2 AES-GCM: an explicit nonce in each record.
    Tls12Gcm,
    /// TLS 1.2 ChaCha20-Poly1305 (RFC 7905): nonces as TLS 1.3 makes them.
    Tls12Chacha,
}

/// One direction's keys.
struct Keys {
    /// The key's bytes (`len` of them), kept while parked; zeroed on drop.
    key: [u8; 32],
    len: u8,
    iv: [u8; 12],
    seq: u64,
    /// The cipher context, made when first needed after a wake-up and dropped to park.
    ctx: Option<LessSafeKey>,
}

/// A connection's record layer after its first park. Made once, on the heap
/// ([`Records::boxed`]), and never moved after: the keys are overwritten in place at a key
/// update and zeroed when it is dropped, so no copy of them is left in freed memory by a
/// park or a wake (issue 52's audit found them at every move).
pub(crate) struct Records {
    /// rustls' key schedule, for TLS 1.3 key updates; `None` for TLS 1.2, which has none (the
    /// master secret it holds is not kept by a parked connection).
    kernel: Option<KernelConnection<ServerConnectionData>>,
    kind: Kind,
    alg: &'static aead::Algorithm,
    /// Records sealed under one send key before it must change.
    limit: u64,
    tx: Keys,
    rx: Keys,
    warnings_left: u8,
    key_updates_left: u8,
    renegotiations_left: u8,
    empty_left: u8,
    /// The client asked for our `KeyUpdate`: it goes before the next record we seal.
    update_pending: bool,
    /// The first bytes of a TLS 1.3 `KeyUpdate` whose record ended before the message did
    /// (RFC 8446 §5.1 lets a handshake message span records, as long as nothing comes between
    /// them and the message that changes keys ends with its record).
    partial: [u8; KEY_UPDATE_MSG],
    partial_len: u8,
}

/// A `KeyUpdate` message: type, three length bytes, the request byte.
const KEY_UPDATE_MSG: usize = 5;

/// A fatal condition: the alert to send (none when the client sent a fatal one) and why.
#[derive(Debug)]
pub(crate) struct Fatal {
    pub alert: Option<u8>,
    pub why: &'static str,
}

fn fatal(alert: u8, why: &'static str) -> Fatal {
    Fatal {
        alert: Some(alert),
        why,
    }
}

/// What one record held.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Opened {
    /// Less than a whole record is buffered.
    Need,
    /// Application data at `start..end` of the buffer; the record took `used` bytes.
    Data {
        start: usize,
        end: usize,
        used: usize,
    },
    /// A record for the layer itself, done with; `reply` says what must be sent back.
    Control { used: usize, reply: Reply },
    /// The client's `close_notify`.
    Closed { used: usize },
}

/// What a control record asks to send now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reply {
    Nothing,
    /// A warning alert with this description.
    Warning(u8),
}

impl Keys {
    /// No key yet: [`Self::set`] writes one in place.
    fn empty() -> Keys {
        Keys {
            key: [0; 32],
            len: 0,
            iv: [0; 12],
            seq: 0,
            ctx: None,
        }
    }

    /// Writes `secrets` over the key in place (the retired key's bytes are overwritten, not
    /// left in memory: RFC 8446 §7.2), from sequence number `seq`; the cipher's algorithm, or
    /// `None` for a suite this module does not seal.
    fn set(
        &mut self,
        seq: u64,
        secrets: &ConnectionTrafficSecrets,
    ) -> Option<&'static aead::Algorithm> {
        let (alg, k, iv) = match secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (&aead::AES_128_GCM, key, iv),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (&aead::AES_256_GCM, key, iv),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
                (&aead::CHACHA20_POLY1305, key, iv)
            }
            _ => return None,
        };
        let k = k.as_ref();
        let iv = iv.as_ref();
        if k.len() != alg.key_len() || k.len() > 32 || iv.len() != 12 {
            return None;
        }
        self.ctx = None;
        self.key.zeroize();
        self.key[..k.len()].copy_from_slice(k);
        self.len = k.len() as u8;
        self.iv.copy_from_slice(iv);
        self.seq = seq;
        Some(alg)
    }

    fn ctx(&mut self, alg: &'static aead::Algorithm) -> Result<&LessSafeKey, Fatal> {
        if self.ctx.is_none() {
            let key = UnboundKey::new(alg, &self.key[..self.len as usize])
                .map_err(|_| fatal(UNEXPECTED_MESSAGE, "TLS key rejected"))?;
            self.ctx = Some(LessSafeKey::new(key));
        }
        match &self.ctx {
            Some(k) => Ok(k),
            None => Err(fatal(UNEXPECTED_MESSAGE, "TLS key rejected")),
        }
    }

    /// The IV with the sequence number XORed into its last 8 bytes (RFC 8446 §5.3).
    fn nonce(&self) -> [u8; 12] {
        let mut n = self.iv;
        for (b, s) in n[4..].iter_mut().zip(self.seq.to_be_bytes()) {
            *b ^= s;
        }
        n
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        self.key.zeroize();
        self.iv.zeroize();
    }
}

/// The TLS 1.2 additional data: sequence number, type, version and plaintext length.
fn aad12(seq: u64, typ: u8, version: [u8; 2], len: usize) -> [u8; 13] {
    let mut a = [0u8; 13];
    a[..8].copy_from_slice(&seq.to_be_bytes());
    a[8] = typ;
    a[9..11].copy_from_slice(&version);
    a[11..].copy_from_slice(&(len as u16).to_be_bytes());
    a
}

impl Records {
    /// The record layer of a connection rustls handed over, on the heap; `None` for a cipher
    /// suite this module does not seal (the caller then keeps rustls' session).
    pub(crate) fn boxed(
        secrets: ExtractedSecrets,
        kernel: KernelConnection<ServerConnectionData>,
    ) -> Option<Box<Records>> {
        let suite = kernel.negotiated_cipher_suite();
        let version = kernel.protocol_version();
        let mut r = Box::new(Records {
            limit: match suite {
                rustls::SupportedCipherSuite::Tls13(s) => s.common.confidentiality_limit,
                rustls::SupportedCipherSuite::Tls12(s) => s.common.confidentiality_limit,
            },
            kernel: (version == ProtocolVersion::TLSv1_3).then_some(kernel),
            kind: Kind::Tls13,
            alg: &aead::AES_128_GCM,
            tx: Keys::empty(),
            rx: Keys::empty(),
            warnings_left: WARNINGS,
            key_updates_left: KEY_UPDATES,
            renegotiations_left: RENEGOTIATIONS,
            empty_left: EMPTY_RECORDS,
            update_pending: false,
            partial: [0; KEY_UPDATE_MSG],
            partial_len: 0,
        });
        let (tx_seq, tx) = &secrets.tx;
        let (rx_seq, rx) = &secrets.rx;
        let alg = r.tx.set(*tx_seq, tx)?;
        let rx_alg = r.rx.set(*rx_seq, rx)?;
        if !std::ptr::eq(alg, rx_alg) {
            return None;
        }
        r.alg = alg;
        r.kind = match version {
            ProtocolVersion::TLSv1_3 => Kind::Tls13,
            ProtocolVersion::TLSv1_2 if std::ptr::eq(alg, &aead::CHACHA20_POLY1305) => {
                Kind::Tls12Chacha
            }
            ProtocolVersion::TLSv1_2 => Kind::Tls12Gcm,
            _ => return None,
        };
        Some(r)
    }

    /// Drops the cipher contexts (about 1.2 KiB): the connection parks with the keys' bytes.
    pub(crate) fn sleep(&mut self) {
        self.tx.ctx = None;
        self.rx.ctx = None;
    }

    /// The most bytes sealing `n` bytes of application data can take.
    pub(crate) fn sealed_len(&self, n: usize) -> usize {
        // One record per 16 KiB, and room for a key update before them.
        n + (n / MAX_PLAIN + 1) * OVERHEAD + Self::KEY_UPDATE_LEN
    }

    const KEY_UPDATE_LEN: usize = HEADER + 4 + 1 + 1 + TAG;

    /// Seals `data` as application data records into `dst` (at least [`Self::sealed_len`]
    /// long): the bytes written.
    pub(crate) fn seal_data(&mut self, data: &[u8], dst: &mut [u8]) -> Result<usize, Fatal> {
        let mut at = 0;
        let mut chunks = data.chunks(MAX_PLAIN);
        // An empty write seals nothing (rustls sends no empty record either).
        for chunk in &mut chunks {
            at += self.seal(APPLICATION_DATA, chunk, &mut dst[at..])?;
        }
        Ok(at)
    }

    /// Seals an alert.
    pub(crate) fn seal_alert(
        &mut self,
        level: u8,
        desc: u8,
        dst: &mut [u8],
    ) -> Result<usize, Fatal> {
        self.seal(ALERT, &[level, desc], dst)
    }

    /// Seals our `KeyUpdate` (update not requested) under the current send key, then moves
    /// the send direction to the next key.
    fn seal_key_update(&mut self, dst: &mut [u8]) -> Result<usize, Fatal> {
        let n = self.seal_record(HANDSHAKE, &[KEY_UPDATE, 0, 0, 1, 0], dst)?;
        let failed = || fatal(UNEXPECTED_MESSAGE, "TLS key update failed");
        let (seq, secrets) = self
            .kernel
            .as_mut()
            .ok_or_else(failed)?
            .update_tx_secret()
            .map_err(|_| failed())?;
        self.tx.set(seq, &secrets).ok_or_else(failed)?;
        Ok(n)
    }

    /// One record, after our key update when the client asked for one or the send key
    /// reached its limit.
    fn seal(&mut self, typ: u8, data: &[u8], dst: &mut [u8]) -> Result<usize, Fatal> {
        let mut at = 0;
        if self.update_pending || self.tx.seq >= self.limit {
            if self.kind != Kind::Tls13 {
                return Err(Fatal {
                    alert: None,
                    why: "TLS 1.2 send key at its limit",
                });
            }
            at = self.seal_key_update(dst)?;
            self.update_pending = false;
        }
        Ok(at + self.seal_record(typ, data, &mut dst[at..])?)
    }

    fn seal_record(&mut self, typ: u8, data: &[u8], dst: &mut [u8]) -> Result<usize, Fatal> {
        seal_with(self.kind, self.alg, &mut self.tx, typ, data, dst)
    }

    /// Opens the first record of `buf` in place.
    pub(crate) fn open(&mut self, buf: &mut [u8]) -> Result<Opened, Fatal> {
        if buf.len() < HEADER {
            return Ok(Opened::Need);
        }
        let typ = buf[0];
        let version = [buf[1], buf[2]];
        let len = u16::from_be_bytes([buf[3], buf[4]]) as usize;
        if version[0] != 3 {
            return Err(fatal(DECODE_ERROR, "TLS record of an unknown version"));
        }
        let tls13 = self.kind == Kind::Tls13;
        match typ {
            APPLICATION_DATA => {}
            ALERT | HANDSHAKE if !tls13 => {}
            CHANGE_CIPHER_SPEC => {
                return Err(fatal(
                    UNEXPECTED_MESSAGE,
                    "ChangeCipherSpec after the handshake",
                ))
            }
            _ => {
                return Err(fatal(
                    UNEXPECTED_MESSAGE,
                    "TLS record of an unexpected type",
                ))
            }
        }
        if len > if tls13 { MAX_CIPHER_13 } else { MAX_CIPHER_12 } {
            return Err(fatal(RECORD_OVERFLOW, "TLS record too long"));
        }
        if buf.len() < HEADER + len {
            return Ok(Opened::Need);
        }
        let used = HEADER + len;
        if self.rx.seq >= SEQ_HARD_LIMIT {
            return Err(fatal(UNEXPECTED_MESSAGE, "TLS receive sequence exhausted"));
        }
        let seq = self.rx.seq;
        let alg = self.alg;
        let (start, inner_end) = match self.kind {
            Kind::Tls13 => {
                if len < TAG + 1 {
                    return Err(fatal(BAD_RECORD_MAC, "TLS record too short"));
                }
                let nonce = Nonce::assume_unique_for_key(self.rx.nonce());
                let header: [u8; HEADER] = [buf[0], buf[1], buf[2], buf[3], buf[4]];
                let key = self.rx.ctx(alg)?;
                let plain = key
                    .open_in_place(nonce, Aad::from(header), &mut buf[HEADER..used])
                    .map_err(|_| fatal(BAD_RECORD_MAC, "TLS record failed to decrypt"))?;
                (HEADER, HEADER + plain.len())
            }
            Kind::Tls12Gcm => {
                if len < 8 + TAG {
                    return Err(fatal(BAD_RECORD_MAC, "TLS record too short"));
                }
                let mut nonce = [0u8; 12];
                nonce[..4].copy_from_slice(&self.rx.iv[..4]);
                nonce[4..].copy_from_slice(&buf[HEADER..HEADER + 8]);
                let aad = aad12(seq, typ, version, len - 8 - TAG);
                let key = self.rx.ctx(alg)?;
                let plain = key
                    .open_in_place(
                        Nonce::assume_unique_for_key(nonce),
                        Aad::from(aad),
                        &mut buf[HEADER + 8..used],
                    )
                    .map_err(|_| fatal(BAD_RECORD_MAC, "TLS record failed to decrypt"))?;
                (HEADER + 8, HEADER + 8 + plain.len())
            }
            Kind::Tls12Chacha => {
                if len < TAG {
                    return Err(fatal(BAD_RECORD_MAC, "TLS record too short"));
                }
                let nonce = Nonce::assume_unique_for_key(self.rx.nonce());
                let aad = aad12(seq, typ, version, len - TAG);
                let key = self.rx.ctx(alg)?;
                let plain = key
                    .open_in_place(nonce, Aad::from(aad), &mut buf[HEADER..used])
                    .map_err(|_| fatal(BAD_RECORD_MAC, "TLS record failed to decrypt"))?;
                (HEADER, HEADER + plain.len())
            }
        };
        self.rx.seq += 1;
        // TLS 1.3: the content type is the last byte that is not padding (RFC 8446 §5.4).
        let (inner, end) = if tls13 {
            match buf[start..inner_end].iter().rposition(|&b| b != 0) {
                Some(i) => (buf[start + i], start + i),
                None => return Err(fatal(UNEXPECTED_MESSAGE, "TLS record with no content type")),
            }
        } else {
            (typ, inner_end)
        };
        // The plaintext, with a TLS 1.3 record's content type and padding (RFC 8446 §5.4).
        if inner_end - start > MAX_PLAIN + usize::from(tls13) {
            return Err(fatal(RECORD_OVERFLOW, "TLS plaintext too long"));
        }
        if end == start {
            if self.empty_left == 0 {
                return Err(fatal(UNEXPECTED_MESSAGE, "too many empty TLS records"));
            }
            self.empty_left -= 1;
        } else {
            self.empty_left = EMPTY_RECORDS;
        }
        let content = &buf[start..end];
        if self.partial_len > 0 && inner != HANDSHAKE {
            return Err(fatal(
                UNEXPECTED_MESSAGE,
                "a record inside a split TLS handshake message",
            ));
        }
        match inner {
            APPLICATION_DATA => {
                if !content.is_empty() {
                    self.key_updates_left = KEY_UPDATES;
                }
                Ok(Opened::Data { start, end, used })
            }
            ALERT => self.alert(content, used),
            HANDSHAKE => {
                let reply = self.handshake(content)?;
                Ok(Opened::Control { used, reply })
            }
            _ => Err(fatal(
                UNEXPECTED_MESSAGE,
                "TLS record of an unexpected type",
            )),
        }
    }

    fn alert(&mut self, content: &[u8], used: usize) -> Result<Opened, Fatal> {
        let &[level, desc] = content else {
            return Err(fatal(DECODE_ERROR, "malformed TLS alert"));
        };
        if level != 1 && level != 2 {
            return Err(fatal(ILLEGAL_PARAMETER, "TLS alert of an unknown level"));
        }
        if desc == CLOSE_NOTIFY {
            return Ok(Opened::Closed { used });
        }
        if level == 2 {
            return Err(Fatal {
                alert: None,
                why: "the client sent a fatal TLS alert",
            });
        }
        if self.warnings_left == 0 {
            return Err(fatal(UNEXPECTED_MESSAGE, "too many TLS warning alerts"));
        }
        self.warnings_left -= 1;
        if self.kind == Kind::Tls13 && desc != USER_CANCELED {
            return Err(fatal(DECODE_ERROR, "TLS 1.3 warning alert"));
        }
        Ok(Opened::Control {
            used,
            reply: Reply::Nothing,
        })
    }

    /// A handshake record after the handshake: a TLS 1.3 key update or a TLS 1.2
    /// renegotiation attempt, each in a record of its own.
    fn handshake(&mut self, content: &[u8]) -> Result<Reply, Fatal> {
        if self.kind == Kind::Tls13 {
            return self.key_update_part(content);
        }
        if content.len() < 4 {
            return Err(fatal(
                UNEXPECTED_MESSAGE,
                "fragmented TLS handshake message",
            ));
        }
        let body = u32::from_be_bytes([0, content[1], content[2], content[3]]) as usize;
        if content.len() != 4 + body {
            return Err(fatal(
                UNEXPECTED_MESSAGE,
                "TLS handshake message split or followed by another",
            ));
        }
        match (self.kind, content[0]) {
            (Kind::Tls13, KEY_UPDATE) => self.key_update(&content[4..]),
            (Kind::Tls12Gcm | Kind::Tls12Chacha, CLIENT_HELLO) => {
                if self.renegotiations_left == 0 {
                    return Err(fatal(UNEXPECTED_MESSAGE, "too many renegotiation requests"));
                }
                self.renegotiations_left -= 1;
                Ok(Reply::Warning(NO_RENEGOTIATION))
            }
            _ => Err(fatal(
                UNEXPECTED_MESSAGE,
                "unexpected TLS handshake message",
            )),
        }
    }

    /// A TLS 1.3 handshake record: all or part of a `KeyUpdate`, the one handshake message a
    /// client sends after the handshake. A message split across records is joined (issue 52's
    /// audit: it was refused); one that goes on past its record's end after the key changes,
    /// or any other message, is fatal.
    fn key_update_part(&mut self, content: &[u8]) -> Result<Reply, Fatal> {
        if content.is_empty() {
            return Err(fatal(UNEXPECTED_MESSAGE, "empty TLS handshake record"));
        }
        let have = usize::from(self.partial_len);
        if have + content.len() > KEY_UPDATE_MSG {
            return Err(fatal(
                UNEXPECTED_MESSAGE,
                "TLS handshake message other than a KeyUpdate, or one not ending its record",
            ));
        }
        let mut msg = self.partial;
        msg[have..have + content.len()].copy_from_slice(content);
        let known = have + content.len();
        // What is known so far must be a KeyUpdate's header: type 24, body length 1.
        if msg[..known.min(4)] != [KEY_UPDATE, 0, 0, 1][..known.min(4)] {
            return Err(fatal(
                UNEXPECTED_MESSAGE,
                "unexpected TLS handshake message",
            ));
        }
        if known < KEY_UPDATE_MSG {
            self.partial = msg;
            self.partial_len = known as u8;
            return Ok(Reply::Nothing);
        }
        self.partial = [0; KEY_UPDATE_MSG];
        self.partial_len = 0;
        self.key_update(&msg[4..])
    }

    /// A whole `KeyUpdate`'s body: new receive keys, and ours owed when asked for.
    fn key_update(&mut self, body: &[u8]) -> Result<Reply, Fatal> {
        let &[request] = body else {
            return Err(fatal(DECODE_ERROR, "malformed KeyUpdate"));
        };
        if request > 1 {
            return Err(fatal(ILLEGAL_PARAMETER, "KeyUpdate request out of range"));
        }
        if self.key_updates_left == 0 {
            return Err(fatal(UNEXPECTED_MESSAGE, "too many key updates"));
        }
        self.key_updates_left -= 1;
        let failed = || fatal(UNEXPECTED_MESSAGE, "TLS key update failed");
        let (seq, secrets) = self
            .kernel
            .as_mut()
            .ok_or_else(failed)?
            .update_rx_secret()
            .map_err(|_| failed())?;
        self.rx.set(seq, &secrets).ok_or_else(failed)?;
        // Ours goes before the next record we seal; asked again meanwhile, still one.
        self.update_pending |= request == 1;
        Ok(Reply::Nothing)
    }
}

/// Seals one record of type `typ` under `keys` into `dst` (long enough): the bytes written.
fn seal_with(
    kind: Kind,
    alg: &'static aead::Algorithm,
    keys: &mut Keys,
    typ: u8,
    data: &[u8],
    dst: &mut [u8],
) -> Result<usize, Fatal> {
    let n = data.len();
    let nonce = keys.nonce();
    let seq = keys.seq;
    let (outer, body, total) = match kind {
        Kind::Tls13 => (APPLICATION_DATA, HEADER, HEADER + n + 1 + TAG),
        Kind::Tls12Gcm => (typ, HEADER + 8, HEADER + 8 + n + TAG),
        Kind::Tls12Chacha => (typ, HEADER, HEADER + n + TAG),
    };
    let dst = &mut dst[..total];
    let mut header = [outer, 3, 3, 0, 0];
    header[3..].copy_from_slice(&((total - HEADER) as u16).to_be_bytes());
    dst[..HEADER].copy_from_slice(&header);
    dst[body..body + n].copy_from_slice(data);
    let sealed_end = match kind {
        Kind::Tls13 => {
            dst[body + n] = typ;
            body + n + 1
        }
        Kind::Tls12Gcm => {
            dst[HEADER..HEADER + 8].copy_from_slice(&nonce[4..]);
            body + n
        }
        Kind::Tls12Chacha => body + n,
    };
    let key = keys.ctx(alg)?;
    let nonce = Nonce::assume_unique_for_key(nonce);
    let tag = match kind {
        Kind::Tls13 => {
            key.seal_in_place_separate_tag(nonce, Aad::from(header), &mut dst[body..sealed_end])
        }
        _ => key.seal_in_place_separate_tag(
            nonce,
            Aad::from(aad12(seq, typ, [3, 3], n)),
            &mut dst[body..sealed_end],
        ),
    }
    .map_err(|_| fatal(UNEXPECTED_MESSAGE, "TLS seal failed"))?;
    dst[sealed_end..].copy_from_slice(tag.as_ref());
    keys.seq += 1;
    Ok(total)
}

#[cfg(test)]
#[path = "records_tests.rs"]
mod tests;
