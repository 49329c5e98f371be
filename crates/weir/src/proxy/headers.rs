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

/// Names listed in the message's `Connection` fields (lowercased).
pub fn connection_tokens(headers: &[Header]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for h in headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case(b"connection"))
    {
        for t in h.value.split(|b| *b == b',') {
            let t: Vec<u8> = t
                .iter()
                .copied()
                .filter(|b| *b != b' ' && *b != b'\t')
                .collect();
            if !t.is_empty() {
                out.push(t.to_ascii_lowercase());
            }
        }
    }
    out
}

/// Whether a field must not be forwarded.
pub fn is_hop_by_hop(name: &[u8], connection_tokens: &[Vec<u8>]) -> bool {
    HOP_BY_HOP.iter().any(|h| name.eq_ignore_ascii_case(h))
        || connection_tokens
            .iter()
            .any(|t| name.eq_ignore_ascii_case(t))
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
        let tokens = connection_tokens(&h);
        assert!(is_hop_by_hop(b"X-Secret", &tokens));
        assert!(is_hop_by_hop(b"Keep-Alive", &tokens));
        assert!(is_hop_by_hop(b"Proxy-Authorization", &tokens));
        assert!(!is_hop_by_hop(b"X-Other", &tokens));
        assert_eq!(forwarded_node("::1".parse().unwrap()), "\"[::1]\"");
    }
}
