//! The one error type of the request path, and the one place an error becomes a status code and
//! a canned response ([`Error::status`], [`canned`]).
//!
//! An [`Error`] says what went wrong ([`ErrorKind`]), on which side ([`Side`]: the client, an
//! upstream, or weir itself), whether another try may fix it, and why (the cause, for the log).
//! Whether the client still gets a response is decided from the kind alone: a client whose
//! request could not be framed gets a 4xx and the connection is closed; an upstream that failed
//! before a response head maps to 502/503/504; one that failed after the head was relayed cuts
//! the client connection (a truncated message, never a short one presented as complete).

use std::fmt;

use weir_http::{Framing, ParseError, Reply};

/// Which side of the proxy failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Client,
    Upstream,
    Internal,
}

/// What went wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request could not be parsed or framed (4xx/5xx per the parse error).
    BadRequest(ParseError),
    /// The head did not arrive within `timeouts.header`.
    HeaderTimeout,
    /// The request body stalled for `timeouts.body`.
    BodyTimeout,
    /// The client stopped reading for `timeouts.write`.
    WriteTimeout,
    /// The client closed in the middle of a request.
    ClientClosed,
    /// The client socket failed.
    ClientIo,
    /// No server of the upstream is up.
    NoServer,
    /// Connecting to the server failed.
    Connect,
    ConnectTimeout,
    /// The upstream reset or closed before a complete response head.
    UpstreamReset,
    /// No response head within `response_header`.
    ResponseTimeout,
    /// The upstream's response could not be parsed.
    BadResponse,
    /// The upstream failed after the response started: the client connection is cut.
    UpstreamAborted,
    /// `only-if-cached` and nothing usable is stored.
    NotCached,
    /// An upstream cap (`limits`: connections, pending, requests, retries) is reached.
    Overflow,
    /// A file could not be read while its body was being sent (static files): the server's
    /// side; the head is out, so the connection is cut, never a short body presented whole.
    File,
    /// The shield refused the request and closes the connection without a reply (a blocked
    /// client, or `action: close`).
    Refused,
    /// An unsafe method in 0-RTT early data (HTTP/3 with `early_data`): 425, RFC 8470.
    TooEarly,
    /// A gRPC call's own deadline (`grpc-timeout`) passed before the response head: 504
    /// (`DEADLINE_EXCEEDED`). The client's limit, not the server's failure: no passive-health
    /// mark, no retry.
    CallDeadline,
    /// A gRPC call's stream was quiet both ways for the route's `stream_idle` while the
    /// answer was relayed: the stream is cut. The route's limit, not the server's failure (as
    /// `CallDeadline`). Before the answer's head the wait is the server's to meet: a
    /// `ResponseTimeout`.
    StreamIdle,
}

/// An error with its cause.
#[derive(Debug)]
pub struct Error {
    pub kind: ErrorKind,
    cause: Option<String>,
}

impl Error {
    pub fn new(kind: ErrorKind) -> Error {
        Error { kind, cause: None }
    }

    /// An error with a cause for the log.
    pub fn with(kind: ErrorKind, cause: impl fmt::Display) -> Error {
        Error {
            kind,
            cause: Some(cause.to_string()),
        }
    }

    pub fn side(&self) -> Side {
        use ErrorKind::*;
        match self.kind {
            BadRequest(_) | HeaderTimeout | BodyTimeout | WriteTimeout | ClientClosed
            | ClientIo | Refused | TooEarly | CallDeadline | StreamIdle => Side::Client,
            NoServer | Connect | ConnectTimeout | UpstreamReset | ResponseTimeout | BadResponse
            | UpstreamAborted | Overflow => Side::Upstream,
            NotCached | File => Side::Internal,
        }
    }

    /// Whether another server may succeed, given which retry conditions the upstream allows and
    /// whether the request can be replayed (idempotent, no body).
    pub fn retryable(&self, on: &RetryOn, replayable: bool) -> bool {
        use ErrorKind::*;
        match self.kind {
            Connect | ConnectTimeout => on.connect,
            ResponseTimeout => replayable && on.timeout,
            UpstreamReset | BadResponse => replayable && on.reset,
            _ => false,
        }
    }

    /// The status to answer with, if the client can still be answered. The one mapping.
    pub fn status(&self) -> Option<u16> {
        use ErrorKind::*;
        match self.kind {
            BadRequest(e) => Some(e.status()),
            HeaderTimeout | BodyTimeout => Some(408),
            NoServer | Overflow => Some(503),
            TooEarly => Some(425),
            ConnectTimeout | ResponseTimeout | NotCached | CallDeadline | StreamIdle => Some(504),
            Connect | UpstreamReset | BadResponse => Some(502),
            WriteTimeout | ClientClosed | ClientIo | UpstreamAborted | File | Refused => None,
        }
    }

    /// A short, stable description for logs.
    pub fn as_str(&self) -> &'static str {
        use ErrorKind::*;
        match self.kind {
            BadRequest(e) => e.as_str(),
            HeaderTimeout => "request head timeout",
            BodyTimeout => "request body timeout",
            WriteTimeout => "write timeout",
            ClientClosed => "client closed mid-request",
            ClientIo => "socket error",
            NoServer => "no server up",
            Connect => "connect failed",
            ConnectTimeout => "connect timeout",
            UpstreamReset => "upstream reset",
            ResponseTimeout => "response header timeout",
            BadResponse => "malformed response",
            UpstreamAborted => "upstream failed mid-response",
            NotCached => "only-if-cached",
            Overflow => "upstream limit reached",
            File => "file read failed",
            Refused => "refused by the shield",
            TooEarly => "unsafe method in early data",
            CallDeadline => "the call's grpc-timeout passed",
            StreamIdle => "the gRPC stream was quiet for the route's stream_idle",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.cause {
            Some(c) => write!(f, "{}: {c}", self.as_str()),
            None => f.write_str(self.as_str()),
        }
    }
}

impl std::error::Error for Error {}

/// Gives an error its side and context where it arises (Pingora's `OrErr`): an `io::Error`
/// has no side of its own (a blanket `From<io::Error>` once made every upstream and file
/// failure a client's), so each `?` on one says what failed.
pub trait OrErr<T> {
    /// `Err(e)` becomes an [`Error`] of `kind`, its cause `context: e`.
    fn or_err(self, kind: ErrorKind, context: &'static str) -> Result<T, Error>;
}

impl<T, E: fmt::Display> OrErr<T> for Result<T, E> {
    #[inline]
    fn or_err(self, kind: ErrorKind, context: &'static str) -> Result<T, Error> {
        self.map_err(|e| Error::with(kind, format_args!("{context}: {e}")))
    }
}

impl From<ParseError> for Error {
    fn from(e: ParseError) -> Self {
        Error::new(ErrorKind::BadRequest(e))
    }
}

/// The retry conditions an upstream allows (`retries.on`).
#[derive(Debug, Clone, Default)]
pub struct RetryOn {
    /// Connect failures (nothing was sent: safe for any request).
    pub connect: bool,
    /// For idempotent requests without a body:
    pub timeout: bool,
    pub reset: bool,
}

/// The canned body of a status: `404 Not Found\n`.
pub fn canned_body(status: u16) -> String {
    format!("{status} {}\n", weir_http::response::reason(status))
}

/// The canned response for `status`: `server_line` (`Server: ...`, or empty), a `text/plain`
/// body from [`canned_body`]; the caller adds any fields (`Allow`, `Location`, `Cache-Status`).
pub fn canned(status: u16, body_len: usize, server_line: &[u8]) -> Reply<'_> {
    let mut r = Reply::new(status, Framing::Length(body_len as u64));
    r.add_lines(server_line);
    r.add_lines(b"Content-Type: text/plain; charset=utf-8\r\n");
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_maps_to_one_status_and_side() {
        use ErrorKind::*;
        let table = [
            (BadRequest(ParseError::UriTooLong), Some(414), Side::Client),
            (HeaderTimeout, Some(408), Side::Client),
            (BodyTimeout, Some(408), Side::Client),
            (WriteTimeout, None, Side::Client),
            (ClientClosed, None, Side::Client),
            (NoServer, Some(503), Side::Upstream),
            (Overflow, Some(503), Side::Upstream),
            (File, None, Side::Internal),
            (Connect, Some(502), Side::Upstream),
            (ConnectTimeout, Some(504), Side::Upstream),
            (UpstreamReset, Some(502), Side::Upstream),
            (ResponseTimeout, Some(504), Side::Upstream),
            (BadResponse, Some(502), Side::Upstream),
            (UpstreamAborted, None, Side::Upstream),
            (NotCached, Some(504), Side::Internal),
            (TooEarly, Some(425), Side::Client),
            (CallDeadline, Some(504), Side::Client),
            (StreamIdle, Some(504), Side::Client),
        ];
        for (kind, status, side) in table {
            let e = Error::new(kind);
            assert_eq!(e.status(), status, "{kind:?}");
            assert_eq!(e.side(), side, "{kind:?}");
        }
    }

    #[test]
    fn retries_follow_the_upstream_conditions_and_replayability() {
        use ErrorKind::*;
        let all = RetryOn {
            connect: true,
            timeout: true,
            reset: true,
        };
        assert!(
            Error::new(Connect).retryable(&all, false),
            "nothing was sent"
        );
        assert!(!Error::new(ResponseTimeout).retryable(&all, false));
        assert!(Error::new(ResponseTimeout).retryable(&all, true));
        assert!(!Error::new(UpstreamReset).retryable(&RetryOn::default(), true));
        assert!(!Error::new(NoServer).retryable(&all, true));
        assert!(!Error::new(CallDeadline).retryable(&all, true));
        assert_eq!(
            Error::with(Connect, "refused").to_string(),
            "connect failed: refused"
        );
    }
}
