//! Machine-readable results: every table column, plus status counts and the target.

use crate::run::RunResult;

pub fn value(r: &RunResult) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    m.insert("target".into(), r.options.target.name.clone().into());
    m.insert("url".into(), r.options.target.url.clone().into());
    for (k, v) in super::table::COLUMNS.iter().zip(super::table::row(r)) {
        m.insert((*k).into(), v.into());
    }
    let statuses: serde_json::Map<String, serde_json::Value> = r
        .stats
        .statuses
        .iter()
        .map(|(k, v)| (k.to_string(), (*v).into()))
        .collect();
    m.insert("statuses".into(), statuses.into());
    m.insert("latency_unit".into(), "ms".into());
    serde_json::Value::Object(m)
}

/// All runs as a JSON array.
pub fn render(runs: &[RunResult]) -> String {
    serde_json::Value::Array(runs.iter().map(value).collect()).to_string()
}
