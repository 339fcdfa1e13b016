//! A simulated worker's life: it becomes active (its check-in), starts runs, reports their
//! end, idles out and ends, billed and counted as it goes.

use super::{FINISH, Fate, HANDLES_A_RUN_MS, IDLE_EXIT, Phase, RUN_REPORTED, Sim, add, serve};
use crate::dispatch::Resources;

impl Sim<'_> {
    pub(super) fn start_bundle(&mut self, job: u32, bundle: u32, now: u64) {
        let arrival = self.workload.arrivals[bundle as usize];
        let requested = Resources::requested(&self.staged_bundle(bundle));
        *self.owner_runs.entry(arrival.owner).or_default() += 1;
        let worker = &mut self.jobs[job as usize];
        if worker.running.is_empty() {
            // Cancels its idle exit.
            worker.idle_generation += 1;
            worker.busy_since = Some(now);
        }
        worker.running.push((bundle, now));
        worker.in_use = add(worker.in_use, requested);
        worker.started += 1;
        if let Some(gap) = self.checkin_gap() {
            let next = now + gap + HANDLES_A_RUN_MS;
            self.jobs[job as usize].checkins_from = next;
            self.serve_at(next);
        }
        let worker = &self.jobs[job as usize];
        let pool = worker.pool;
        // A restaged run's wait (from its arrival) was counted at its first start.
        if !self.restarted.remove(&bundle) {
            self.stats[pool].waits.push(now - arrival.at_ms);
            self.started += 1;
        }
        self.schedule(now + arrival.duration_ms, FINISH, job, bundle);
    }

    /// An active worker with no run waits for one, and exits after `worker_idle`.
    pub(super) fn idle_or_exit(&mut self, job: u32, now: u64) {
        let max_runs = self.config.worker_max_runs;
        let worker = &mut self.jobs[job as usize];
        if !worker.running.is_empty() || worker.phase != Phase::Active {
            return;
        }
        if max_runs.is_some_and(|max| worker.started >= max) {
            self.exit(job, now);
            return;
        }
        worker.idle_generation += 1;
        let generation = worker.idle_generation;
        if !self.config.worker_idle.is_zero() {
            // A new worker's idle clock starts once its first check-in has come back.
            let first = (worker.started == 0)
                .then_some(self.config.checkin_gap)
                .flatten();
            let at = now + (self.config.worker_idle + first.unwrap_or_default()).as_millis() as u64;
            self.schedule(at, IDLE_EXIT, job, generation);
        }
    }

    pub(super) fn ready(&mut self, job: u32, now: u64) {
        let worker = &mut self.jobs[job as usize];
        if worker.phase != Phase::Pending {
            return;
        }
        let pool = worker.pool;
        match worker.fate {
            Fate::Fail => {
                self.bill(job, now);
                let worker = &mut self.jobs[job as usize];
                worker.phase = Phase::Failed;
                self.stats[pool].failures += 1;
                self.stats[pool].live -= 1;
                self.release(job, now);
            }
            Fate::Preempt => {
                self.bill(job, now);
                let worker = &mut self.jobs[job as usize];
                worker.phase = Phase::Preempted;
                self.stats[pool].live -= 1;
                self.release(job, now);
            }
            Fate::Start => {
                worker.checkins_from = now;
                worker.phase = Phase::Active;
                worker.active_at = now;
                self.stats[pool].active += 1;
                // Its worker checks in at once: the next tick's worker list shows it.
                self.reclaim_later(job, now);
                self.serve(now);
                self.idle_or_exit(job, now);
            }
            Fate::Stuck => {}
        }
    }

    /// `bundle`'s run on `job`'s worker ends at `now` (it is `ready`). Where check-ins are
    /// modelled ([`SimConfig::checkin_gap`](super::SimConfig::checkin_gap)), the server counts
    /// its room free only from the worker's next check-in, which reports the run gone: on the
    /// `advise` bench's two recorded runs of 2026-11-30 (21:00, 21:30), the next run on a
    /// worker whose bundle was waiting for its room started 4.3–11.9 s after the last one was
    /// `ready` (10 of them, median 5.8 s), and room counted free at `ready` made the replay's
    /// wait p90 9 and 12 % short.
    pub(super) fn finish(&mut self, job: u32, bundle: u32, now: u64) {
        match self.next_checkin(job, now) {
            Some(reported) => self.schedule(reported, RUN_REPORTED, job, bundle),
            None => self.run_reported(job, bundle, now),
        }
    }

    /// The server learns that `bundle`'s run on `job`'s worker has ended: its room is free.
    pub(super) fn run_reported(&mut self, job: u32, bundle: u32, now: u64) {
        let requested = Resources::requested(&self.staged_bundle(bundle));
        let owner = self.workload.arrivals[bundle as usize].owner;
        let worker = &mut self.jobs[job as usize];
        let Some(at) = worker.running.iter().position(|(b, _)| *b == bundle) else {
            return;
        };
        worker.running.swap_remove(at);
        worker.in_use = worker.in_use.minus(requested);
        let pool = worker.pool;
        if worker.running.is_empty()
            && let Some(since) = worker.busy_since.take()
        {
            self.stats[pool].busy_ms += now - since;
        }
        *self.owner_runs.entry(owner).or_default() -= 1;
        self.finished += 1;
        self.runnable_left -= 1;
        self.last_finish = now;
        self.serve(now);
        self.idle_or_exit(job, now);
    }

    pub(super) fn idle_exit(&mut self, job: u32, generation: u32, now: u64) {
        let worker = &self.jobs[job as usize];
        if worker.phase == Phase::Active
            && worker.running.is_empty()
            && worker.idle_generation == generation
        {
            // `cl-worker` looks at its idle time between check-ins: an exit waits for the end
            // of the check-in it falls in.
            match self.cycle(job, now) {
                serve::Cycle::In { until } => self.schedule(until, IDLE_EXIT, job, generation),
                _ => self.exit(job, now),
            }
        }
    }

    /// An active worker ends (idle, or its run count reached).
    pub(super) fn exit(&mut self, job: u32, now: u64) {
        self.end_active(job, now, Phase::Gone);
    }

    /// An active worker's end, counted: `Gone`, or `Preempted` (listed once more, then gone).
    pub(super) fn end_active(&mut self, job: u32, now: u64, phase: Phase) {
        self.bill(job, now);
        let worker = &mut self.jobs[job as usize];
        worker.phase = phase;
        let (pool, unused) = (worker.pool, worker.started == 0);
        let stats = &mut self.stats[pool];
        stats.live -= 1;
        stats.active -= 1;
        stats.unused += u64::from(unused);
        self.release(job, now);
        if let Some(ghost) = self.config.ghost {
            let until = now + ghost.as_millis() as u64;
            self.ghosts.push((job, until));
            self.serve_at(until);
        }
    }
}
