//! The reverse proxy: upstream pools, load balancing, health, and the `proxy` route action.
//!
//! * [`upstream`]: a compiled pool — servers with their resolved addresses and shared health
//!   state (atomics, because every worker reads and updates it), and the pool's policies.
//! * [`balance`]: load-balancing policies, one file each, instantiated per worker.
//! * [`route`]: the compiled `proxy` action — path rewrites, header edits, forwarding headers.
//! * [`headers`]: hop-by-hop stripping and the X-Forwarded-* / Forwarded / Via rules.
//! * [`health`]: the background thread that runs active checks and re-resolves DNS names.
//! * [`pool`]: per-worker idle upstream connections; [`local`]: the rest of a worker's state
//!   per upstream (balancer, in-flight counts, retry budget).
//!
//! The exchange itself (connect, stream the request, relay the response, map failures to
//! 502/503/504) lives with the connection it serves, in `server/forward.rs`.

pub mod balance;
pub mod headers;
pub mod health;
pub mod local;
pub mod pool;
pub mod route;
pub mod upstream;
