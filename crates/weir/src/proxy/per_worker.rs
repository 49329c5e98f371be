//! What each worker keeps per upstream: its balancer, requests in flight per server (for
//! least_conn and p2c), its idle connection pool and its retry budget. Thread-per-core, so plain
//! `Cell`/`RefCell`, never held across an `.await`.

use std::cell::{Cell, RefCell};
use std::net::IpAddr;

use weir_http::RequestHead;

use super::balance::{new_balancer, Balancer, PickCtx};
use super::pool::Pool;
use super::upstream::Upstream;

/// Retry tokens a worker starts with (and the floor of the budget), per upstream.
const BUDGET_MIN: f64 = 10.0;
/// The budget never saves up more than this.
const BUDGET_MAX: f64 = 100.0;

/// Per-worker state of one upstream.
#[derive(Debug)]
pub struct WorkerUpstream {
    /// What the state was built for: a reloaded upstream keeps it only if this is unchanged.
    shape: Shape,
    balancer: RefCell<Box<dyn Balancer>>,
    active: RefCell<Vec<u32>>,
    pub pool: RefCell<Pool>,
    /// Idle FastCGI connections per server (`protocol: fastcgi`; `fastcgi/mod.rs`).
    pub fastcgi_idle: super::fastcgi::Idle,
    budget: Cell<f64>,
    scratch: RefCell<Vec<usize>>,
}

/// Counts one request in flight to a server while alive (for the balancer, and in the
/// server's `in_flight` gauge when metrics are on).
#[derive(Debug)]
pub struct InFlight<'a> {
    up: &'a WorkerUpstream,
    server: usize,
    gauge: Option<&'a crate::metrics::Counter>,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut a = self.up.active.borrow_mut();
        a[self.server] = a[self.server].saturating_sub(1);
        if let Some(g) = self.gauge {
            g.dec();
        }
    }
}

/// The parts of an upstream's config its per-worker state depends on.
#[derive(Debug, PartialEq)]
struct Shape {
    servers: Vec<String>,
    weights: Vec<u32>,
    policy: super::balance::Policy,
    max_idle: usize,
    idle_timeout: std::time::Duration,
}

impl Shape {
    fn of(up: &Upstream) -> Shape {
        Shape {
            servers: up.servers.iter().map(|s| s.name.clone()).collect(),
            weights: up.weights.clone(),
            policy: up.policy.clone(),
            max_idle: up.max_idle,
            idle_timeout: up.idle_timeout,
        }
    }
}

impl WorkerUpstream {
    /// Whether this state can serve `up` (a reloaded upstream with the same servers, weights,
    /// policy and pool settings keeps its warm connections, balancer position and budget).
    pub fn fits(&self, up: &Upstream) -> bool {
        self.shape == Shape::of(up)
    }

    pub fn new(up: &Upstream) -> WorkerUpstream {
        let n = up.servers.len();
        WorkerUpstream {
            shape: Shape::of(up),
            balancer: RefCell::new(new_balancer(&up.policy, n, up.ring.clone())),
            active: RefCell::new(vec![0; n]),
            pool: RefCell::new(Pool::new(n, up.max_idle, up.idle_timeout)),
            fastcgi_idle: std::rc::Rc::new(RefCell::new((0..n).map(|_| Vec::new()).collect())),
            budget: Cell::new(BUDGET_MIN),
            scratch: RefCell::new(Vec::with_capacity(n)),
        }
    }

    /// Picks a server that is up at `now`, preferring ones not yet `tried`; `None` when none
    /// is up.
    pub fn pick(
        &self,
        up: &Upstream,
        client_ip: IpAddr,
        request: &RequestHead,
        tried: &[usize],
        now: crate::clock::Mono,
    ) -> Option<usize> {
        let mut cands = self.scratch.borrow_mut();
        super::balance::up_candidates(up, tried, &mut cands, now);
        if cands.is_empty() {
            return None;
        }
        let ctx = PickCtx { client_ip, request };
        Some(
            self.balancer
                .borrow_mut()
                .pick(&ctx, &cands, &up.weights, &self.active.borrow()),
        )
    }

    /// Marks a request in flight to `server` until the guard drops; `gauge` is the server's
    /// metric, counted too.
    pub fn track_active<'a>(
        &'a self,
        server: usize,
        gauge: Option<&'a crate::metrics::Counter>,
    ) -> InFlight<'a> {
        self.active.borrow_mut()[server] += 1;
        if let Some(g) = gauge {
            g.inc();
        }
        InFlight {
            up: self,
            server,
            gauge,
        }
    }

    /// Each request earns `ratio` of a retry.
    pub fn deposit_budget(&self, ratio: f64) {
        self.budget.set((self.budget.get() + ratio).min(BUDGET_MAX));
    }

    /// Spends one retry if the budget allows.
    pub fn take_budget(&self) -> bool {
        let b = self.budget.get();
        if b >= 1.0 {
            self.budget.set(b - 1.0);
            true
        } else {
            false
        }
    }
}
