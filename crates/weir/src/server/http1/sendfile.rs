//! A response body sent from a file with `sendfile` (disk-tier hits and slice pieces:
//! `pipeline/cache/hit.rs`, `slice.rs`), after the head and anything else queued. Plain TCP
//! only (`ClientIo::sends_files`).

use std::io;

use tokio::time::timeout;

use super::conn::Conn;
use crate::error::{Error, ErrorKind, OrErr};
use weir_http::BodyEncoding;

/// Most bytes one `sendfile` call is asked for (a slow client still gets its stall timeout
/// per step, and the worker other connections between steps).
const SENDFILE_STEP: usize = 1 << 20;

impl Conn {
    /// Writes what is queued, then `len` bytes of `file` from `offset`, waiting (within
    /// `timeouts.write` per stall) while the client's socket is full.
    pub(super) async fn send_file_body(
        &mut self,
        file: &std::fs::File,
        offset: u64,
        len: u64,
    ) -> Result<(), Error> {
        if self.encoding != BodyEncoding::Plain && self.encoding != BodyEncoding::UntilClose {
            return Err(Error::with(
                ErrorKind::ClientIo,
                "sendfile into a chunked body",
            ));
        }
        self.flush().await?;
        let stall = self.rt.cfg.timeouts.write;
        let end = offset + len;
        let mut at = offset as i64;
        while (at as u64) < end {
            let want = ((end - at as u64) as usize).min(SENDFILE_STEP);
            match self.io.send_file(file, &mut at, want) {
                Ok(0) => return Err(Error::with(ErrorKind::ClientIo, "sendfile: the file ended")),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    timeout(stall, self.io.writable())
                        .await
                        .map_err(|_| Error::new(ErrorKind::WriteTimeout))?
                        .or_err(ErrorKind::ClientIo, "write")?;
                }
                Err(e) => {
                    return Err(Error::with(
                        ErrorKind::ClientIo,
                        format_args!("sendfile: {e}"),
                    ))
                }
            }
        }
        Ok(())
    }
}
