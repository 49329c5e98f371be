//! The operator's part of the config file: the error log, access logs, the request id and the
//! `health` route action. Re-exported from `model.rs`, which holds the rest of the file format.

use serde::Deserialize;

/// The error log (`tracing`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Log {
    /// `error`, `warn`, `info`, `debug`, `trace`, or a filter such as `info,weir::proxy=debug`.
    /// `--log-level` and `WEIR_LOG` override it.
    pub level: String,
    /// `text` or `json`.
    pub format: String,
}

impl Default for Log {
    fn default() -> Self {
        Log {
            level: "info".into(),
            format: "text".into(),
        }
    }
}

/// `off`, or where and how to write access log lines.
#[derive(Debug, Clone)]
pub enum AccessLogSetting {
    Off,
    On(AccessLog),
}

/// An access log.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessLog {
    /// A file (appended to; reopened on SIGUSR1), or `stdout`.
    pub path: Option<String>,
    /// Syslog instead of a file: `udp://host:514` or `unix:///dev/log` (RFC 5424).
    pub syslog: Option<String>,
    /// `combined` (default), `common`, `json`, or a template of `$variables`.
    #[serde(default = "default_log_format")]
    pub format: String,
}

fn default_log_format() -> String {
    "combined".into()
}

impl<'de> Deserialize<'de> for AccessLogSetting {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = AccessLogSetting;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("`off` or { path | syslog, format }")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                match v {
                    "off" => Ok(AccessLogSetting::Off),
                    _ => Err(E::custom(format!(
                        "{v:?}: write `off` or {{ path: FILE, format: combined }}"
                    ))),
                }
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Self::Value, E> {
                // YAML 1.1 reads a bare `off` as false.
                match v {
                    false => Ok(AccessLogSetting::Off),
                    true => Err(E::custom("write { path: FILE, format: combined }")),
                }
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                m: A,
            ) -> Result<Self::Value, A::Error> {
                AccessLog::deserialize(serde::de::value::MapAccessDeserializer::new(m))
                    .map(AccessLogSetting::On)
            }
        }
        d.deserialize_any(V)
    }
}

/// The request id.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RequestId {
    /// The field it travels in.
    pub header: String,
    /// Peers (addresses or CIDRs) whose id is kept; from anyone else a new one is made.
    pub trust_from: Vec<String>,
}

/// `tracing`: W3C Trace Context (`trace/`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tracing {
    /// The share of new traces sampled (a continued trace keeps its parent's decision).
    #[serde(default = "all")]
    pub sample: f64,
    /// Peers (addresses or CIDRs) whose `traceparent` and `tracestate` are continued.
    #[serde(default)]
    pub trust_from: Vec<String>,
    /// Where sampled spans are exported (OTLP); without it, the context alone.
    #[serde(default)]
    pub otlp: Option<Otlp>,
}

fn all() -> f64 {
    1.0
}

/// `tracing.otlp`: span export over OTLP (`trace/export.rs`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Otlp {
    /// The collector: `http://host:4318` (HTTP/protobuf; `https://` too) or
    /// `http://host:4317` with `protocol: grpc`. Empty: no export (so that
    /// `${WEIR_OTLP_ENDPOINT:-}` turns it on from the environment).
    pub endpoint: String,
    /// `http/protobuf` (the default, as OpenTelemetry's SDKs have it) or `grpc`.
    #[serde(default = "http_protobuf")]
    pub protocol: String,
    /// The `service.name` of weir's spans.
    #[serde(default = "weir_name")]
    pub service_name: String,
    /// Requests' spans waiting for export; more are dropped (and counted).
    #[serde(default = "otlp_queue")]
    pub queue: usize,
    /// Requests' spans in one export.
    #[serde(default = "otlp_batch")]
    pub batch: usize,
    /// The longest a span waits for its batch.
    #[serde(default = "otlp_interval")]
    pub interval: super::units::Dur,
    /// The longest one export may take (connecting included).
    #[serde(default = "otlp_timeout")]
    pub timeout: super::units::Dur,
    /// Fields sent with each export (a collector's API key).
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
}

fn http_protobuf() -> String {
    "http/protobuf".into()
}
fn weir_name() -> String {
    "weir".into()
}
fn otlp_queue() -> usize {
    8192
}
fn otlp_batch() -> usize {
    512
}
fn otlp_interval() -> super::units::Dur {
    super::units::Dur(std::time::Duration::from_secs(1))
}
fn otlp_timeout() -> super::units::Dur {
    super::units::Dur(std::time::Duration::from_secs(10))
}

impl Default for RequestId {
    fn default() -> Self {
        RequestId {
            header: "x-request-id".into(),
            trust_from: Vec::new(),
        }
    }
}

/// The `health` action.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthRoute {
    /// Upstreams that must have a server up (default: all of them).
    #[serde(default)]
    pub upstreams: Option<Vec<String>>,
}
