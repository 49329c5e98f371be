//! `via: true`: `Via: 1.1 weir` on the upstream request and on every response (RFC 9110 §7.6.3).

use bytes::{BufMut, BytesMut};
use weir_http::{Reply, RequestHead};

use super::{Client, Filter};

const LINE: &[u8] = b"Via: 1.1 weir\r\n";

#[derive(Debug)]
pub struct Via;

impl Filter for Via {
    fn upstream_fields(&self, _: &Client, _: &RequestHead, out: &mut BytesMut) {
        out.put_slice(LINE);
    }

    fn response<'a>(&'a self, reply: &mut Reply<'a>) {
        reply.add_lines(LINE);
    }
}
