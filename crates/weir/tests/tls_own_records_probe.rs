//! Outside review probes of weir's own TLS record layer (`tls/records.rs`), used once a TLS
//! HTTP/1.1 connection has parked. A raw client: rustls (unbuffered) does the handshake and
//! hands its keys over (`dangerous_into_kernel_connection`), then this file seals and opens
//! records itself, so that it can send what rustls never would.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_lc_rs::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use common::parked::{metric, wait_parked};
use common::tlskit::Pki;
use common::TestServer;
use rustls::client::{ClientConnectionData, UnbufferedClientConnection};
use rustls::kernel::KernelConnection;
use rustls::pki_types::ServerName;
use rustls::unbuffered::ConnectionState;
use rustls::{ConnectionTrafficSecrets, ProtocolVersion, SupportedCipherSuite};

struct Env {
    pki: Pki,
    srv: TestServer,
    admin: SocketAddr,
    _root: PathBuf,
}

fn env(tag: &str, timeouts: &str) -> Env {
    let pki = Pki::new(&format!("own-{tag}"));
    let a = pki.issue("a", "a.example.test", &["a.example.test"]);
    let root = pki.dir.join("www");
    std::fs::create_dir_all(&root).unwrap();
    let big: Vec<u8> = (0..(4u32 << 20))
        .map(|i| (i * 7 + (i >> 11)) as u8)
        .collect();
    std::fs::write(root.join("big.bin"), &big).unwrap();
    let srv = common::start_config(&format!(
        r#"workers: 1
timeouts: {timeouts}
limits: {{ max_body_bytes: 64m }}
admin: {{ address: 127.0.0.1:0 }}
listeners:
  - address: 127.0.0.1:0
    tls:
      certificates: [{{ cert: '{}', key: '{}' }}]
    routes:
      - match: {{ path_prefix: /static/ }}
        static: {{ root: '{}' }}
      - respond: {{ body: "hi\n" }}
"#,
        a.cert.display(),
        a.key.display(),
        root.display(),
    ));
    let admin = srv.handle.as_ref().unwrap().admin_addr().unwrap();
    Env {
        pki,
        srv,
        admin,
        _root: root,
    }
}

/// `tlskit::suite_config` with secret extraction on: this client seals its own records.
fn suite_cfg(
    ca: &rustls::pki_types::CertificateDer<'static>,
    suite: SupportedCipherSuite,
) -> Arc<rustls::ClientConfig> {
    let mut cfg = (*common::tlskit::suite_config(ca, suite)).clone();
    cfg.enable_secret_extraction = true;
    Arc::new(cfg)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    T13,
    T12Gcm,
    T12Chacha,
}

struct Dir {
    alg: &'static aead::Algorithm,
    key: LessSafeKey,
    iv: [u8; 12],
    seq: u64,
}

impl Dir {
    fn new(seq: u64, s: ConnectionTrafficSecrets) -> Dir {
        let (alg, k, iv) = match s {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (&aead::AES_128_GCM, key, iv),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (&aead::AES_256_GCM, key, iv),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
                (&aead::CHACHA20_POLY1305, key, iv)
            }
            _ => panic!("suite"),
        };
        Dir {
            alg,
            key: LessSafeKey::new(UnboundKey::new(alg, k.as_ref()).unwrap()),
            iv: iv.as_ref().try_into().unwrap(),
            seq,
        }
    }
    fn nonce(&self) -> [u8; 12] {
        let mut n = self.iv;
        for (b, s) in n[4..].iter_mut().zip(self.seq.to_be_bytes()) {
            *b ^= s;
        }
        n
    }
}

/// What one record from the server held.
#[derive(Debug)]
pub enum Got {
    Data(Vec<u8>),
    Alert(u8, u8),
    KeyUpdate(u8),
    Handshake(Vec<u8>),
    Eof,
    Reset(String),
}

#[allow(missing_debug_implementations)]
pub struct Raw {
    pub tcp: TcpStream,
    kernel: KernelConnection<ClientConnectionData>,
    kind: Kind,
    tx: Dir,
    rx: Dir,
    inbuf: Vec<u8>,
    /// Key updates the server sent.
    pub server_kus: usize,
    pub seen: Vec<u8>,
}

fn aad12(seq: u64, typ: u8, len: usize) -> [u8; 13] {
    let mut a = [0u8; 13];
    a[..8].copy_from_slice(&seq.to_be_bytes());
    a[8] = typ;
    a[9] = 3;
    a[10] = 3;
    a[11..].copy_from_slice(&(len as u16).to_be_bytes());
    a
}

impl Raw {
    pub fn connect(addr: SocketAddr, cfg: &Arc<rustls::ClientConfig>) -> Raw {
        let (mut raw, last) = Raw::connect_holding_last_flight(addr, cfg);
        raw.send(&last).unwrap();
        raw
    }

    /// The handshake, with the client's last flight (its Finished) not yet sent: returned, so
    /// that a test sends it together with records of its own in one segment.
    pub fn connect_holding_last_flight(
        addr: SocketAddr,
        cfg: &Arc<rustls::ClientConfig>,
    ) -> (Raw, Vec<u8>) {
        let mut held = Vec::new();
        let mut tcp = TcpStream::connect(addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        tcp.set_nodelay(true).unwrap();
        let name = ServerName::try_from("a.example.test").unwrap();
        let mut conn = UnbufferedClientConnection::new(cfg.clone(), name).unwrap();
        let mut inc = vec![0u8; 65536];
        let mut filled = 0usize;
        let mut out = Vec::new();
        loop {
            let st = conn.process_tls_records(&mut inc[..filled]);
            let discard = st.discard;
            let mut done = false;
            let mut need_read = false;
            match st.state.unwrap() {
                ConnectionState::EncodeTlsData(mut e) => {
                    let mut buf = vec![0u8; 16384];
                    let n = e.encode(&mut buf).unwrap();
                    out.extend_from_slice(&buf[..n]);
                }
                ConnectionState::TransmitTlsData(t) => {
                    // Sent before the next read; the last flight is held for the caller.
                    held.append(&mut out);
                    t.done();
                }
                ConnectionState::BlockedHandshake => need_read = true,
                ConnectionState::WriteTraffic(_) => done = true,
                ConnectionState::ReadTraffic(mut r) => while r.next_record().is_some() {},
                other => panic!("handshake state {other:?}"),
            }
            if discard > 0 {
                inc.copy_within(discard..filled, 0);
                filled -= discard;
            }
            if done {
                break;
            }
            if need_read {
                tcp.write_all(&held).unwrap();
                held.clear();
                let n = tcp.read(&mut inc[filled..]).unwrap();
                assert!(n > 0, "eof in handshake");
                filled += n;
            }
        }
        let version = conn.protocol_version().unwrap();
        let (secrets, kernel) = conn.dangerous_into_kernel_connection().unwrap();
        let tx = Dir::new(secrets.tx.0, secrets.tx.1);
        let rx = Dir::new(secrets.rx.0, secrets.rx.1);
        let kind = match version {
            ProtocolVersion::TLSv1_3 => Kind::T13,
            _ if std::ptr::eq(tx.alg, &aead::CHACHA20_POLY1305) => Kind::T12Chacha,
            _ => Kind::T12Gcm,
        };
        (
            Raw {
                tcp,
                kernel,
                kind,
                tx,
                rx,
                inbuf: inc[..filled].to_vec(),
                server_kus: 0,
                seen: Vec::new(),
            },
            held,
        )
    }

    pub fn tls13(&self) -> bool {
        self.kind == Kind::T13
    }

    /// One record of type `typ` (TLS 1.3: the inner type, padded with `pad` zeros).
    pub fn seal(&mut self, typ: u8, data: &[u8], pad: usize) -> Vec<u8> {
        let nonce = self.tx.nonce();
        let seq = self.tx.seq;
        self.tx.seq += 1;
        match self.kind {
            Kind::T13 => {
                let mut inner = data.to_vec();
                inner.push(typ);
                inner.extend(std::iter::repeat_n(0u8, pad));
                let len = inner.len() + 16;
                let header = [23, 3, 3, (len >> 8) as u8, len as u8];
                self.tx
                    .key
                    .seal_in_place_append_tag(
                        Nonce::assume_unique_for_key(nonce),
                        Aad::from(header),
                        &mut inner,
                    )
                    .unwrap();
                let mut rec = header.to_vec();
                rec.extend(inner);
                rec
            }
            Kind::T12Gcm => {
                let mut body = data.to_vec();
                self.tx
                    .key
                    .seal_in_place_append_tag(
                        Nonce::assume_unique_for_key(nonce),
                        Aad::from(aad12(seq, typ, data.len())),
                        &mut body,
                    )
                    .unwrap();
                let len = body.len() + 8;
                let mut rec = vec![typ, 3, 3, (len >> 8) as u8, len as u8];
                rec.extend_from_slice(&nonce[4..]);
                rec.extend(body);
                rec
            }
            Kind::T12Chacha => {
                let mut body = data.to_vec();
                self.tx
                    .key
                    .seal_in_place_append_tag(
                        Nonce::assume_unique_for_key(nonce),
                        Aad::from(aad12(seq, typ, data.len())),
                        &mut body,
                    )
                    .unwrap();
                let len = body.len();
                let mut rec = vec![typ, 3, 3, (len >> 8) as u8, len as u8];
                rec.extend(body);
                rec
            }
        }
    }

    /// Application data in records of up to 16 KiB.
    pub fn data(&mut self, d: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        for c in d.chunks(16384) {
            v.extend(self.seal(23, c, 0));
        }
        v
    }

    /// Our KeyUpdate record (sealed under the current key), then the next send key.
    pub fn key_update(&mut self, requested: bool) -> Vec<u8> {
        let rec = self.seal(22, &[24, 0, 0, 1, requested as u8], 0);
        let (seq, s) = self.kernel.update_tx_secret().unwrap();
        self.tx = Dir::new(seq, s);
        rec
    }

    /// A KeyUpdate in two records, split after `at` bytes, then the next send key.
    pub fn key_update_split(&mut self, requested: bool, at: usize) -> Vec<u8> {
        let msg = [24, 0, 0, 1, requested as u8];
        let mut recs = self.seal(22, &msg[..at], 0);
        recs.extend(self.seal(22, &msg[at..], 0));
        let (seq, s) = self.kernel.update_tx_secret().unwrap();
        self.tx = Dir::new(seq, s);
        recs
    }

    pub fn send(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.tcp.write_all(b)
    }

    fn fill(&mut self) -> Option<Got> {
        let mut buf = [0u8; 65536];
        match self.tcp.read(&mut buf) {
            Ok(0) => Some(Got::Eof),
            Ok(n) => {
                self.inbuf.extend_from_slice(&buf[..n]);
                None
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut => {
                Some(Got::Reset("read timed out".into()))
            }
            Err(e) => Some(Got::Reset(e.to_string())),
        }
    }

    /// The next record from the server; key updates are applied (and returned).
    pub fn next_record(&mut self) -> Got {
        loop {
            if self.inbuf.len() >= 5 {
                let len = u16::from_be_bytes([self.inbuf[3], self.inbuf[4]]) as usize;
                if self.inbuf.len() >= 5 + len {
                    let rec: Vec<u8> = self.inbuf.drain(..5 + len).collect();
                    return self.open(rec);
                }
            }
            if let Some(g) = self.fill() {
                if !self.inbuf.is_empty() {
                    panic!("{g:?} with {} bytes of a record", self.inbuf.len());
                }
                return g;
            }
        }
    }

    fn open(&mut self, rec: Vec<u8>) -> Got {
        let typ = rec[0];
        let header: [u8; 5] = rec[..5].try_into().unwrap();
        let seq = self.rx.seq;
        let (inner, content) = match self.kind {
            Kind::T13 => {
                let mut body = rec[5..].to_vec();
                let n = self
                    .rx
                    .key
                    .open_in_place(
                        Nonce::assume_unique_for_key(self.rx.nonce()),
                        Aad::from(header),
                        &mut body,
                    )
                    .unwrap_or_else(|_| {
                        panic!("TLS 1.3 record {seq} (type {typ}) does not decrypt")
                    })
                    .len();
                body.truncate(n);
                while body.last() == Some(&0) {
                    body.pop();
                }
                let t = body.pop().unwrap();
                (t, body)
            }
            Kind::T12Gcm => {
                let mut nonce = [0u8; 12];
                nonce[..4].copy_from_slice(&self.rx.iv[..4]);
                nonce[4..].copy_from_slice(&rec[5..13]);
                let mut body = rec[13..].to_vec();
                let aad = aad12(seq, typ, body.len() - 16);
                let n = self
                    .rx
                    .key
                    .open_in_place(
                        Nonce::assume_unique_for_key(nonce),
                        Aad::from(aad),
                        &mut body,
                    )
                    .unwrap_or_else(|_| {
                        panic!("TLS 1.2 record {seq} (type {typ}) does not decrypt")
                    })
                    .len();
                body.truncate(n);
                (typ, body)
            }
            Kind::T12Chacha => {
                let mut body = rec[5..].to_vec();
                let aad = aad12(seq, typ, body.len() - 16);
                let n = self
                    .rx
                    .key
                    .open_in_place(
                        Nonce::assume_unique_for_key(self.rx.nonce()),
                        Aad::from(aad),
                        &mut body,
                    )
                    .unwrap_or_else(|_| {
                        panic!("TLS 1.2 record {seq} (type {typ}) does not decrypt")
                    })
                    .len();
                body.truncate(n);
                (typ, body)
            }
        };
        self.rx.seq += 1;
        match inner {
            23 => Got::Data(content),
            21 => Got::Alert(content[0], content[1]),
            22 if content[0] == 24 => {
                let (seq, s) = self.kernel.update_rx_secret().unwrap();
                self.rx = Dir::new(seq, s);
                self.server_kus += 1;
                Got::KeyUpdate(content[4])
            }
            22 => Got::Handshake(content),
            t => panic!("record type {t}"),
        }
    }

    /// The next HTTP response (head and content-length body), skipping key updates and
    /// session tickets: its status and body, or what ended the connection first.
    pub fn response(&mut self) -> Result<(u16, Vec<u8>), Got> {
        loop {
            if let Some(end) = find(&self.seen, b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&self.seen[..end]).to_string();
                let status: u16 = head[9..12].parse().unwrap();
                let len: usize = head
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("content-length")
                            .then(|| v.trim().parse().unwrap())
                    })
                    .unwrap_or(0);
                if self.seen.len() >= end + 4 + len {
                    let body = self.seen[end + 4..end + 4 + len].to_vec();
                    self.seen.drain(..end + 4 + len);
                    return Ok((status, body));
                }
            }
            match self.next_record() {
                Got::Data(d) => self.seen.extend(d),
                Got::KeyUpdate(_) | Got::Handshake(_) => {}
                other => return Err(other),
            }
        }
    }

    /// Reads until the connection ends: the alerts seen, and how it ended.
    pub fn until_end(&mut self) -> (Vec<(u8, u8)>, Got) {
        let mut alerts = Vec::new();
        loop {
            match self.next_record() {
                Got::Alert(l, d) => alerts.push((l, d)),
                Got::Data(_) | Got::KeyUpdate(_) | Got::Handshake(_) => {}
                end => return (alerts, end),
            }
        }
    }

    pub fn get(&mut self, path: &str) -> Result<(u16, Vec<u8>), Got> {
        let rec = self.data(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
        self.send(&rec).map_err(|e| Got::Reset(e.to_string()))?;
        self.response()
    }
}

fn find(h: &[u8], n: &[u8]) -> Option<usize> {
    h.windows(n.len()).position(|w| w == n)
}

use rustls::crypto::aws_lc_rs::cipher_suite as cs;
const SUITES: [SupportedCipherSuite; 6] = [
    cs::TLS13_AES_128_GCM_SHA256,
    cs::TLS13_AES_256_GCM_SHA384,
    cs::TLS13_CHACHA20_POLY1305_SHA256,
    cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
];

const PARKING: &str = "{ header: 2s, keepalive: 30s }";

/// A raw connection on `suite` that answered one request; parked (weir's records) when `park`.
fn ready(env: &Env, suite: SupportedCipherSuite, park: bool, _parked_before: f64) -> Raw {
    let before = metric(env.admin, "weir_connections_parked ");
    let mut c = Raw::connect(env.srv.addr, &suite_cfg(&env.pki.ca_der, suite));
    assert_eq!(c.get("/").unwrap(), (200, b"hi\n".to_vec()));
    if park {
        common::until("one more parked", Duration::from_secs(10), || {
            metric(env.admin, "weir_connections_parked ") >= before + 1.0
        });
    }
    c
}

fn rss() -> u64 {
    common::proc_status_bytes(std::process::id(), "VmRSS:")
}

/// Sanity: the raw client works on every suite, fresh and after parking, across parks.
#[test]
fn probe_raw_client_every_suite() {
    let env = env("sanity", PARKING);
    for suite in SUITES {
        for park in [false, true] {
            let mut c = ready(&env, suite, park, 0.0);
            if c.tls13() {
                let ku = c.key_update(true);
                c.send(&ku).unwrap();
            }
            assert_eq!(c.get("/").unwrap().0, 200, "{suite:?} park={park}");
            if park {
                wait_parked(env.admin, 1.0);
                assert_eq!(c.get("/").unwrap().0, 200, "{suite:?} second park");
            }
            drop(c);
            wait_parked(env.admin, 0.0);
        }
    }
}

/// A client that asks for a key update (update_requested) 32 times per body byte and never
/// reads: how many bytes weir queues for it, fresh (rustls) and after parking (records.rs).
#[test]
fn probe_key_update_requests_pile_up() {
    let env = env("kuflood", PARKING);
    let n: usize = std::env::var("PROBE_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    let mut kus = Vec::new();
    for park in [false, true] {
        let mut c = ready(&env, SUITES[0], park, 0.0);
        let head =
            c.data(format!("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {n}\r\n\r\n").as_bytes());
        c.send(&head).unwrap();
        // paces: the head taken in before the baseline RSS is read.
        std::thread::sleep(Duration::from_millis(100));
        let before = rss();
        let t = Instant::now();
        let mut sent = 0usize;
        let mut batch = Vec::new();
        for i in 0..n {
            for _ in 0..32 {
                batch.extend(c.key_update(true));
            }
            batch.extend(c.data(b"x"));
            if i % 64 == 63 || i == n - 1 {
                sent += batch.len();
                c.send(&batch).unwrap();
                batch.clear();
            }
        }
        // paces: the server takes in what was sent before RSS is read again.
        std::thread::sleep(Duration::from_millis(500));
        let after = rss();
        let took = t.elapsed();
        c.tcp
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let r = c.response();
        eprintln!(
            "park={park}: sent {} KiB ({} key update requests) in {took:?}; RSS {} -> {} KiB (+{} KiB); server sent {} key updates; response {:?}",
            sent / 1024,
            n * 32,
            before / 1024,
            after / 1024,
            (after as i64 - before as i64) / 1024,
            c.server_kus,
            r.as_ref().map(|r| r.0)
        );
        kus.push(c.server_kus);
        drop(c);
        wait_parked(env.admin, 0.0);
    }
    // rustls answers any number of requests with one KeyUpdate (it coalesces them), and so
    // does weir's own layer (it queued one per request, without bound, before the review).
    assert!(
        kus[1] <= 2 * kus[0].max(1),
        "after parking, {} KeyUpdates queued for {} requests (fresh: {})",
        kus[1],
        n * 32,
        kus[0]
    );
}

/// Records of the largest size and one byte more, on each suite, fresh and parked.
#[test]
fn probe_record_sizes() {
    let env = env("sizes", PARKING);
    let mut overflow_accepted = Vec::new();
    for suite in SUITES {
        for park in [false, true] {
            // TLS 1.3: 16 KiB of content padded to a 2^14 + 256 ciphertext: allowed.
            let mut c = ready(&env, suite, park, 0.0);
            let head = c.data(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 16384\r\n\r\n");
            let body = vec![b'y'; 16384];
            let max_pad = if c.tls13() {
                16384 + 256 - 16 - 1 - 16384
            } else {
                0
            };
            let rec = c.seal(23, &body, max_pad);
            eprintln!("{suite:?} park={park}: record of {} bytes", rec.len() - 5);
            c.send(&head).unwrap();
            c.send(&rec).unwrap();
            let r = c.response();
            eprintln!("  max -> {:?}", r.as_ref().map(|r| r.0));
            drop(c);
            // One more byte of padding (TLS 1.3), or of content.
            let mut c = ready(&env, suite, park, 0.0);
            let head = c.data(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 16385\r\n\r\n");
            let rec = if c.tls13() {
                c.seal(23, &body, max_pad + 1)
            } else {
                c.seal(23, &vec![b'y'; 16385], 0)
            };
            c.send(&head).unwrap();
            let _ = c.send(&rec);
            eprintln!("  max+1 ({} bytes) -> {:?}", rec.len() - 5, c.until_end());
            // TLS 1.3: 16385 bytes of content in a record within the ciphertext limit.
            let mut c = ready(&env, suite, park, 0.0);
            let head = c.data(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 16385\r\n\r\n");
            let rec = c.seal(23, &vec![b'y'; 16385], 0);
            c.send(&head).unwrap();
            let _ = c.send(&rec);
            eprintln!("  content 16385 -> {:?}", c.until_end());
            // TLS 1.3: content plus padding over 2^14 + 1 (inner plaintext limit, RFC 8446 5.4)
            if suite_is_13(suite) {
                let mut c = ready(&env, suite, park, 0.0);
                let rec = c.seal(23, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", 16384);
                c.send(&rec).unwrap();
                let r = c.response().map(|r| r.0);
                eprintln!("  inner plaintext over 2^14+1 -> {r:?}");
                overflow_accepted.push((suite, park, r.is_ok()));
            }
            wait_parked(env.admin, 0.0);
        }
    }
    // RFC 8446 5.4: the TLSInnerPlaintext (content, type and padding) is at most 2^14 + 1
    // bytes, else record_overflow; rustls enforces it, weir's own layer counts content only.
    let accepted: Vec<_> = overflow_accepted.iter().filter(|o| o.2).collect();
    assert!(
        accepted.is_empty(),
        "padded past 2^14 + 1 and accepted: {accepted:?}"
    );
}

fn suite_is_13(s: SupportedCipherSuite) -> bool {
    matches!(s, SupportedCipherSuite::Tls13(_))
}

/// Short and malformed records: every length from 0 to 40 with garbage, each on its own
/// connection, fresh and parked: an alert and a close, never a panic.
#[test]
fn probe_short_records() {
    let env = env("short", PARKING);
    for suite in [SUITES[0], SUITES[3], SUITES[5]] {
        for park in [false, true] {
            for len in [0usize, 1, 7, 8, 15, 16, 17, 23, 24, 25, 40] {
                let mut c = ready(&env, suite, park, 0.0);
                let mut rec = vec![23, 3, 3, 0, len as u8];
                rec.extend(std::iter::repeat_n(0xa5, len));
                c.send(&rec).unwrap();
                let (alerts, end) = c.until_end();
                eprintln!("{suite:?} park={park} len={len}: {alerts:?} {end:?}");
            }
            wait_parked(env.admin, 0.0);
        }
    }
    // The server is still there.
    let mut c = ready(&env, SUITES[0], false, 0.0);
    assert_eq!(c.get("/").unwrap().0, 200);
}

/// Empty application data records: many of them, then a request.
#[test]
fn probe_empty_records() {
    let env = env("empty", PARKING);
    let mut served = Vec::new();
    for suite in [SUITES[0], SUITES[3]] {
        for park in [false, true] {
            let mut c = ready(&env, suite, park, 0.0);
            let mut flight = Vec::new();
            for _ in 0..2_000 {
                flight.extend(c.seal(23, &[], 0));
            }
            flight.extend(c.data(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
            let t = Instant::now();
            let r = c.send(&flight);
            let got = c.response();
            eprintln!(
                "{suite:?} park={park}: {} KiB of empty records: send {:?}, {:?} in {:?}",
                flight.len() / 1024,
                r.map_err(|e| e.to_string()),
                got.as_ref().map(|r| r.0),
                t.elapsed()
            );
            served.push((suite, park, got.is_ok()));
            drop(c);
            wait_parked(env.admin, 0.0);
        }
    }
    // rustls cuts a connection after 32 empty records in a row
    // (ALLOWED_CONSECUTIVE_EMPTY_FRAGMENTS_MAX), and so does weir's own layer (it opened any
    // number before the review).
    let taken: Vec<_> = served.iter().filter(|s| s.2).collect();
    assert!(
        taken.is_empty(),
        "2,000 empty records in a row accepted: {taken:?}"
    );
}

/// Key updates asked for at every place of a flight, during a download and an upload.
#[test]
fn probe_key_update_placement() {
    let env = env("kuplace", PARKING);
    for suite in [SUITES[0], SUITES[1], SUITES[2]] {
        for park in [false, true] {
            let mut c = ready(&env, suite, park, 0.0);
            let req = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
            // KU, KU, request, KU, request in one flight.
            let mut f = c.key_update(true);
            f.extend(c.key_update(true));
            f.extend(c.data(req));
            f.extend(c.key_update(true));
            f.extend(c.data(req));
            c.send(&f).unwrap();
            let a = c.response();
            let b = c.response();
            eprintln!(
                "{suite:?} park={park}: flight -> {:?} {:?} ({} KUs)",
                a.map(|r| r.0),
                b.map(|r| r.0),
                c.server_kus
            );
            // A key update asked for in the middle of a 4 MiB download, with the next request.
            let rec = c.data(b"GET /static/big.bin HTTP/1.1\r\nHost: x\r\n\r\n");
            c.send(&rec).unwrap();
            let mut got = 0;
            while got < 200_000 {
                match c.next_record() {
                    Got::Data(d) => {
                        c.seen.extend(&d);
                        got += d.len()
                    }
                    Got::KeyUpdate(_) => {}
                    other => panic!("{other:?}"),
                }
            }
            let mut f = c.key_update(true);
            f.extend(c.data(req));
            c.send(&f).unwrap();
            let big = c.response();
            let next = c.response();
            eprintln!(
                "  download -> {:?} then {:?} ({} KUs)",
                big.map(|r| (r.0, r.1.len())),
                next.map(|r| r.0),
                c.server_kus
            );
            // An upload with key updates asked for every 1000 bytes, never reading meanwhile.
            let n = 2_000_000;
            let mut f = c.data(
                format!("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {n}\r\n\r\n").as_bytes(),
            );
            let chunk = vec![b'z'; 1000];
            for _ in 0..n / 1000 {
                f.extend(c.data(&chunk));
                f.extend(c.key_update(true));
            }
            c.send(&f).unwrap();
            eprintln!(
                "  upload -> {:?} ({} KUs)",
                c.response().map(|r| r.0),
                c.server_kus
            );
            if park {
                wait_parked(env.admin, 1.0);
                eprintln!("  parked again -> {:?}", c.get("/").map(|r| r.0));
            }
            drop(c);
            wait_parked(env.admin, 0.0);
        }
    }
}

/// Alerts: user_canceled and warnings up to the limit and over it, a fatal alert,
/// close_notify followed by data, CCS and plaintext.
#[test]
fn probe_alerts_and_plaintext() {
    let env = env("alerts", PARKING);
    for suite in [SUITES[0], SUITES[3]] {
        for park in [false, true] {
            let mut c = ready(&env, suite, park, 0.0);
            let mut f = Vec::new();
            for _ in 0..4 {
                f.extend(c.seal(21, &[1, 90], 0));
            }
            f.extend(c.data(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
            c.send(&f).unwrap();
            eprintln!(
                "{suite:?} park={park}: 4 user_canceled -> {:?}",
                c.response().map(|r| r.0)
            );
            // The 5th over the connection's life (rustls does not reset this either).
            let mut f = c.seal(21, &[1, 90], 0);
            f.extend(c.data(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
            c.send(&f).unwrap();
            eprintln!("  5th user_canceled -> {:?}", c.until_end());
            // Request, then close_notify and more data in one flight.
            let mut c = ready(&env, suite, park, 0.0);
            let mut f = c.data(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
            f.extend(c.seal(21, &[1, 0], 0));
            f.extend(c.data(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
            c.send(&f).unwrap();
            eprintln!(
                "  req+close_notify+req -> {:?} then {:?}",
                c.response().map(|r| r.0),
                c.until_end()
            );
            // A fatal alert.
            let mut c = ready(&env, suite, park, 0.0);
            let f = c.seal(21, &[2, 40], 0);
            c.send(&f).unwrap();
            eprintln!("  fatal -> {:?}", c.until_end());
            // A warning other than user_canceled.
            let mut c = ready(&env, suite, park, 0.0);
            let mut f = c.seal(21, &[1, 100], 0);
            f.extend(c.data(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
            c.send(&f).unwrap();
            eprintln!("  warning 100 + req -> {:?}", c.response().map(|r| r.0));
            // Two alerts in one record.
            let mut c = ready(&env, suite, park, 0.0);
            let f = c.seal(21, &[1, 90, 1, 90], 0);
            c.send(&f).unwrap();
            eprintln!("  two alerts in a record -> {:?}", c.until_end());
            // CCS and plaintext.
            for (what, rec) in [
                ("ccs", vec![20u8, 3, 3, 0, 1, 1]),
                ("plain alert", vec![21, 3, 3, 0, 2, 1, 0]),
                ("plain handshake", vec![22, 3, 3, 0, 4, 24, 0, 0, 0]),
                ("version 3.4", vec![23, 3, 4, 0, 3, 1, 2, 3]),
            ] {
                let mut c = ready(&env, suite, park, 0.0);
                c.send(&rec).unwrap();
                eprintln!("  {what} -> {:?}", c.until_end());
            }
            // Half-close after a request: the response still comes.
            let mut c = ready(&env, suite, park, 0.0);
            let f = c.data(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
            c.send(&f).unwrap();
            c.tcp.shutdown(std::net::Shutdown::Write).unwrap();
            eprintln!(
                "  request + FIN -> {:?} then {:?}",
                c.response().map(|r| r.0),
                c.until_end()
            );
        }
    }
}

/// TLS 1.2: renegotiation attempts (a ClientHello in a record of its own), and handshake
/// messages split or joined.
#[test]
fn probe_tls12_handshakes() {
    let env = env("tls12hs", PARKING);
    for suite in [SUITES[3], SUITES[5]] {
        for park in [false, true] {
            let hello = [1u8, 0, 0, 2, 3, 3];
            let mut c = ready(&env, suite, park, 0.0);
            let mut f = c.seal(22, &hello, 0);
            f.extend(c.data(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
            c.send(&f).unwrap();
            let mut alerts = Vec::new();
            let r = loop {
                match c.next_record() {
                    Got::Alert(l, d) => alerts.push((l, d)),
                    Got::Data(d) => {
                        c.seen.extend(d);
                        break c.response();
                    }
                    other => break Err(other),
                }
            };
            eprintln!(
                "{suite:?} park={park}: renegotiation 1 -> {alerts:?} {:?}",
                r.map(|r| r.0)
            );
            let f = c.seal(22, &hello, 0);
            c.send(&f).unwrap();
            eprintln!("  renegotiation 2 -> {:?}", c.until_end());
            let mut c = ready(&env, suite, park, 0.0);
            let f = c.seal(22, &[1, 0, 0], 0);
            c.send(&f).unwrap();
            eprintln!("  3-byte handshake -> {:?}", c.until_end());
            wait_parked(env.admin, 0.0);
        }
    }
}

/// Issue 52 (audit of the record layer): a KeyUpdate(update_requested) in the same segment as
/// the client's Finished, with session tickets off. rustls processed both in the call that
/// completed the handshake, whose bytes were not counted as read since the last write, so the
/// connection parked with rustls' KeyUpdate owed and its send key already moved on: the
/// client, never told, failed on bad MACs. Now the connection answers, and keeps answering
/// across a park.
#[test]
fn a_key_update_with_the_finished_survives_the_hand_off() {
    let pki = Pki::new("own-ku-finished");
    let a = pki.issue("a", "a.example.test", &["a.example.test"]);
    let srv = common::start_config(&format!(
        r#"workers: 1
timeouts: {PARKING}
admin: {{ address: 127.0.0.1:0 }}
listeners:
  - address: 127.0.0.1:0
    tls:
      session_tickets: false
      certificates: [{{ cert: '{}', key: '{}' }}]
    routes:
      - respond: {{ body: "hi\n" }}
"#,
        a.cert.display(),
        a.key.display(),
    ));
    let admin = srv.handle.as_ref().unwrap().admin_addr().unwrap();
    for suite in [SUITES[0], SUITES[1], SUITES[2]] {
        // The previous suite's connection, closed, is no longer parked.
        wait_parked(admin, 0.0);
        let before = 0.0;
        let (mut c, finished) =
            Raw::connect_holding_last_flight(srv.addr, &suite_cfg(&pki.ca_der, suite));
        let mut flight = finished;
        flight.extend(c.key_update(true));
        c.send(&flight).unwrap();
        // Where it went wrong: the connection parked while it owed the KeyUpdate. Give it the
        // time it took (the park came within a second of quiet; the header timeout is 2 s).
        let quiet = Instant::now();
        while quiet.elapsed() < Duration::from_millis(1500)
            && metric(admin, "weir_connections_parked ") < before + 1.0
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(c.get("/").unwrap(), (200, b"hi\n".to_vec()), "{suite:?}");
        assert_eq!(c.server_kus, 1, "{suite:?}: the KeyUpdate asked for came");
        wait_parked(admin, before + 1.0);
        assert_eq!(
            c.get("/").unwrap(),
            (200, b"hi\n".to_vec()),
            "{suite:?} parked"
        );
    }
}

/// Issue 52 (audit): a KeyUpdate split across two records, on a parked (own records) and a
/// fresh (rustls) connection: the next request is answered under the new key, with the
/// KeyUpdate asked for. Refused before on parked connections ("fragmented TLS handshake
/// message").
#[test]
fn a_key_update_split_across_records_is_taken() {
    let env = env("kusplit", PARKING);
    for park in [false, true] {
        for at in [1, 3, 4] {
            let mut c = ready(&env, SUITES[0], park, 0.0);
            let mut f = c.key_update_split(true, at);
            f.extend(c.data(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
            c.send(&f).unwrap();
            let r = c.response();
            assert_eq!(r.map(|r| r.0).ok(), Some(200), "park={park} at={at}");
            assert_eq!(c.server_kus, 1, "park={park} at={at}");
        }
    }
}

/// The next record that is not a KeyUpdate, within `within`.
fn next_non_ku(c: &mut Raw, within: Duration) -> Got {
    c.tcp.set_read_timeout(Some(within)).unwrap();
    loop {
        match c.next_record() {
            Got::KeyUpdate(_) => {}
            other => return other,
        }
    }
}

/// Issue 52 (audit): a TLS connection ends with `close_notify` whoever ends it. The client's
/// own `close_notify` is answered with weir's, on a parked and on a fresh connection; a parked
/// connection closed at the keep-alive timeout says `close_notify` before its FIN. Before,
/// each ended with a bare FIN.
#[test]
fn tls_connections_end_with_close_notify() {
    let env = env("closes", "{ header: 2s, keepalive: 4s }");
    for suite in [SUITES[0], SUITES[3]] {
        for park in [false, true] {
            let mut c = ready(&env, suite, park, 0.0);
            let alert = c.seal(21, &[1, 0], 0);
            c.send(&alert).unwrap();
            let got = next_non_ku(&mut c, Duration::from_secs(5));
            assert!(
                matches!(got, Got::Alert(1, 0)),
                "{suite:?} park={park}: the client's close_notify answered with {got:?}"
            );
        }
        // Left parked until the keep-alive timeout closes it.
        let mut c = ready(&env, suite, true, 0.0);
        let got = next_non_ku(&mut c, Duration::from_secs(10));
        assert!(
            matches!(got, Got::Alert(1, 0)),
            "{suite:?}: closed at the keep-alive timeout with {got:?}"
        );
        assert!(matches!(
            next_non_ku(&mut c, Duration::from_secs(5)),
            Got::Eof
        ));
    }
}

/// Issue 52 (audit): a lone KeyUpdate while idle keeps the keep-alive deadline. With
/// `keepalive: 3s` and `header: 20s`, a KeyUpdate sent while the connection waits (in its task,
/// or parked) does not turn the wait into a header wait: the connection still closes about 3 s
/// after its last answer (with close_notify), not 20 s after the KeyUpdate.
#[test]
fn a_lone_key_update_keeps_the_keep_alive_deadline() {
    let env = env("kukeep", "{ header: 20s, keepalive: 3s }");
    for (park, after) in [(false, 300u64), (true, 0)] {
        // The answer comes within milliseconds of this; `ready` then waits for the park.
        let answered = Instant::now();
        let mut c = ready(&env, SUITES[0], park, 0.0);
        // paces: idle `after` ms before the KeyUpdate.
        std::thread::sleep(Duration::from_millis(after));
        let ku = c.key_update(false);
        c.send(&ku).unwrap();
        let got = next_non_ku(&mut c, Duration::from_secs(15));
        let closed = answered.elapsed();
        assert!(
            matches!(got, Got::Alert(1, 0)),
            "park={park}: {got:?} after {closed:?}"
        );
        assert!(
            closed >= Duration::from_millis(2500) && closed < Duration::from_millis(5500),
            "park={park}: closed {closed:?} after the last answer (keepalive 3 s)"
        );
    }
}
