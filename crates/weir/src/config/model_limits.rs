//! `limits:`: sizes, counts and the request-path and field-name policies every listener
//! applies before routing (`docs/config.md`, "limits" and "Request paths").

use serde::Deserialize;

use super::units::Size;

/// Limits; the defaults follow what nginx and HAProxy operators expect.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Most client connections open at once, over all workers; more wait in the listen backlog.
    pub max_connections: usize,
    /// Largest request header section (431 beyond).
    pub max_header_bytes: Size,
    /// Longest request target (414 beyond).
    pub max_uri_bytes: Size,
    /// Largest request body (413 beyond).
    pub max_body_bytes: Size,
    /// Requests served on one connection before it is closed (0 = unlimited).
    pub max_requests_per_connection: u64,
    /// Listen backlog of each listening socket.
    pub backlog: u32,
    /// Request paths with `%2F` or `%5C` (an encoded `/` or `\`): refused with 400 (`reject`,
    /// the default) or passed through as they are (`keep`) for origins that need them.
    pub encoded_slashes: EncodedSlashes,
    /// Request paths with `;` (path parameters, `;jsessionid=`): refused with 400 (`reject`,
    /// the default: Tomcat and Jetty drop `;...` from a segment, which no route sees) or passed
    /// through (`keep`). `..;` and `%3B` are refused either way.
    pub semicolons: EncodedSlashes,
    /// Raw bytes above 0x7F in a request path (RFC 3986 wants them percent-encoded): refused
    /// with 400 (`reject`, the default) or passed through as UTF-8 (`keep`) for origins that
    /// need them. Unicode look-alikes of ASCII (U+FF0E `．`, U+FF0F `／`, fullwidth letters ...), raw
    /// or escaped, are refused either way.
    pub utf8_paths: EncodedSlashes,
    /// Request fields whose names hold `_`: kept (`allow`), left out (`drop`, nginx's
    /// `underscores_in_headers off`) or answered 400 (`reject`).
    pub underscores_in_headers: UnderscoresInHeaders,
}

/// `limits.underscores_in_headers`.
#[derive(Debug, Deserialize, Default, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum UnderscoresInHeaders {
    #[default]
    Allow,
    Drop,
    Reject,
}

/// What to do with an encoded `/` or `\` in a request path.
#[derive(Debug, Deserialize, Default, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum EncodedSlashes {
    #[default]
    Reject,
    Keep,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 65_536,
            max_header_bytes: Size(32 * 1024),
            max_uri_bytes: Size(8 * 1024),
            max_body_bytes: Size(1 << 20),
            max_requests_per_connection: 10_000,
            backlog: 4096,
            encoded_slashes: EncodedSlashes::Reject,
            semicolons: EncodedSlashes::Reject,
            utf8_paths: EncodedSlashes::Reject,
            underscores_in_headers: UnderscoresInHeaders::Allow,
        }
    }
}
