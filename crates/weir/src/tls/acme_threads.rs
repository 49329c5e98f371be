//! The threads that obtain certificates (each `acme:` section's renewal loop, each on-demand
//! order), and their end: a server's stop cancels their work and waits for them, bounded.
//!
//! Why they must end before the process does: AWS-LC (rustls's provider) registers an exit
//! handler that wipes its per-thread random generators, and a thread that draws from one
//! afterwards (a TLS exchange with the CA still going) aborts the whole process. A `weir run`
//! stopped during an order exited with SIGABRT instead of 0, and CI saw a test binary abort
//! after every one of its tests had passed.
//!
//! Each thread runs its work on a current-thread runtime of its own (the work is not `Send`:
//! instant-acme's futures), raced against the registry's stop signal; a cancelled order is
//! dropped at an await point, which is where every exchange with the CA yields.

use std::future::Future;
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// The certificate threads of one registry (one per process, or per test server).
#[derive(Debug)]
pub struct AcmeThreads {
    stop: watch::Sender<bool>,
    running: Mutex<Vec<JoinHandle<()>>>,
}

impl Default for AcmeThreads {
    fn default() -> Self {
        AcmeThreads {
            stop: watch::channel(false).0,
            running: Mutex::new(Vec::new()),
        }
    }
}

impl AcmeThreads {
    /// Runs the future `make` returns on a thread named `name`, until it ends or the registry
    /// stops. `make` runs on the new thread (the future need not be `Send`).
    pub fn spawn<F, Fut>(&self, name: &str, make: F) -> std::io::Result<()>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = ()>,
    {
        let mut stopped = self.stop.subscribe();
        let t = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        tracing::error!(error = %e, "cannot start an ACME thread's runtime");
                        return;
                    }
                };
                rt.block_on(async move {
                    if *stopped.borrow_and_update() {
                        return;
                    }
                    tokio::select! {
                        () = make() => {}
                        _ = stopped.changed() => {}
                    }
                });
            })?;
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        running.retain(|t| !t.is_finished());
        running.push(t);
        Ok(())
    }

    /// Cancels every thread's work and waits up to `within` for them to end (a thread inside a
    /// blocking call it cannot leave is left, and named in the log).
    pub fn stop(&self, within: Duration) {
        self.stop.send_replace(true);
        let until = Instant::now() + within;
        let mut running =
            std::mem::take(&mut *self.running.lock().unwrap_or_else(|e| e.into_inner()));
        while !running.is_empty() && Instant::now() < until {
            running.retain(|t| !t.is_finished());
            if !running.is_empty() {
                // paces: a join with a deadline (std's JoinHandle has none).
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        for t in running {
            if t.is_finished() {
                let _ = t.join();
            } else {
                tracing::warn!(thread = ?t.thread().name(), "an ACME thread did not end at the stop");
            }
        }
    }

    /// How many threads are running now (for tests).
    pub fn running(&self) -> usize {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        running.retain(|t| !t.is_finished());
        running.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_cancels_work_and_waits_for_the_threads() {
        let t = AcmeThreads::default();
        t.spawn("weir-test-a", || async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        })
        .unwrap();
        t.spawn("weir-test-b", std::future::pending::<()>).unwrap();
        assert_eq!(t.running(), 2);
        let began = Instant::now();
        t.stop(Duration::from_secs(10));
        assert_eq!(t.running(), 0);
        assert!(began.elapsed() < Duration::from_secs(5));
        // Work spawned after the stop does not run.
        let ran = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let r = ran.clone();
        t.spawn("weir-test-c", move || async move {
            r.store(true, std::sync::atomic::Ordering::SeqCst);
        })
        .unwrap();
        t.stop(Duration::from_secs(10));
        assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
    }
}
