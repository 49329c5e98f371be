//! weir: an HTTP accelerator — reverse proxy, RFC 9111 cache and API gateway in one binary.
//!
//! How the pieces fit (the intended shape is `shared/design/ARCHITECTURE.md`, beside this
//! repository):
//! * [`config`] turns a YAML file into a validated model ([`config::Source`]); [`runtime`]
//!   compiles it into the immutable [`runtime::RuntimeConfig`] the server runs on, with state
//!   that outlives a config (cache zones, upstream health) kept by name in a
//!   [`runtime::Registry`].
//! * [`server`] runs thread-per-core workers, each with its own SO_REUSEPORT listeners, and one
//!   task per connection driving the HTTP/1.1 codec from the `weir-http` crate.
//! * [`routes`] picks the route for a request; [`actions`] are what a route does (respond from
//!   config, serve static files, echo).
//! * [`proxy`] is the reverse proxy: upstream pools, balancing, health, forwarding rules.
//! * [`cache`] is the cache stage of proxy routes (zones, Cache-Status); the RFC 9111 rules and
//!   the store are the `weir-cache` crate. [`admin`] is the admin API (purge, stats, health).
//! * [`tls`] terminates TLS (rustls): certificates by SNI, resumption, mTLS.
//! * [`cli`] is the `weir` command line; [`bench_cmd`] is `weir bench` over the `weir-loadgen` crate.

pub mod access_log;
pub mod actions;
pub mod admin;
pub mod bench_cmd;
pub mod cache;
pub mod cli;
pub mod client_socket;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod error;
pub mod filters;
pub mod health;
pub mod import;
pub mod kv;
pub mod logs;
pub mod metrics;
pub mod pipeline;
pub mod providers;
pub mod proxy;
pub mod reload;
pub mod ring;
pub mod routes;
pub mod runtime;
pub mod server;
pub mod shield;
pub mod tcp;
pub mod tls;
pub mod trace;
pub mod vars;
