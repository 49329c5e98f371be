//! The record layer against rustls' own: a buffered rustls client and an unbuffered rustls
//! server shake hands in memory, the server hands its keys over, and from then on every record
//! the client seals is opened here and every record sealed here is opened by the client, for
//! each cipher suite rustls offers. Records rustls would never send (the attacks) are sealed
//! with a copy of the client's keys taken from the server's side.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::sync::Arc;

use rustls::client::ClientConnection;
use rustls::crypto::aws_lc_rs::cipher_suite as cs;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::ConnectionState;
use rustls::{AlertDescription, ClientConfig, RootCertStore, ServerConfig, SupportedCipherSuite};

use super::*;

const TLS13: [SupportedCipherSuite; 3] = [
    cs::TLS13_AES_128_GCM_SHA256,
    cs::TLS13_AES_256_GCM_SHA384,
    cs::TLS13_CHACHA20_POLY1305_SHA256,
];
const TLS12: [SupportedCipherSuite; 3] = [
    cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
];

fn configs(suite: SupportedCipherSuite) -> (Arc<ServerConfig>, Arc<ClientConfig>) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["weir.test".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let der = cert.der().clone();
    let mut provider = crate::tls::provider();
    provider.cipher_suites = vec![suite];
    let provider = Arc::new(provider);
    let versions: &[&rustls::SupportedProtocolVersion] = match suite {
        SupportedCipherSuite::Tls13(_) => &[&rustls::version::TLS13],
        SupportedCipherSuite::Tls12(_) => &[&rustls::version::TLS12],
    };
    let mut server = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![der.clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .unwrap();
    server.enable_secret_extraction = true;
    let mut roots = RootCertStore::empty();
    roots.add(der).unwrap();
    let client = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    (Arc::new(server), Arc::new(client))
}

/// Feeds `wire` to the client and returns the plaintext it yields (or its error).
fn client_reads(client: &mut ClientConnection, wire: &[u8]) -> Result<Vec<u8>, rustls::Error> {
    let mut rd = wire;
    let mut plain = Vec::new();
    while !rd.is_empty() {
        client.read_tls(&mut rd).unwrap();
        client.process_new_packets()?;
        // Drained as it comes: rustls holds at most 16 KiB of plaintext unread.
        match client.reader().read_to_end(&mut plain) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("client read: {e}"),
        }
    }
    Ok(plain)
}

/// What the client has to send.
fn client_wire(client: &mut ClientConnection) -> Vec<u8> {
    let mut wire = Vec::new();
    while client.wants_write() {
        client.write_tls(&mut wire).unwrap();
    }
    wire
}

/// The handshake in memory; the server's keys handed over to [`Records`].
fn handshake(suite: SupportedCipherSuite) -> (ClientConnection, Box<Records>) {
    let (sc, cc) = configs(suite);
    let mut client = ClientConnection::new(cc, ServerName::try_from("weir.test").unwrap()).unwrap();
    let mut server = UnbufferedServerConnection::new(sc).unwrap();
    let mut to_server = Vec::new();
    for _ in 0..10 {
        to_server.extend(client_wire(&mut client));
        let mut to_client = Vec::new();
        loop {
            let st = server.process_tls_records(&mut to_server);
            let discard = st.discard;
            let stop = match st.state.unwrap() {
                ConnectionState::EncodeTlsData(mut e) => {
                    let mut buf = vec![0u8; 64 * 1024];
                    let n = e.encode(&mut buf).unwrap();
                    to_client.extend_from_slice(&buf[..n]);
                    false
                }
                ConnectionState::TransmitTlsData(t) => {
                    t.done();
                    false
                }
                ConnectionState::BlockedHandshake | ConnectionState::WriteTraffic(_) => true,
                _ => panic!("unexpected server state"),
            };
            to_server.drain(..discard);
            if stop {
                break;
            }
        }
        client_reads(&mut client, &to_client).unwrap();
        if !server.is_handshaking() && !client.is_handshaking() && !client.wants_write() {
            break;
        }
    }
    assert!(!server.is_handshaking() && !client.is_handshaking());
    let (secrets, kernel) = server.dangerous_into_kernel_connection().unwrap();
    (client, Records::boxed(secrets, kernel).unwrap())
}

/// Everything the server makes of `wire`: the plaintext, and the records it sends back (key
/// update replies, warnings), or the first fatal condition.
fn server_reads(r: &mut Records, wire: &mut [u8]) -> Result<(Vec<u8>, Vec<u8>, bool), Fatal> {
    let (mut plain, mut back, mut closed, mut at) = (Vec::new(), Vec::new(), false, 0);
    loop {
        match r.open(&mut wire[at..])? {
            Opened::Need => break,
            Opened::Data { start, end, used } => {
                plain.extend_from_slice(&wire[at + start..at + end]);
                at += used;
            }
            Opened::Closed { used } => {
                at += used;
                closed = true;
                break;
            }
            Opened::Control { used, reply } => {
                at += used;
                let mut buf = vec![0u8; r.sealed_len(8)];
                let n = match reply {
                    Reply::Nothing => 0,
                    Reply::Warning(d) => r.seal_alert(1, d, &mut buf)?,
                };
                back.extend_from_slice(&buf[..n]);
            }
        }
    }
    assert_eq!(at, wire.len(), "every whole record is opened");
    Ok((plain, back, closed))
}

fn server_seals(r: &mut Records, data: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; r.sealed_len(data.len())];
    let n = r.seal_data(data, &mut buf).unwrap();
    buf.truncate(n);
    buf
}

fn pattern(n: usize, salt: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ salt).collect()
}

#[test]
fn every_suite_interoperates_with_rustls_across_sleeps() {
    for suite in TLS13.into_iter().chain(TLS12) {
        let (mut client, mut r) = handshake(suite);
        for round in 0..3u8 {
            // 40 KiB from the client: three records of rustls' making, opened here.
            let up = pattern(40 * 1024 + 7, round);
            client.writer().write_all(&up).unwrap();
            let mut wire = client_wire(&mut client);
            let (plain, back, closed) = server_reads(&mut r, &mut wire).unwrap();
            assert_eq!(plain, up, "{suite:?} round {round}");
            assert!(back.is_empty() && !closed);
            // 40 KiB and a short write back: sealed here, opened by rustls.
            let down = pattern(40 * 1024 + 3, round ^ 0x5a);
            let mut wire = server_seals(&mut r, &down);
            wire.extend(server_seals(&mut r, b"bye"));
            let got = client_reads(&mut client, &wire).unwrap();
            assert_eq!(&got[..down.len()], &down[..], "{suite:?} round {round}");
            assert_eq!(&got[down.len()..], b"bye");
            // Parked: the contexts go, the keys and sequence numbers stay.
            r.sleep();
            assert!(r.tx.ctx.is_none() && r.rx.ctx.is_none());
        }
    }
}

#[test]
fn records_arriving_a_byte_at_a_time_wait_until_whole() {
    for suite in [TLS13[0], TLS12[0]] {
        let (mut client, mut r) = handshake(suite);
        client
            .writer()
            .write_all(b"GET / HTTP/1.1\r\n\r\n")
            .unwrap();
        let mut wire = client_wire(&mut client);
        for cut in 0..wire.len() {
            assert_eq!(r.open(&mut wire[..cut].to_vec()).unwrap(), Opened::Need);
        }
        let (plain, _, _) = server_reads(&mut r, &mut wire).unwrap();
        assert_eq!(plain, b"GET / HTTP/1.1\r\n\r\n");
    }
}

#[test]
fn key_updates_both_ways() {
    for suite in TLS13 {
        let (mut client, mut r) = handshake(suite);
        for round in 0..3u8 {
            // rustls' refresh asks for ours in return.
            client.refresh_traffic_keys().unwrap();
            client.writer().write_all(&[round; 100]).unwrap();
            let mut wire = client_wire(&mut client);
            let (plain, back, _) = server_reads(&mut r, &mut wire).unwrap();
            assert_eq!(plain, [round; 100]);
            assert!(back.is_empty(), "ours waits for the next record we send");
            // Parked with our KeyUpdate owed: it still goes first.
            r.sleep();
            let wire = server_seals(&mut r, b"after the update");
            assert_eq!(r.tx.seq, 1, "{suite:?}: the data went under new keys");
            assert_eq!(
                client_reads(&mut client, &wire).unwrap(),
                b"after the update"
            );
        }
    }
}

/// Asked for a key update again and again before we send anything, we send one (as rustls
/// does): a client cannot make the server queue records by asking.
#[test]
fn many_key_update_requests_get_one_key_update() {
    for suite in TLS13 {
        let (mut client, mut r) = handshake(suite);
        for i in 0..200u8 {
            if i % 20 == 0 {
                // Data between keeps the flood allowance (32) from running out.
                client.writer().write_all(&[i]).unwrap();
            }
            client.refresh_traffic_keys().unwrap();
        }
        let mut wire = client_wire(&mut client);
        let (plain, back, _) = server_reads(&mut r, &mut wire).unwrap();
        assert_eq!(plain.len(), 10);
        assert!(back.is_empty());
        let wire = server_seals(&mut r, b"one");
        // One KeyUpdate record (5 + 4 + 1 + 1 + 16) and one data record (5 + 3 + 1 + 16).
        assert_eq!(wire.len(), 27 + 25, "{suite:?}");
        assert_eq!(client_reads(&mut client, &wire).unwrap(), b"one");
    }
}

#[test]
fn the_send_key_changes_at_its_limit_on_tls13_and_ends_tls12() {
    for suite in TLS13 {
        let (mut client, mut r) = handshake(suite);
        r.limit = r.tx.seq + 2;
        let mut wire = Vec::new();
        for i in 0..5u8 {
            wire.extend(server_seals(&mut r, &[i; 10]));
        }
        let got = client_reads(&mut client, &wire).unwrap();
        assert_eq!(got.len(), 50, "{suite:?}");
        assert!(r.tx.seq < 5, "the key changed: {}", r.tx.seq);
    }
    let (_, mut r) = handshake(TLS12[0]);
    r.limit = r.tx.seq + 1;
    let mut buf = vec![0u8; r.sealed_len(10)];
    r.seal_data(&[1; 10], &mut buf).unwrap();
    let f = r.seal_data(&[1; 10], &mut buf).unwrap_err();
    assert_eq!(f.alert, None);
}

#[test]
fn a_tampered_record_gets_bad_record_mac_which_the_client_reads() {
    for suite in TLS13.into_iter().chain(TLS12) {
        let (mut client, mut r) = handshake(suite);
        client.writer().write_all(b"hello").unwrap();
        let mut wire = client_wire(&mut client);
        let last = wire.len() - 1;
        wire[last] ^= 1;
        let f = r.open(&mut wire).unwrap_err();
        assert_eq!(f.alert, Some(BAD_RECORD_MAC), "{suite:?}");
        let mut buf = vec![0u8; r.sealed_len(2)];
        let n = r.seal_alert(2, BAD_RECORD_MAC, &mut buf).unwrap();
        assert_eq!(
            client_reads(&mut client, &buf[..n]).unwrap_err(),
            rustls::Error::AlertReceived(AlertDescription::BadRecordMac)
        );
    }
}

#[test]
fn close_notify_both_ways() {
    for suite in [TLS13[0], TLS12[2]] {
        let (mut client, mut r) = handshake(suite);
        client.send_close_notify();
        let mut wire = client_wire(&mut client);
        let (_, _, closed) = server_reads(&mut r, &mut wire).unwrap();
        assert!(closed, "{suite:?}");
        let mut buf = vec![0u8; r.sealed_len(2)];
        let n = r.seal_alert(1, CLOSE_NOTIFY, &mut buf).unwrap();
        client_reads(&mut client, &buf[..n]).unwrap();
        let mut rest = Vec::new();
        assert_eq!(
            client.reader().read_to_end(&mut rest).unwrap(),
            0,
            "clean end"
        );
    }
}

#[test]
fn key_update_floods_are_cut_unless_data_comes_between() {
    let (mut client, mut r) = handshake(TLS13[0]);
    for i in 0..40u8 {
        client.refresh_traffic_keys().unwrap();
        client.writer().write_all(&[i]).unwrap();
        let mut wire = client_wire(&mut client);
        server_reads(&mut r, &mut wire).unwrap();
    }
    let (mut client, mut r) = handshake(TLS13[0]);
    for _ in 0..KEY_UPDATES {
        client.refresh_traffic_keys().unwrap();
    }
    let mut wire = client_wire(&mut client);
    server_reads(&mut r, &mut wire).unwrap();
    client.refresh_traffic_keys().unwrap();
    let mut wire = client_wire(&mut client);
    let f = server_reads(&mut r, &mut wire).unwrap_err();
    assert_eq!(f.alert, Some(UNEXPECTED_MESSAGE));
}

/// Seals records as the client would, with a copy of its keys (the server's receive side).
struct Forger {
    kind: Kind,
    alg: &'static aead::Algorithm,
    keys: Keys,
}

impl Forger {
    fn of(r: &Records) -> Forger {
        Forger {
            kind: r.kind,
            alg: r.alg,
            keys: Keys {
                key: r.rx.key,
                len: r.rx.len,
                iv: r.rx.iv,
                seq: r.rx.seq,
                ctx: None,
            },
        }
    }

    fn seal(&mut self, typ: u8, data: &[u8]) -> Vec<u8> {
        let mut buf = vec![0u8; data.len() + OVERHEAD + 1];
        let n = seal_with(self.kind, self.alg, &mut self.keys, typ, data, &mut buf).unwrap();
        buf.truncate(n);
        buf
    }

    /// A TLS 1.3 record whose inner plaintext is `inner` as it is (content type and padding
    /// included).
    fn seal13_raw(&mut self, inner: &[u8]) -> Vec<u8> {
        let (body, typ) = inner.split_at(inner.len() - 1);
        self.seal(typ[0], body)
    }
}

fn refused(r: &mut Records, mut wire: Vec<u8>) -> u8 {
    server_reads(r, &mut wire).unwrap_err().alert.unwrap()
}

#[test]
fn forged_tls13_records_get_the_alerts_rfc8446_names() {
    let cases: [(&str, Vec<u8>, u8); 7] = [
        (
            "a ClientHello's first bytes",
            vec![1, 0, HANDSHAKE],
            UNEXPECTED_MESSAGE,
        ),
        ("a warning alert", vec![1, 10, ALERT], DECODE_ERROR),
        (
            "a ClientHello",
            vec![1, 0, 0, 0, HANDSHAKE],
            UNEXPECTED_MESSAGE,
        ),
        (
            "KeyUpdate asking 2",
            vec![24, 0, 0, 1, 2, HANDSHAKE],
            ILLEGAL_PARAMETER,
        ),
        (
            "KeyUpdate then data",
            vec![24, 0, 0, 1, 0, 24, 0, 0, 1, 0, HANDSHAKE],
            UNEXPECTED_MESSAGE,
        ),
        ("no content type", vec![0, 0, 0, 0], UNEXPECTED_MESSAGE),
        (
            "an unknown inner type",
            vec![1, 2, 3, 99],
            UNEXPECTED_MESSAGE,
        ),
    ];
    for (what, inner, alert) in cases {
        let (_, mut r) = handshake(TLS13[1]);
        let mut f = Forger::of(&r);
        assert_eq!(refused(&mut r, f.seal13_raw(&inner)), alert, "{what}");
    }
    // A KeyUpdate split across two records is one KeyUpdate (RFC 8446 §5.1; issue 52's audit:
    // it was refused); a record of another type between its parts is not.
    for split in 1..5 {
        let (_, mut r) = handshake(TLS13[1]);
        let mut f = Forger::of(&r);
        let ku = [24u8, 0, 0, 1, 0];
        let mut wire = f.seal(HANDSHAKE, &ku[..split]);
        wire.extend(f.seal(HANDSHAKE, &ku[split..]));
        assert!(server_reads(&mut r, &mut wire).is_ok(), "split at {split}");
        assert_eq!(r.partial_len, 0, "split at {split}: whole");
        let (_, mut r) = handshake(TLS13[1]);
        let mut f = Forger::of(&r);
        let mut wire = f.seal(HANDSHAKE, &ku[..split]);
        wire.extend(f.seal(APPLICATION_DATA, b"GET / HTTP/1.1\r\n\r\n"));
        assert_eq!(
            refused(&mut r, wire),
            UNEXPECTED_MESSAGE,
            "data inside, at {split}"
        );
    }
    // Padding counts towards the 2^14 + 1 bytes of inner plaintext (RFC 8446 §5.4).
    let (_, mut r) = handshake(TLS13[0]);
    let mut f = Forger::of(&r);
    let mut inner = b"GET / HTTP/1.1\r\n\r\n\x17".to_vec();
    inner.resize(MAX_PLAIN + 2, 0);
    assert_eq!(refused(&mut r, f.seal13_raw(&inner)), RECORD_OVERFLOW);
    let (_, mut r) = handshake(TLS13[0]);
    let mut f = Forger::of(&r);
    let mut inner = vec![b'x'; MAX_PLAIN];
    inner.push(APPLICATION_DATA);
    let mut wire = f.seal13_raw(&inner);
    assert_eq!(server_reads(&mut r, &mut wire).unwrap().0.len(), MAX_PLAIN);
    // Empty records: 32 in a row, not 33.
    for suite in [TLS13[0], TLS12[0]] {
        let (_, mut r) = handshake(suite);
        let mut f = Forger::of(&r);
        for round in 0..3 {
            let mut wire = Vec::new();
            for _ in 0..EMPTY_RECORDS {
                wire.extend(f.seal(APPLICATION_DATA, b""));
            }
            wire.extend(f.seal(APPLICATION_DATA, b"x"));
            assert_eq!(
                server_reads(&mut r, &mut wire).unwrap().0,
                b"x",
                "round {round}"
            );
        }
        let mut wire = Vec::new();
        for _ in 0..=EMPTY_RECORDS {
            wire.extend(f.seal(APPLICATION_DATA, b""));
        }
        assert_eq!(refused(&mut r, wire), UNEXPECTED_MESSAGE, "{suite:?}");
    }
    // Padding is not content: "data" padded with zeros is "data".
    let (_, mut r) = handshake(TLS13[2]);
    let mut f = Forger::of(&r);
    let mut wire = f.seal13_raw(b"data\x17\0\0\0\0\0");
    assert_eq!(server_reads(&mut r, &mut wire).unwrap().0, b"data");
    // Plaintext records after the handshake.
    for (what, wire, alert) in [
        (
            "ChangeCipherSpec",
            vec![20, 3, 3, 0, 1, 1],
            UNEXPECTED_MESSAGE,
        ),
        (
            "a plaintext alert",
            vec![21, 3, 3, 0, 2, 1, 0],
            UNEXPECTED_MESSAGE,
        ),
        (
            "an unknown type",
            vec![99, 3, 3, 0, 1, 0],
            UNEXPECTED_MESSAGE,
        ),
        ("a version 2 header", vec![23, 2, 0, 0, 1, 0], DECODE_ERROR),
        ("too long", vec![23, 3, 3, 0x41, 0x01], RECORD_OVERFLOW),
        (
            "too short for a tag",
            vec![23, 3, 3, 0, 3, 1, 2, 3],
            BAD_RECORD_MAC,
        ),
    ] {
        let (_, mut r) = handshake(TLS13[0]);
        assert_eq!(refused(&mut r, wire), alert, "{what}");
    }
    // user_canceled is let by, four times in a row.
    let (_, mut r) = handshake(TLS13[0]);
    let mut f = Forger::of(&r);
    for _ in 0..WARNINGS {
        let mut wire = f.seal(ALERT, &[1, USER_CANCELED]);
        server_reads(&mut r, &mut wire).unwrap();
    }
    assert_eq!(
        refused(&mut r, f.seal(ALERT, &[1, USER_CANCELED])),
        UNEXPECTED_MESSAGE
    );
    // A fatal alert from the client ends the connection with nothing sent back.
    let (_, mut r) = handshake(TLS13[0]);
    let mut f = Forger::of(&r);
    let mut wire = f.seal(ALERT, &[2, 40]);
    assert_eq!(server_reads(&mut r, &mut wire).unwrap_err().alert, None);
    // Data after close_notify is never opened.
    let (_, mut r) = handshake(TLS13[0]);
    let mut f = Forger::of(&r);
    let mut wire = f.seal(ALERT, &[1, CLOSE_NOTIFY]);
    let rest = f.seal(APPLICATION_DATA, b"late");
    let closed_at = wire.len();
    wire.extend(rest);
    assert_eq!(
        r.open(&mut wire).unwrap(),
        Opened::Closed { used: closed_at }
    );
}

#[test]
fn forged_tls12_records_renegotiation_once_then_fatal() {
    for suite in TLS12 {
        let (_, mut r) = handshake(suite);
        let mut f = Forger::of(&r);
        // A renegotiation: refused with a warning, the connection goes on.
        let mut wire = f.seal(HANDSHAKE, &[CLIENT_HELLO, 0, 0, 2, 3, 3]);
        let (_, back, _) = server_reads(&mut r, &mut wire).unwrap();
        assert!(!back.is_empty(), "{suite:?}: the no_renegotiation warning");
        let mut wire = f.seal(APPLICATION_DATA, b"still here");
        assert_eq!(server_reads(&mut r, &mut wire).unwrap().0, b"still here");
        // The second is fatal.
        let wire = f.seal(HANDSHAKE, &[CLIENT_HELLO, 0, 0, 2, 3, 3]);
        assert_eq!(refused(&mut r, wire), UNEXPECTED_MESSAGE, "{suite:?}");
    }
    let cases: [(&str, u8, Vec<u8>, u8); 5] = [
        (
            "ChangeCipherSpec",
            CHANGE_CIPHER_SPEC,
            vec![1],
            UNEXPECTED_MESSAGE,
        ),
        (
            "a Finished",
            HANDSHAKE,
            vec![20, 0, 0, 0],
            UNEXPECTED_MESSAGE,
        ),
        ("an empty handshake", HANDSHAKE, vec![], UNEXPECTED_MESSAGE),
        ("a long alert", ALERT, vec![1, 0, 0], DECODE_ERROR),
        ("an alert of level 3", ALERT, vec![3, 0], ILLEGAL_PARAMETER),
    ];
    for (what, typ, body, alert) in cases {
        let (_, mut r) = handshake(TLS12[0]);
        let mut f = Forger::of(&r);
        let wire = f.seal(typ, &body);
        assert_eq!(refused(&mut r, wire), alert, "{what}");
    }
    // More than 16 KiB of plaintext in one record.
    for suite in TLS12 {
        let (_, mut r) = handshake(suite);
        let mut f = Forger::of(&r);
        let wire = f.seal(APPLICATION_DATA, &[7; MAX_PLAIN + 1]);
        assert_eq!(refused(&mut r, wire), RECORD_OVERFLOW, "{suite:?}");
    }
    // TLS 1.2 warnings are let by, four in a row.
    let (_, mut r) = handshake(TLS12[1]);
    let mut f = Forger::of(&r);
    for _ in 0..WARNINGS {
        let mut wire = f.seal(ALERT, &[1, 10]);
        server_reads(&mut r, &mut wire).unwrap();
    }
    assert_eq!(refused(&mut r, f.seal(ALERT, &[1, 10])), UNEXPECTED_MESSAGE);
}
