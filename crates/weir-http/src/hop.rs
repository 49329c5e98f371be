//! Hop-by-hop fields (RFC 9110 §7.6.1): the fixed set that describes one connection, and any
//! field a message's `Connection` names. A proxy never forwards them, a cache never stores them,
//! and an interim response relayed to a client drops them too: one table for all of those.

use crate::framing::trim_ows;
use crate::request::Header;

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
                        .any(|t| trim_ows(t).eq_ignore_ascii_case(token))
                })
    }
}

/// Whether a field must not be forwarded or stored.
pub fn is_hop_by_hop(name: &[u8], connection: &ConnectionTokens<'_>) -> bool {
    HOP_BY_HOP.iter().any(|h| name.eq_ignore_ascii_case(h)) || connection.contains(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn fields(pairs: &[(&'static str, &'static str)]) -> Vec<Header> {
        pairs
            .iter()
            .map(|(n, v)| Header {
                name: Bytes::from_static(n.as_bytes()),
                value: Bytes::from_static(v.as_bytes()),
            })
            .collect()
    }

    #[test]
    fn hop_by_hop_table() {
        let with = fields(&[("Connection", "close,  X-Secret "), ("connection", "x-two")]);
        let without = fields(&[("X-Secret", "1")]);
        for (name, msg, want) in [
            ("X-Secret", &with, true),
            ("x-two", &with, true),
            ("Keep-Alive", &with, true),
            ("Proxy-Authorization", &without, true),
            ("TE", &without, true),
            ("Transfer-Encoding", &without, true),
            ("X-Secret", &without, false),
            ("X-Other", &with, false),
            ("Content-Length", &with, false),
        ] {
            let tokens = ConnectionTokens::of(msg);
            assert_eq!(is_hop_by_hop(name.as_bytes(), &tokens), want, "{name}");
        }
    }
}
