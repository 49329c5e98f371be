//! A real Jaeger (v1.76's `cmd/jaeger`, built from the Go module proxy by `.ci/run` through
//! `tests/fixtures/jaeger`) receiving OTLP over HTTP and gRPC on loopback, its spans in memory,
//! read back through its query API (`/api/traces/<id>`). Killed when dropped.
#![allow(dead_code, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::process::{have_all_or_skip, Running};

pub const INSTALL: &str = "Jaeger v1.76: (cd crates/weir/tests/fixtures/jaeger && go build -o /usr/local/bin/jaeger github.com/jaegertracing/jaeger/cmd/jaeger), as .ci/run does";

/// The ports one Jaeger listens on.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    pub otlp_http: u16,
    pub otlp_grpc: u16,
    pub query: u16,
    pub query_grpc: u16,
    pub health: u16,
}

impl Ports {
    pub fn free() -> Ports {
        let p = super::process::free_ports(5);
        Ports {
            otlp_http: p[0],
            otlp_grpc: p[1],
            query: p[2],
            query_grpc: p[3],
            health: p[4],
        }
    }
}

pub struct Jaeger {
    pub ports: Ports,
    _child: Running,
    _dir: std::path::PathBuf,
}

impl Jaeger {
    /// `None` (SKIPPED) only outside CI when `jaeger` is not installed.
    pub fn start() -> Option<Jaeger> {
        Jaeger::start_on(Ports::free())
    }

    /// On given ports (a collector that comes back where it was).
    pub fn start_on(ports: Ports) -> Option<Jaeger> {
        if !have_all_or_skip(&["jaeger"], INSTALL) {
            return None;
        }
        let dir = std::env::temp_dir().join(format!(
            "weir-jaeger-{}-{}",
            std::process::id(),
            ports.otlp_http
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("jaeger.yaml");
        std::fs::write(
            &config,
            format!(
                r#"service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: 127.0.0.1:{query}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 100000
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:{health}
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{grpc}
      http:
        endpoint: 127.0.0.1:{http}
processors:
  batch:
    timeout: 20ms
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
"#,
                query = ports.query,
                query_grpc = ports.query_grpc,
                health = ports.health,
                grpc = ports.otlp_grpc,
                http = ports.otlp_http,
            ),
        )
        .unwrap();
        let child = Command::new("jaeger")
            .arg("--config")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("jaeger.log")).unwrap())
            .spawn()
            .unwrap();
        let j = Jaeger {
            ports,
            _child: Running(child),
            _dir: dir,
        };
        let health = j.addr(ports.health);
        let query = j.addr(ports.query);
        super::until("Jaeger is up", Duration::from_secs(60), || {
            std::net::TcpStream::connect(health).is_ok()
                && super::get(health, "/status").status == 200
                && std::net::TcpStream::connect(query).is_ok()
        });
        Some(j)
    }

    fn addr(&self, port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    /// `http://127.0.0.1:<otlp http>`.
    pub fn otlp_http(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports.otlp_http)
    }

    /// `http://127.0.0.1:<otlp grpc>`.
    pub fn otlp_grpc(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports.otlp_grpc)
    }

    /// The spans of trace `id` (32 hex digits) that Jaeger has now.
    pub fn spans(&self, id: &str) -> Vec<serde_json::Value> {
        let r = super::get(self.addr(self.ports.query), &format!("/api/traces/{id}"));
        if r.status != 200 {
            return Vec::new();
        }
        let v: serde_json::Value = serde_json::from_str(&r.text()).unwrap();
        v["data"][0]["spans"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Waits until trace `id` has `n` spans (or more), and returns them.
    pub fn wait_spans(&self, id: &str, n: usize) -> Vec<serde_json::Value> {
        super::until_value(
            &format!("trace {id} with {n} spans in Jaeger"),
            Duration::from_secs(30),
            || self.spans(id),
            |s| s.len() >= n,
        )
    }
}

/// A span's tag `key` as JSON (`null` when absent).
pub fn tag(span: &serde_json::Value, key: &str) -> serde_json::Value {
    span["tags"]
        .as_array()
        .and_then(|t| t.iter().find(|kv| kv["key"] == key))
        .map_or(serde_json::Value::Null, |kv| kv["value"].clone())
}

/// The span id of a span's CHILD_OF parent.
pub fn parent(span: &serde_json::Value) -> Option<String> {
    span["references"]
        .as_array()?
        .iter()
        .find(|r| r["refType"] == "CHILD_OF")
        .and_then(|r| r["spanID"].as_str())
        .map(str::to_string)
}
