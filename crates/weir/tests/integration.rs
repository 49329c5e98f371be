//! The integration tests that may share a process: one test binary for all of them.
//!
//! Each file here was a test binary of its own, and each linked all of weir: about 118 MB in a
//! debug build, 10.6 GB for the 90 of them, and the run of 2026-11-30 in CI died of a full
//! disk. One binary links weir once and builds `common/` once. The files below keep their
//! names; run one with `cargo test -p weir --test integration <file>::`, e.g.
//! `cargo test -p weir --test integration h2_upstream::`.
//!
//! A file stays a binary of its own (a `[[test]]` in `Cargo.toml`) when its tests measure or
//! change the whole process, which other files' tests would disturb here: the process's
//! memory (`proxy`, `cache_memory`, `h3_abuse`, `tls_own_records_probe`), its threads
//! (`on_demand_edges`, `tracing_reload`), its environment (`panics`, `hot_path_edges` turn on
//! fault injection), process-wide counters read exactly (`kubernetes_provider`,
//! `kubernetes_isolation`; `tls_stream_edges` compares `weir_panics_total`, which counts every
//! panic in the process), a measurement that a busy neighbour would skew (`h2_slow_readers`:
//! a child weir's memory per stream within 12%, which two such runs at once starve), or a
//! feature (`uring`).
#![allow(clippy::unwrap_used)]

mod common;

mod access_log;
mod acme;
mod admin_api;
mod admin_budget;
mod admin_guard;
mod auth;
mod cache;
mod cache_304;
mod cache_head_leader;
mod cache_memory_large;
mod cache_rfc;
mod cache_slices;
mod cache_vectored;
mod cli;
mod cluster;
mod cluster_hot_copies;
mod cluster_redis;
mod compress;
mod config_sources;
mod control;
mod dashboard;
mod disk;
mod dns_update_edges;
mod error_pages;
mod fastcgi;
mod fastcgi_dokuwiki;
mod fastcgi_review;
mod first_run;
mod gateway;
mod grpc;
mod grpc_go;
mod h2;
mod h2_flow;
mod h2_review;
mod h2_upstream;
mod h2spec;
mod h3;
mod h3_messages;
mod host;
mod import_gateway;
mod import_ingress;
mod import_nginx;
mod interim;
mod kube_apiserver;
mod kv;
mod log_flood;
mod maps;
mod not_forwarded;
mod ocsp;
mod on_demand_tls;
mod parking;
mod parking_edges;
mod parking_tls;
mod paths;
mod quic_edges;
mod reload;
mod route_conditions;
mod route_limits;
mod shield;
mod sites;
mod static_files;
mod static_sites;
mod tcp_proxy;
mod tls;
mod tls_renegotiation;
mod trace_context;
mod tracing_otlp;
mod unix_listener;
mod unix_listener_edges;
mod unix_upstream;
mod upgrade;
mod upgrade_quic;
mod upstream_desync;
mod upstream_parsing;
mod upstream_policy;
mod upstream_tls;
mod wire;
