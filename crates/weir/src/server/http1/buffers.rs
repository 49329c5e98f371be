//! The connection's buffers: a per-worker pool of read and write buffers, so that 10k idle
//! keep-alive connections cost a task and a socket each rather than 16 KiB of buffers, and the
//! one way a connection reads more input into them.

use std::cell::RefCell;
use std::io;

use bytes::BytesMut;

use crate::server::client_io::ClientIo;

/// Pooled buffers larger than this are freed instead, so one big response does not pin memory.
const POOL_BUF_MAX: usize = 128 * 1024;
/// Capacity of a fresh read buffer.
pub(super) const READ_BUF: usize = 8 * 1024;
/// Idle buffers kept per worker.
const POOL_MAX: usize = 256;

thread_local! {
    static POOL: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
}

pub(super) fn take_buf() -> BytesMut {
    let mut b = POOL.with(|p| p.borrow_mut().pop()).unwrap_or_default();
    // Reclaims the whole original allocation once the request heads that borrowed it are gone.
    b.reserve(READ_BUF);
    b
}

pub(super) fn give_buf(mut b: BytesMut) {
    if b.capacity() == 0 || b.capacity() > POOL_BUF_MAX {
        return;
    }
    b.clear();
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < POOL_MAX {
            p.push(b);
        }
    });
}

/// Reads whatever is available into `buf`, growing it if it is nearly full.
pub(super) async fn read_more(io: &mut ClientIo, buf: &mut BytesMut) -> io::Result<usize> {
    if buf.capacity() - buf.len() < 1024 {
        buf.reserve(READ_BUF);
    }
    io.read_buf(buf).await
}
