//! The cache stage of `proxy` routes: zones (stores shared by all workers), the compiled stage
//! per route, and the `Cache-Status` header. The request flow lives with the connection in
//! `server/cache_stage.rs`; the RFC 9111 rules and the store are the `weir-cache` crate.
//!
//! Divergence from the architecture notes, on purpose: collapsed requests wait for the first
//! request's response to be complete and are then served from the store, rather than being
//! streamed the response as it arrives. It keeps the leader's path a plain proxy with a tee;
//! waiters of a slow, large response see it later than they could.

pub mod route;
pub mod status;
pub mod zone;

pub use route::CacheRoute;
pub use status::CacheStatus;
pub use zone::CacheZone;
