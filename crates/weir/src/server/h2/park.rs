//! Idle HTTP/2 connections parked outside their task, as HTTP/1.1 ones are (`server/park.rs`).
//!
//! An HTTP/2 connection with no stream open, nothing to write and nothing half-read marks its
//! slot idle; the sweeper parks it as it parks an HTTP/1.1 connection, by aborting its task.
//! Dropping the task drops the [`Driver`], whose `Drop` here hands the socket, the TLS record
//! keys (`IdleTls`) and what HTTP/2 must remember ([`Shared`]: the HPACK decoder's table,
//! both sides' settings and windows, the stream ids seen, the guard's counters) to the slot.
//! The buffers (read, write, header blocks) were given back when it went idle. The client's
//! next frame wakes the idle epoll, which serves the connection again in a new task
//! ([`super::serve_resumed`]), without a new preface.
//!
//! TLS: rustls' session can be parked only with nothing owed (`ServerTls::is_quiet`): a read
//! after the last write might have been a `KeyUpdate` rustls answers on its next write. An
//! HTTP/2 client reads the response and then often writes (a SETTINGS acknowledgement, a
//! WINDOW_UPDATE) with nothing for the server to answer; such a connection writes a frame the
//! peer answers with nothing, a WINDOW_UPDATE of one octet on the connection (weir-h2's
//! `Conn::nudge`), once, after which it can park. (An empty frame of an unknown type, which
//! RFC 9113 §5.5 says to ignore, crashed h2spec's client: not that.)

use std::net::SocketAddr;
use std::rc::Rc;

use tokio::io::{AsyncRead, AsyncWrite};

use crate::client_socket::ClientStream;
use crate::runtime::WorkerRuntime;
use crate::server::state::WorkerState;
use crate::tls::stream::{IdleTls, ServerTls};
use crate::tls::TlsInfo;

/// Whether the transport could be parked now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Quiet {
    Yes,
    /// After one more write (a TLS session that read since it last wrote).
    AfterWrite,
    No,
}

/// A client transport HTTP/2 runs over: plain TCP or weir's TLS stream.
pub(crate) trait H2Io: AsyncRead + AsyncWrite + Unpin + 'static {
    fn quiet(&self) -> Quiet;
    /// The socket and, over TLS, the record keys, when nothing is in flight.
    fn into_parked(self) -> Option<(ClientStream, Option<IdleTls>)>;
    /// Closing without parking: TLS says `close_notify` if the socket takes it now.
    fn close_now(&mut self);
}

impl H2Io for ClientStream {
    fn quiet(&self) -> Quiet {
        Quiet::Yes
    }

    fn into_parked(self) -> Option<(ClientStream, Option<IdleTls>)> {
        Some((self, None))
    }

    fn close_now(&mut self) {}
}

impl H2Io for ServerTls {
    fn quiet(&self) -> Quiet {
        if self.is_quiet() {
            Quiet::Yes
        } else if self.quiet_but_for_a_write() {
            Quiet::AfterWrite
        } else {
            Quiet::No
        }
    }

    fn into_parked(self) -> Option<(ClientStream, Option<IdleTls>)> {
        self.into_idle().map(|(tcp, idle)| (tcp, Some(idle)))
    }

    fn close_now(&mut self) {
        self.queue_close_notify();
        let _ = self.push();
    }
}

/// Where a connection parks, and what it needs to be served again.
#[derive(Debug)]
pub(crate) struct ParkTo {
    pub state: Rc<WorkerState>,
    pub key: usize,
    pub rt: Rc<WorkerRuntime>,
    pub listener: usize,
    pub peer: SocketAddr,
    pub tls: Option<Rc<TlsInfo>>,
}
