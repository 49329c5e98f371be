//! The request body's limits: what a connection reads before its route is known (the largest
//! any route takes), and the chosen route's own (`limits.max_body_bytes` per route or site).

use weir_http::{BodyKind, RequestHead};

use crate::error::Error;

/// A declared body over what any route takes (`limits.max_body_bytes`, or a route's own above
/// it) is refused (413) before anything of it is read or forwarded, over either protocol (an
/// HTTP/2 `content-length` once reached the origin first); the route's own limit follows once
/// it is chosen ([`route_body_limit`]).
pub(crate) fn check_declared_length(
    head: &RequestHead,
    limits: &crate::runtime::Limits,
) -> Result<(), Error> {
    match head.body {
        BodyKind::Length(n) if n > limits.body_ceiling => {
            Err(weir_http::ParseError::BodyTooLarge.into())
        }
        _ => Ok(()),
    }
}

/// The body limit of `route` (its own, else `limits.max_body_bytes`), when it is below what
/// the connection reads anyway: `Err` (413) for a declared length past it, else the cap to
/// hold the body to. `Ok(None)`: nothing to do (no body, or no lower limit).
pub(super) fn route_body_limit(
    head: &RequestHead,
    route: &crate::routes::Route,
    limits: &crate::runtime::Limits,
) -> Result<Option<u64>, ()> {
    if head.body == BodyKind::Empty {
        return Ok(None);
    }
    let max = route.max_body_bytes.unwrap_or(limits.max_body_bytes);
    if max >= limits.body_ceiling {
        return Ok(None);
    }
    match head.body {
        BodyKind::Length(n) if n > max => Err(()),
        _ => Ok(Some(max)),
    }
}
