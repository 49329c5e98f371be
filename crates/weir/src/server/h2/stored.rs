//! The HPACK fields of stored heads (a cache object's, a KV value's), made once per head and
//! worker and then copied, as an HTTP/1.1 hit copies the stored head itself (issue 54: "a hit
//! writes stored bytes for its HEADERS frame"). Encoding a hit's ten or so stored fields for
//! each HTTP/2 response cost more than the rest of its head.
//!
//! Memoized here, by the head's address and length in a small direct-mapped table, rather than
//! in the stored object: the cache crate stays protocol-blind, and an object's block is made
//! only if HTTP/2 serves it. A stored head is immutable while referenced; a freed one's address
//! may be reused by another head, so every hit compares the head's bytes with the copy the
//! entry keeps (a `memcmp`), and a different head replaces the entry.

use std::cell::RefCell;

/// Entries per worker: direct-mapped by address.
const ENTRIES: usize = 256;

struct Entry {
    key: (usize, usize),
    head: Box<[u8]>,
    block: Box<[u8]>,
}

thread_local! {
    static TABLE: RefCell<Vec<Option<Entry>>> = RefCell::new((0..ENTRIES).map(|_| None).collect());
}

/// Appends the HPACK fields of stored head `head` (status line, field lines; its status is
/// written apart).
pub(super) fn put_fields(head: &[u8], out: &mut Vec<u8>) {
    let key = (head.as_ptr() as usize, head.len());
    let slot = (key.0 >> 4).wrapping_add(key.1) % ENTRIES;
    TABLE.with_borrow_mut(|table| {
        if let Some(e) = &table[slot] {
            if e.key == key && *e.head == *head {
                out.extend_from_slice(&e.block);
                return;
            }
        }
        let start = out.len();
        super::lines::put_lines(super::lines::after_status_line(head), out);
        table[slot] = Some(Entry {
            key,
            head: head.into(),
            block: out[start..].into(),
        });
    });
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn fields(head: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        put_fields(head, &mut out);
        out
    }

    /// The memo gives what encoding gives, and a different head at the same address (a freed
    /// object's memory reused) is encoded anew, not served the old block.
    #[test]
    fn a_reused_address_is_never_served_another_head_s_block() {
        let a =
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nETag: \"a\"\r\nContent-Length: 5\r\n"
                .to_vec();
        let mut direct = Vec::new();
        crate::server::h2::lines::put_lines(
            crate::server::h2::lines::after_status_line(&a),
            &mut direct,
        );
        let mut buf = a.clone();
        assert_eq!(fields(&buf), direct);
        assert_eq!(fields(&buf), direct, "from the memo");
        // Same address and length, other bytes.
        buf.copy_from_slice(&b"HTTP/1.1 200 OK\r\nContent-Type: text/plainETag: \"b\"\r\nX-Other: 1\r\nContent-Length: 5\r\n"[..a.len()]);
        let mut want = Vec::new();
        crate::server::h2::lines::put_lines(
            crate::server::h2::lines::after_status_line(&buf),
            &mut want,
        );
        assert_ne!(want, direct);
        assert_eq!(fields(&buf), want);
    }
}
