//! The io_uring transport's constants, shared by the ring's setup (`mod.rs`), its driver and
//! its buffers: a leaf, so that neither imports the folder's `mod.rs` for them.

use std::time::Duration;

/// Provided buffers per worker (a power of two; `WEIR_URING_BUFS` sets another, 1 to 32768)
/// and the size of each.
pub(super) const BUFS: u16 = 2048;
pub(super) const BUF_SIZE: usize = 4096;
/// How often running out of buffers is logged, at most.
pub(super) const STARVED_LOG_EVERY: Duration = Duration::from_secs(10);
/// The buffer group id of the provided buffers.
pub(super) const GROUP: u16 = 0;
/// Bytes in flight, and again queued behind them, per connection before a write waits (a
/// stalled client holds at most twice this in user space).
pub(super) const SEND_MAX: usize = 64 * 1024;

pub(super) const OP_RECV: u64 = 1;
pub(super) const OP_SEND: u64 = 2;
pub(super) const OP_CANCEL: u64 = 3;

pub(super) fn user_data(slot: usize, op: u64) -> u64 {
    ((slot as u64) << 2) | op
}
