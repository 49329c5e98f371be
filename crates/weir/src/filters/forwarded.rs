//! `forwarded:`: tells the upstream who the client was, with `X-Forwarded-For/-Proto/-Host`
//! and/or RFC 7239 `Forwarded`. The client's own values are kept (and appended to) only when
//! it is a trusted proxy; from anyone else they are dropped, so a client cannot forge its
//! address.

use bytes::BytesMut;
use ipnet::IpNet;
use weir_http::response::put_header;
use weir_http::RequestHead;

use super::{Client, Filter, Upward};
use crate::vars::format_ip;

/// A compiled `forwarded` block.
#[derive(Debug)]
pub struct Forwarded {
    pub x_forwarded: bool,
    pub forwarded: bool,
    pub trusted: Vec<IpNet>,
}

impl Forwarded {
    /// Whether a peer's forwarding fields are to be kept.
    pub fn trusts(&self, ip: std::net::IpAddr) -> bool {
        self.trusted.iter().any(|n| n.contains(&ip))
    }
}

/// Fields in which a client names itself, its scheme or port, relayed only from trusted proxies
/// when `x_forwarded` is on (`forwarded` re-emits `Forwarded` itself when on).
const CLIENT_CLAIMS: &[&[u8]] = &[
    b"forwarded",
    b"x-real-ip",
    b"x-forwarded-port",
    b"x-forwarded-ssl",
    b"x-forwarded-scheme",
    b"x-forwarded-server",
    b"x-client-ip",
    b"x-cluster-client-ip",
    b"true-client-ip",
    b"cf-connecting-ip",
    b"fastly-client-ip",
    b"client-ip",
    b"x-original-forwarded-for",
    b"x-proxyuser-ip",
    b"x-forwarded",
    b"forwarded-for",
    b"x-originating-ip",
    b"x-remote-ip",
    b"x-remote-addr",
    b"x-true-client-ip",
    b"x-forwarded-client-ip",
    // A client claiming TLS (CodeIgniter's `is_https()` trusts it; the review of issue 53).
    b"front-end-https",
];

impl Filter for Forwarded {
    fn phases(&self) -> super::Phases {
        super::Phases::UPSTREAM | super::Phases::DROPS_UPSTREAM
    }

    fn drops_upstream(&self, client: &Client, name: &[u8]) -> bool {
        // Every name below starts with one of these letters (once folded): the other fields
        // of a request (Host, Accept, User-Agent ...) are passed at once, not compared with
        // two dozen names each (~80 instructions a field, callgrind 2026-11-27).
        if !name
            .first()
            .is_some_and(|b| matches!(b.to_ascii_lowercase(), b'x' | b'f' | b'c' | b't'))
        {
            return false;
        }
        if self.x_forwarded {
            // Another spelling of a field set here (`X_Forwarded_For`, `aliases.rs`) is never
            // relayed, even from a trusted proxy: an application could read it as ours.
            for ours in [
                &b"x-forwarded-for"[..],
                b"x-forwarded-proto",
                b"x-forwarded-host",
            ] {
                if super::aliases::folds_to(name, ours) && !name.eq_ignore_ascii_case(ours) {
                    return true;
                }
            }
            // Other fields that name the client, its scheme or port: frameworks read them
            // (Rack prefers `Forwarded`), so from a client not trusted they are not relayed.
            if !self.trusts(client.ip)
                && CLIENT_CLAIMS
                    .iter()
                    .any(|c| super::aliases::folds_to(name, c))
                && !(self.forwarded && name.eq_ignore_ascii_case(b"forwarded"))
            {
                return true;
            }
            // Re-emitted below (with the trusted prior values first).
            if name.eq_ignore_ascii_case(b"x-forwarded-for") {
                return true;
            }
            if (name.eq_ignore_ascii_case(b"x-forwarded-proto")
                || name.eq_ignore_ascii_case(b"x-forwarded-host"))
                && !self.trusts(client.ip)
            {
                return true;
            }
        }
        self.forwarded && name.eq_ignore_ascii_case(b"forwarded")
    }

    fn upstream_fields(&self, up: &Upward<'_>, out: &mut BytesMut) {
        let (client, head) = (up.client, up.head);
        let trusted = self.trusts(client.ip);
        // The validated, normalised authority (an absolute-form target's wins over Host).
        let client_host = head.authority();
        if self.x_forwarded {
            // Written in place: the trusted list first, then the client (no list built apart:
            // that was an allocation on every proxied request).
            out.extend_from_slice(b"X-Forwarded-For: ");
            if trusted {
                for (_, value) in head
                    .fields()
                    .iter()
                    .filter(|(n, v)| n.eq_ignore_ascii_case(b"x-forwarded-for") && !v.is_empty())
                {
                    out.extend_from_slice(value);
                    out.extend_from_slice(b", ");
                }
            }
            let mut ip = [0u8; 64];
            out.extend_from_slice(format_ip(client.ip, &mut ip));
            out.extend_from_slice(b"\r\n");
            if !trusted || head.header("x-forwarded-proto").is_none() {
                put_header(out, b"X-Forwarded-Proto", client.scheme.as_bytes());
            }
            if let (false, Some(h)) = (
                trusted && head.header("x-forwarded-host").is_some(),
                client_host,
            ) {
                put_header(out, b"X-Forwarded-Host", h);
            }
        }
        if self.forwarded {
            let mut fwd = prior(head, b"forwarded", trusted);
            let mut element = format!("for={};proto={}", node(client.ip), client.scheme);
            if let Some(h) = client_host.and_then(|h| std::str::from_utf8(h).ok()) {
                element.push_str(&format!(";host=\"{h}\""));
            }
            append_list(&mut fwd, element.as_bytes());
            put_header(out, b"Forwarded", &fwd);
        }
    }
}

/// The values of `name` the client sent, comma-joined, when it is trusted.
fn prior(head: &RequestHead, name: &[u8], trusted: bool) -> Vec<u8> {
    let mut list = Vec::new();
    if trusted {
        for h in head
            .headers()
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case(name))
        {
            append_list(&mut list, &h.value);
        }
    }
    list
}

/// The `for=` node of RFC 7239: IPv6 addresses are quoted and bracketed.
pub fn node(ip: std::net::IpAddr) -> String {
    match ip {
        // A unix socket's client (`runtime::UNIX_PEER`): RFC 7239's "unknown" node.
        std::net::IpAddr::V4(a) if a.is_unspecified() => "unknown".into(),
        std::net::IpAddr::V4(a) => a.to_string(),
        std::net::IpAddr::V6(a) => format!("\"[{a}]\""),
    }
}

/// Appends `item` to a comma-separated field value being built.
fn append_list(list: &mut Vec<u8>, item: &[u8]) {
    if !list.is_empty() {
        list.extend_from_slice(b", ");
    }
    list.extend_from_slice(item);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(f: &Forwarded, peer: &str, req: &str) -> (String, Vec<String>) {
        let client = Client {
            ip: peer.parse().unwrap(),
            scheme: "http",
            version: "1.1",
            member: false,
        };
        let mut b = BytesMut::from(req.as_bytes());
        let head = weir_http::parse_request(&mut b, &Default::default())
            .unwrap()
            .unwrap();
        let mut out = BytesMut::new();
        let up = Upward {
            client: &client,
            head: &head,
            identity: None,
        };
        f.upstream_fields(&up, &mut out);
        let dropped = head
            .headers()
            .iter()
            .filter(|h| f.drops_upstream(&client, &h.name))
            .map(|h| String::from_utf8_lossy(&h.name).into_owned())
            .collect();
        (String::from_utf8(out.to_vec()).unwrap(), dropped)
    }

    /// The first-letter pass in `drops_upstream` lets every name it drops through.
    #[test]
    fn the_first_letters_cover_every_name_dropped() {
        for name in CLIENT_CLAIMS.iter().chain(&[
            &b"x-forwarded-for"[..],
            b"x-forwarded-proto",
            b"x-forwarded-host",
            b"forwarded",
        ]) {
            assert!(
                matches!(name[0], b'x' | b'f' | b'c' | b't'),
                "{:?}",
                std::str::from_utf8(name)
            );
        }
    }

    #[test]
    fn untrusted_values_are_replaced_and_trusted_ones_extended() {
        let f = Forwarded {
            x_forwarded: true,
            forwarded: true,
            trusted: vec!["10.0.0.0/8".parse().unwrap()],
        };
        let req = "GET / HTTP/1.1\r\nHost: Site.Example\r\nX-Forwarded-For: 1.2.3.4\r\nX-Forwarded-Proto: https\r\nForwarded: for=1.2.3.4\r\n\r\n";
        let (out, dropped) = fields(&f, "192.0.2.1", req);
        assert_eq!(
            out,
            "X-Forwarded-For: 192.0.2.1\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: site.example\r\nForwarded: for=192.0.2.1;proto=http;host=\"site.example\"\r\n"
        );
        assert_eq!(
            dropped,
            ["X-Forwarded-For", "X-Forwarded-Proto", "Forwarded"]
        );
        let (out, dropped) = fields(&f, "10.1.2.3", req);
        assert!(
            out.starts_with("X-Forwarded-For: 1.2.3.4, 10.1.2.3\r\n"),
            "{out}"
        );
        assert!(
            !out.contains("X-Forwarded-Proto"),
            "the trusted proxy's is kept: {out}"
        );
        assert!(
            out.contains("Forwarded: for=1.2.3.4, for=10.1.2.3;"),
            "{out}"
        );
        assert_eq!(dropped, ["X-Forwarded-For", "Forwarded"]);
        // Several fields from a trusted proxy join in order; an empty one adds nothing.
        let req = "GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 1.2.3.4\r\nX-Forwarded-For:\r\nx-forwarded-for: 5.6.7.8, 9.9.9.9\r\n\r\n";
        let (out, _) = fields(&f, "10.1.2.3", req);
        assert!(
            out.starts_with("X-Forwarded-For: 1.2.3.4, 5.6.7.8, 9.9.9.9, 10.1.2.3\r\n"),
            "{out}"
        );
        assert_eq!(node("::1".parse().unwrap()), "\"[::1]\"");
        // A unix socket's client (`runtime::UNIX_PEER`) is written as nginx writes it.
        let mut buf = [0u8; 64];
        assert_eq!(format_ip("0.0.0.0".parse().unwrap(), &mut buf), b"unix:");
        assert_eq!(node("0.0.0.0".parse().unwrap()), "unknown");
        for ip in [
            "0.0.0.1",
            "10.1.22.255",
            "192.168.100.9",
            "::1",
            "2001:db8::7",
        ] {
            let mut buf = [0u8; 64];
            assert_eq!(format_ip(ip.parse().unwrap(), &mut buf), ip.as_bytes());
        }
        // Every octet value, in every position, as std writes it (0.0.0.0 is `unix:`, above).
        for o in 1..=255u8 {
            for ip in [
                [o, 0, 2, 3],
                [1, o, 2, 0],
                [1, 2, o, 3],
                [0, 2, 3, o],
                [o; 4],
            ] {
                let ip = std::net::IpAddr::from(ip);
                let mut buf = [0u8; 64];
                assert_eq!(format_ip(ip, &mut buf), ip.to_string().as_bytes());
            }
        }
    }
}
