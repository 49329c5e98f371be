//! `grpc.health.v1` active health checks (issue 55 §3), for `protocol: h2` upstreams
//! (`active_health: { grpc: { service } }`): the unary call `grpc.health.v1.Health/Check` with a
//! `HealthCheckRequest { service }`, healthy when the answer is `grpc-status: 0` with a
//! `HealthCheckResponse` whose status is `SERVING`. What grpc-go, grpc-java and Envoy's
//! `grpc_health_check` do; `grpc-health-probe` asks the same question.
//!
//! The two messages are a field each, so they are encoded and read here by hand (a few lines of
//! protobuf wire format) rather than through a generated client: weir builds without `protoc`
//! (issue 33 §6), and `prost` would add a code generator for two integers and a string.

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};

use super::upstream::Upstream;

/// The path of the call.
const CHECK: &str = "/grpc.health.v1.Health/Check";
/// `HealthCheckResponse.ServingStatus.SERVING`.
const SERVING: u64 = 1;
/// A `HealthCheckResponse` is a few bytes; anything longer than this is not one.
const MAX_ANSWER: usize = 4096;

/// One gRPC health check of `server` about `service` within `within`.
pub async fn check(
    up: &Upstream,
    server: usize,
    service: &str,
    within: Duration,
) -> Result<(), String> {
    let fields: [(&[u8], &[u8]); 3] = [
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
        (b"user-agent", b"weir-health-check"),
    ];
    let message = request(service);
    let answer = super::h2_client::check::call(
        up,
        server,
        (b"POST", CHECK.as_bytes()),
        &fields,
        Some(&message),
        within,
    )
    .await?;
    verdict(answer)
}

/// The call's one message: `HealthCheckRequest { string service = 1; }` in a gRPC frame
/// (uncompressed, its length in 4 bytes).
fn request(service: &str) -> Bytes {
    let mut msg = BytesMut::with_capacity(16 + service.len());
    if !service.is_empty() {
        msg.put_u8(0x0a); // field 1, length-delimited
        put_varint(&mut msg, service.len() as u64);
        msg.put_slice(service.as_bytes());
    }
    let mut out = BytesMut::with_capacity(5 + msg.len());
    out.put_u8(0);
    out.put_u32(msg.len() as u32);
    out.put_slice(&msg);
    out.freeze()
}

fn put_varint(out: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        out.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

/// Reads the answer: `Ok` when it is `grpc-status: 0` and `SERVING`.
fn verdict(answer: super::h2_client::check::Answer) -> Result<(), String> {
    if answer.status != 200 {
        return Err(format!("status {}", answer.status));
    }
    // A trailers-only answer carries the status in its head.
    grpc_ok(&answer.fields)?;
    if answer.body.len() > MAX_ANSWER {
        return Err("answer too long".into());
    }
    match &answer.trailers {
        Some(t) => grpc_ok(t)?,
        None => return Err("no grpc-status".into()),
    }
    match serving_status(&answer.body)? {
        SERVING => Ok(()),
        0 => Err("UNKNOWN".into()),
        2 => Err("NOT_SERVING".into()),
        3 => Err("SERVICE_UNKNOWN".into()),
        n => Err(format!("serving status {n}")),
    }
}

/// `Err` when `fields` carry a `grpc-status` other than 0, or more than one.
fn grpc_ok(fields: &[(Vec<u8>, Vec<u8>)]) -> Result<(), String> {
    let value = |name: &[u8]| fields.iter().find(|(n, _)| n == name).map(|(_, v)| v);
    if fields.iter().filter(|(n, _)| n == b"grpc-status").count() > 1 {
        return Err("more than one grpc-status".into());
    }
    match value(b"grpc-status").map(|v| v.as_slice()) {
        None | Some(b"0") => Ok(()),
        Some(code) => {
            let message = value(b"grpc-message")
                .map(|m| String::from_utf8_lossy(m).into_owned())
                .unwrap_or_default();
            Err(format!(
                "grpc-status {} {message}",
                String::from_utf8_lossy(code)
            ))
        }
    }
}

/// The `status` (field 1) of the one `HealthCheckResponse` in `body` (a gRPC frame, and
/// nothing after it: a unary answer has one message); 0 when absent, as protobuf has it.
fn serving_status(body: &[u8]) -> Result<u64, String> {
    let (&flag, rest) = body.split_first().ok_or("no message")?;
    if flag != 0 {
        return Err("a compressed answer (none was asked for)".into());
    }
    let len = rest
        .get(..4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .ok_or("a cut message")?;
    let mut msg = rest.get(4..4 + len).ok_or("a cut message")?;
    if rest.len() > 4 + len {
        return Err("more than one message".into());
    }
    let mut status = 0;
    while !msg.is_empty() {
        let key = varint(&mut msg)?;
        match (key >> 3, key & 7) {
            (1, 0) => status = varint(&mut msg)?,
            (_, 0) => {
                varint(&mut msg)?;
            }
            (_, 1) => msg = msg.get(8..).ok_or("a cut field")?,
            (_, 2) => {
                let n = varint(&mut msg)? as usize;
                msg = msg.get(n..).ok_or("a cut field")?;
            }
            (_, 5) => msg = msg.get(4..).ok_or("a cut field")?,
            (_, w) => return Err(format!("wire type {w} in a HealthCheckResponse")),
        }
    }
    Ok(status)
}

fn varint(buf: &mut &[u8]) -> Result<u64, String> {
    let mut v = 0u64;
    for i in 0..10 {
        let (&b, rest) = buf.split_first().ok_or("a cut varint")?;
        *buf = rest;
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err("a varint over 10 bytes".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_is_a_framed_health_check_request() {
        assert_eq!(&request("")[..], &[0, 0, 0, 0, 0]);
        assert_eq!(
            &request("a.B")[..],
            &[0, 0, 0, 0, 5, 0x0a, 3, b'a', b'.', b'B']
        );
        let long = "s".repeat(200);
        let r = request(&long);
        assert_eq!(&r[5..8], &[0x0a, 0xc8, 0x01], "a two-byte length");
        assert_eq!(r.len(), 5 + 3 + 200);
    }

    #[test]
    fn answers_read_as_protobuf_has_them() {
        assert_eq!(serving_status(&[0, 0, 0, 0, 2, 0x08, 1]), Ok(1));
        assert_eq!(serving_status(&[0, 0, 0, 0, 2, 0x08, 2]), Ok(2));
        assert_eq!(serving_status(&[0, 0, 0, 0, 0]), Ok(0), "absent: UNKNOWN");
        // Unknown fields before it are skipped (a newer server's).
        assert_eq!(
            serving_status(&[0, 0, 0, 0, 8, 0x12, 2, b'h', b'i', 0x18, 5, 0x08, 1][..]),
            Ok(1)
        );
        for bad in [
            &[][..],
            &[1, 0, 0, 0, 2, 0x08, 1],
            &[0, 0, 0, 0, 9, 0x08, 1],
            &[0, 0, 0, 0, 1, 0x08],
            &[0, 0, 0, 0, 2, 0x0b, 1],
            // SERVING, then NOT_SERVING: two messages are no unary answer.
            &[0, 0, 0, 0, 2, 0x08, 1, 0, 0, 0, 0, 2, 0x08, 2],
        ] {
            assert!(serving_status(bad).is_err(), "{bad:?}");
        }
    }
}
