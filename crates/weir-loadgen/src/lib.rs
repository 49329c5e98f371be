//! `weir bench`: an HTTP/1.1, HTTP/2 and HTTP/3 load generator, plain or over TLS, that gives wrk's numbers, hey's numbers and the seed
//! 004 table, with sweeps over connection counts and SVG charts.
//!
//! * [`options`]: what to run (targets, connections, threads, duration or request count, open-loop
//!   rate, method, headers, body, `Connection: close`, pipelining, timeout).
//! * [`client`]: one connection's loop, on the `weir-http` codec; closed loop, or open loop
//!   where latency is measured from the *intended* send time (coordinated omission corrected, as
//!   wrk2 does).
//! * [`h2client`]: an HTTP/2 connection running several streams at once (h2load's `-m`);
//!   [`h3client`]: HTTP/3 over QUIC (quinn), one connection per UDP socket, streams as
//!   `--h2`'s, or a handshake per request with `--close`;
//!   [`transport`]: plain TCP or TLS (rustls) under HTTP/1.1 and HTTP/2.
//! * [`run`]: threads (each a current-thread tokio runtime), merging their results.
//! * [`report`]: wrk, hey, table and JSON output; [`chart`]: requests/s and p99 against
//!   connections, as SVG.
//!
//! Latency goes into HDR histograms at microsecond resolution with no sampling: every response
//! is recorded.

pub mod chart;
pub mod client;
pub mod h2client;
pub mod h3client;
pub mod options;
pub mod report;
pub mod run;
pub mod transport;

pub use options::{Options, Target};
pub use run::{run, RunResult};
