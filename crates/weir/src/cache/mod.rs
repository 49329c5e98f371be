//! The cache of `proxy` routes: zones (stores shared by all workers), the compiled cache
//! settings per route, and the `Cache-Status` header. The request flow is the pipeline's cache
//! phase, `pipeline/cache/`; the RFC 9111 rules and the store are the `weir-cache` crate.
//!
//! Request coalescing: the first miss for a key (the leader) fetches it; concurrent misses
//! (followers) are streamed the leader's response as it arrives — the leader publishes the head
//! and every body chunk into the zone's in-flight record ([`zone::Inflight`]) while relaying it to
//! its own client. An uncacheable answer releases followers to fetch on their own; an upstream
//! failure mid-body aborts them as it aborts the leader's client.

pub mod route;
pub mod status;
pub mod zone;

pub use route::CacheRoute;
pub use status::CacheStatus;
pub use zone::CacheZone;
