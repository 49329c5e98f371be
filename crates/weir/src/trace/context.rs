//! W3C Trace Context (`traceparent: 00-<trace-id>-<parent-id>-<flags>`): parsed from trusted
//! peers, made otherwise, rendered for the upstream and the logs.
//!
//! Ids come from `fastrand` (the worker's thread-local generator, seeded at random): trace ids
//! need to be unique, not secret, as the spec says.

use std::net::IpAddr;

use bytes::{BufMut, BytesMut};
use ipnet::IpNet;
use weir_http::RequestHead;

use crate::config::{model, CompileError};

/// The compiled `tracing` section.
#[derive(Debug, Clone)]
pub struct TraceSettings {
    /// The share of new traces sampled, 0 to 1.
    pub sample: f64,
    /// Peers whose `traceparent` (and `tracestate`) are continued.
    pub trust_from: Vec<IpNet>,
    /// Where sampled requests' spans go (`tracing.otlp`), when set.
    pub export: Option<std::sync::Arc<super::export::Exporter>>,
}

impl TraceSettings {
    pub fn compile(c: &model::Tracing) -> Result<TraceSettings, CompileError> {
        if !(0.0..=1.0).contains(&c.sample) {
            return Err((
                "tracing.sample".into(),
                "a share between 0 and 1 (0.01: one trace in a hundred)".into(),
            ));
        }
        let trust_from = crate::config::trusted_peers(&c.trust_from, "tracing.trust_from")?;
        let export = match &c.otlp {
            Some(o) => super::export::Exporter::compile(o)?.map(std::sync::Arc::new),
            None => None,
        };
        Ok(TraceSettings {
            sample: c.sample,
            trust_from,
            export,
        })
    }

    /// The context of a request from `peer`: its `traceparent` continued when `peer` is
    /// trusted and the field is valid, else a new trace.
    pub fn context(&self, head: &RequestHead, peer: IpAddr) -> TraceContext {
        // Two `traceparent` fields: which one is the parent? A new trace (the spec: restart).
        let received = self
            .trust_from
            .iter()
            .any(|n| n.contains(&peer))
            .then(|| {
                match head
                    .fields()
                    .iter()
                    .filter(|(n, _)| n.eq_ignore_ascii_case(b"traceparent"))
                    .count()
                {
                    1 => head.header("traceparent").and_then(parse),
                    _ => None,
                }
            })
            .flatten();
        match received {
            Some((trace_id, parent, flags)) => TraceContext {
                trace_id,
                parent: Some(parent),
                span_id: new_span_id(),
                sampled: flags & 1 == 1,
                continued: true,
            },
            None => {
                let trace_id = new_trace_id();
                TraceContext {
                    trace_id,
                    parent: None,
                    span_id: new_span_id(),
                    sampled: self.samples(&trace_id),
                    continued: false,
                }
            }
        }
    }
}

impl TraceSettings {
    /// Whether a new trace is sampled: its id's last 8 bytes below `sample` × 2⁶⁴, as
    /// OpenTelemetry's `TraceIdRatioBased` sampler decides (the id is random already: no
    /// further draw, and every tracer with the same ratio agrees on the same trace).
    fn samples(&self, trace_id: &[u8; 16]) -> bool {
        let mut low = [0u8; 8];
        low.copy_from_slice(&trace_id[8..]);
        self.sample >= 1.0
            || (u64::from_be_bytes(low) as f64) < self.sample * 18_446_744_073_709_551_616.0
    }
}

/// One request's place in a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceContext {
    pub trace_id: [u8; 16],
    /// The client's span, when the trace was continued.
    pub parent: Option<[u8; 8]>,
    /// weir's span for the request.
    pub span_id: [u8; 8],
    pub sampled: bool,
    /// Continued from a trusted peer (its `tracestate` is relayed too).
    pub continued: bool,
}

impl TraceContext {
    /// Writes the upstream's `traceparent` (this trace, `parent` as its parent: weir's span,
    /// or the try's client span when spans are exported) and the client's `tracestate` when
    /// the trace was continued and it sent one. Rendered straight into the request (~120
    /// instructions: a boxed line and its copy cost ~500 a request, 2026-11-29).
    pub fn put_upstream_lines(&self, parent: &[u8; 8], head: &RequestHead, out: &mut BytesMut) {
        let mut line = [0u8; TRACEPARENT_LINE];
        line[..16].copy_from_slice(b"traceparent: 00-");
        hex_into(&self.trace_id, &mut line[16..48]);
        line[48] = b'-';
        hex_into(parent, &mut line[49..65]);
        line[65..].copy_from_slice(if self.sampled { b"-01\r\n" } else { b"-00\r\n" });
        out.put_slice(&line);
        if let Some(state) = self.client_state(head) {
            out.put_slice(b"tracestate: ");
            out.put_slice(&state);
            out.put_slice(b"\r\n");
        }
    }

    /// The client's `tracestate` as it goes upstream (and into weir's server span): only for a
    /// continued trace; several fields are one list (the spec: combined with commas); a list
    /// over 512 bytes, or with bytes a list has not, is dropped whole.
    pub fn client_state(&self, head: &RequestHead) -> Option<smallvec::SmallVec<[u8; 128]>> {
        if !self.continued {
            return None;
        }
        let mut states = head
            .fields()
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(b"tracestate"));
        let (_, first) = states.next()?;
        let mut state: smallvec::SmallVec<[u8; 128]> = smallvec::SmallVec::from_slice(first);
        for (_, more) in states {
            state.push(b',');
            state.extend_from_slice(more);
        }
        (state.len() <= 512 && state.iter().all(|b| (0x20..0x7f).contains(b))).then_some(state)
    }

    /// [`TraceContext::put_upstream_lines`] with weir's span as the parent, on their own.
    pub fn upstream_lines(&self, head: &RequestHead) -> BytesMut {
        let mut out = BytesMut::new();
        self.put_upstream_lines(&self.span_id, head, &mut out);
        out
    }
}

/// The fields a `traceparent` replaces upstream.
pub fn is_trace_field(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"traceparent") || name.eq_ignore_ascii_case(b"tracestate")
}

/// `traceparent: 00-<32>-<16>-01\r\n`.
const TRACEPARENT_LINE: usize = 70;

/// Each byte's two lowercase hex digits.
static HEX2: [[u8; 2]; 256] = {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut t = [[0u8; 2]; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = [DIGITS[i >> 4], DIGITS[i & 15]];
        i += 1;
    }
    t
};

/// `bytes` as lowercase hex into `out` (twice as long).
fn hex_into(bytes: &[u8], out: &mut [u8]) {
    for (b, pair) in bytes.iter().zip(out.chunks_exact_mut(2)) {
        pair.copy_from_slice(&HEX2[*b as usize]);
    }
}

/// `bytes` as lowercase hex.
pub fn put_hex(bytes: &[u8], out: &mut impl BufMut) {
    for b in bytes {
        out.put_slice(&HEX2[*b as usize]);
    }
}

fn new_trace_id() -> [u8; 16] {
    loop {
        let id = fastrand::u128(..).to_be_bytes();
        if id != [0; 16] {
            return id;
        }
    }
}

/// A span id: 8 random bytes, not all zero.
pub fn new_span_id() -> [u8; 8] {
    loop {
        let id = fastrand::u64(..).to_be_bytes();
        if id != [0; 8] {
            return id;
        }
    }
}

/// A `traceparent` value: version `00` exactly as the spec has it; a later version by its
/// first four fields (`ff` is invalid); ids not all zero; lowercase hex.
fn parse(v: &[u8]) -> Option<([u8; 16], [u8; 8], u8)> {
    if v.len() < 55 || (v.len() > 55 && (v[..2] == *b"00" || v[55] != b'-')) {
        return None;
    }
    if v[2] != b'-' || v[35] != b'-' || v[52] != b'-' || v[..2] == *b"ff" {
        return None;
    }
    hex::<1>(&v[..2])?;
    let trace_id = hex::<16>(&v[3..35])?;
    let parent = hex::<8>(&v[36..52])?;
    let flags = hex::<1>(&v[53..55])?[0];
    (trace_id != [0; 16] && parent != [0; 8]).then_some((trace_id, parent, flags))
}

fn hex<const N: usize>(s: &[u8]) -> Option<[u8; N]> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (i, pair) in s.chunks_exact(2).enumerate() {
        out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &[u8] = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn traceparent_values_parse_as_the_spec_says() {
        let (t, p, f) = parse(GOOD).unwrap();
        assert_eq!(t[0], 0x4b);
        assert_eq!(p, [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]);
        assert_eq!(f, 1);
        // A later version may add fields after a dash.
        assert!(parse(b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz").is_some());
        for bad in [
            &b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x"[..],
            b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            b"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"",
        ] {
            assert!(parse(bad).is_none(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn hex_renders_lowercase() {
        let mut out = Vec::new();
        put_hex(&[0x00, 0xab, 0x7f], &mut out);
        assert_eq!(&out[..], b"00ab7f");
        let mut arr = [0u8; 6];
        hex_into(&[0x00, 0xab, 0x7f], &mut arr);
        assert_eq!(&arr, b"00ab7f");
    }

    #[test]
    fn the_upstream_line_is_the_spec_s_form() {
        let t = TraceContext {
            trace_id: [0x4b; 16],
            parent: None,
            span_id: [0x01; 8],
            sampled: true,
            continued: false,
        };
        let mut raw = bytes::BytesMut::from("GET / HTTP/1.1\r\nHost: a\r\ntracestate: x=1\r\n\r\n");
        let head = weir_http::parse_request(&mut raw, &weir_http::Limits::default())
            .unwrap()
            .unwrap();
        let lines = t.upstream_lines(&head);
        assert_eq!(
            &lines[..],
            b"traceparent: 00-4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b-0101010101010101-01\r\n",
            "a new trace sends no tracestate"
        );
        let lines = TraceContext {
            continued: true,
            ..t
        }
        .upstream_lines(&head);
        assert!(lines.ends_with(b"tracestate: x=1\r\n"));
    }
}
