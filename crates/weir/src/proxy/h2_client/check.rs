//! One exchange on a connection of its own, for active health checks (`health.rs`,
//! `grpc_health.rs`): a check must see the server as a new client would, not through the
//! requests' pooled connections, and its connection closes when it is done.

use std::time::Duration;

use super::conn::H2Conn;
use super::stream::{ClientStream, Incoming};
use crate::proxy::upstream::Upstream;

/// Largest answer body a check reads.
const MAX_BODY: usize = 64 * 1024;

/// What a check's call got back.
#[derive(Debug)]
pub(crate) struct Answer {
    pub status: u16,
    pub fields: weir_h2::conn::Fields,
    pub body: Vec<u8>,
    /// The trailer section, when one came.
    pub trailers: Option<weir_h2::conn::Fields>,
}

/// `(method, path)` to `server` with `fields` and `body`, all within `within`.
pub(crate) async fn call(
    up: &Upstream,
    server: usize,
    (method, path): (&[u8], &[u8]),
    fields: &[(&[u8], &[u8])],
    body: Option<&[u8]>,
    within: Duration,
) -> Result<Answer, String> {
    let run = async {
        let s = &up.servers[server];
        let socket = crate::proxy::socket::connect(s, up.tls.as_ref(), within)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let conn = H2Conn::start(socket, &up.http2, within)
            .await
            .map_err(|e| e.to_string())?;
        // Closed however the check ends: answered, failed or timed out (attack review: a
        // check that timed out left its connection open until the idle timeout).
        let _closing = Closing(conn.clone());
        let scheme: &[u8] = if s.tls_name.is_some() {
            b"https"
        } else {
            b"http"
        };
        let authority = s.authority();
        let stream = ClientStream::open(
            conn.clone(),
            (method, scheme, authority.as_bytes(), path),
            fields.iter().copied(),
            body.is_none(),
        );
        exchange(&stream, body, within).await
    };
    tokio::time::timeout(within, run)
        .await
        .map_err(|_| "timeout".to_string())?
}

/// Closes a check's connection when dropped.
struct Closing(std::rc::Rc<H2Conn>);

impl Drop for Closing {
    fn drop(&mut self) {
        self.0.close();
    }
}

async fn exchange(
    stream: &ClientStream,
    body: Option<&[u8]>,
    within: Duration,
) -> Result<Answer, String> {
    if let Some(b) = body {
        stream
            .send_data(b, true, within)
            .await
            .map_err(|e| e.to_string())?;
    }
    let (status, fields, mut ended) = loop {
        match stream.next().await.map_err(|e| e.to_string())? {
            Incoming::Head(status, fields, end) => break (status, fields, end),
            Incoming::Interim => {}
            _ => return Err("a body before the head".into()),
        }
    };
    let mut answer = Answer {
        status,
        fields,
        body: Vec::new(),
        trailers: None,
    };
    while !ended {
        match stream.next().await.map_err(|e| e.to_string())? {
            Incoming::Data(d, end) => {
                stream.release(d.len());
                if answer.body.len() + d.len() > MAX_BODY {
                    return Err("answer too long".into());
                }
                answer.body.extend_from_slice(&d);
                ended = end;
            }
            Incoming::Trailers(t) => {
                answer.trailers = Some(t);
                ended = true;
            }
            _ => return Err("a second head".into()),
        }
    }
    Ok(answer)
}
