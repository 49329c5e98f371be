//! The request's value of a `Vary` field, as stored with a variant and compared on lookup.
//!
//! Values are normalised so that requests meaning the same thing share a variant:
//! * every field: lines combined, list members trimmed of whitespace, empty members dropped,
//!   rejoined with `", "`;
//! * `Accept`, `Accept-Charset`, `Accept-Encoding`, `Accept-Language` (case-insensitive tokens and
//!   language tags): lowercased, whitespace around `;` and `=` removed;
//! * `Accept-Encoding` and `Accept-Language` (preference is carried by `q`, not by position):
//!   members sorted;
//! * with the route's `normalize_accept_encoding`, `Accept-Encoding` is reduced further to `br`,
//!   `zstd`, `gzip` or nothing ([`crate::key::normalize_accept_encoding`]).
//!
//! Other fields keep their case and member order: weir cannot know that they are insensitive.

use bytes::Bytes;
use weir_http::Header;

use crate::key::normalize_accept_encoding;
use crate::policy::values;

/// Fields whose value is lowercased and whose members lose inner whitespace.
const CASE_INSENSITIVE: &[&str] = &[
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
];
/// Fields whose members are sorted.
const UNORDERED: &[&str] = &["accept-encoding", "accept-language"];

/// The normalised value of field `name` (lowercase) in `headers`; `None` when absent.
pub fn request_value(headers: &[Header], name: &str, normalize_ae: bool) -> Option<Bytes> {
    if normalize_ae && name == "accept-encoding" {
        let first = values(headers, "accept-encoding").next();
        let n = normalize_accept_encoding(first);
        return (!n.is_empty()).then(|| Bytes::from_static(n));
    }
    let mut lines = values(headers, name).peekable();
    lines.peek()?;
    let insensitive = CASE_INSENSITIVE.contains(&name);
    let mut members: Vec<Vec<u8>> = Vec::new();
    for line in lines {
        for m in line.split(|b| *b == b',') {
            let m = m.trim_ascii();
            if m.is_empty() {
                continue;
            }
            members.push(if insensitive { tidy(m) } else { m.to_vec() });
        }
    }
    if UNORDERED.contains(&name) {
        members.sort();
    }
    Some(Bytes::from(members.join(&b", "[..])))
}

/// Lowercase, no whitespace around `;` or `=`.
fn tidy(m: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(m.len());
    for part in m.split(|b| *b == b';') {
        if !out.is_empty() {
            out.push(b';');
        }
        let mut kv = part.splitn(2, |b| *b == b'=');
        let k = kv.next().unwrap_or_default().trim_ascii();
        out.extend(k.iter().map(u8::to_ascii_lowercase));
        if let Some(v) = kv.next() {
            out.push(b'=');
            out.extend(v.trim_ascii().iter().map(u8::to_ascii_lowercase));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::tests::h;

    /// (field name, request fields, normalised value)
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], Option<&'a str>);

    #[test]
    fn normalisation_table() {
        let cases: &[Case] = &[
            ("accept-language", &[], None),
            (
                "accept-language",
                &[("Accept-Language", "en-US, fr;q=0.5")],
                Some("en-us, fr;q=0.5"),
            ),
            (
                "accept-language",
                &[("Accept-Language", "fr ; q=0.5,EN-us")],
                Some("en-us, fr;q=0.5"),
            ),
            (
                "accept-language",
                &[
                    ("Accept-Language", "fr;q=0.5"),
                    ("Accept-Language", "en-us"),
                ],
                Some("en-us, fr;q=0.5"),
            ),
            (
                "accept-encoding",
                &[("Accept-Encoding", "GZIP,  br")],
                Some("br, gzip"),
            ),
            (
                "accept",
                &[("Accept", "Text/HTML, application/json")],
                Some("text/html, application/json"),
            ),
            (
                "x-tenant",
                &[("X-Tenant", " Blue ,, Red ")],
                Some("Blue, Red"),
            ),
            ("x-tenant", &[("X-Tenant", "Red, Blue")], Some("Red, Blue")),
        ];
        for (name, headers, want) in cases {
            let got = request_value(&h(headers), name, false);
            assert_eq!(
                got.as_deref(),
                want.map(str::as_bytes),
                "{name} {headers:?}"
            );
        }
        assert_eq!(
            request_value(
                &h(&[("Accept-Encoding", "gzip, br")]),
                "accept-encoding",
                true
            )
            .as_deref(),
            Some(&b"br"[..])
        );
    }
}
