//! The rest of a request that must wait for IO ([`Later`]): a boxed future whose block is
//! recycled on its worker thread rather than returned to malloc.
//!
//! Why by hand: the proxy's upstream phase is a future of ~2.3 KB, boxed once per request so
//! that an idle connection does not carry it (`pipeline/mod.rs`). glibc serves blocks over
//! 1,032 bytes from its bins, not from its per-thread cache: `malloc` and `free` of that one
//! block cost ~600 instructions per proxied request, 3% of the request (callgrind,
//! 2026-11-27, `bench/ab_weir.sh`). A few freed blocks are kept per worker thread, by
//! layout, and handed to the next request of the same shape. A pooled allocator crate would
//! replace glibc's malloc for everything, and the sweeper's `malloc_trim` (memory given back
//! after a burst, `server/worker/sweep.rs`) relies on glibc's heaps.
//!
//! The module's unsafe code is the block's life: written once, pinned, dropped once, given
//! back; each block states its invariant.
#![allow(unsafe_code)]

use std::alloc::Layout;
use std::cell::RefCell;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::ptr::NonNull;
use std::task::{Context, Poll};

/// Freed blocks kept per thread: enough for the requests one worker has in flight at once
/// under load (each holds its block while it waits for an upstream).
const KEPT: usize = 32;

/// A thread's freed blocks, given back to malloc when the thread ends.
struct Blocks {
    free: Vec<(Layout, NonNull<u8>)>,
}

impl Drop for Blocks {
    fn drop(&mut self) {
        for (layout, block) in self.free.drain(..) {
            // SAFETY: each block was allocated with `std::alloc::alloc(layout)` and is no
            // longer in use (it is on the free list).
            unsafe { std::alloc::dealloc(block.as_ptr(), layout) };
        }
    }
}

thread_local! {
    static BLOCKS: RefCell<Blocks> = const { RefCell::new(Blocks { free: Vec::new() }) };
}

/// A block for `layout` (not zero-sized): a kept one of that layout, else a new one.
fn take(layout: Layout) -> NonNull<u8> {
    let kept = BLOCKS
        .try_with(|b| {
            let mut b = b.borrow_mut();
            let i = b.free.iter().rposition(|(l, _)| *l == layout)?;
            Some(b.free.swap_remove(i).1)
        })
        .ok()
        .flatten();
    if let Some(block) = kept {
        return block;
    }
    // SAFETY: `layout` is not zero-sized (callers check).
    let raw = unsafe { std::alloc::alloc(layout) };
    NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout))
}

/// Returns a block taken with `layout`: kept for reuse while there is room, else freed.
fn give(layout: Layout, block: NonNull<u8>) {
    let kept = BLOCKS
        .try_with(|b| {
            let mut b = b.borrow_mut();
            if b.free.len() < KEPT {
                b.free.push((layout, block));
                true
            } else {
                false
            }
        })
        .unwrap_or(false);
    if !kept {
        // SAFETY: `block` came from `take(layout)`, i.e. `std::alloc::alloc(layout)`, and its
        // value was dropped.
        unsafe { std::alloc::dealloc(block.as_ptr(), layout) };
    }
}

/// A pinned, boxed future whose block is recycled (see the module doc). Like
/// `Pin<Box<dyn Future>>`: the future never moves once made, and is dropped in place.
pub(crate) struct Later<'a, T> {
    future: NonNull<dyn Future<Output = T> + 'a>,
    layout: Layout,
    /// Owns a `dyn Future + 'a` (for drop check and auto traits: neither `Send` nor `Sync`).
    _owns: PhantomData<Box<dyn Future<Output = T> + 'a>>,
}

impl<'a, T> Later<'a, T> {
    pub(crate) fn new<F: Future<Output = T> + 'a>(future: F) -> Later<'a, T> {
        let layout = Layout::new::<F>();
        let block: NonNull<F> = if layout.size() == 0 {
            NonNull::dangling()
        } else {
            take(layout).cast()
        };
        // SAFETY: `block` is valid for writes of an `F` and aligned for it: a fresh or kept
        // block of `F`'s exact layout, or dangling for a zero-sized `F`.
        unsafe { block.as_ptr().write(future) };
        Later {
            future: block,
            layout,
            _owns: PhantomData,
        }
    }
}

impl<T> Future for Later<'_, T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        // SAFETY: the future lives in its block until `drop`, is never moved out of it, and
        // `self` is its only owner: pinning it there is sound.
        let future = unsafe { Pin::new_unchecked(self.future.as_mut()) };
        future.poll(cx)
    }
}

impl<T> Drop for Later<'_, T> {
    fn drop(&mut self) {
        /// Gives the block back even if the future's drop panics.
        struct Release(Layout, NonNull<u8>);
        impl Drop for Release {
            fn drop(&mut self) {
                if self.0.size() != 0 {
                    give(self.0, self.1);
                }
            }
        }
        let _release = Release(self.layout, self.future.cast());
        // SAFETY: the future was written in `new` and is dropped exactly once, here.
        unsafe { std::ptr::drop_in_place(self.future.as_ptr()) };
    }
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use super::*;

    fn run<T>(f: Later<'_, T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn a_block_is_reused_by_the_next_future_of_its_shape() {
        let big = [7u8; 3000];
        let a = Later::new(async move { big.iter().map(|b| *b as usize).sum::<usize>() });
        let first = a.future.cast::<u8>();
        assert_eq!(run(a), 21_000);
        let b = Later::new(async move { big.len() });
        assert_eq!(b.future.cast::<u8>(), first, "the same block");
        assert_eq!(run(b), 3000);
        // Zero-sized futures take no block.
        assert_eq!(run(Later::new(std::future::ready(5))), 5);
    }

    #[test]
    fn unfinished_futures_are_dropped_and_their_values_with_them() {
        let owned = Rc::new(());
        let held = owned.clone();
        let pending = Later::new(async move {
            let _keep = held;
            std::future::pending::<()>().await;
        });
        assert_eq!(Rc::strong_count(&owned), 2);
        drop(pending);
        assert_eq!(Rc::strong_count(&owned), 1);
    }

    #[test]
    fn a_panicking_drop_still_gives_the_block_back() {
        struct Bomb([u8; 512]);
        impl Drop for Bomb {
            fn drop(&mut self) {
                panic!("boom {}", self.0[0]);
            }
        }
        let bomb = Bomb([1; 512]);
        let f = Later::new(async move {
            let _b = bomb;
            std::future::pending::<()>().await;
        });
        let block = f.future.cast::<u8>();
        let layout = f.layout;
        assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(f))).is_err());
        assert_eq!(take(layout), block, "kept, not lost");
        give(layout, block);
    }

    #[test]
    fn past_the_kept_count_blocks_go_back_to_malloc() {
        let layout = Layout::from_size_align(1500, 8).unwrap();
        let blocks: Vec<_> = (0..KEPT + 5).map(|_| take(layout)).collect();
        for b in &blocks {
            give(layout, *b);
        }
        let kept = BLOCKS.with(|b| b.borrow().free.iter().filter(|(l, _)| *l == layout).count());
        assert_eq!(kept, KEPT);
        // Empty the list for the other tests on this thread.
        for _ in 0..KEPT {
            let b = take(layout);
            // SAFETY: a block of `layout` from `std::alloc::alloc`, unused.
            unsafe { std::alloc::dealloc(b.as_ptr(), layout) };
        }
    }
}
