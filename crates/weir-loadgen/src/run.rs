//! A run: `threads` OS threads, each a current-thread tokio runtime driving its share of the
//! connections; their statistics are merged at the end.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use crate::client::{connection, Control, Errors, Stats};
use crate::options::Options;
use crate::transport::Tls;

/// A finished run.
#[derive(Debug)]
pub struct RunResult {
    pub options: Options,
    /// When it started (for reports).
    pub started: std::time::SystemTime,
    pub elapsed: Duration,
    pub stats: Stats,
    /// Responses per 100 ms, one series per thread (for wrk's Req/Sec statistics).
    pub per_thread_ticks: Vec<Vec<u64>>,
}

impl RunResult {
    pub fn requests_per_sec(&self) -> f64 {
        self.stats.responses as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// TLS handshakes per second (0 over plain TCP).
    pub fn handshakes_per_sec(&self) -> f64 {
        self.stats.handshakes as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub fn errors(&self) -> Errors {
        self.stats.errors
    }
}

/// Runs the load described by `opts`.
pub fn run(opts: &Options) -> Result<RunResult, String> {
    if opts.connections == 0 {
        return Err("need at least one connection".into());
    }
    if opts.h2 && (opts.rate.is_some() || opts.pipeline > 1 || opts.close) {
        return Err(
            "--h2 runs closed loop over kept connections: no -R, --pipeline or --close".into(),
        );
    }
    if opts.h3 && (opts.rate.is_some() || opts.pipeline > 1 || opts.h2 || !opts.target.tls) {
        return Err(
            "--h3 runs closed loop over QUIC to an https:// URL: no -R, --pipeline or --h2".into(),
        );
    }
    let quic = if opts.h3 {
        Some(crate::h3client::client_config(opts)?)
    } else {
        None
    };
    let threads = opts.threads.clamp(1, opts.connections);
    let started = std::time::SystemTime::now();
    let ctl = Arc::new(Control::new(opts.stop));
    let request = opts.request_bytes();
    let mut handles = Vec::new();
    for t in 0..threads {
        // Connections spread evenly: the first `extra` threads take one more.
        let (base, extra) = (opts.connections / threads, opts.connections % threads);
        let mine = base + usize::from(t < extra);
        let first = t * base + t.min(extra);
        let (opts, ctl, request) = (opts.clone(), ctl.clone(), request.clone());
        let quic = quic.clone();
        handles.push(
            std::thread::Builder::new()
                .name(format!("weir-bench-{t}"))
                .spawn(move || -> Result<Stats, String> {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|e| e.to_string())?;
                    let local = tokio::task::LocalSet::new();
                    let stats = Rc::new(RefCell::new(Stats::new()));
                    // One TLS config (and session store) per thread.
                    let tls = Tls::for_options(&opts)?;
                    let opts = Rc::new(opts);
                    local.block_on(&rt, async {
                        let tasks: Vec<_> = (0..mine)
                            .map(|i| {
                                if let Some(quic) = &quic {
                                    tokio::task::spawn_local(crate::h3client::connection(
                                        opts.clone(),
                                        ctl.clone(),
                                        stats.clone(),
                                        quic.clone(),
                                    ))
                                } else if opts.h2 {
                                    tokio::task::spawn_local(crate::h2client::connection(
                                        opts.clone(),
                                        ctl.clone(),
                                        stats.clone(),
                                        tls.clone(),
                                    ))
                                } else {
                                    tokio::task::spawn_local(connection(
                                        opts.clone(),
                                        request.clone(),
                                        ctl.clone(),
                                        stats.clone(),
                                        first + i,
                                        tls.clone(),
                                    ))
                                }
                            })
                            .collect();
                        for t in tasks {
                            let _ = t.await;
                        }
                    });
                    let stats = stats.replace(Stats::new());
                    Ok(stats)
                })
                .map_err(|e| e.to_string())?,
        );
    }
    let mut merged = Stats::new();
    let mut ticks = Vec::new();
    for h in handles {
        let s = h
            .join()
            .map_err(|_| "a bench thread panicked".to_string())??;
        let _ = merged.latency.add(&s.latency);
        merged.responses += s.responses;
        merged.bytes += s.bytes;
        merged.body_bytes += s.body_bytes;
        merged.handshakes += s.handshakes;
        merged.resumed += s.resumed;
        merged.errors.add(&s.errors);
        for (k, v) in &s.statuses {
            *merged.statuses.entry(*k).or_insert(0) += v;
        }
        ticks.push(s.per_tick);
    }
    if let Some(why) = ctl.aborted() {
        return Err(why.to_string());
    }
    let elapsed = ctl.start.elapsed();
    Ok(RunResult {
        started,
        options: opts.clone(),
        elapsed,
        stats: merged,
        per_thread_ticks: ticks,
    })
}
