//! The reverse proxy: upstream pools, load balancing, health, and the `proxy` route action.
//!
//! * [`upstream`] (its servers' addresses parsed in `address.rs`): a compiled pool — servers with their resolved addresses and shared health
//!   state (atomics, because every worker reads and updates it), and the pool's policies.
//! * [`balance`]: load-balancing policies, one file each, instantiated per worker.
//! * [`route`]: the compiled `proxy` action — upstream, path rewrites, Host, and its filters
//!   (header edits, forwarding fields, `Via`: `filters/`).
//! * [`exchange`]: the upstream side of an exchange — checkout or connect, the upstream request
//!   head, the response head, passive-health accounting (revalidations go through the
//!   pipeline's one upstream phase: `pipeline/fetch.rs`).
//! * [`health`]: the background thread that runs active checks and re-resolves DNS names.
//! * [`outlier`]: ejecting servers that fail in a row (Envoy's outlier detection).
//! * [`limits`]: caps on connections, pending requests, requests and retries per upstream.
//! * [`shadow`]: delivering a mirror's copies to a shadow upstream.
//! * [`fastcgi`]: FastCGI to upstreams (`protocol: fastcgi`, php-fpm): records, the CGI
//!   environment, kept connections (the exchange: `pipeline/forward_cgi.rs`).
//! * [`h2_client`]: weir's HTTP/2 client (`protocol: h2`, gRPC): connections per server,
//!   streams; [`h2_upstream`]: a request as an HTTP/2 server sees it (the exchange:
//!   `pipeline/forward_h2.rs`).
//! * [`tls`]: TLS to upstream servers (verification, SNI, client certificates, resumption);
//!   [`socket`]: the socket a server names (TCP, unix-domain, TLS) and connecting to it.
//! * [`pool`]: per-worker idle upstream connections; [`per_worker`]: the rest of a worker's
//!   state per upstream (balancer, in-flight counts, retry budget).
//!
//! Relaying between an upstream and a client (streaming both bodies, retries, 1xx, upgrades) is
//! a pipeline phase: `pipeline/forward.rs`.

mod address;
pub mod balance;
pub mod exchange;
pub mod fastcgi;
pub mod grpc_health;
pub mod grpc_web;
pub mod h2_client;
pub mod h2_upstream;
pub mod limits;
pub mod outlier;
pub mod per_worker;
pub mod pool;
pub mod route;
pub mod shadow;
pub mod socket;
pub mod tls;
pub mod upstream;
