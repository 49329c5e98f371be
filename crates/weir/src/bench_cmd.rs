//! `weir bench`: the command-line face of the `weir-loadgen` crate.
//!
//! Flags follow wrk (`-c`, `-t`, `-d` duration, `-H`, `--latency`, accepted: the distribution is
//! always printed) and hey (`-n`, `-z` duration, `-m`, `-D` body file). hey's `-d` (body string)
//! is `--body` here, because `-d` is wrk's duration.

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use clap::{Args, ValueEnum};
use weir_loadgen::options::Stop;
use weir_loadgen::{report, Options, RunResult, Target};

use crate::config::units::Dur;

/// Report format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Wrk,
    Hey,
    Table,
    Json,
}

/// `weir bench` arguments.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// URL to load (or use --target, repeatable).
    pub url: Option<String>,
    /// Connections to keep open.
    #[arg(short = 'c', long, default_value_t = 10)]
    pub connections: usize,
    /// Threads (each drives its share of the connections).
    #[arg(short = 't', long, default_value_t = 1)]
    pub threads: usize,
    /// Duration of each run (e.g. 10s); the default when -n is not given. `-z` as in hey.
    #[arg(short = 'd', long, short_alias = 'z')]
    pub duration: Option<String>,
    /// Accepted for wrk's command lines: the latency distribution is always printed.
    #[arg(long)]
    pub latency: bool,
    /// Total requests instead of a duration.
    #[arg(short = 'n', long)]
    pub requests: Option<u64>,
    /// Open loop at this many requests per second (latency from the intended send time).
    #[arg(short = 'R', long)]
    pub rate: Option<f64>,
    /// Request method. With --h2, a number means streams per connection, as h2load's `-m`.
    #[arg(short = 'm', long, default_value = "GET")]
    pub method: String,
    /// Speak HTTP/2: ALPN `h2` over https://, prior knowledge (h2c) over http://.
    #[arg(long)]
    pub h2: bool,
    /// Speak HTTP/3 over QUIC to an https:// URL (UDP, same port); with --close, a new QUIC
    /// connection (a full handshake) per request.
    #[arg(long, conflicts_with = "h2")]
    pub h3: bool,
    /// Concurrent streams per HTTP/2 or HTTP/3 connection (h2load's `-m`).
    #[arg(long, default_value_t = 1)]
    pub streams: usize,
    /// Resume TLS sessions when reconnecting; by default every connection makes a full
    /// handshake. Certificates are not verified (test servers), handshake signatures are.
    #[arg(long)]
    pub tls_resume: bool,
    /// Request header `Name: value` (repeatable).
    #[arg(short = 'H', long = "header")]
    pub headers: Vec<String>,
    /// Request body.
    #[arg(long)]
    pub body: Option<String>,
    /// Request body from a file.
    #[arg(short = 'D', long = "body-file")]
    pub body_file: Option<PathBuf>,
    /// A new connection for every request (`Connection: close`).
    #[arg(long)]
    pub close: bool,
    /// Requests in flight per connection (HTTP/1.1 pipelining).
    #[arg(long, default_value_t = 1)]
    pub pipeline: usize,
    /// Per-request timeout.
    #[arg(long, default_value = "10s")]
    pub timeout: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Wrk)]
    pub format: Format,
    /// Run once per connection count, e.g. 1,10,100,1000.
    #[arg(long, value_delimiter = ',')]
    pub sweep_conns: Vec<usize>,
    /// Write an SVG chart of requests/s and p99 against connections.
    #[arg(long)]
    pub chart: Option<PathBuf>,
    /// A named target `name=URL` (repeatable; all appear in one chart).
    #[arg(long = "target")]
    pub targets: Vec<String>,
    /// Chart title.
    #[arg(long, default_value = "weir bench")]
    pub title: String,
    /// `name=PID`: report that server process's CPU time per request (user+sys from
    /// /proc/PID/stat around each run) for the target of that name (repeatable).
    #[arg(long = "pid")]
    pub pids: Vec<String>,
}

/// user+sys clock ticks of a process, from /proc/PID/stat.
fn cpu_ticks(pid: u32) -> Result<u64, String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| format!("cannot read /proc/{pid}/stat: {e}"))?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let after = stat.rsplit_once(')').map(|(_, a)| a).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let num = |i: usize| {
        f.get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or_else(|| format!("unexpected /proc/{pid}/stat format"))
    };
    Ok(num(11)? + num(12)?)
}

/// Clock ticks per second (USER_HZ), 100 on every Linux configuration weir supports.
const TICKS_PER_SEC: f64 = 100.0;

/// Runs the command; errors are one line for stderr.
pub fn run(a: BenchArgs) -> Result<(), String> {
    let mut targets = Vec::new();
    if let Some(u) = &a.url {
        targets.push(Target::parse(u, u)?);
    }
    for t in &a.targets {
        let (name, url) = t
            .split_once('=')
            .ok_or_else(|| format!("--target {t:?}: expected name=URL"))?;
        targets.push(Target::parse(name, url)?);
    }
    if targets.is_empty() {
        return Err("give a URL or --target name=URL".into());
    }
    let stop = match (a.requests, &a.duration) {
        (Some(_), Some(_)) => return Err("give -d or -n, not both".into()),
        (Some(n), None) => Stop::Requests(n),
        (None, d) => Stop::After(parse_dur(d.as_deref().unwrap_or("10s"))?),
    };
    let body = match (&a.body, &a.body_file) {
        (Some(_), Some(_)) => return Err("give --body or -D, not both".into()),
        (Some(b), None) => Bytes::from(b.clone()),
        (None, Some(f)) => {
            Bytes::from(std::fs::read(f).map_err(|e| format!("cannot read {}: {e}", f.display()))?)
        }
        (None, None) => Bytes::new(),
    };
    let mut headers = Vec::new();
    for h in &a.headers {
        let (n, v) = h
            .split_once(':')
            .ok_or_else(|| format!("-H {h:?}: expected 'Name: value'"))?;
        headers.push((n.trim().to_string(), v.trim().to_string()));
    }
    // h2load's `-m N` is streams per connection; ours is the method, unless --h2 and a number.
    let (method, streams) = match a.method.parse::<usize>() {
        Ok(n) if (a.h2 || a.h3) && n > 0 => ("GET".to_string(), n),
        Ok(_) => {
            return Err(format!(
                "-m {}: a method, or with --h2/--h3 a stream count",
                a.method
            ))
        }
        Err(_) => (a.method.to_ascii_uppercase(), a.streams.max(1)),
    };
    if a.rate.is_some_and(|r| r <= 0.0) {
        return Err("-R must be positive".into());
    }
    let mut pids = std::collections::HashMap::new();
    for p in &a.pids {
        let (name, pid) = p
            .split_once('=')
            .ok_or_else(|| format!("--pid {p:?}: expected name=PID"))?;
        let pid: u32 = pid
            .parse()
            .map_err(|_| format!("--pid {p:?}: not a process id"))?;
        cpu_ticks(pid)?;
        pids.insert(name.to_string(), pid);
    }
    // CPU µs per request of the target's server process, per run, when --pid names it.
    let mut cpu: std::collections::HashMap<(String, usize), f64> = std::collections::HashMap::new();
    let conns_list = if a.sweep_conns.is_empty() {
        vec![a.connections]
    } else {
        a.sweep_conns.clone()
    };
    let mut series: Vec<(String, Vec<RunResult>)> = Vec::new();
    for target in &targets {
        let mut runs = Vec::new();
        for &c in &conns_list {
            let opts = Options {
                target: target.clone(),
                connections: c,
                threads: a.threads,
                stop,
                rate: a.rate,
                method: method.clone(),
                headers: headers.clone(),
                body: body.clone(),
                close: a.close,
                pipeline: a.pipeline,
                timeout: parse_dur(&a.timeout)?,
                h2: a.h2,
                h3: a.h3,
                streams,
                tls_resume: a.tls_resume,
            };
            if conns_list.len() > 1 || targets.len() > 1 {
                eprintln!("weir bench: {} with {c} connections…", target.name);
            }
            let pid = pids.get(&target.name).copied();
            let before = pid.map(cpu_ticks).transpose()?;
            let r = weir_loadgen::run(&opts)?;
            if r.stats.responses == 0 {
                // An all-zero report with exit 0 hid what happened (an h2 run against an
                // HTTP/1.1-only port, a server that closes every connection).
                let e = r.errors();
                let hint = if a.h3 {
                    " (does the server speak HTTP/3 on this port's UDP side? weir needs `quic: true` on the listener)"
                } else if a.h2 {
                    " (does the server speak HTTP/2 on this port? over plain TCP it must take h2c with prior knowledge)"
                } else {
                    ""
                };
                return Err(format!(
                    "{}: no response in the whole run: connect errors {}, read {}, write {}, timeouts {}{hint}",
                    target.name, e.connect, e.read, e.write, e.timeout
                ));
            }
            if let (Some(pid), Some(before)) = (pid, before) {
                let used = cpu_ticks(pid)?.saturating_sub(before) as f64 / TICKS_PER_SEC;
                cpu.insert(
                    (target.name.clone(), c),
                    used * 1e6 / r.stats.responses.max(1) as f64,
                );
            }
            if matches!(a.format, Format::Wrk | Format::Hey) {
                let text = if a.format == Format::Wrk {
                    report::wrk::render(&r)
                } else {
                    report::hey::render(&r)
                };
                println!("{text}");
            }
            runs.push(r);
        }
        series.push((target.name.clone(), runs));
    }
    match a.format {
        Format::Table => {
            for (name, runs) in &series {
                if series.len() > 1 {
                    println!("{name}\n");
                }
                println!("{}", report::table::render(runs));
                let cpu_row: Vec<String> = runs
                    .iter()
                    .filter_map(|r| {
                        cpu.get(&(name.clone(), r.options.connections))
                            .map(|v| format!("{}: {v:.2}", r.options.connections))
                    })
                    .collect();
                if !cpu_row.is_empty() {
                    println!("server CPU µs/request by conns — {}\n", cpu_row.join(", "));
                }
            }
        }
        Format::Json => {
            let mut all = Vec::new();
            for (name, runs) in &series {
                for r in runs {
                    let mut v = report::json::value(r);
                    if let Some(c) = cpu.get(&(name.clone(), r.options.connections)) {
                        v["cpu_us_per_req"] = (*c).into();
                    }
                    all.push(v);
                }
            }
            println!("{}", serde_json::Value::Array(all));
        }
        _ => {}
    }
    if let Some(path) = &a.chart {
        let svg = weir_loadgen::chart::render(&a.title, &series);
        std::fs::write(path, svg).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        eprintln!("weir bench: chart written to {}", path.display());
    }
    Ok(())
}

fn parse_dur(s: &str) -> Result<Duration, String> {
    s.parse::<Dur>().map(|d| d.0).map_err(|e| e.to_string())
}
