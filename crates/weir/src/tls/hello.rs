//! The server name (and ALPN) a TLS client asks for, read from its ClientHello: without
//! terminating TLS (routing by SNI in passthrough, Traefik's `HostSNI`, HAProxy's
//! `req.ssl_sni`), and before a handshake weir terminates (`tls/stream.rs`: rustls' unbuffered
//! connection does not expose the name; on-demand certificates wait on it).
//!
//! Written by hand rather than with a TLS parser crate: it reads the few fields in front of the
//! `server_name` extension (RFC 8446 §4.1.2, RFC 6066 §3) from bytes the kernel still holds
//! (`MSG_PEEK`), so what the upstream server receives is the client's ClientHello untouched.
//! A ClientHello split over several records is joined (post-quantum key shares make it larger
//! than one segment on the Internet).

/// What the bytes received so far say.
#[derive(Debug, PartialEq, Eq)]
pub enum Hello {
    /// Not a whole ClientHello yet: read more.
    Incomplete,
    /// Not TLS (or not a ClientHello): route as without a name.
    NotTls,
    /// A whole ClientHello: the name it asks for (lowercase, without a trailing dot), if any.
    Done(Option<String>),
}

/// TLS record type of handshake messages.
const HANDSHAKE: u8 = 0x16;
/// Handshake message type of a ClientHello.
const CLIENT_HELLO: u8 = 0x01;
/// The largest ClientHello read: larger ones are routed as without a name.
pub const MAX_HELLO: usize = 16 * 1024;

/// Reads the server name out of the start of a TLS connection.
pub fn parse(bytes: &[u8]) -> Hello {
    match scan(bytes, MAX_HELLO) {
        Scan::Incomplete => Hello::Incomplete,
        Scan::NotTls => Hello::NotTls,
        Scan::Done(fields) => Hello::Done(fields.and_then(|f| f.name)),
    }
}

/// What a whole ClientHello asks for: the fields weir reads before a handshake.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Fields {
    /// The `server_name` host name (lowercase, without a trailing dot), if any.
    pub name: Option<String>,
    /// The ALPN protocols offered, in the client's order.
    pub alpn: Vec<Vec<u8>>,
}

/// What the bytes received so far say, with the fields of a whole ClientHello.
#[derive(Debug, PartialEq, Eq)]
pub enum Scan {
    /// Not a whole ClientHello yet: read more.
    Incomplete,
    /// Not TLS (or not a ClientHello).
    NotTls,
    /// A whole ClientHello: its fields, `None` when it is larger than the limit or malformed.
    Done(Option<Fields>),
}

/// Reads the fields of the ClientHello at the start of `bytes`; one whose body is over `max`
/// bytes is `Done(None)`.
pub fn scan(bytes: &[u8], max: usize) -> Scan {
    // The handshake layer's bytes, joined across records.
    let mut hs: Vec<u8> = Vec::new();
    let mut rest = bytes;
    loop {
        if rest.is_empty() {
            return Scan::Incomplete;
        }
        if rest[0] != HANDSHAKE {
            return Scan::NotTls;
        }
        if rest.len() < 5 {
            return Scan::Incomplete;
        }
        // Record versions are 3.x (SSL 3.0 through TLS 1.3's legacy 3.1/3.3).
        if rest[1] != 3 {
            return Scan::NotTls;
        }
        let len = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
        // rustls' own bound (`MAX_PAYLOAD`, 16 KiB + 2 KiB): a longer record is refused there,
        // any shorter one it reads, so the name read here is the one it uses.
        if len == 0 || len > 16 * 1024 + 2048 - 1 {
            return Scan::NotTls;
        }
        if rest.len() < 5 + len {
            return Scan::Incomplete;
        }
        hs.extend_from_slice(&rest[5..5 + len]);
        rest = &rest[5 + len..];
        if hs.len() < 4 {
            continue;
        }
        if hs[0] != CLIENT_HELLO {
            return Scan::NotTls;
        }
        let body = (usize::from(hs[1]) << 16) | (usize::from(hs[2]) << 8) | usize::from(hs[3]);
        if body > max {
            return Scan::Done(None);
        }
        if hs.len() >= 4 + body {
            return Scan::Done(fields(&hs[4..4 + body]));
        }
    }
}

/// A cursor over a ClientHello's body; every read fails (`None`) past its end.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }

    fn u8(&mut self) -> Option<usize> {
        self.take(1).map(|b| usize::from(b[0]))
    }

    fn u16(&mut self) -> Option<usize> {
        self.take(2)
            .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
    }
}

/// The fields of a ClientHello body; `None` when it is malformed.
fn fields(body: &[u8]) -> Option<Fields> {
    let mut c = Cursor(body);
    c.take(2 + 32)?; // legacy_version, random
    let n = c.u8()?;
    c.take(n)?; // legacy_session_id
    let n = c.u16()?;
    c.take(n)?; // cipher_suites
    let n = c.u8()?;
    c.take(n)?; // legacy_compression_methods
    let n = c.u16()?;
    let mut ext = Cursor(c.take(n)?);
    let mut out = Fields::default();
    while !ext.0.is_empty() {
        let kind = ext.u16()?;
        let n = ext.u16()?;
        let data = ext.take(n)?;
        match kind {
            0 => {
                let mut list = Cursor(data);
                let n = list.u16()?;
                let mut names = Cursor(list.take(n)?);
                while !names.0.is_empty() {
                    let name_type = names.u8()?;
                    let n = names.u16()?;
                    let name = names.take(n)?;
                    if name_type == 0 {
                        out.name = host_name(name);
                        break;
                    }
                }
            }
            16 => {
                let mut list = Cursor(data);
                let n = list.u16()?;
                let mut protocols = Cursor(list.take(n)?);
                while !protocols.0.is_empty() {
                    let n = protocols.u8()?;
                    out.alpn.push(protocols.take(n)?.to_vec());
                }
            }
            _ => {}
        }
    }
    Some(out)
}

/// A host name as routes compare it: ASCII letters, digits, `-`, `_` and dots, lowercased,
/// without a trailing dot; anything else is no name.
fn host_name(name: &[u8]) -> Option<String> {
    let name = name.strip_suffix(b".").unwrap_or(name);
    if name.is_empty()
        || name.len() > 253
        || !name
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return None;
    }
    Some(String::from_utf8_lossy(name).to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello body with `extensions` (type, data) and `session` id bytes.
    fn hello_body(extensions: &[(u16, Vec<u8>)], session: usize) -> Vec<u8> {
        let mut b = vec![3, 3];
        b.extend([7u8; 32]);
        b.push(session as u8);
        b.extend(vec![1u8; session]);
        b.extend([0, 4, 0x13, 0x01, 0x13, 0x02]); // two cipher suites
        b.extend([1, 0]); // null compression
        let mut ext = Vec::new();
        for (kind, data) in extensions {
            ext.extend(kind.to_be_bytes());
            ext.extend((data.len() as u16).to_be_bytes());
            ext.extend(data);
        }
        b.extend((ext.len() as u16).to_be_bytes());
        b.extend(ext);
        b
    }

    fn sni_ext(name: &[u8]) -> (u16, Vec<u8>) {
        let mut entry = vec![0u8];
        entry.extend((name.len() as u16).to_be_bytes());
        entry.extend(name);
        let mut d = (entry.len() as u16).to_be_bytes().to_vec();
        d.extend(entry);
        (0, d)
    }

    /// The body as a handshake message in records of at most `chunk` bytes.
    fn records(body: &[u8], chunk: usize) -> Vec<u8> {
        let mut hs = vec![CLIENT_HELLO];
        hs.extend(&(body.len() as u32).to_be_bytes()[1..]);
        hs.extend(body);
        let mut out = Vec::new();
        for part in hs.chunks(chunk) {
            out.extend([HANDSHAKE, 3, 1]);
            out.extend((part.len() as u16).to_be_bytes());
            out.extend(part);
        }
        out
    }

    #[test]
    fn names_are_read_from_whole_hellos_and_joined_records() {
        let alpn = (16u16, vec![0, 3, 2, b'h', b'2']);
        let cases: Vec<(&str, Vec<u8>, Hello)> = vec![
            (
                "one record",
                records(
                    &hello_body(&[alpn.clone(), sni_ext(b"DB.Example.")], 32),
                    16384,
                ),
                Hello::Done(Some("db.example".into())),
            ),
            (
                "split over records of 40 bytes",
                records(&hello_body(&[sni_ext(b"a.example")], 0), 40),
                Hello::Done(Some("a.example".into())),
            ),
            (
                "no server_name extension",
                records(&hello_body(std::slice::from_ref(&alpn), 0), 16384),
                Hello::Done(None),
            ),
            (
                "a name with a space is no name",
                records(&hello_body(&[sni_ext(b"a b")], 0), 16384),
                Hello::Done(None),
            ),
            (
                "an extension longer than the hello",
                {
                    let mut b = hello_body(&[sni_ext(b"a.example")], 0);
                    // The extensions' length, in front of the 18 bytes of the one extension.
                    let n = b.len();
                    b[n - 20] = 0xff;
                    records(&b, 16384)
                },
                Hello::Done(None),
            ),
            ("HTTP", b"GET / HTTP/1.1\r\n".to_vec(), Hello::NotTls),
            (
                "an alert record",
                vec![0x15, 3, 3, 0, 2, 2, 40],
                Hello::NotTls,
            ),
            ("empty", Vec::new(), Hello::Incomplete),
        ];
        for (what, bytes, want) in cases {
            assert_eq!(parse(&bytes), want, "{what}");
        }
    }

    #[test]
    fn every_prefix_of_a_hello_asks_for_more() {
        let whole = records(&hello_body(&[sni_ext(b"a.example")], 32), 50);
        for n in 0..whole.len() {
            assert_eq!(parse(&whole[..n]), Hello::Incomplete, "prefix of {n}");
        }
        assert_eq!(parse(&whole), Hello::Done(Some("a.example".into())));
    }
}
