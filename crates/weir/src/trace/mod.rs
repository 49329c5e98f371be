//! Distributed tracing (issue 55 §4): W3C Trace Context. A request's `traceparent` is continued
//! when a trusted peer sent it (as forwarding fields are trusted: `tracing.trust_from`), else a
//! trace is started, sampled at `tracing.sample` (parent-based: a continued trace keeps its
//! parent's decision); the upstream is sent weir's own `traceparent` (its parent: weir's span
//! for the exchange), and the access log has `$trace_id` and `$span_id`.
//!
//! Built so far: the context, its propagation and the log fields. Not yet: span export (OTLP)
//! and span attributes; see docs/limitations.md.

pub mod context;
