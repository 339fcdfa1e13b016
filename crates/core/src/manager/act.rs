//! The act step of a tick: pool by pool, stop the stuck and lost jobs the policy named, then
//! launch what it decided (stopping early when a shutdown is requested or a launch fails).
//! The I/O is here; what each stop and launch means for the pool is the engine's
//! ([`crate::engine`]'s act step).

use super::{Manager, TickReport, shutdown};
use crate::backend::{JobState, LaunchRequest, WorkerJob, new_unique};
use crate::pools::PoolDecision;

impl Manager {
    /// Stops stuck and lost jobs, then launches, pool by pool.
    pub(super) async fn act(&mut self, report: &mut TickReport) {
        let decisions = report.pools.pools.clone();
        for (index, decision) in decisions.iter().enumerate() {
            let kept = self.engine.note_kept(index, decision, self.clock());
            report.events.extend(kept);
            self.stop(index, decision, report).await;
            for _ in 0..decision.launches {
                if self.stop_flags.stopping() || !self.launch(index, report).await {
                    break;
                }
            }
        }
        let now = self.clock();
        (self.engine).decided(&report.pools, now, super::unix_start(now));
    }

    /// Stops the jobs `decision` names on pool `index` (a dry run only says it would).
    async fn stop(&mut self, index: usize, decision: &PoolDecision, report: &mut TickReport) {
        if decision.stops.is_empty() {
            return;
        }
        let runtime = &self.engine.pools[index];
        if self.config.dry_run {
            // A dry run changes nothing on the platform: it may run beside the live manager.
            let pool = runtime.name();
            for id in &decision.stops {
                tracing::info!(pool, job = %id, dry_run = true, "would stop job {id} (dry run: nothing is stopped)");
            }
            return;
        }
        let mut results = Vec::with_capacity(decision.stops.len());
        for id in &decision.stops {
            let job = (runtime.listed.iter())
                .find(|j| &j.id == id)
                .cloned()
                .unwrap_or_else(|| WorkerJob::new(id.clone(), JobState::Pending));
            let result = self.backends[index].stop_worker_job(&job).await;
            results.push((id.clone(), result.map_err(|e| e.to_string())));
        }
        let server = self.client.server().to_owned();
        let now = self.clock();
        let events = (self.engine).stopped(index, decision, results, &server, now);
        report.events.extend(events);
    }

    /// One launch on pool `index`. Returns whether to go on launching on this pool this tick.
    async fn launch(&mut self, index: usize, report: &mut TickReport) -> bool {
        let unique = new_unique();
        let dry_run = self.config.dry_run;
        let now = self.clock();
        let start = super::unix_start(now);
        if !dry_run {
            self.engine.launching(index, &unique, now, start);
        }
        let runtime = &self.engine.pools[index];
        let backend = &self.backends[index];
        let request = LaunchRequest {
            unique: &unique,
            worker: &runtime.pool.worker,
            dry_run,
        };
        let submitting = shutdown::Submitting::new(&self.stop_flags.submitting);
        let result = backend.start_worker_job(&request).await;
        drop(submitting);
        match &result {
            Ok(job) => {
                let output = backend.job_output(job);
                tracing::info!(pool = runtime.name(), job = %job.id, backend = backend.name(), dry_run, output = output.as_deref(), "started a worker job{}", output.as_deref().map(|o| format!("; its output goes to {o}")).unwrap_or_default());
                report.launched.push(job.clone());
            }
            Err(error) => report.launch_errors.push(error.to_string()),
        }
        let outcome = (self.engine).launch_result(index, &unique, &result, dry_run, now, start);
        report.events.extend(outcome.events);
        outcome.go_on
    }
}
