//! Distributed tracing (issue 55 §4): W3C Trace Context. A request's `traceparent` is continued
//! when a trusted peer sent it (as forwarding fields are trusted: `tracing.trust_from`), else a
//! trace is started, sampled at `tracing.sample` (parent-based: a continued trace keeps its
//! parent's decision); the upstream is sent weir's own `traceparent` (its parent: weir's
//! client span for the try when spans are exported, else weir's span for the request), and the
//! access log has `$trace_id` and `$span_id`.
//!
//! With `tracing.otlp`, a sampled request's spans (weir's server span, a client span per
//! upstream attempt: `span.rs`, recorded by `pipeline/trace_spans.rs`) are exported over OTLP
//! from a thread of their own (`export.rs`, `otlp.rs`, `transport.rs`).

pub mod context;
pub mod export;
pub mod otlp;
pub mod span;
pub mod transport;
