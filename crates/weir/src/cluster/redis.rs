//! Redis for rate limits with `cluster: redis` (`filters/rate_limit_redis.rs`): the cluster's
//! count of admitted requests per key, kept as a GCRA theoretical arrival time (TAT).
//!
//! One Lua script on one key (so Redis Cluster never answers CROSSSLOT), on Redis's clock
//! (`TIME`: the members' clocks may disagree, Redis's is one): add `n` emission intervals to
//! the key's TAT (from when the first of them was admitted if the TAT is older), keep the key
//! as long as the TAT is ahead plus the longest a report can be late (`PX`: an expired key and
//! a TAT in the past mean the same, a whole burst), and answer how far ahead of now the TAT is. `n = 0` reads without writing. Nodes send what they
//! admitted since their last sync, all keys at once on one multiplexed connection (the
//! `redis` crate pipelines concurrent calls): one round trip per sync, not per request.
//!
//! Why the `redis` crate: it is the Rust ecosystem's maintained client, with tokio support,
//! script loading (EVALSHA, EVAL again on NOSCRIPT) and connection and response timeouts.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::AsyncConnectionConfig;

/// The GCRA increment, in microseconds: KEYS[1] the key, ARGV[1] the emission interval,
/// ARGV[2] the requests to add, ARGV[3] how long ago the first of them was admitted, ARGV[4]
/// how long (ms) the key outlives its TAT. Answers the TAT's distance ahead of Redis's now
/// (negative: passed, as good as absent).
///
/// Requests are charged from when the first was admitted, not from now, and the key outlives
/// its TAT by the longest such age: nodes report what they admitted up to a sync interval
/// late, and charging it from now, or forgetting a TAT that passed a moment ago, either
/// charges the cluster's idle time twice or lets each node's charges land side by side
/// instead of one after another (measured with 3 nodes and a 300 r/s quota: 265 r/s admitted
/// the first way, 482 r/s the second). The age is a duration on the node's clock, applied to
/// Redis's: no two clocks are compared.
const SCRIPT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
local n = tonumber(ARGV[2])
if n > 0 then
  local from = now - tonumber(ARGV[3])
  if tat < from then tat = from end
  tat = tat + n * tonumber(ARGV[1])
  local ttl = math.ceil((tat - now) / 1000) + tonumber(ARGV[4])
  if ttl > 0 then
    redis.call('SET', KEYS[1], string.format('%d', tat), 'PX', ttl)
  end
end
return tat - now
";

/// A connection to the cluster's Redis, made on first use and again after an error.
#[derive(Debug)]
pub struct Redis {
    client: redis::Client,
    script: redis::Script,
    conn: tokio::sync::Mutex<Option<MultiplexedConnection>>,
    timeout: Duration,
    /// `redis://host:port/…`, for logs.
    pub url: String,
}

impl Redis {
    /// `host:port` or a `redis://` URL; nothing is connected yet.
    pub fn open(url: &str, timeout: Duration) -> Result<Redis, String> {
        let url = if url.contains("://") {
            url.to_string()
        } else {
            format!("redis://{url}")
        };
        let client = redis::Client::open(url.as_str()).map_err(|e| format!("{url:?}: {e}"))?;
        Ok(Redis {
            client,
            script: redis::Script::new(SCRIPT),
            conn: tokio::sync::Mutex::new(None),
            timeout,
            url,
        })
    }

    async fn connection(&self) -> Result<MultiplexedConnection, String> {
        let mut held = self.conn.lock().await;
        if let Some(c) = held.as_ref() {
            return Ok(c.clone());
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        let c = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| format!("connect to {}: {e}", self.url))?;
        *held = Some(c.clone());
        Ok(c)
    }

    /// Adds `n` intervals of `interval_us` to each key's TAT, from `age` µs ago at the
    /// earliest; each key's distance ahead of now (µs), in order. Any error fails the whole
    /// sync (and drops the connection).
    pub async fn add(
        &self,
        batch: &[(String, u64, u64)],
        interval_us: u64,
        outlive: Duration,
    ) -> Result<Vec<i64>, String> {
        let outlive = outlive.as_millis() as u64;
        let conn = self.connection().await?;
        let calls = batch.iter().map(|(key, n, age)| {
            let mut conn = conn.clone();
            let script = &self.script;
            async move {
                script
                    .key(key)
                    .arg(interval_us)
                    .arg(*n)
                    .arg(*age)
                    .arg(outlive)
                    .invoke_async::<i64>(&mut conn)
                    .await
            }
        });
        let answers = futures_util::future::join_all(calls).await;
        let mut out = Vec::with_capacity(answers.len());
        for a in answers {
            match a {
                Ok(ahead) => out.push(ahead),
                Err(e) => {
                    *self.conn.lock().await = None;
                    return Err(format!("{}: {e}", self.url));
                }
            }
        }
        Ok(out)
    }
}
