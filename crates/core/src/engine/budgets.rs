//! Budgets in the loop: each tick meters the pools' active workers into their rolling-day
//! windows, judges every budget (all pools, then each pool; see [`crate::budget`]), records
//! `budget_reached` / `budget_restored` when a budget's state changes, and tells the pool
//! policy which pools may not launch ([`PoolObservation::budget_reached`]).
//!
//! The use survives every restart (review §6): a launch charges its minimum life (the worker's
//! `idle_seconds`, what the launch gate reserves) to the pool's use and writes it to the launch
//! record *before* the job is submitted; each tick that metered new use writes it (with the
//! time it is metered until, so the next process meters the time in between), and so does
//! every way out of `Manager::run`. A job's active time uses up its launch's reservation
//! before it is charged again: a worker costs the larger of its minimum life and its metered
//! time, and a process killed at any point has recorded no less than that.

use super::Engine;
use crate::backend::JobState;
use crate::budget::{ALL_POOLS, BudgetStatus, LaunchRoom, UsageWindow, Use, launch_room, status};
use crate::events::EventKind;
use crate::policy::Reason;
use crate::pools::PoolsObservation;
use std::time::Duration;

use super::runtime::PoolRuntime;

impl Engine {
    /// Meters, judges and applies the budgets for this tick's plan; returns the budgets
    /// reached and restored. `start` is the clock's zero as time since the Unix epoch.
    pub(super) fn apply_budgets(
        &mut self,
        observed: &mut PoolsObservation,
        now: Duration,
        start: Duration,
    ) -> Vec<EventKind> {
        self.meter(now, start);
        let statuses = self.judge_budgets(now);
        let mut events = Vec::new();
        for new in &statuses {
            let was_reached =
                (self.previous_budget(&new.scope)).is_some_and(|o| o.reached.is_some());
            match (&new.reached, was_reached) {
                (Some(detail), false) => events.push(EventKind::BudgetReached {
                    scope: new.scope.clone(),
                    detail: detail.clone(),
                }),
                (None, true) => events.push(EventKind::BudgetRestored {
                    scope: new.scope.clone(),
                }),
                _ => {}
            }
        }
        let reached = |scope: &str| {
            statuses
                .iter()
                .find(|s| s.scope == scope && s.reached.is_some())
        };
        for (runtime, pool) in self.pools.iter().zip(observed.pools.iter_mut()) {
            pool.budget_reached = reached(runtime.name())
                .or_else(|| reached(ALL_POOLS))
                .map(|s| Reason::BudgetReached {
                    scope: s.scope.clone(),
                    detail: s.reached.clone().unwrap_or_default(),
                    resumes_at_seconds: s.resumes_at_seconds,
                });
        }
        let rooms = self.launch_rooms(&statuses);
        for (pool, room) in observed.pools.iter_mut().zip(rooms) {
            pool.budget_room = room;
        }
        self.budgets = statuses;
        events
    }

    /// Each pool's launch room: the tighter of its own budget's and the overall one's, each
    /// pending or running job (of the scope) reserved the pool's minimum worker life. The use
    /// holds what the launches' reservations (see [`PoolRuntime::launching`]) did not use up
    /// yet; those are taken out of it here, as the room reserves a whole life per job.
    fn launch_rooms(&self, statuses: &[BudgetStatus]) -> Vec<Option<LaunchRoom>> {
        let committed = |runtime: &super::runtime::PoolRuntime| {
            runtime
                .listed
                .iter()
                .filter(|j| j.state.is_capacity())
                .count()
        };
        let all: usize = self.pools.iter().map(committed).sum();
        // Hours reserved and not yet used, per pool, weighted by 1 and by cost per hour.
        let outstanding = |runtime: &PoolRuntime| {
            let hours = runtime.outstanding_hours();
            (
                hours,
                hours * runtime.pool.policy.cost_per_hour.unwrap_or_default(),
            )
        };
        let used = |scope: &str| {
            let s = statuses.iter().find(|s| s.scope == scope);
            let (hours, cost) = match scope == ALL_POOLS {
                true => self
                    .pools
                    .iter()
                    .map(outstanding)
                    .fold((0.0, 0.0), |(h, c), (h2, c2)| (h + h2, c + c2)),
                false => self
                    .pools
                    .iter()
                    .find(|p| p.name() == scope)
                    .map_or((0.0, 0.0), outstanding),
            };
            Use {
                worker_hours: s.map_or(0.0, |s| s.worker_hours - hours).max(0.0),
                cost: s.and_then(|s| s.cost).map(|c| (c - cost).max(0.0)),
            }
        };
        self.pools
            .iter()
            .map(|runtime| {
                let policy = &runtime.pool.policy;
                let life = Duration::from_secs(runtime.pool.worker.idle_seconds);
                let own = (committed(runtime), life);
                let name = runtime.name();
                let rooms = [
                    launch_room(name, policy.budget, used(name), own, policy.cost_per_hour),
                    launch_room(
                        ALL_POOLS,
                        self.budget,
                        used(ALL_POOLS),
                        (all, life),
                        policy.cost_per_hour,
                    ),
                ];
                rooms.into_iter().flatten().min_by_key(|r| r.workers)
            })
            .collect()
    }

    fn previous_budget(&self, scope: &str) -> Option<&BudgetStatus> {
        self.budgets.iter().find(|s| s.scope == scope)
    }

    /// Whether any budget is set (the use is then saved at every tick that metered some).
    fn budgeted(&self) -> bool {
        self.budget.is_set() || self.pools.iter().any(|p| p.pool.policy.budget.is_set())
    }

    /// Meters each pool's active jobs since the last tick (see [`PoolRuntime::meter`]).
    fn meter(&mut self, now: Duration, start: Duration) {
        let save = self.budgeted();
        for runtime in &mut self.pools {
            runtime.meter(now, start, save);
        }
    }

    /// Writes each pool's budget use to its launch record: on every way out of the
    /// manager's loop (restart, shutdown, a fatal error).
    pub fn save_budget_use(&mut self, now: Duration, start: Duration) {
        for runtime in &mut self.pools {
            runtime.save_use(now, start);
        }
    }

    /// Every budget's status: all pools first, then each pool.
    fn judge_budgets(&self, now: Duration) -> Vec<BudgetStatus> {
        let costed = self
            .pools
            .iter()
            .any(|p| p.pool.policy.cost_per_hour.is_some());
        let hours = UsageWindow::merged(self.pools.iter().map(|p| (&p.usage, 1.0)));
        let cost = costed.then(|| {
            UsageWindow::merged(
                self.pools
                    .iter()
                    .map(|p| (&p.usage, p.pool.policy.cost_per_hour.unwrap_or_default())),
            )
        });
        let mut statuses = vec![status(ALL_POOLS, self.budget, &hours, cost.as_ref(), now)];
        for runtime in &self.pools {
            let policy = &runtime.pool.policy;
            let cost = policy
                .cost_per_hour
                .map(|per_hour| UsageWindow::merged([(&runtime.usage, per_hour)]));
            statuses.push(status(
                runtime.name(),
                policy.budget,
                &runtime.usage,
                cost.as_ref(),
                now,
            ));
        }
        statuses
    }
}

impl PoolRuntime {
    /// Adds the active jobs' time (stopping ones too: they still run) since the last tick, or
    /// at a process's first tick since the record was last metered (`start`: the manager
    /// clock's zero, as time since the Unix epoch); each job first uses up its launch's
    /// reservation. Writes the use to the record when `save` and the tick metered something.
    pub(crate) fn meter(&mut self, now: Duration, start: Duration, save: bool) {
        let gap = match self.metered_at {
            Some(at) => now.saturating_sub(at),
            None => self
                .record
                .metered_until()
                .map_or(Duration::ZERO, |until| (start + now).saturating_sub(until)),
        };
        let seconds = gap.min(crate::budget::MAX_METERED_GAP).as_secs_f64();
        let mut charged = 0.0;
        let mut metered = false;
        for job in self.listed.iter().filter(|j| j.state == JobState::Active) {
            charged += self.record.consume(job, seconds);
            metered |= seconds > 0.0;
        }
        self.usage.charge(now, charged);
        self.metered_at = Some(now);
        let usage = self.usage.to_unix(start);
        self.record.metered(usage, start + now, save && metered);
    }

    /// Takes `record` (read back at start, `start`: the manager clock's zero as time since
    /// the Unix epoch) as the pool's launch record, and the budget use and the capacity memory
    /// (`capacity.rs`) it holds.
    pub(crate) fn take_record(&mut self, record: super::record::LaunchRecord, start: Duration) {
        self.usage = crate::budget::UsageWindow::from_unix(record.usage(), start);
        if let Some(capacity) = record.capacity() {
            self.capacity = crate::pools::fallback::Capacity::from_unix(capacity, start);
        }
        self.record = record;
        self.restore_suspension();
        self.restore_hedges(start);
    }

    /// Writes the use, as metered, to the record.
    pub(crate) fn save_use(&mut self, now: Duration, start: Duration) {
        let until = start + self.metered_at.unwrap_or(now);
        let usage = self.usage.to_unix(start);
        self.record.metered(usage, until, true);
    }

    /// A launch of `unique` is about to be submitted: its minimum life is charged to the use
    /// and written, with the launch, to the record, in one write before the submit.
    pub(crate) fn launching(&mut self, unique: &str, now: Duration, start: Duration) {
        let life = self.pool.worker.idle_seconds as f64;
        self.usage.charge(now, life);
        let usage = self.usage.to_unix(start);
        self.record.reserve(unique, life, Some(usage), start + now);
    }

    /// The submit of `unique` failed (no job): its reservation is taken back and the use saved.
    pub(crate) fn launch_failed(&mut self, unique: &str, now: Duration, start: Duration) {
        let released = self.record.unreserve(unique);
        self.usage.charge(now, -released);
        self.save_use(now, start);
    }

    /// Hours of the listed live jobs' reservations not used up yet.
    fn outstanding_hours(&self) -> f64 {
        let seconds: f64 = self
            .listed
            .iter()
            .filter(|j| j.state.is_capacity())
            .map(|j| self.record.outstanding(j))
            .sum();
        seconds / 3600.0
    }
}

#[cfg(test)]
mod tests;
