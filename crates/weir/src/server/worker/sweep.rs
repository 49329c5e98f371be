//! The worker's sweeper: one task per worker that moves the coarse clock a few times per idle
//! timeout, closes the connections whose idle deadline passed, parks the HTTP/1.1 ones (plain or
//! TLS) idle at two sweeps in a row (`server/park.rs`), and gives memory back to the system
//! after many connections went away.

use std::rc::Rc;
use std::time::Duration;

use crate::metrics::CloseReason;
use crate::server::parked::Park;
use crate::server::state::WorkerState;

impl WorkerState {
    /// Marks connection `key` idle for `wait` (closed by the sweeper after it), or busy (`None`).
    /// `parkable`: an HTTP/1.1 connection in its idle wait, which the sweeper may park
    /// (`park.rs`).
    /// Connection `key`'s idle deadline (the coarse clock's ms; 0: none).
    pub(crate) fn idle_deadline(&self, key: usize) -> u64 {
        self.conns
            .borrow()
            .get(key)
            .map_or(0, |slot| slot.idle_until.get())
    }

    /// Brings connection `key`'s idle deadline forward to `until` if it is later: a wake that
    /// brought no request (a lone TLS KeyUpdate) keeps the keep-alive deadline it had.
    pub(crate) fn cap_idle(&self, key: usize, until: u64) {
        if let Some(slot) = self.conns.borrow().get(key) {
            let now = slot.idle_until.get();
            if now == 0 || now > until {
                slot.idle_until.set(until);
            }
        }
    }

    /// Whether the sweeper is parking connection `key` (it aborted its task to that end).
    pub(crate) fn parking(&self, key: usize) -> bool {
        self.conns
            .borrow()
            .get(key)
            .is_some_and(|slot| slot.park.get() == Park::Parking)
    }

    pub(crate) fn set_idle(&self, key: usize, wait: Option<Duration>, parkable: bool) {
        let until = match wait {
            // One tick more, so that the coarse clock's lag never closes a connection early.
            Some(w) => self.clock_ms.get() + w.as_millis() as u64 + self.tick_ms.get(),
            None => 0,
        };
        if let Some(slot) = self.conns.borrow().get(key) {
            slot.idle_until.set(until);
            slot.park.set(if parkable { Park::Idle } else { Park::No });
        }
    }

    /// Closes the idle connections whose deadline passed (`now`: the coarse clock, ms), and
    /// parks the parkable ones idle at this sweep and the last (`park.rs`).
    pub(super) fn sweep(self: &Rc<Self>, now: u64) {
        let (mut closed, mut parking) = (0usize, 0usize);
        let mut parked_out = Vec::new();
        for (key, slot) in self.conns.borrow().iter() {
            let until = slot.idle_until.get();
            if until == 0 {
                continue;
            }
            if until <= now {
                slot.idle_until.set(0);
                if slot.park.get() == Park::Parked {
                    parked_out.push(key);
                } else if let Some(a) = &slot.abort {
                    a.abort();
                    closed += 1;
                }
                continue;
            }
            if self.shutting_down.get() {
                continue;
            }
            match slot.park.get() {
                Park::Idle => slot.park.set(Park::Seen),
                Park::Seen => {
                    if let Some(a) = &slot.abort {
                        slot.park.set(Park::Parking);
                        a.abort();
                        parking += 1;
                    }
                }
                _ => {}
            }
        }
        closed += parked_out.len();
        for key in parked_out {
            crate::server::park::close(self, key, CloseReason::Idle);
        }
        if closed > 0 {
            tracing::debug!(
                connections = closed,
                "closed idle connections (idle or first-request timeout, or shutdown)"
            );
        }
        if parking > 0 {
            tracing::trace!(connections = parking, "parking idle connections");
        }
    }
}

/// The sweeper's period: a quarter of the shortest idle wait, between 10 ms and 1 s.
pub(super) fn sweep_tick(t: &crate::runtime::Timeouts) -> Duration {
    (t.keepalive.min(t.header) / 4).clamp(Duration::from_millis(10), Duration::from_secs(1))
}

/// Moves the worker's coarse clock and closes connections idle past their deadline.
pub(super) async fn sweeper(state: Rc<WorkerState>) {
    let start = tokio::time::Instant::now();
    let mut rt = state.cached();
    let mut trim = Trim::default();
    loop {
        state.refresh(&mut rt);
        let tick = sweep_tick(&rt.cfg.timeouts);
        state.tick_ms.set(tick.as_millis() as u64);
        tokio::time::sleep(tick).await;
        let now = start.elapsed().as_millis() as u64;
        state.clock_ms.set(now);
        state.sweep(now);
        for log in &rt.logs {
            log.flush();
        }
        // Parked connections hold no task: trimming after many parked gives their cells back.
        trim.tick(
            state
                .active
                .get()
                .saturating_sub(state.metrics.parked.get() as usize),
        );
    }
}

/// Hands freed memory back to the system after many connections closed: glibc's malloc keeps
/// what a burst of connections freed (12,800 stalled HTTP/2 streams left 40 MiB resident after
/// their clients were gone), and RSS never came down. `malloc_trim` walks the heap, so it runs
/// only when the connection count fell to half its peak or less, by 32 at least, or to zero
/// (not per tick; a steady load never triggers it). Emptying trims on three ticks in a row:
/// memory freed a little after the last connection (a task's cell, a timer entry) goes too.
#[derive(Debug, Default)]
struct Trim {
    /// The most connections seen open at a tick since the last trim.
    peak: usize,
    /// Ticks left to trim on while no connection is open.
    again: u8,
}

impl Trim {
    fn tick(&mut self, active: usize) {
        let halved = active <= self.peak / 2 && active + 32 <= self.peak;
        if active == 0 && self.peak > 0 {
            self.again = 3;
        }
        let settling = active == 0 && self.again > 0;
        if !(halved || settling) {
            self.peak = self.peak.max(active);
            return;
        }
        self.again = self.again.saturating_sub(1);
        #[cfg(target_env = "gnu")]
        #[allow(unsafe_code)]
        // SAFETY: malloc_trim only releases free memory of the allocator's own heaps; it takes
        // the allocator's locks and may be called from any thread at any time.
        unsafe {
            libc::malloc_trim(0);
        }
        self.peak = active;
    }
}
