//! Header rules of a proxy (RFC 9110 §7.6): hop-by-hop fields are not forwarded — the fixed set
//! and any field the message's `Connection` names — and the proxy says who it is (`Via`) and
//! who the client was (X-Forwarded-For/-Proto/-Host, RFC 7239 `Forwarded`).

use weir_http::Header;

/// Fields that describe one connection, never forwarded.
const HOP_BY_HOP: &[&[u8]] = &[
    b"connection",
    b"keep-alive",
    b"te",
    b"trailer",
    b"transfer-encoding",
    b"upgrade",
    b"proxy-connection",
    b"proxy-authenticate",
    b"proxy-authorization",
];

/// The field names a message's `Connection` fields list, read in place (no allocation: most
/// messages have one such field with one token, or none).
#[derive(Debug, Clone, Copy)]
pub struct ConnectionTokens<'a> {
    headers: &'a [Header],
    present: bool,
}

impl<'a> ConnectionTokens<'a> {
    pub fn of(headers: &'a [Header]) -> ConnectionTokens<'a> {
        let present = headers
            .iter()
            .any(|h| h.name.eq_ignore_ascii_case(b"connection"));
        ConnectionTokens { headers, present }
    }

    /// Whether `token` is listed (case-insensitive).
    pub fn contains(&self, token: &[u8]) -> bool {
        self.present
            && self
                .headers
                .iter()
                .filter(|h| h.name.eq_ignore_ascii_case(b"connection"))
                .any(|h| {
                    h.value
                        .split(|b| *b == b',')
                        .any(|t| trim(t).eq_ignore_ascii_case(token))
                })
    }
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// Whether a field must not be forwarded.
pub fn is_hop_by_hop(name: &[u8], connection: &ConnectionTokens<'_>) -> bool {
    HOP_BY_HOP.iter().any(|h| name.eq_ignore_ascii_case(h)) || connection.contains(name)
}

/// The `for=` node of RFC 7239: IPv6 addresses are quoted and bracketed.
pub fn forwarded_node(ip: std::net::IpAddr) -> String {
    match ip {
        std::net::IpAddr::V4(a) => a.to_string(),
        std::net::IpAddr::V6(a) => format!("\"[{a}]\""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn hop_by_hop_includes_connection_tokens() {
        let h = vec![Header {
            name: Bytes::from_static(b"Connection"),
            value: Bytes::from_static(b"close, X-Secret"),
        }];
        let tokens = ConnectionTokens::of(&h);
        assert!(is_hop_by_hop(b"X-Secret", &tokens));
        assert!(is_hop_by_hop(b"Keep-Alive", &tokens));
        assert!(is_hop_by_hop(b"Proxy-Authorization", &tokens));
        assert!(!is_hop_by_hop(b"X-Other", &tokens));
        assert_eq!(forwarded_node("::1".parse().unwrap()), "\"[::1]\"");
    }
}
