//! Budgets in the loop: each tick meters the pools' active workers into their rolling-day
//! windows, judges every budget (all pools, then each pool; see [`crate::budget`]), records
//! `budget_reached` / `budget_restored` when a budget's state changes, and tells the pool
//! policy which pools may not launch ([`PoolObservation::budget_reached`]).

use super::Manager;
use crate::backend::JobState;
use crate::budget::{ALL_POOLS, BudgetStatus, LaunchRoom, UsageWindow, Use, launch_room, status};
use crate::events::EventKind;
use crate::policy::Reason;
use crate::pools::PoolsObservation;
use std::time::Duration;

/// How often a pool's budget use is written to its launch record.
const USAGE_SAVE_EVERY: Duration = Duration::from_secs(60);

impl Manager {
    /// Meters, judges and applies the budgets for this tick's plan.
    pub(super) fn apply_budgets(&mut self, observed: &mut PoolsObservation, now: Duration) {
        self.meter(now);
        let statuses = self.judge_budgets(now);
        let changes: Vec<(&BudgetStatus, bool)> = statuses
            .iter()
            .map(|s| {
                (
                    s,
                    self.previous_budget(&s.scope)
                        .is_some_and(|o| o.reached.is_some()),
                )
            })
            .collect();
        for (new, was_reached) in changes {
            match (&new.reached, was_reached) {
                (Some(detail), false) => self.journal.record(
                    now,
                    EventKind::BudgetReached {
                        scope: new.scope.clone(),
                        detail: detail.clone(),
                    },
                ),
                (None, true) => self.journal.record(
                    now,
                    EventKind::BudgetRestored {
                        scope: new.scope.clone(),
                    },
                ),
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
    }

    /// Each pool's launch room: the tighter of its own budget's and the overall one's, each
    /// pending or running job (of the scope) reserved the pool's minimum worker life.
    fn launch_rooms(&self, statuses: &[BudgetStatus]) -> Vec<Option<LaunchRoom>> {
        let committed = |runtime: &super::runtime::PoolRuntime| {
            runtime
                .listed
                .iter()
                .filter(|j| j.state.is_capacity())
                .count()
        };
        let all: usize = self.pools.iter().map(committed).sum();
        let used = |scope: &str| {
            let s = statuses.iter().find(|s| s.scope == scope);
            Use {
                worker_hours: s.map_or(0.0, |s| s.worker_hours),
                cost: s.and_then(|s| s.cost),
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
                        self.config.budget,
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

    /// Adds each pool's active jobs (stopping ones too: they still run) since the last tick;
    /// when a budget is set, writes each pool's use to its launch record once a minute (so a
    /// restart goes on with the same day, losing at most a minute of use).
    fn meter(&mut self, now: Duration) {
        let budgeted =
            self.config.budget.is_set() || self.pools.iter().any(|p| p.pool.policy.budget.is_set());
        let start = super::record::unix_now().saturating_sub(now);
        for runtime in &mut self.pools {
            let active = runtime
                .listed
                .iter()
                .filter(|j| j.state == JobState::Active)
                .count();
            let gap = runtime
                .metered_at
                .map_or(Duration::ZERO, |at| now.saturating_sub(at));
            runtime.usage.add(now, active, gap);
            runtime.metered_at = Some(now);
            let due = runtime
                .usage_saved_at
                .is_none_or(|at| now.saturating_sub(at) >= USAGE_SAVE_EVERY);
            if budgeted && due {
                runtime.record.set_usage(runtime.usage.to_unix(start));
                runtime.usage_saved_at = Some(now);
            }
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
        let mut statuses = vec![status(
            ALL_POOLS,
            self.config.budget,
            &hours,
            cost.as_ref(),
            now,
        )];
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
