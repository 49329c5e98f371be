//! Who the client is, as filters and the cache key see it: its address, the listener's scheme,
//! the protocol version `Via` names. (A peer fill's member flag is set by the request phase.)

use crate::filters::Client;

use super::downstream::Downstream;

/// What filters are told about the client.
pub(crate) fn client_of<D: Downstream>(d: &D) -> Client {
    Client {
        ip: d.peer().ip(),
        scheme: scheme_of(d),
        version: d.via_version(),
        member: false,
    }
}

/// `https` on a TLS connection, else `http`: for `X-Forwarded-Proto`, `Forwarded` and the
/// cache key.
#[inline]
pub(crate) fn scheme_of<D: Downstream>(d: &D) -> &'static str {
    if d.tls().is_some() {
        "https"
    } else {
        "http"
    }
}
