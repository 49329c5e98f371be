//! A response head as an HPACK header block, statelessly (`hpack::encoder`): `:status` first,
//! then the fields, less the connection-specific ones HTTP/2 forbids (RFC 9113 §8.2.2:
//! `Connection` and the fields it names, `Keep-Alive`, `Proxy-Connection`,
//! `Transfer-Encoding`, `Upgrade`), names lower-cased. Stateless, so a stored response's block
//! is made once, when it is stored, and every hit over any connection writes the same bytes
//! (issue 54), as an HTTP/1.1 hit writes its stored head.

use crate::hpack::encoder::{integer, put_field};

/// `:status` (RFC 7541 Appendix A: 200, 204, 206, 304, 400, 404 and 500 are static entries
/// 8 to 14; any other is a literal naming entry 8).
pub fn put_status(status: u16, out: &mut Vec<u8>) {
    let index = match status {
        200 => 8,
        204 => 9,
        206 => 10,
        304 => 11,
        400 => 12,
        404 => 13,
        500 => 14,
        _ => 0,
    };
    if index > 0 {
        integer(out, index, 7, 0x80);
        return;
    }
    let digits = [
        b'0' + (status / 100 % 10) as u8,
        b'0' + (status / 10 % 10) as u8,
        b'0' + (status % 10) as u8,
    ];
    // Literal without indexing, name from entry 8; the value is three octets, never shorter
    // in Huffman than needed to matter.
    integer(out, 8, 4, 0x00);
    integer(out, 3, 7, 0x00);
    out.extend_from_slice(&digits);
}

/// The block of a response: `status`, then `fields` (name, value) as HTTP/2 may carry them.
pub fn put_response<'a>(
    status: u16,
    fields: impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
    out: &mut Vec<u8>,
) {
    put_status(status, out);
    // The fields `Connection` names are hop-by-hop too (RFC 9110 §7.6.1).
    let named = |name: &[u8]| {
        fields
            .clone()
            .filter(|(n, _)| n.eq_ignore_ascii_case(b"connection"))
            .flat_map(|(_, v)| v.split(|b| *b == b','))
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(name))
    };
    for (name, value) in fields.clone() {
        if connection_specific(name) || named(name) {
            continue;
        }
        put_field(name, value, out);
    }
}

/// RFC 9113 §8.2.2's connection-specific fields.
pub fn connection_specific(name: &[u8]) -> bool {
    [
        &b"connection"[..],
        b"keep-alive",
        b"proxy-connection",
        b"transfer-encoding",
        b"upgrade",
    ]
    .iter()
    .any(|n| name.eq_ignore_ascii_case(n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hpack::decoder::{Decoder, Outcome};

    fn decode(block: &[u8]) -> Vec<(String, String)> {
        let mut d = Decoder::new(4096);
        let mut fields: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        assert_eq!(
            d.decode(block, 1 << 20, &mut fields).unwrap(),
            Outcome::Complete
        );
        fields
            .into_iter()
            .map(|(n, v)| (String::from_utf8(n).unwrap(), String::from_utf8(v).unwrap()))
            .collect()
    }

    #[test]
    fn statuses_static_and_literal() {
        for status in [200u16, 204, 206, 304, 400, 404, 500, 101, 302, 418, 503] {
            let mut out = Vec::new();
            put_status(status, &mut out);
            assert_eq!(decode(&out), [(":status".into(), status.to_string())]);
        }
        let mut out = Vec::new();
        put_status(200, &mut out);
        assert_eq!(out, [0x88]);
    }

    /// The connection-specific fields and those `Connection` names are left out; names go
    /// lower-case; the rest as given, in order.
    #[test]
    fn a_response_head_without_what_http2_forbids() {
        let fields: Vec<(&[u8], &[u8])> = vec![
            (b"Content-Type", b"text/html"),
            (b"Connection", b"close, X-Hop"),
            (b"X-Hop", b"1"),
            (b"Transfer-Encoding", b"chunked"),
            (b"Keep-Alive", b"timeout=5"),
            (b"Set-Cookie", b"a=1"),
            (b"Cache-Control", b"max-age=60"),
        ];
        let mut out = Vec::new();
        put_response(200, fields.iter().copied(), &mut out);
        let got = decode(&out);
        let want: Vec<(String, String)> = [
            (":status", "200"),
            ("content-type", "text/html"),
            ("set-cookie", "a=1"),
            ("cache-control", "max-age=60"),
        ]
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
        assert_eq!(got, want);
        // Stateless: the same block twice.
        let mut again = Vec::new();
        put_response(200, fields.iter().copied(), &mut again);
        assert_eq!(out, again);
    }
}
