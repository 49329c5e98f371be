//! Header rules of a proxy: it says who the client was (X-Forwarded-For/-Proto/-Host, RFC 7239
//! `Forwarded`). Hop-by-hop fields are `weir_http::hop`, shared with the cache.

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

    #[test]
    fn forwarded_nodes() {
        assert_eq!(forwarded_node("::1".parse().unwrap()), "\"[::1]\"");
        assert_eq!(forwarded_node("10.0.0.1".parse().unwrap()), "10.0.0.1");
    }
}
