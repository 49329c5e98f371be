//! The TLS code's one error type (certificates and keys, ACME, RFC 2136 updates, OCSP, QUIC
//! settings), as `crate::error::Error` is the request path's: a [`Kind`] a caller can act on,
//! the message an operator reads, and the `io::Error` underneath when there is one. A caller
//! can tell a bad certificate ([`Kind::Certificate`]) from a file it could not write
//! ([`Kind::File`], [`TlsError::disk_full`]) or a CA that refused ([`Kind::Acme`]); before this
//! type (issue 54 §2) each was a `String`.
//!
//! Config loading still reports `(key path, message)` pairs (`runtime/`): there a `TlsError`
//! becomes its message, with the file and key named by the config error path.

use std::fmt;
use std::io;
use std::path::Path;

/// What went wrong, by what a caller would do about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A file could not be read or written: missing, permissions, a full disk.
    File,
    /// A certificate or private key that cannot be used: not PEM, not X.509, no key, a key
    /// that does not match, expired or not yet valid.
    Certificate,
    /// ACME: the CA refused or failed an account, order, challenge or finalization.
    Acme,
    /// DNS: an RFC 2136 update refused, a zone not found, a TSIG key or signature wrong.
    Dns,
    /// OCSP: a request that cannot be made, a response that is not valid.
    Ocsp,
    /// A remote could not be reached or broke the exchange (CA, DNS server, OCSP responder,
    /// on-demand `ask` endpoint).
    Network,
    /// Settings that cannot work together (QUIC transport, names).
    Config,
}

/// An error of the TLS code.
#[derive(Debug)]
pub struct TlsError {
    kind: Kind,
    message: String,
    io: Option<io::Error>,
}

impl TlsError {
    pub(crate) fn new(kind: Kind, message: impl fmt::Display) -> TlsError {
        TlsError {
            kind,
            message: message.to_string(),
            io: None,
        }
    }

    /// `verb` (read, write, rename…) failed on `path`.
    pub(crate) fn file(verb: &str, path: &Path, e: io::Error) -> TlsError {
        TlsError {
            kind: Kind::File,
            message: format!("cannot {verb} {}: {e}", path.display()),
            io: Some(e),
        }
    }

    /// An exchange with `whom` failed on the network.
    pub(crate) fn network(whom: impl fmt::Display, e: io::Error) -> TlsError {
        TlsError {
            kind: Kind::Network,
            message: format!("{whom}: {e}"),
            io: Some(e),
        }
    }

    pub(crate) fn certificate(message: impl fmt::Display) -> TlsError {
        TlsError::new(Kind::Certificate, message)
    }

    pub(crate) fn acme(message: impl fmt::Display) -> TlsError {
        TlsError::new(Kind::Acme, message)
    }

    pub(crate) fn dns(message: impl fmt::Display) -> TlsError {
        TlsError::new(Kind::Dns, message)
    }

    pub(crate) fn ocsp(message: impl fmt::Display) -> TlsError {
        TlsError::new(Kind::Ocsp, message)
    }

    pub(crate) fn config(message: impl fmt::Display) -> TlsError {
        TlsError::new(Kind::Config, message)
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The system error underneath, when there is one.
    pub fn io(&self) -> Option<&io::Error> {
        self.io.as_ref()
    }

    /// A write failed because the disk (or the user's quota) is full.
    pub fn disk_full(&self) -> bool {
        self.io.as_ref().is_some_and(|e| {
            e.kind() == io::ErrorKind::StorageFull
                || matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
        })
    }

    /// The same error, its message prefixed with where it happened (`{prefix}: {message}`).
    pub(crate) fn context(mut self, prefix: impl fmt::Display) -> TlsError {
        self.message = format!("{prefix}: {}", self.message);
        self
    }
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for TlsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.io.as_ref().map(|e| e as _)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_is_told_from_a_bad_certificate() {
        let full = TlsError::file(
            "write",
            Path::new("/var/lib/weir/acme/a.test.pem"),
            io::Error::from_raw_os_error(libc::ENOSPC),
        );
        assert_eq!(full.kind(), Kind::File);
        assert!(full.disk_full());
        assert!(full
            .to_string()
            .starts_with("cannot write /var/lib/weir/acme/a.test.pem: "));
        let bad = TlsError::certificate("cert.pem: certificate expired on 2020-01-01");
        assert_eq!(bad.kind(), Kind::Certificate);
        assert!(!bad.disk_full() && bad.io().is_none());
        let denied = TlsError::file(
            "read",
            Path::new("key.pem"),
            io::Error::from(io::ErrorKind::PermissionDenied),
        );
        assert!(!denied.disk_full(), "a refused read is not a full disk");
        let ctx = bad.context("site.test");
        assert_eq!(ctx.kind(), Kind::Certificate, "context keeps the kind");
        assert!(ctx.to_string().starts_with("site.test: cert.pem: "));
    }
}
