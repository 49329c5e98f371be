//! Validation shared by the parts of the config that carry header names and values.

/// Header values must not be able to break the response framing.
pub(crate) fn check_header_value(v: &str) -> Result<(), String> {
    if v.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f) {
        return Err("header values must not contain control characters or line breaks".into());
    }
    Ok(())
}

/// Header names must be RFC 9110 tokens.
pub(crate) fn check_header_name(n: &str) -> Result<(), String> {
    let ok = !n.is_empty()
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!("{n:?} is not a valid header name"))
    }
}
