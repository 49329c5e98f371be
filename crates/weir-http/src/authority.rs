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
//! Normalised form (what routing and cache keys see, and what an absolute-form request forwards):
//! lowercase, one trailing dot of a reg-name removed, and the port dropped when it is empty or the
//! scheme's default. Values already in that form (nearly all) are kept as slices of the head: the
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
const STOP: u8 = 0x10;
const PCT: u8 = 0x10;
const COLON: u8 = 0x20;
const BAD: u8 = 0x40;

static CLASS: [u8; 256] = {
    let mut t = [BAD; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = match c {
            b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => 0,
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

/// Validates and normalises a `Host` value or a URI authority. `default_port` is the scheme's
/// (80 for http, 443 for https). One table lookup per byte; no allocation unless the value
/// must change.
pub fn parse_authority(v: &[u8], default_port: u16) -> Result<Authority, &'static str> {
    if v.is_empty() {
        return Err("empty Host");
    }
    let (host, port, upper) = if v[0] == b'[' {
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
            v[..close].iter().any(u8::is_ascii_uppercase),
        )
    } else {
        let (mut i, mut flags) = (0, 0u8);
        while i < v.len() {
            let c = CLASS[v[i] as usize];
            if c >= STOP {
                match c {
                    PCT => {
                        let hex = v.get(i + 1..i + 3);
                        if !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                            return Err("invalid percent-encoding in Host");
                        }
                        flags |= u8::from(v[i + 1..i + 3].iter().any(u8::is_ascii_uppercase));
                        i += 3;
                        continue;
                    }
                    COLON => break,
                    _ => return Err("invalid character in Host"),
                }
            }
            flags |= c;
            i += 1;
        }
        if i == 0 {
            return Err("empty host in Host");
        }
        (
            &v[..i],
            v.get(i + 1..).filter(|_| i < v.len()),
            flags & UPPER != 0,
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
    let trailing_dot = v[0] != b'[' && host.len() > 1 && host.ends_with(b".");
    let needs_change = upper
        || trailing_dot
        || (port.is_some() && !keep_port)
        // a port with leading zeros is re-rendered
        || (keep_port && port.is_some_and(|p| p.len() > 1 && p[0] == b'0'));
    let host_len = host.len() - usize::from(trailing_dot);
    if !needs_change {
        return Ok(Authority {
            host_len,
            normalised: None,
        });
    }
    let mut text = Vec::with_capacity(host_len + 6);
    text.extend(host[..host_len].iter().map(u8::to_ascii_lowercase));
    if let (true, Some(p)) = (keep_port, port_num) {
        text.push(b':');
        text.extend_from_slice(itoa::Buffer::new().format(p).as_bytes());
    }
    Ok(Authority {
        host_len,
        normalised: Some(text),
    })
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
            ("a%2eb", "a%2eb"),
            ("a%2Eb", "a%2eb"),
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
            "a\"b",
            "[v1.x]",
            "a\x7fb",
            "caf\u{e9}",
        ] {
            assert!(norm(input).is_err(), "{input:?} should be rejected");
        }
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
