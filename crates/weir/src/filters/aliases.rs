//! Field names that CGI, WSGI, PHP and Rack fold into one variable: `X-Consumer`, `X_Consumer`
//! and `X.Consumer` all become `HTTP_X_CONSUMER` (Apache's CGI maps every byte that is not a
//! letter or digit to `_`: `X~Consumer` too). A filter that sets a field for the upstream
//! (`x-consumer`, `forward_auth`'s `copy_headers`, `headers.set`, the forwarding fields) drops
//! the client's fields under every such spelling, not only the exact one: otherwise a client
//! sends `X_Consumer: admin` beside weir's `X-Consumer: alice` and the application may read
//! either (issue 33 §2; Traefik's `aliasHeadersStrategy`).

/// Whether `name` (a client's field name) folds to the same variable as `ours` (a field name
/// weir sets, any case): equal once ASCII case is ignored and every byte that is not a letter
/// or digit reads as `-`.
pub fn folds_to(name: &[u8], ours: &[u8]) -> bool {
    name.len() == ours.len() && name.iter().zip(ours).all(|(a, b)| fold(*a) == fold(*b))
}

#[inline]
fn fold(b: u8) -> u8 {
    if b.is_ascii_alphanumeric() {
        b.to_ascii_lowercase()
    } else {
        b'-'
    }
}

#[cfg(test)]
mod tests {
    use super::folds_to;

    #[test]
    fn spellings_that_fold_together() {
        for n in [
            "X-Consumer",
            "x-consumer",
            "X_Consumer",
            "X.Consumer",
            "x_CONSUMER",
            "X-Consumer",
        ] {
            assert!(folds_to(n.as_bytes(), b"x-consumer"), "{n}");
        }
        for n in ["X-Consumers", "XConsumer", "X-Consume", "Y-Consumer"] {
            assert!(!folds_to(n.as_bytes(), b"x-consumer"), "{n}");
        }
        assert!(folds_to(b"X_FORWARDED_FOR", b"x-forwarded-for"));
    }
}
