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
//! hot path allocates nothing.

use bytes::Bytes;

/// A validated authority, as `host[:port]` in normalised form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authority {
    /// `host[:port]`, normalised.
    pub text: Bytes,
    /// Length of the host part of `text` (the rest is `:port`).
    pub host_len: usize,
}

impl Authority {
    /// The host, without the port (`[::1]` keeps its brackets).
    pub fn host(&self) -> &[u8] {
        &self.text[..self.host_len]
    }

    /// The port, when it is not the scheme's default.
    pub fn port(&self) -> Option<&[u8]> {
        self.text.get(self.host_len + 1..)
    }
}

/// Validates and normalises a `Host` value or a URI authority. `value` is a slice of `whole`'s
/// buffer kind: when nothing changes, the result is `value` itself (no copy). `default_port` is
/// the port of the scheme (80 for http, 443 for https).
pub fn parse_authority(value: &Bytes, default_port: u16) -> Result<Authority, &'static str> {
    let v = &value[..];
    if v.is_empty() {
        return Err("empty Host");
    }
    // Split host and port.
    let (host, port): (&[u8], Option<&[u8]>) = if v[0] == b'[' {
        let close = memchr::memchr(b']', v).ok_or("unterminated IPv6 literal in Host")?;
        let literal = &v[1..close];
        let text = std::str::from_utf8(literal).map_err(|_| "invalid IPv6 literal in Host")?;
        if text.parse::<std::net::Ipv6Addr>().is_err() {
            return Err("invalid IPv6 literal in Host");
        }
        match &v[close + 1..] {
            [] => (&v[..=close], None),
            [b':', port @ ..] => (&v[..=close], Some(port)),
            _ => return Err("invalid bytes after IPv6 literal in Host"),
        }
    } else {
        match memchr::memchr(b':', v) {
            Some(i) => (&v[..i], Some(&v[i + 1..])),
            None => (v, None),
        }
    };
    if v[0] != b'[' {
        if host.is_empty() {
            return Err("empty host in Host");
        }
        if !valid_reg_name(host) {
            return Err("invalid character in Host");
        }
    }
    let port_num = match port {
        None | Some([]) => None,
        Some(p) => {
            if p.len() > 5 || !p.iter().all(u8::is_ascii_digit) {
                return Err("invalid port in Host");
            }
            let n: u32 = p.iter().fold(0, |n, d| n * 10 + u32::from(d - b'0'));
            if n > 65535 {
                return Err("invalid port in Host");
            }
            Some(n as u16)
        }
    };
    let keep_port = port_num.is_some_and(|p| p != default_port);
    let trailing_dot = v[0] != b'[' && host.len() > 1 && host.ends_with(b".");
    let needs_change = host.iter().any(u8::is_ascii_uppercase)
        || trailing_dot
        || (port.is_some() && !keep_port)
        // a port with leading zeros is re-rendered
        || (keep_port && port.is_some_and(|p| p.len() > 1 && p[0] == b'0'));
    if !needs_change {
        return Ok(Authority {
            text: value.clone(),
            host_len: host.len(),
        });
    }
    let host = if trailing_dot {
        &host[..host.len() - 1]
    } else {
        host
    };
    let mut text = Vec::with_capacity(host.len() + 6);
    text.extend(host.iter().map(u8::to_ascii_lowercase));
    if let (true, Some(p)) = (keep_port, port_num) {
        text.push(b':');
        text.extend_from_slice(itoa::Buffer::new().format(p).as_bytes());
    }
    Ok(Authority {
        host_len: host.len(),
        text: Bytes::from(text),
    })
}

/// RFC 3986 reg-name: unreserved / pct-encoded / sub-delims.
fn valid_reg_name(host: &[u8]) -> bool {
    let mut i = 0;
    while i < host.len() {
        let b = host[i];
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {}
            b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'=' => {}
            b'%' => {
                let hex = host.get(i + 1..i + 3);
                if !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                    return false;
                }
                i += 2;
            }
            _ => return false,
        }
        i += 1;
    }
    true
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
        parse_authority(&Bytes::copy_from_slice(s.as_bytes()), 80)
            .map(|a| String::from_utf8(a.text.to_vec()).unwrap())
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
        ] {
            assert!(norm(input).is_err(), "{input:?} should be rejected");
        }
    }

    #[test]
    fn host_and_port_parts() {
        let a = parse_authority(&Bytes::from_static(b"Example.com:8080"), 80).unwrap();
        assert_eq!(a.host(), b"example.com");
        assert_eq!(a.port(), Some(&b"8080"[..]));
        let a = parse_authority(&Bytes::from_static(b"[::1]:443"), 443).unwrap();
        assert_eq!(a.host(), b"[::1]");
        assert_eq!(a.port(), None);
    }

    #[test]
    fn unchanged_values_are_not_copied() {
        let v = Bytes::from_static(b"example.com:8080");
        let a = parse_authority(&v, 80).unwrap();
        assert_eq!(a.text.as_ptr(), v.as_ptr());
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
