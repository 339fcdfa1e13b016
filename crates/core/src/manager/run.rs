//! The loop around the tick: apply reloads, tick, let the error policy decide the next delay,
//! and return when a shutdown is requested, one tick ran with `--once`, the restart time came,
//! too many launches failed, or an error is fatal.

use super::error_policy::{Action, ErrorPolicy, RefusalSpell};
use super::{Manager, Outcome};
use crate::error::Result;
use tokio::sync::watch;

impl Manager {
    /// Ticks every `sleep_time` until a shutdown is requested (`shutdown` turns `true`: the
    /// tick in flight is cancelled, see [`SUBMIT_GRACE`](super::SUBMIT_GRACE)), one tick ran with `once`, the
    /// restart time came, or an error is fatal. On every way out, the budget use is written to
    /// the launch records (a restart goes on with the same day), and the history's last lines
    /// to its files.
    pub async fn run(&mut self, once: bool, shutdown: watch::Receiver<bool>) -> Result<Outcome> {
        let outcome = self.run_loop(once, shutdown).await;
        let now = self.clock();
        (self.engine).save_budget_use(now, super::unix_start(now));
        self.history_flush();
        outcome
    }

    async fn run_loop(
        &mut self,
        once: bool,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<Outcome> {
        let mut errors = ErrorPolicy::new(
            self.config.sleep_time,
            self.config.max_backoff,
            self.started,
            once,
        );
        let mut refusals = RefusalSpell::new(self.refused_again_for);
        loop {
            self.apply_reloads();
            if let Some(outcome) = self.restart_due() {
                return Ok(outcome);
            }
            let Some(result) = self.tick_or_shutdown(&mut shutdown).await else {
                return Ok(Outcome::Shutdown);
            };
            let launch_errors = result.as_ref().map_or(0, |r| r.launch_errors.len());
            let next_tick = self.next_tick(result.as_ref().ok());
            let result = refusals.judge(result.map(drop), self.clock());
            let delay = match errors.next(result, next_tick) {
                Action::Requeue(delay) => delay,
                Action::Stop(error) => return Err(error),
            };
            if let Some(outcome) = self.too_many_failures() {
                return Ok(outcome);
            }
            if once {
                return Ok(Outcome::Once { launch_errors });
            }
            if *shutdown.borrow() {
                return Ok(Outcome::Shutdown);
            }
            tracing::debug!("sleeping {} seconds", delay.as_secs());
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = shutdown.wait_for(|stop| *stop) => return Ok(Outcome::Shutdown),
            }
        }
    }

    /// When to tick next after a successful tick: `sleep_time`, or sooner while a pool races
    /// launches for waiting bundles (its `race_watch`; logged).
    fn next_tick(&self, report: Option<&super::TickReport>) -> std::time::Duration {
        let sleep_time = self.config.sleep_time;
        let Some(report) = report else {
            return sleep_time;
        };
        let Some((pool, watch)) = report.pools.watched_by(sleep_time) else {
            return sleep_time;
        };
        tracing::debug!(
            "next tick in {} s (pool {pool}'s race_watch), not --sleep-time {}: it races launches for its waiting bundles, and the losers go once the winners check in",
            watch.as_secs(),
            sleep_time.as_secs(),
        );
        watch
    }

    /// Whether `--restart-after-seconds` has elapsed (logged).
    fn restart_due(&self) -> Option<Outcome> {
        let limit = self.config.restart_after?;
        let elapsed = self.started.elapsed();
        if elapsed <= limit {
            return None;
        }
        tracing::info!(
            "{} seconds have elapsed since this manager was started, more than {}; restarting",
            elapsed.as_secs(),
            limit.as_secs()
        );
        Some(Outcome::Restart)
    }

    /// Whether `--exit-after-num-failed` has been exceeded (logged).
    fn too_many_failures(&self) -> Option<Outcome> {
        let limit = self.config.exit_after_num_failed?;
        if self.engine.num_failed() <= limit {
            return None;
        }
        tracing::error!(
            "failed to start {} worker jobs in total, more than --exit-after-num-failed {limit}; exiting",
            self.engine.num_failed(),
        );
        Some(Outcome::TooManyFailures {
            failed: self.engine.num_failed(),
            limit,
        })
    }
}
