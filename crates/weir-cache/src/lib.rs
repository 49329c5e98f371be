//! weir's HTTP cache, without IO: everything here is a pure function or a data structure, so the
//! RFC 9111 rules can be tested as tables, with a clock that is just a number.
//!
//! * [`directives`]: `Cache-Control` / `CDN-Cache-Control` parsing.
//! * [`vary`]: a request's normalised value of a `Vary` field.
//! * [`structured`]: RFC 8941 Dictionaries (for `CDN-Cache-Control`).
//! * [`policy`]: storability, freshness lifetime, age, and the verdict for a stored response
//!   given a request (fresh, stale but servable, must revalidate).
//! * [`extent`]: `Content-Range` parsing (the bytes a partial response holds).
//! * [`key`]: cache keys (method class, scheme, host, path, query, chosen headers/cookies/params).
//! * [`object`]: a stored response: its pre-encoded head, body, and the metadata policy needs.
//! * [`stored`]: building, refreshing (304) and invalidating stored responses.
//! * [`slice`]: partial content: representations stored in fixed-size slices, 206s stored and
//!   combined (RFC 9111 §3.3, §3.4).
//! * [`storage`]: the storage seam every tier implements (lookup now or later, insert, purge,
//!   usage); a zone holds its tiers as a list of them.
//! * [`variants`]: the keys a tier holding one object per key writes Vary variants under.
//! * [`disk`]: the disk tier (segments, index snapshot, checksums, persistent purges, an IO
//!   pool and a writer thread: the one module here that does IO).
//! * [`store`]: the memory store — sharded, a hard byte limit that counts keys, heads and bodies,
//!   S3-FIFO eviction (scan resistant), Vary variants, a tag index for purges, stats.
//!
//! Apart from [`disk`], time is passed in as seconds (`now: u64`, Unix time): the caller owns the clock ([`clock`]).

pub mod clock;
pub mod directives;
pub mod disk;
pub mod extent;
pub mod key;
pub mod object;
pub mod policy;
pub mod slice;
pub mod storage;
pub mod store;
pub mod stored;
pub mod striped;
pub mod structured;
pub mod variants;
pub mod vary;

pub use clock::{Clock, ManualClock, SystemClock};
pub use directives::Directives;
pub use disk::{DiskConfig, DiskTier};
pub use key::{CacheKey, KeySpec};
pub use object::{CachedObject, ObjectMeta};
pub use policy::{Freshness, NoStore};
pub use storage::PurgeSelector;
pub use storage::{FileBody, Lookup, Pending, Purged, Read, Storage};
pub use store::{MemoryStore, Stats};
pub use striped::Striped;
