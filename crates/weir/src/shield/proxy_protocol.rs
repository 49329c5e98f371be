//! The PROXY protocol, versions 1 (text) and 2 (binary), as HAProxy specifies it: an L4 load
//! balancer's first bytes name the client it connected for. Parsed from bytes peeked at (not
//! read), so the caller consumes exactly the header and the stream after it (HTTP or TLS) is
//! untouched. A `LOCAL` (v2) or `UNKNOWN` (v1) header, a load balancer's own health check,
//! names no client: the connection keeps its peer address.
//!
//! Only listeners with `proxy_protocol: {trusted: [...]}` parse it, and only from those sources:
//! anyone else could name any address (`server/proxied.rs` refuses them in the accept loop).
//!
//! [`encode`] writes one, for TCP listeners with `send_proxy` (`tcp/connect.rs`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The v2 signature.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// The longest v1 header (the spec's 107 bytes) and the most peeked at once.
const V1_MAX: usize = 107;
/// Most bytes a header may take (v2: 16 + addresses + TLVs, capped here).
pub const MAX: usize = 536;

/// What the peeked bytes hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// A valid start; more bytes are needed.
    Incomplete,
    /// A whole header of `len` bytes, naming `client` (`None`: LOCAL / UNKNOWN).
    Done {
        len: usize,
        client: Option<SocketAddr>,
    },
}

/// The header naming `client` connected to `local`: version 1 (text) or 2 (binary). Mixed
/// families are written as IPv6, the IPv4 address mapped (`::ffff:a.b.c.d`).
///
/// A client without an address (a unix socket's, `runtime::UNIX_PEER`) is sent as v1
/// `UNKNOWN` or a v2 `LOCAL` header, as HAProxy does for such connections: the server uses the
/// connection's own address, and no invented IPv4 client reaches it.
pub fn encode(v2: bool, client: SocketAddr, local: SocketAddr) -> Vec<u8> {
    if client.ip().is_unspecified() {
        if !v2 {
            return b"PROXY UNKNOWN\r\n".to_vec();
        }
        let mut out = V2_SIGNATURE.to_vec();
        out.extend_from_slice(&[0x20, 0x00, 0x00, 0x00]); // version 2, LOCAL, UNSPEC, no addresses
        return out;
    }
    let (src, dst) = match (client.ip(), local.ip()) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (IpAddr::V4(a), IpAddr::V4(b)),
        (a, b) => (IpAddr::V6(v6(a)), IpAddr::V6(v6(b))),
    };
    if !v2 {
        let family = if src.is_ipv4() { "TCP4" } else { "TCP6" };
        return format!(
            "PROXY {family} {src} {dst} {} {}\r\n",
            client.port(),
            local.port()
        )
        .into_bytes();
    }
    let mut out = Vec::with_capacity(16 + 36);
    out.extend_from_slice(&V2_SIGNATURE);
    out.push(0x21); // version 2, PROXY
    match (src, dst) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            out.push(0x11); // TCP over IPv4
            out.extend_from_slice(&12u16.to_be_bytes());
            out.extend_from_slice(&a.octets());
            out.extend_from_slice(&b.octets());
        }
        (a, b) => {
            out.push(0x21); // TCP over IPv6
            out.extend_from_slice(&36u16.to_be_bytes());
            out.extend_from_slice(&v6(a).octets());
            out.extend_from_slice(&v6(b).octets());
        }
    }
    out.extend_from_slice(&client.port().to_be_bytes());
    out.extend_from_slice(&local.port().to_be_bytes());
    out
}

fn v6(a: IpAddr) -> Ipv6Addr {
    match a {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

/// Parses a PROXY header at the start of `b`; `Err` names what is wrong.
pub fn parse(b: &[u8]) -> Result<Parsed, &'static str> {
    if b.is_empty() {
        return Ok(Parsed::Incomplete);
    }
    if b[0] == b'\r' {
        return parse_v2(b);
    }
    if b[0] == b'P' {
        return parse_v1(b);
    }
    Err("no PROXY protocol header")
}

fn parse_v1(b: &[u8]) -> Result<Parsed, &'static str> {
    let prefix = b"PROXY ";
    let n = b.len().min(prefix.len());
    if b[..n] != prefix[..n] {
        return Err("no PROXY protocol header");
    }
    let Some(end) = b.windows(2).take(V1_MAX - 1).position(|w| w == b"\r\n") else {
        return if b.len() >= V1_MAX {
            Err("PROXY v1 header longer than 107 bytes")
        } else {
            Ok(Parsed::Incomplete)
        };
    };
    let line = std::str::from_utf8(&b[prefix.len()..end]).map_err(|_| "PROXY v1: not ASCII")?;
    let mut parts = line.split(' ');
    let family = parts.next().unwrap_or("");
    let len = end + 2;
    if family == "UNKNOWN" {
        return Ok(Parsed::Done { len, client: None });
    }
    let fields: Vec<&str> = parts.collect();
    let [src, _dst, sport, _dport] = fields[..] else {
        return Err("PROXY v1: expected 4 fields after the family");
    };
    let ip: IpAddr = match family {
        "TCP4" => IpAddr::V4(src.parse::<Ipv4Addr>().map_err(|_| "PROXY v1: bad IPv4")?),
        "TCP6" => IpAddr::V6(src.parse::<Ipv6Addr>().map_err(|_| "PROXY v1: bad IPv6")?),
        _ => return Err("PROXY v1: unknown family"),
    };
    let port = sport.parse::<u16>().map_err(|_| "PROXY v1: bad port")?;
    Ok(Parsed::Done {
        len,
        client: named(SocketAddr::new(ip, port)),
    })
}

fn parse_v2(b: &[u8]) -> Result<Parsed, &'static str> {
    let n = b.len().min(V2_SIGNATURE.len());
    if b[..n] != V2_SIGNATURE[..n] {
        return Err("no PROXY protocol header");
    }
    if b.len() < 16 {
        return Ok(Parsed::Incomplete);
    }
    let (ver_cmd, family) = (b[12], b[13]);
    if ver_cmd >> 4 != 2 {
        return Err("PROXY v2: unknown version");
    }
    let body = usize::from(u16::from_be_bytes([b[14], b[15]]));
    let len = 16 + body;
    if len > MAX {
        return Err("PROXY v2: header too long");
    }
    if b.len() < len {
        return Ok(Parsed::Incomplete);
    }
    let a = &b[16..len];
    match ver_cmd & 0x0f {
        // LOCAL: the balancer's own connection.
        0 => return Ok(Parsed::Done { len, client: None }),
        1 => {}
        _ => return Err("PROXY v2: unknown command"),
    }
    let client = match family {
        // TCP or UDP over IPv4.
        0x11 | 0x12 if a.len() >= 12 => {
            let ip = Ipv4Addr::new(a[0], a[1], a[2], a[3]);
            Some(SocketAddr::new(ip.into(), u16::from_be_bytes([a[8], a[9]])))
        }
        0x21 | 0x22 if a.len() >= 36 => {
            let mut o = [0u8; 16];
            o.copy_from_slice(&a[..16]);
            Some(SocketAddr::new(
                Ipv6Addr::from(o).into(),
                u16::from_be_bytes([a[32], a[33]]),
            ))
        }
        // UNSPEC or a unix socket: no address to use.
        0x00 | 0x31 | 0x32 => None,
        _ => return Err("PROXY v2: bad address block"),
    };
    Ok(Parsed::Done {
        len,
        client: client.and_then(named),
    })
}

/// A header's source as the client, unless it is the unspecified address: no TCP client has
/// it, and weir writes its unix socket clients so (`runtime::UNIX_PEER`), so it is read as a
/// header naming nobody (the connection's own peer stands).
fn named(client: SocketAddr) -> Option<SocketAddr> {
    (!client.ip().is_unspecified()).then_some(client)
}

/// A v1 header for `client` → `server` (tests, `bench/ddos.sh`).
pub fn v1(client: SocketAddr, server: SocketAddr) -> String {
    let fam = if client.is_ipv4() { "TCP4" } else { "TCP6" };
    format!(
        "PROXY {fam} {} {} {} {}\r\n",
        client.ip(),
        server.ip(),
        client.port(),
        server.port()
    )
}

/// A v2 header for `client` → `server` (both the same family), with `tlvs` appended.
pub fn v2(client: SocketAddr, server: SocketAddr, tlvs: &[u8]) -> Vec<u8> {
    let mut out = V2_SIGNATURE.to_vec();
    out.push(0x21);
    let mut addrs = Vec::new();
    match (client.ip(), server.ip()) {
        (IpAddr::V4(c), IpAddr::V4(s)) => {
            out.push(0x11);
            addrs.extend_from_slice(&c.octets());
            addrs.extend_from_slice(&s.octets());
        }
        (c, s) => {
            out.push(0x21);
            let six = |ip: IpAddr| match ip {
                IpAddr::V4(v) => v.to_ipv6_mapped().octets(),
                IpAddr::V6(v) => v.octets(),
            };
            addrs.extend_from_slice(&six(c));
            addrs.extend_from_slice(&six(s));
        }
    }
    addrs.extend_from_slice(&client.port().to_be_bytes());
    addrs.extend_from_slice(&server.port().to_be_bytes());
    addrs.extend_from_slice(tlvs);
    out.extend_from_slice(&(addrs.len() as u16).to_be_bytes());
    out.extend_from_slice(&addrs);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn v1_headers() {
        let cases: &[(&[u8], Result<Parsed, &str>)] = &[
            (
                b"PROXY TCP4 192.0.2.7 10.0.0.1 5555 80\r\nGET /",
                Ok(Parsed::Done {
                    len: 39,
                    client: Some(sa("192.0.2.7:5555")),
                }),
            ),
            (
                b"PROXY TCP6 2001:db8::7 2001:db8::1 5555 443\r\n",
                Ok(Parsed::Done {
                    len: 45,
                    client: Some(sa("[2001:db8::7]:5555")),
                }),
            ),
            (
                b"PROXY UNKNOWN\r\n",
                Ok(Parsed::Done {
                    len: 15,
                    client: None,
                }),
            ),
            (b"PROXY TCP4 192.0.2.7 10.0", Ok(Parsed::Incomplete)),
            (b"PRO", Ok(Parsed::Incomplete)),
            (b"GET / HTTP/1.1\r\n", Err("no PROXY protocol header")),
            (
                b"PROXY TCP4 300.0.2.7 10.0.0.1 5555 80\r\n",
                Err("PROXY v1: bad IPv4"),
            ),
            (
                b"PROXY TCP4 192.0.2.7 10.0.0.1 80\r\n",
                Err("PROXY v1: expected 4 fields after the family"),
            ),
            (
                b"PROXY UDP4 192.0.2.7 10.0.0.1 1 2\r\n",
                Err("PROXY v1: unknown family"),
            ),
        ];
        for (bytes, want) in cases {
            assert_eq!(parse(bytes), *want, "{:?}", String::from_utf8_lossy(bytes));
        }
        let long = [b"PROXY TCP4 ".as_slice(), &[b'1'; 120]].concat();
        assert!(parse(&long).is_err());
    }

    #[test]
    fn v2_headers() {
        let h = v2(sa("192.0.2.7:5555"), sa("10.0.0.1:80"), &[0x04, 0, 1, b'x']);
        assert_eq!(
            parse(&h),
            Ok(Parsed::Done {
                len: h.len(),
                client: Some(sa("192.0.2.7:5555"))
            })
        );
        for cut in [1, 12, 15, 20, h.len() - 1] {
            assert_eq!(parse(&h[..cut]), Ok(Parsed::Incomplete), "cut at {cut}");
        }
        let h6 = v2(sa("[2001:db8::7]:1"), sa("[2001:db8::1]:2"), &[]);
        assert_eq!(
            parse(&h6),
            Ok(Parsed::Done {
                len: 52,
                client: Some(sa("[2001:db8::7]:1"))
            })
        );
        let mut local = h.clone();
        local[12] = 0x20;
        assert_eq!(
            parse(&local),
            Ok(Parsed::Done {
                len: h.len(),
                client: None
            })
        );
        let mut bad = h.clone();
        bad[12] = 0x31;
        assert!(parse(&bad).is_err());
        let mut short = h.clone();
        short[13] = 0x21; // IPv6 family with an IPv4-sized block
        assert_eq!(parse(&short), Err("PROXY v2: bad address block"));
    }

    #[test]
    fn encoded_headers_parse_back_to_the_client() {
        let cases: [(&str, &str); 3] = [
            ("192.0.2.7:5555", "10.0.0.1:8444"),
            ("[2001:db8::7]:5555", "[2001:db8::1]:8444"),
            ("192.0.2.7:5555", "[2001:db8::1]:8444"),
        ];
        for (client, local) in cases {
            let (c, l): (SocketAddr, SocketAddr) =
                (client.parse().unwrap(), local.parse().unwrap());
            for v2 in [false, true] {
                let mut h = encode(v2, c, l);
                let len = h.len();
                h.extend_from_slice(b"\x16\x03\x01");
                let Ok(Parsed::Done {
                    len: got,
                    client: Some(named),
                }) = parse(&h)
                else {
                    panic!("v2={v2} {client}: {:?}", parse(&h));
                };
                assert_eq!(got, len, "v2={v2} {client}: exactly the header");
                assert_eq!(named.port(), c.port());
                assert_eq!(v6(named.ip()), v6(c.ip()), "v2={v2} {client}");
            }
        }
        // A unix socket's client: UNKNOWN / LOCAL, which parse back to no client.
        let unix: SocketAddr = "0.0.0.0:0".parse().unwrap();
        let local: SocketAddr = "10.0.0.1:8444".parse().unwrap();
        assert_eq!(encode(false, unix, local), b"PROXY UNKNOWN\r\n");
        for v2 in [false, true] {
            let h = encode(v2, unix, local);
            assert_eq!(
                parse(&h),
                Ok(Parsed::Done {
                    len: h.len(),
                    client: None
                }),
                "v2={v2}"
            );
        }
        // A header naming the unspecified address names nobody (it never becomes `unix:`).
        for h in [
            v1(unix, local).into_bytes(),
            v2(unix, local, &[]),
            v1("[::]:0".parse().unwrap(), "[::1]:1".parse().unwrap()).into_bytes(),
        ] {
            assert!(
                matches!(parse(&h), Ok(Parsed::Done { client: None, .. })),
                "{h:?}"
            );
        }
    }
}
