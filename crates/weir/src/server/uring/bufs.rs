//! The provided buffers of a worker's ring (`server/uring/mod.rs`): where the kernel puts what
//! it receives, and how buffers go back to it.

use std::io;
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::types;

use super::consts::BUF_SIZE;

/// The provided buffers: a page-aligned ring of entries the kernel takes buffers from, and the
/// buffers themselves, both anonymous mappings owned by the driver.
pub(super) struct BufRing {
    pub(super) entries: *mut types::BufRingEntry,
    pub(super) mem: *mut u8,
    /// The tail as this side last wrote it (published to the kernel by [`BufRing::publish`]).
    pub(super) tail: u16,
    /// How many buffers (a power of two).
    pub(super) n: u16,
}

impl BufRing {
    pub(super) fn new(n: u16) -> io::Result<BufRing> {
        let entries = map(usize::from(n) * std::mem::size_of::<types::BufRingEntry>())?;
        let mem = match map(usize::from(n) * BUF_SIZE) {
            Ok(m) => m,
            Err(e) => {
                unmap(
                    entries,
                    usize::from(n) * std::mem::size_of::<types::BufRingEntry>(),
                );
                return Err(e);
            }
        };
        let mut ring = BufRing {
            entries: entries.cast(),
            mem,
            tail: 0,
            n,
        };
        for bid in 0..n {
            ring.give(bid);
        }
        ring.publish();
        Ok(ring)
    }

    /// Puts buffer `bid` back (visible to the kernel at the next [`BufRing::publish`]).
    pub(super) fn give(&mut self, bid: u16) {
        let at = usize::from(self.tail & (self.n - 1));
        // SAFETY: `at` < n, the number of entries mapped at `entries`; the kernel reads an
        // entry only once the tail is published past it, which happens after this write.
        #[allow(unsafe_code)]
        let entry = unsafe { &mut *self.entries.add(at) };
        entry.set_addr(self.mem as u64 + u64::from(bid) * BUF_SIZE as u64);
        entry.set_len(BUF_SIZE as u32);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    pub(super) fn publish(&self) {
        // SAFETY: `entries` is the ring's page-aligned base, whose first entry's `resv` field is
        // the shared tail; it is a valid, aligned u16 the kernel only reads.
        #[allow(unsafe_code)]
        let tail = unsafe { &*types::BufRingEntry::tail(self.entries).cast::<AtomicU16>() };
        tail.store(self.tail, Ordering::Release);
    }

    /// The first `len` bytes of buffer `bid`, which a completion said the kernel filled.
    pub(super) fn bytes(&self, bid: u16, len: usize) -> &[u8] {
        debug_assert!(bid < self.n && len <= BUF_SIZE);
        // SAFETY: buffer `bid` lies inside the mapping, `len` ≤ BUF_SIZE, and the kernel wrote
        // it before posting the completion that named it; it is not handed back to the kernel
        // (`give`) while this borrow lives.
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts(self.mem.add(usize::from(bid) * BUF_SIZE), len)
        }
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        unmap(
            self.entries.cast(),
            usize::from(self.n) * std::mem::size_of::<types::BufRingEntry>(),
        );
        unmap(self.mem, usize::from(self.n) * BUF_SIZE);
    }
}

pub(super) fn map(len: usize) -> io::Result<*mut u8> {
    // SAFETY: an anonymous private mapping with no address hint touches no existing memory.
    #[allow(unsafe_code)]
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(p.cast())
}

pub(super) fn unmap(p: *mut u8, len: usize) {
    // SAFETY: `p` and `len` are a mapping made by `map`, unmapped once (its owner's drop).
    #[allow(unsafe_code)]
    unsafe {
        libc::munmap(p.cast(), len);
    }
}
