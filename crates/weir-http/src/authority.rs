//! The authority a request is for: the `Host` field, or the authority of an absolute-form target,
//! validated and normalised.
//!
//! Why this is strict: the host becomes part of routing and of cache keys, and is forwarded
//! upstream. A value such as `victim.example/b` joined with the path `/x` looks exactly like the
//! host `victim.example` with the path `/b/x`; accepting it let one client store an object that
//! others were then served (cache poisoning). So a host must be, per RFC 3986 §3.2.2 and RFC 9112
//! §3.2, `host [":" port]` where host is a reg-name (unreserved, pct-encoded and sub-delims), an
//! IPv4 address (a reg-name syntactically) or a bracketed IPv6 literal, and port is digits. No
//! `/`, `?`, `#`, `@`, whitespace or control byte can pass.
//!
//! A reg-name with an empty label (`a..b`, `a..`, `.a`, `.`) is refused: it names no host, and
//! `admin.example..` once lost one trailing dot per pass, became `admin.example.`, missed a
//! `host: admin.example` route and reached a name-based origin that served the internal site.
//!
//! Normalised form (what routing and cache keys see, what `X-Forwarded-Host` says and what is
//! forwarded as Host): lowercase, percent-encoded unreserved characters decoded (RFC 3986
//! §6.2.2.2, so `admin%2Eexample` is `admin.example`), the one trailing dot of a reg-name removed,
//! and the port dropped when it is empty or the scheme's default. It is computed once, by the
//! codec, for HTTP/1.1 Host, absolute-form targets and HTTP/2 `:authority` alike. Values already in that form (nearly all) are kept as slices of the head: the
//! hot path allocates nothing and clones no buffer: one table lookup per byte.

/// A validated authority: where its host ends, and its normalised text when that differs from
/// the value as received (`None`: the value is already normal and can be used as is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authority {
    /// Length of the host part of the normalised text (the rest is `:port`).
    pub host_len: usize,
    /// The normalised `host[:port]`, when it differs from the value received.
    pub normalised: Option<Vec<u8>>,
}

/// Byte classes, one table lookup per byte. Reg-name bytes (letters, digits, `-._~`, the
/// sub-delims) are 0, except uppercase letters, which are valid but flagged to be lowercased;
/// anything at `STOP` or above ends the fast loop.
const UPPER: u8 = 1;
/// A percent-encoded unreserved character, to be decoded.
const DECODE: u8 = 2;
const STOP: u8 = 0x10;
const PCT: u8 = 0x10;
const COLON: u8 = 0x20;
const BAD: u8 = 0x40;
const DOT: u8 = 0x80;

static CLASS: [u8; 256] = {
    let mut t = [BAD; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = match c {
            b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'~' => 0,
            b'.' => DOT,
            b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'=' => 0,
            b'A'..=b'Z' => UPPER,
            b'%' => PCT,
            b':' => COLON,
            _ => BAD,
        };
        b += 1;
    }
    t
};

/// Longest value [`SEEN`] remembers.
const SEEN_MAX: usize = 62;

/// The last value this thread found valid and already normal, and the scheme's default port it
/// was checked against: a connection sends the same `Host` with every request, and most of a
/// worker's connections send one of a few. Checking it again costs a comparison instead of a
/// pass over every byte (a 15-byte `127.0.0.1:18399` took about 250 instructions, callgrind,
/// 2026-11-27: 4% of a keep-alive hello).
#[derive(Clone, Copy)]
struct Seen {
    default_port: u16,
    len: u8,
    host_len: u8,
    bytes: [u8; SEEN_MAX],
}

thread_local! {
    static SEEN: std::cell::Cell<Seen> = const {
        std::cell::Cell::new(Seen { default_port: 0, len: 0, host_len: 0, bytes: [0; SEEN_MAX] })
    };
}

/// Validates and normalises a `Host` value or a URI authority. `default_port` is the scheme's
/// (80 for http, 443 for https). One table lookup per byte, or one comparison when the value
/// is this thread's last normal one; no allocation unless the value must change.
pub fn parse_authority(v: &[u8], default_port: u16) -> Result<Authority, &'static str> {
    if v.is_empty() {
        return Err("empty Host");
    }
    if v.len() <= SEEN_MAX {
        let seen = SEEN.get();
        if usize::from(seen.len) == v.len()
            && seen.default_port == default_port
            && seen.bytes[..v.len()] == *v
        {
            return Ok(Authority {
                host_len: usize::from(seen.host_len),
                normalised: None,
            });
        }
    }
    let parsed = check_authority(v, default_port);
    if let Ok(Authority {
        host_len,
        normalised: None,
    }) = parsed
    {
        if v.len() <= SEEN_MAX {
            let mut bytes = [0; SEEN_MAX];
            bytes[..v.len()].copy_from_slice(v);
            SEEN.set(Seen {
                default_port,
                len: v.len() as u8,
                host_len: host_len as u8,
                bytes,
            });
        }
    }
    parsed
}

/// [`parse_authority`], every byte looked at.
fn check_authority(v: &[u8], default_port: u16) -> Result<Authority, &'static str> {
    let (host, port, flags, last_dot) = if v[0] == b'[' {
        let close = memchr::memchr(b']', v).ok_or("unterminated IPv6 literal in Host")?;
        let text = std::str::from_utf8(&v[1..close]).map_err(|_| "invalid IPv6 literal in Host")?;
        if text.parse::<std::net::Ipv6Addr>().is_err() {
            return Err("invalid IPv6 literal in Host");
        }
        let port = match &v[close + 1..] {
            [] => None,
            [b':', port @ ..] => Some(port),
            _ => return Err("invalid bytes after IPv6 literal in Host"),
        };
        (
            &v[..=close],
            port,
            u8::from(v[..close].iter().any(u8::is_ascii_uppercase)),
            0,
        )
    } else {
        // `label_start`: the last byte seen ended a label (or none was seen), so a dot here
        // would make an empty label.
        let (mut i, mut flags, mut label_start) = (0, 0u8, true);
        while i < v.len() {
            let c = CLASS[v[i] as usize];
            if c >= STOP {
                match c {
                    DOT => {
                        if label_start {
                            return Err("empty label in Host");
                        }
                        label_start = true;
                        i += 1;
                        continue;
                    }
                    PCT => {
                        let decoded = v.get(i + 1..i + 3).and_then(hex_byte);
                        let Some(decoded) = decoded else {
                            return Err("invalid percent-encoding in Host");
                        };
                        if is_unreserved(decoded) {
                            flags |= DECODE;
                            if decoded == b'.' {
                                if label_start {
                                    return Err("empty label in Host");
                                }
                                label_start = true;
                                i += 3;
                                continue;
                            }
                        } else {
                            flags |= u8::from(v[i + 1..i + 3].iter().any(u8::is_ascii_uppercase));
                        }
                        label_start = false;
                        i += 3;
                        continue;
                    }
                    COLON => break,
                    _ => return Err("invalid character in Host"),
                }
            }
            flags |= c;
            label_start = false;
            i += 1;
        }
        if i == 0 {
            return Err("empty host in Host");
        }
        // A trailing dot is allowed once (the root label); `a..` was refused above.
        let last_dot = if v[i - 1] == b'.' {
            1
        } else if i >= 3 && v[i - 3] == b'%' && v[i - 2] == b'2' && v[i - 1] | 0x20 == b'e' {
            3
        } else {
            0
        };
        if last_dot == i {
            return Err("empty label in Host");
        }
        (
            &v[..i],
            v.get(i + 1..).filter(|_| i < v.len()),
            flags,
            last_dot,
        )
    };
    let port_num = match port {
        None | Some([]) => None,
        Some(p) => {
            let mut n: u32 = 0;
            for d in p {
                let digit = d.wrapping_sub(b'0');
                if digit > 9 || n > 6553 {
                    return Err("invalid port in Host");
                }
                n = n * 10 + u32::from(digit);
            }
            if n > 65535 {
                return Err("invalid port in Host");
            }
            Some(n as u16)
        }
    };
    let keep_port = port_num.is_some_and(|p| p != default_port);
    let needs_change = flags != 0
        || last_dot != 0
        || (port.is_some() && !keep_port)
        // a port with leading zeros is re-rendered
        || (keep_port && port.is_some_and(|p| p.len() > 1 && p[0] == b'0'));
    let kept = &host[..host.len() - last_dot];
    if !needs_change {
        return Ok(Authority {
            host_len: kept.len(),
            normalised: None,
        });
    }
    let mut text = Vec::with_capacity(kept.len() + 6);
    let mut j = 0;
    while j < kept.len() {
        let decoded = (kept[j] == b'%')
            .then(|| hex_byte(&kept[j + 1..j + 3]))
            .flatten();
        match decoded {
            Some(d) if is_unreserved(d) => {
                text.push(d.to_ascii_lowercase());
                j += 3;
            }
            _ => {
                text.push(kept[j].to_ascii_lowercase());
                j += 1;
            }
        }
    }
    let host_len = text.len();
    if let (true, Some(p)) = (keep_port, port_num) {
        text.push(b':');
        text.extend_from_slice(itoa::Buffer::new().format(p).as_bytes());
    }
    Ok(Authority {
        host_len,
        normalised: Some(text),
    })
}

/// The byte two hex digits stand for.
fn hex_byte(h: &[u8]) -> Option<u8> {
    let digit = |c: u8| (c as char).to_digit(16);
    match h {
        [a, b] => Some((digit(*a)? * 16 + digit(*b)?) as u8),
        _ => None,
    }
}

/// RFC 3986 §2.3: a percent-encoded unreserved character means the character itself.
fn is_unreserved(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~')
}

/// The parts of an absolute-form target (`http://authority/path?query`): the scheme's default
/// port, the authority, and where the path starts. Userinfo (`user@`) is an error (RFC 9110
/// §4.2.4), as is any scheme but http and https.
pub(crate) fn split_absolute(target: &[u8]) -> Result<(u16, &[u8], usize), &'static str> {
    let (default_port, rest_at) =
        if target.len() > 7 && target[..7].eq_ignore_ascii_case(b"http://") {
            (80, 7)
        } else if target.len() > 8 && target[..8].eq_ignore_ascii_case(b"https://") {
            (443, 8)
        } else {
            return Err("unsupported scheme in request target");
        };
    let rest = &target[rest_at..];
    let end = memchr::memchr3(b'/', b'?', b'#', rest).unwrap_or(rest.len());
    let authority = &rest[..end];
    if memchr::memchr(b'@', authority).is_some() {
        return Err("userinfo in request target");
    }
    Ok((default_port, authority, rest_at + end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(s: &str) -> Result<String, &'static str> {
        parse_authority(s.as_bytes(), 80).map(|a| {
            let text = a.normalised.unwrap_or_else(|| s.as_bytes().to_vec());
            assert!(a.host_len <= text.len());
            String::from_utf8(text).unwrap()
        })
    }

    #[test]
    fn valid_hosts_normalise() {
        for (input, want) in [
            ("example.com", "example.com"),
            ("Example.COM", "example.com"),
            ("example.com.", "example.com"),
            ("example.com:80", "example.com"),
            ("example.com:", "example.com"),
            ("example.com:8080", "example.com:8080"),
            ("example.com:08080", "example.com:8080"),
            ("EXAMPLE.com.:443", "example.com:443"),
            ("127.0.0.1:8080", "127.0.0.1:8080"),
            ("[::1]", "[::1]"),
            ("[::1]:80", "[::1]"),
            ("[2001:DB8::1]:81", "[2001:db8::1]:81"),
            ("a_b-c~d", "a_b-c~d"),
            ("a%2eb", "a.b"),
            ("a%2Eb", "a.b"),
            ("Admin%2EExample", "admin.example"),
            ("a%41", "aa"),
            ("a%2fb", "a%2fb"),
            ("a%2Fb", "a%2fb"),
            ("a.b%2e", "a.b"),
            ("x!$&'()*+,;=y", "x!$&'()*+,;=y"),
        ] {
            assert_eq!(norm(input).as_deref(), Ok(want), "{input}");
        }
    }

    #[test]
    fn invalid_hosts_are_rejected() {
        for input in [
            "",
            "bad host",
            "a/b",
            "victim.example/b",
            "a@b",
            "[::1",
            "[::1]x",
            "[zz::1]",
            "a?b",
            "a#b",
            "a\\b",
            "a:b",
            "a:1:2",
            "a:99999",
            "a:123456",
            ":80",
            "a%zz",
            "a%2",
            // empty labels: not a reg-name (and `admin.example..` once slipped past host routes)
            ".",
            "..",
            "a..",
            "a..b",
            ".a",
            "admin.example..",
            "admin.example..:80",
            "admin.example%2e.",
            "admin.example.%2e",
            "a%2e%2eb",
            "%2ea",
            "a\"b",
            "[v1.x]",
            "a\x7fb",
            "caf\u{e9}",
        ] {
            assert!(norm(input).is_err(), "{input:?} should be rejected");
        }
    }

    /// The remembered value answers only for the same bytes and the same default port.
    #[test]
    fn the_last_normal_value_is_remembered_exactly() {
        for _ in 0..2 {
            assert_eq!(
                parse_authority(b"plain.test:81", 80),
                Ok(Authority {
                    host_len: 10,
                    normalised: None
                })
            );
        }
        // Same text, other scheme: `:443` is kept for http and dropped for https.
        assert_eq!(
            parse_authority(b"plain.test:443", 80).map(|a| a.normalised),
            Ok(None)
        );
        assert_eq!(
            parse_authority(b"plain.test:443", 443).map(|a| a.normalised),
            Ok(Some(b"plain.test".to_vec()))
        );
        // A prefix or an extension of the remembered value is looked at again.
        assert!(parse_authority(b"plain.test:4431", 80).is_ok());
        assert!(parse_authority(b"plain.test:44", 80).is_ok());
        assert!(parse_authority(b"plain.test:4431/", 80).is_err());
        assert!(parse_authority(b"plain.test..", 80).is_err());
        assert!(parse_authority(b"Plain.test", 80)
            .unwrap()
            .normalised
            .is_some());
        // Longer than it keeps: checked every time, and still right.
        let long = format!("{}.example", "a".repeat(80));
        for _ in 0..2 {
            assert_eq!(
                parse_authority(long.as_bytes(), 80),
                Ok(Authority {
                    host_len: long.len(),
                    normalised: None
                })
            );
        }
        assert!(parse_authority(format!("{long}/").as_bytes(), 80).is_err());
    }

    #[test]
    fn host_length_excludes_port_and_dot() {
        let a = parse_authority(b"Example.com.:8080", 80).unwrap();
        assert_eq!(a.host_len, 11);
        assert_eq!(a.normalised.as_deref(), Some(&b"example.com:8080"[..]));
        let a = parse_authority(b"[::1]:443", 443).unwrap();
        assert_eq!(
            (a.host_len, a.normalised.as_deref()),
            (5, Some(&b"[::1]"[..]))
        );
        let a = parse_authority(b"plain.test:81", 80).unwrap();
        assert_eq!(
            (a.host_len, a.normalised),
            (10, None),
            "normal values are not copied"
        );
    }

    #[test]
    fn absolute_targets() {
        assert_eq!(
            split_absolute(b"http://Example.com:81/a?b"),
            Ok((80, &b"Example.com:81"[..], 21))
        );
        assert_eq!(split_absolute(b"https://h?q"), Ok((443, &b"h"[..], 9)));
        assert_eq!(split_absolute(b"HTTP://h"), Ok((80, &b"h"[..], 8)));
        assert!(split_absolute(b"http://u:p@h/").is_err());
        assert!(split_absolute(b"ftp://h/").is_err());
    }
}
