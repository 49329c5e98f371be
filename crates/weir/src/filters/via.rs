//! `via: true`: `Via` on the upstream request and on every response (RFC 9110 §7.6.3). Each
//! names the protocol of the message weir received on that hop: the client's version (`1.0`,
//! `1.1`, `2`) upstream, the upstream's (HTTP/1.1 as weir relays it) on the response.

use bytes::{BufMut, BytesMut};
use weir_http::Reply;

use super::{Filter, Upward};

const LINE: &[u8] = b"Via: 1.1 weir\r\n";
const LINE_10: &[u8] = b"Via: 1.0 weir\r\n";
const LINE_2: &[u8] = b"Via: 2 weir\r\n";

#[derive(Debug)]
pub struct Via;

impl Filter for Via {
    fn phases(&self) -> super::Phases {
        super::Phases::UPSTREAM | super::Phases::RESPONSE
    }

    fn upstream_fields(&self, up: &Upward<'_>, out: &mut BytesMut) {
        out.put_slice(match up.client.version {
            "2" => LINE_2,
            "1.0" => LINE_10,
            _ => LINE,
        });
    }

    fn response<'a>(&'a self, reply: &mut Reply<'a>, _: &mut super::State, _: &mut BytesMut) {
        reply.add_lines(LINE);
    }
}
