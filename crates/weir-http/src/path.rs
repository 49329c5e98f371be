//! One normal form for request paths, made once by the parser so that routing, filters, the
//! cache key and the request sent upstream all see the same path (issue 33 §1: `/api/../private/x`
//! matched a public route and reached the private content of an origin that normalises).
//!
//! The form (RFC 3986 §6.2.2): percent-encoded unreserved bytes decoded (`%70` → `p`, `%2e` →
//! `.`), other escapes kept with upper-case hex (`%3f` → `%3F`), runs of `/` merged, and dot
//! segments removed (§5.2.4; `..` above the root stays at the root). What cannot be normalised
//! without guessing what the origin will make of it is refused (400), as Traefik's request-path
//! checks and Envoy's `path_with_escaped_slashes_action: REJECT_REQUEST` do:
//!
//! - an encoded `/` or `\` (`%2F`, `%5C`): a segment boundary to some origins, not to others
//!   (`keep_encoded_slashes` passes them through untouched, for origins that need them);
//! - a raw `\` (a separator on Windows origins), an encoded NUL (`%00`);
//! - an encoded `%` (`%25`): whatever follows it is another escape to an origin that decodes
//!   twice (`%252e`, `%2570`, `%25%32%65`); Traefik refuses it by default too;
//! - `;` (path parameters), raw or encoded (`%3B`): Tomcat and Jetty drop `;...` from a segment
//!   (`/private;x/` is `/private/` to them, `..;` is `..`), which no route can see
//!   (`keep_semicolons` passes raw ones for origins that use them, as `;jsessionid=`);
//! - an encoded `?` or `#` (`%3F`, `%23`): a query or fragment to an origin that decodes first;
//! - bytes that are never UTF-8 (`%C0`, `%C1`, `%F5`–`%FF`): overlong encodings (`%C0%AE` is `.`
//!   to a lax decoder);
//! - a malformed escape (`%zz`, `%4`);
//! - raw bytes above 0x7F (RFC 3986 wants them escaped; `keep.utf8` passes UTF-8 through);
//! - Unicode look-alikes of ASCII, raw or escaped: every character NFKC folds into ASCII
//!   (U+FF0E `．`, U+FF0F `／`, U+2025 `‥`, U+FE52 `﹒`, U+FF3C `＼`, fullwidth letters and
//!   `％` ...): `/%EF%BC%8E%EF%BC%8E/private` is `/../private`, and `/%EF%BD%90rivate/`
//!   `/private/`, to an origin that applies NFKC (issue 52 and its review).
//!
//! Case, trailing dots and spaces are left as they are: an origin that folds `/PRIVATE/` into
//! `/private/` must be matched by routes written for it.
//!
//! Cost: a path that is already normal (no `%`, `\`, `//` or dot segment: nearly every request)
//! is one pass over its bytes and no copy; only the others are rewritten into a new buffer.

/// Why a path was refused (the 400's reason).
pub type Refusal = &'static str;

/// Bytes [`is_normal`] looks at: 1 ends the fast path at once, 2 is a `/`.
const CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0x80;
    while b < 256 {
        t[b] = 1;
        b += 1;
    }
    t[b'%' as usize] = 1;
    t[b'\\' as usize] = 1;
    t[b';' as usize] = 1;
    t[b'/' as usize] = 2;
    t
};

/// Whether `path` is already in normal form: one pass, no allocation. A table lookup per byte
/// (111 instructions per `/hello` request with a `match` per byte, callgrind; see the note in
/// `docs/config.md`, "Request paths").
#[inline]
fn is_normal(path: &[u8]) -> bool {
    if path.first() == Some(&b'.') && is_dot_segment_tail(&path[1..]) {
        return false;
    }
    for (i, &b) in path.iter().enumerate() {
        match CLASS[b as usize] {
            0 => {}
            1 => return false,
            _ => match path.get(i + 1) {
                Some(b'/') => return false,
                Some(b'.') if is_dot_segment_tail(&path[i + 2..]) => return false,
                _ => {}
            },
        }
    }
    true
}

/// Whether a segment that began with `.` is a dot segment (`.` or `..`, possibly with `;`
/// parameters): `rest` is what follows that first dot.
fn is_dot_segment_tail(rest: &[u8]) -> bool {
    let rest = rest.strip_prefix(b".").unwrap_or(rest);
    matches!(rest.first(), None | Some(b'/') | Some(b';'))
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// What a listener passes through that is refused by default.
#[derive(Debug, Clone, Copy, Default)]
pub struct Keep {
    /// `%2F` and `%5C`.
    pub encoded_slashes: bool,
    /// Raw `;`.
    pub semicolons: bool,
    /// Raw UTF-8 (bytes above 0x7F).
    pub utf8: bool,
}

/// Whether a non-ASCII character of `text` is one NFKC folds into ASCII (`．` → `.`, `／` →
/// `/`, `ｐ` → `p`, `％` → `%`, `ﬁ` → `fi`): a look-alike, which an origin that normalises
/// reads as another path than every route saw. Only paths with escapes or non-ASCII bytes get
/// here (the rewrite), so the per-character look-up costs the common path nothing.
fn has_lookalike(text: &str) -> bool {
    let nfkc = icu_normalizer::ComposingNormalizerBorrowed::new_nfkc();
    let mut one = [0u8; 4];
    text.chars().filter(|c| !c.is_ascii()).any(|c| {
        let folded = nfkc.normalize(c.encode_utf8(&mut one));
        folded.bytes().any(|b| b.is_ascii())
    })
}

/// The normal form of `path` (a request target's path, before any `?`): `Ok(None)` when it is
/// already normal (the caller keeps its slice), `Ok(Some(new))` when rewritten, `Err` when it
/// is refused.
pub fn normalize(path: &[u8], keep_encoded_slashes: bool) -> Result<Option<Vec<u8>>, Refusal> {
    normalize_with(
        path,
        Keep {
            encoded_slashes: keep_encoded_slashes,
            ..Keep::default()
        },
    )
}

/// [`normalize`], with what `keep` passes through. The check that a path is already normal is
/// inlined into the parser; the rewrite is not (it is rare).
#[inline]
pub fn normalize_with(path: &[u8], keep: Keep) -> Result<Option<Vec<u8>>, Refusal> {
    if is_normal(path) {
        return Ok(None);
    }
    rewrite(path, keep).map(Some)
}

/// The normal form of a path that is not in it, or why it is refused.
#[cold]
#[inline(never)]
fn rewrite(path: &[u8], keep: Keep) -> Result<Vec<u8>, Refusal> {
    let Keep {
        encoded_slashes: keep_encoded_slashes,
        semicolons: keep_semicolons,
        utf8: keep_utf8,
    } = keep;
    // 1. Escapes: decode the unreserved, refuse the unsafe, upper-case the rest. Segments are
    //    split on the raw `/` only, so a kept `%2F` stays inside its segment.
    let mut decoded = Vec::with_capacity(path.len());
    // Every escape decoded, for one check: the bytes must be UTF-8 (an overlong `%E0%80%AE` is
    // `.` to a lax decoder; `%C0`/`%C1` and `%F5`-`%FF` alone were not enough).
    let mut text = Vec::with_capacity(path.len());
    let mut i = 0;
    while i < path.len() {
        let b = path[i];
        match b {
            b'\\' => return Err("backslash in request path"),
            b';' if !keep_semicolons => return Err("path parameters (;) in request path"),
            b'%' => {
                let (Some(h), Some(l)) = (
                    path.get(i + 1).copied().and_then(hex),
                    path.get(i + 2).copied().and_then(hex),
                ) else {
                    return Err("malformed percent-encoding in request path");
                };
                let c = h << 4 | l;
                text.push(c);
                match c {
                    0 => return Err("encoded NUL in request path"),
                    b'/' | b'\\' if !keep_encoded_slashes => {
                        return Err("encoded slash in request path")
                    }
                    b'%' => return Err("encoded percent sign in request path"),
                    b';' | b'?' | b'#' => return Err("encoded ; ? or # in request path"),
                    0xC0 | 0xC1 | 0xF5..=0xFF => {
                        return Err("a byte that is never UTF-8 in request path")
                    }
                    c if unreserved(c) => decoded.push(c),
                    c => {
                        const HEX: &[u8; 16] = b"0123456789ABCDEF";
                        decoded.extend_from_slice(&[
                            b'%',
                            HEX[(c >> 4) as usize],
                            HEX[(c & 15) as usize],
                        ]);
                    }
                }
                i += 3;
            }
            0x80..=0xFF if !keep_utf8 => return Err("a raw non-ASCII byte in request path"),
            b => {
                decoded.push(b);
                text.push(b);
                i += 1;
            }
        }
    }
    let Ok(text) = std::str::from_utf8(&text) else {
        return Err("a request path that is not UTF-8 once decoded");
    };
    if !text.is_ascii() && has_lookalike(text) {
        return Err("a Unicode look-alike of an ASCII character in request path");
    }
    // 2. Segments: merge empty ones (`//`), drop `.`, pop on `..` (not above the root).
    let mut out: Vec<u8> = Vec::with_capacity(decoded.len());
    let trailing_slash = decoded.last() == Some(&b'/');
    let mut ends_in_dir = false;
    for seg in decoded.split(|b| *b == b'/') {
        ends_in_dir = false;
        match seg {
            b"" => continue,
            b"." => ends_in_dir = true,
            b".." => {
                let cut = out.iter().rposition(|b| *b == b'/').unwrap_or(0);
                out.truncate(cut);
                ends_in_dir = true;
            }
            s if s.first() == Some(&b'.') && is_dot_segment_tail(&s[1..]) => {
                return Err("dot segment with parameters in request path");
            }
            s => {
                out.push(b'/');
                out.extend_from_slice(s);
            }
        }
    }
    if out.is_empty() || ends_in_dir || trailing_slash {
        out.push(b'/');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::{normalize, normalize_with};

    fn n(p: &str) -> Result<String, &'static str> {
        normalize(p.as_bytes(), false)
            .map(|o| String::from_utf8(o.unwrap_or_else(|| p.as_bytes().to_vec())).unwrap())
    }

    #[test]
    fn already_normal_paths_are_not_copied() {
        for p in [
            "/",
            "/a/b",
            "/a/b/",
            "/a.b/c..d/.e",
            "/..a/b",
            "/index.html",
            "",
        ] {
            assert_eq!(normalize(p.as_bytes(), false), Ok(None), "{p}");
        }
    }

    #[test]
    fn spellings_of_one_path_become_it() {
        for (raw, want) in [
            ("/api/../private/x", "/private/x"),
            ("/api/%2e%2e/private/x", "/private/x"),
            ("/api/%2E%2E/private/x", "/private/x"),
            ("/api/.%2e/private/x", "/private/x"),
            ("/x/../private/x", "/private/x"),
            ("/%70rivate/x", "/private/x"),
            ("/%70RIVATE/x", "/pRIVATE/x"),
            ("//private/x", "/private/x"),
            ("/private//x", "/private/x"),
            ("/./private/x", "/private/x"),
            ("/private/./x", "/private/x"),
            ("/../../private/x", "/private/x"),
            ("/a/b/..", "/a/"),
            ("/a/b/.", "/a/b/"),
            ("/a/..", "/"),
            ("/..", "/"),
            ("/a/b/", "/a/b/"),
            ("/a%20b", "/a%20b"),
            ("/a%40b%3d", "/a%40b%3D"),
            ("/a%2bb", "/a%2Bb"),
            ("/%7euser", "/~user"),
            ("/caf%C3%A9", "/caf%C3%A9"),
            ("/%e2%82%ac", "/%E2%82%AC"),
        ] {
            assert_eq!(n(raw), Ok(want.to_string()), "{raw}");
        }
    }

    #[test]
    fn unsafe_spellings_are_refused() {
        for raw in [
            "/api/..%2Fprivate/x",
            "/private%2Fx",
            "/private%2fx",
            "/private%5Cx",
            "/private\\x",
            "/a%00b",
            "/api/%252e%252e/private/x",
            "/a%252Fb",
            "/api/..;/private/x",
            "/api/.;x/private",
            "/private;a/x",
            "/private;/x",
            "/api/..%3b/private/x",
            "/a%3fb",
            "/a%23b",
            "/%2570rivate/x",
            "/%25%37%30rivate/x",
            "/api/%25%32%65%25%32%65/private/x",
            "/api/%25252e%25252e/private/x",
            "/api/%c0%ae%c0%ae/private/x",
            "/api/%E0%80%AE%E0%80%AE/private/x",
            "/api/%F0%80%80%AE/private/x",
            "/api/..%E0%80%AFprivate/x",
            "/a%e9",
            "/a%ff",
            "/a%25",
            "/a%zz",
            "/a%4",
            "/a%",
        ] {
            assert!(n(raw).is_err(), "{raw} was accepted as {:?}", n(raw));
        }
    }

    /// Issue 52: look-alikes of `.` and `/` (escaped or raw) and raw non-ASCII bytes are
    /// refused; escaped UTF-8 letters pass; `keep.utf8` passes raw UTF-8 but never a look-alike.
    #[test]
    fn unicode_look_alikes_and_raw_non_ascii_are_refused() {
        let utf8 = |p: &[u8]| {
            normalize_with(
                p,
                super::Keep {
                    utf8: true,
                    ..super::Keep::default()
                },
            )
        };
        for escaped in [
            "/%EF%BC%8E%EF%BC%8E/private/x",
            "/a%EF%BC%8Fb",
            "/%E2%80%A5/private",
            "/%EF%B9%92%EF%B9%92/x",
            "/x%EF%BC%BCy",
            "/%ef%bc%8e%ef%bc%8e/private",
            // The review of issue 52: fullwidth letters and percent signs.
            "/%EF%BD%90rivate/p",
            "/priv%EF%BD%81te/p",
            "/x/%EF%BC%852e%EF%BC%852e/private/p",
            "/x/%EF%B9%AA2e/private/p",
        ] {
            assert!(n(escaped).is_err(), "{escaped}");
            assert!(
                utf8(escaped.as_bytes()).is_err(),
                "{escaped} with utf8 kept"
            );
        }
        for raw in [
            "/．．/private",
            "/a／b",
            "/‥/private",
            "/﹒﹒/x",
            "/x＼y",
            "/ｐrivate/",
        ] {
            assert!(n(raw).is_err(), "{raw}");
            assert!(utf8(raw.as_bytes()).is_err(), "{raw} with utf8 kept");
        }
        assert_eq!(n("/caf\u{e9}"), Err("a raw non-ASCII byte in request path"));
        assert!(n("/a\u{0430}b").is_err());
        assert_eq!(
            utf8("/caf\u{e9}/x".as_bytes()),
            Ok(Some("/caf\u{e9}/x".as_bytes().to_vec()))
        );
        // Escaped letters are what RFC 3986 asks for: they pass, as they are.
        assert_eq!(n("/%D0%BF%D1%80"), Ok("/%D0%BF%D1%80".into()));
    }

    #[test]
    fn semicolons_can_be_kept() {
        let keep = |p: &str| {
            normalize_with(
                p.as_bytes(),
                super::Keep {
                    semicolons: true,
                    ..super::Keep::default()
                },
            )
        };
        assert_eq!(
            keep("/a;jsessionid=1/b").map(|o| o.map(|v| String::from_utf8(v).unwrap())),
            Ok(Some("/a;jsessionid=1/b".to_string()))
        );
        assert!(keep("/api/..;/private").is_err(), "never in a dot segment");
        assert!(keep("/a%3bb").is_err(), "encoded, never");
        assert!(normalize("/a;b=1/c".as_bytes(), false).is_err());
    }

    #[test]
    fn encoded_slashes_can_be_kept() {
        let keep = |p: &str| {
            normalize(p.as_bytes(), true).map(|o| o.map(|v| String::from_utf8(v).unwrap()))
        };
        assert_eq!(keep("/a%2fb"), Ok(Some("/a%2Fb".into())));
        assert_eq!(keep("/x/..%2Fy"), Ok(Some("/x/..%2Fy".into())));
        assert_eq!(keep("/a/../b%2Fc"), Ok(Some("/b%2Fc".into())));
        assert!(keep("/a%00").is_err());
        assert!(keep("/a\\b").is_err());
    }

    #[test]
    fn normalizing_is_idempotent() {
        for raw in [
            "/a/./b/../c//d/",
            "/%7e/%41",
            "/a%2b/..",
            "/x/y/../../..",
            "/a/b/.",
        ] {
            let once = n(raw).unwrap();
            assert_eq!(n(&once), Ok(once.clone()), "{raw}");
            assert_eq!(
                normalize(once.as_bytes(), false),
                Ok(None),
                "{raw} → {once}"
            );
        }
    }
}
