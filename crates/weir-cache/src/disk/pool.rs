//! A small pool of threads for blocking file IO, so that a worker never waits on a disk: a job
//! is queued (or refused at once when the queue is full) and its result arrives on a oneshot.

use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use tokio::sync::oneshot;

type Job = Box<dyn FnOnce() + Send>;

/// The pool. Its threads finish the queued jobs and exit when the pool and every
/// [`PoolSender`] are dropped.
#[derive(Debug)]
pub struct IoPool {
    tx: PoolSender,
    _threads: Vec<JoinHandle<()>>,
}

/// A handle that queues jobs on the pool (cheap to clone into a future).
#[derive(Debug, Clone)]
pub struct PoolSender(SyncSender<Job>);

impl IoPool {
    /// `threads` threads named `name`, at most `queue` jobs waiting.
    pub fn new(name: &str, threads: usize, queue: usize) -> std::io::Result<IoPool> {
        let (tx, rx) = sync_channel::<Job>(queue.max(1));
        let rx = Arc::new(Mutex::new(rx));
        let mut handles = Vec::new();
        for i in 0..threads.max(1) {
            let rx: Arc<Mutex<Receiver<Job>>> = rx.clone();
            handles.push(
                std::thread::Builder::new()
                    .name(format!("{name}-{i}"))
                    .spawn(move || loop {
                        let job = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
                        match job {
                            Ok(job) => job(),
                            Err(_) => return,
                        }
                    })?,
            );
        }
        Ok(IoPool {
            tx: PoolSender(tx),
            _threads: handles,
        })
    }

    /// A handle to queue jobs with.
    pub fn sender(&self) -> PoolSender {
        self.tx.clone()
    }

    /// Queues `f`; `None` when the queue is full (the caller treats that as a miss).
    pub fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Option<oneshot::Receiver<T>> {
        self.tx.run(f)
    }
}

impl PoolSender {
    /// Queues `f`; `None` when the queue is full (the caller treats that as a miss).
    pub fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Option<oneshot::Receiver<T>> {
        let (done, result) = oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = done.send(f());
        });
        match self.0.try_send(job) {
            Ok(()) => Some(result),
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_run_off_the_caller_and_a_full_queue_refuses() {
        let pool = IoPool::new("t", 1, 1).unwrap();
        let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
        let blocker = pool.run(move || gate_rx.recv().is_ok()).unwrap();
        // The thread is busy and may or may not have taken the job yet: fill the queue.
        let mut refused = false;
        let mut queued = Vec::new();
        for _ in 0..3 {
            match pool.run(|| 7) {
                Some(r) => queued.push(r),
                None => refused = true,
            }
        }
        assert!(refused, "a full queue refuses instead of blocking");
        gate_tx.send(()).unwrap();
        assert!(blocker.blocking_recv().unwrap());
        for r in queued {
            assert_eq!(r.blocking_recv().unwrap(), 7);
        }
    }
}
