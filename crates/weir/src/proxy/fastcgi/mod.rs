//! FastCGI to upstreams (`protocol: fastcgi`): php-fpm and other FastCGI responders, over TCP
//! or a unix socket, with `FCGI_KEEP_CONN` and the connections kept per worker and server.
//!
//! The exchange itself is the upstream phase's (`pipeline/forward_cgi.rs`): it builds the
//! request as for any upstream, reads it back as the CGI environment ([`params`]), writes the
//! records ([`record`]) and turns the CGI response head ([`reply`]) into the client's.
//!
//! - [`script`]: which script a path runs; with `require_file` (the default) a script that is
//!   not a file under the root is answered 404 without asking the application, a directory
//!   without its index script 403 (or the fallback, `directories: fallback`).
//! - [`conn`]: connections (opened within the connect timeout, kept idle) and the exchange's
//!   buffers.
//! - [`config`]: the `fastcgi:` settings.
//!
//! Until 2026-11-29 each request was bridged through an in-memory HTTP/1.1 pipe to a task of
//! its own (as HTTP/2 upstreams still are, `h2_upstream.rs`): an HTTP/1.1 encode and parse on
//! each side of the pipe, 44.9k user-space instructions a request against 32.9k now, and a
//! `MSG_PEEK` per request (see `conn.rs`).

pub mod config;
pub mod conn;
pub mod params;
pub mod record;
pub mod reply;
pub mod script;

pub use conn::Idle;
