//! HTTP/1.1 field lines, as weir's one encoder writes them (validated, one a line), turned into
//! HPACK fields: what `head.rs` does with a reply's head and `stored.rs` with a stored one.

/// What follows the status line of an HTTP/1.1 head.
pub(super) fn after_status_line(text: &[u8]) -> &[u8] {
    match memchr::memchr(b'\n', text) {
        Some(i) => &text[i + 1..],
        None => &[],
    }
}

/// Appends the HPACK fields of HTTP/1.1 field lines as weir's encoder writes them (validated,
/// one a line), less the connection-specific ones; stops at a blank line.
pub(super) fn put_lines(text: &[u8], out: &mut Vec<u8>) {
    let mut at = 0;
    while at < text.len() {
        let end = memchr::memchr(b'\n', &text[at..]).map_or(text.len(), |i| at + i);
        let line = &text[at..end];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        at = end + 1;
        if line.is_empty() {
            break;
        }
        let Some(colon) = memchr::memchr(b':', line) else {
            continue;
        };
        let name = &line[..colon];
        let value = line[colon + 1..].trim_ascii();
        if let Some(index) = common_name(name) {
            // Literal without indexing, the name from the static table, the value as is.
            weir_h2::hpack::encoder::integer(out, index, 4, 0x00);
            weir_h2::hpack::encoder::integer(out, value.len(), 7, 0x00);
            out.extend_from_slice(value);
            continue;
        }
        if weir_http::hop::not_in_h2(name) {
            continue;
        }
        weir_h2::hpack::encoder::put_field(name, value, out);
    }
}

/// The static table index (RFC 7541 Appendix A) of the fields weir's responses carry most,
/// found by length, then case-insensitively: the general encoder's lower-casing, table search
/// and credential check cost about 400 instructions a field (callgrind), this a tenth.
/// None of them is connection-specific or a credential.
fn common_name(name: &[u8]) -> Option<usize> {
    let candidates: &[(&[u8], usize)] = match name.len() {
        3 => &[(b"age", 21), (b"via", 60)],
        4 => &[(b"date", 33), (b"etag", 34), (b"vary", 59)],
        6 => &[(b"server", 54)],
        7 => &[(b"expires", 36)],
        8 => &[(b"location", 46)],
        12 => &[(b"content-type", 31)],
        13 => &[
            (b"cache-control", 24),
            (b"last-modified", 44),
            (b"accept-ranges", 18),
        ],
        14 => &[(b"content-length", 28)],
        16 => &[(b"content-encoding", 26)],
        _ => return None,
    };
    candidates
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|&(_, i)| i)
}

/// Appends the HPACK block of a trailer section; names lower-cased, the fields a trailer
/// section must not carry left out.
pub(crate) fn trailer_block(fields: &[weir_http::Header], out: &mut Vec<u8>) {
    for f in fields {
        if weir_http::hop::not_in_h2(&f.name) {
            continue;
        }
        weir_h2::hpack::encoder::put_field(&f.name, &f.value, out);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The short-cut names are the static table's entries of the same name.
    #[test]
    fn common_names_are_their_static_entries() {
        for name in [
            "Age",
            "via",
            "Date",
            "ETag",
            "Vary",
            "Server",
            "Expires",
            "Location",
            "Content-Type",
            "Cache-Control",
            "Last-Modified",
            "Accept-Ranges",
            "Content-Length",
            "Content-Encoding",
        ] {
            let lower = name.to_ascii_lowercase();
            let (index, _) = weir_h2::hpack::table::find_static(lower.as_bytes(), b"x").unwrap();
            assert_eq!(common_name(name.as_bytes()), Some(index), "{name}");
        }
        assert_eq!(common_name(b"x-date"), None);
        assert_eq!(common_name(b"set-cookie"), None);
    }
}
