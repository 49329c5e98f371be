//! The HTTP/1.1 connection as the pipeline's [`Downstream`]: request bodies (lengths, chunks,
//! `100 Continue`, trailers), replies encoded with `weir_http::Reply::encode_h1`, flushes and
//! tunnels.

use std::net::SocketAddr;

use bytes::Bytes;
use tokio::io::AsyncWriteExt;
use tokio::time::timeout;
use weir_http::reply::{put_chunk, put_last_chunk};
use weir_http::{BodyEncoding, BodyEvent, ParseError, Persistence, Reply, RequestHead, Version};

use super::buffers::{read_more, take_buf};
use super::conn::{too_many_reads, Conn, FLUSH_AT};
use crate::error::{Error, ErrorKind, OrErr};
use crate::pipeline::downstream::Downstream;

impl Downstream for Conn {
    fn peer(&self) -> SocketAddr {
        self.peer
    }

    fn version(&self) -> Version {
        self.version
    }

    fn persistence(&self, head: &RequestHead) -> Persistence {
        let max = self.rt.cfg.limits.max_requests_per_connection;
        if !head.keep_alive
            || (max > 0 && self.served >= max)
            || self.state.shutting_down.get()
            || self.orphaned
        {
            Persistence::Close
        } else {
            Persistence::KeepAlive
        }
    }

    fn shutting_down(&self) -> bool {
        self.state.shutting_down.get() || self.orphaned
    }

    fn tls(&self) -> Option<&crate::tls::TlsInfo> {
        self.io.tls_info()
    }

    fn cap_body(&mut self, max: u64) {
        if let Some(b) = self.body.as_mut() {
            b.limit = b.limit.min(max);
        }
    }

    fn keepalive(&mut self, wait: std::time::Duration) {
        self.keepalive_ms = u32::try_from(wait.as_millis()).unwrap_or(u32::MAX).max(1);
    }

    fn body_timeout(&mut self, wait: std::time::Duration) {
        if let Some(b) = self.body.as_mut() {
            b.timeout = Some(wait);
        }
    }

    async fn body_chunk(&mut self) -> Result<Option<Bytes>, Error> {
        let body_timeout = self
            .body
            .as_ref()
            .and_then(|b| b.timeout)
            .unwrap_or(self.rt.cfg.timeouts.body);
        loop {
            let Some(body) = self.body.as_mut() else {
                return Ok(None);
            };
            match body.decoder.decode(&mut self.buf)? {
                BodyEvent::Data(chunk) => {
                    if body.decoder.consumed() > body.limit {
                        return Err(ParseError::BodyTooLarge.into());
                    }
                    return Ok(Some(chunk));
                }
                BodyEvent::Done(trailers) => {
                    body.trailers = trailers;
                    return Ok(None);
                }
                BodyEvent::NeedMore => {
                    body.reads += 1;
                    if let Some(shield) = &self.rt.cfg.shield {
                        let max = shield.body_reads;
                        too_many_reads(shield, self.peer, body.reads, max, ErrorKind::BodyTimeout)?;
                    }
                    if !body.continued {
                        body.continued = true;
                        self.out.extend_from_slice(weir_http::response::CONTINUE);
                    }
                    self.flush().await?;
                    let n = timeout(body_timeout, read_more(&mut self.io, &mut self.buf))
                        .await
                        .map_err(|_| Error::new(ErrorKind::BodyTimeout))?
                        .or_err(ErrorKind::ClientIo, "read")?;
                    if n == 0 {
                        return Err(Error::new(ErrorKind::ClientClosed));
                    }
                }
            }
        }
    }

    fn request_trailers(&mut self) -> Vec<weir_http::Header> {
        self.body
            .as_mut()
            .map(|b| std::mem::take(&mut b.trailers))
            .unwrap_or_default()
    }

    async fn send_interim(&mut self, reply: &Reply<'_>) -> Result<(), Error> {
        reply.encode_h1(&mut self.out, self.version, Persistence::KeepAlive);
        self.flush().await
    }

    #[inline]
    fn send_head(&mut self, reply: &Reply<'_>, persistence: Persistence) -> Persistence {
        if self.out.capacity() == 0 {
            // A fresh connection answers before it ever waited: take a pooled buffer rather
            // than grow an empty one field by field.
            self.out = take_buf();
        }
        self.encoding = reply.encode_h1(&mut self.out, self.version, persistence);
        if let Some(quic) = &self.rt.cfg.listeners[self.listener].quic {
            // `Alt-Svc: h3=":PORT"` before the blank line that ends the head.
            if !quic.alt_svc.is_empty() {
                self.out.truncate(self.out.len() - 2);
                self.out.extend_from_slice(&quic.alt_svc);
                self.out.extend_from_slice(b"\r\n");
            }
        }
        if self.encoding == BodyEncoding::UntilClose {
            Persistence::Close
        } else {
            persistence
        }
    }

    #[inline(always)]
    fn send_data(&mut self, data: &Bytes) {
        match self.encoding {
            BodyEncoding::Chunked => put_chunk(&mut self.out, data),
            BodyEncoding::Plain | BodyEncoding::UntilClose => self.put_body(data),
        }
    }

    fn send_trailers(&mut self, fields: &[weir_http::Header]) {
        if self.encoding != BodyEncoding::Chunked || fields.is_empty() {
            return;
        }
        // The last chunk with the trailer section; `end_body` then has nothing to add.
        self.out.extend_from_slice(b"0\r\n");
        for h in fields {
            weir_http::response::put_header(&mut self.out, &h.name, &h.value);
        }
        self.out.extend_from_slice(b"\r\n");
        self.encoding = BodyEncoding::Plain;
    }

    fn end_body(&mut self) {
        if self.encoding == BodyEncoding::Chunked {
            put_last_chunk(&mut self.out);
        }
    }

    fn sends_files(&self) -> bool {
        self.io.sends_files()
    }

    async fn send_file(
        &mut self,
        file: &std::fs::File,
        offset: u64,
        len: u64,
    ) -> Result<(), Error> {
        self.send_file_body(file, offset, len).await
    }

    fn should_flush(&self) -> bool {
        self.out.len() >= FLUSH_AT || !self.segs.is_empty()
    }

    async fn flush(&mut self) -> Result<(), Error> {
        Conn::flush(self).await
    }

    async fn tunnel(
        &mut self,
        upstream: &mut dyn crate::pipeline::downstream::Tunnel,
        early: &[u8],
    ) -> Result<(), Error> {
        // Bytes the upstream sent after its head belong to the tunnel.
        self.out.extend_from_slice(early);
        Conn::flush(self).await?;
        self.upgraded = true;
        if !self.buf.is_empty() {
            upstream
                .write_all(&self.buf)
                .await
                .or_err(ErrorKind::UpstreamReset, "tunnel write")?;
            self.buf.clear();
        }
        let _ = self.io.tunnel(upstream).await;
        Ok(())
    }
}
