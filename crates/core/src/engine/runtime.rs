//! A pool as the engine knows it ([`PoolSpec`]: its policy, worker settings and backend's
//! name), what the manager remembers about it between ticks (last launch, failure memory, jobs being stopped,
//! since when jobs are pending, which jobs became active), and how a listing turns into the
//! pure [`PoolObservation`] that [`crate::pools::plan_pools`] takes.

use super::checkins::{CheckinMemory, matchable};
use super::record::LaunchRecord;
use crate::backend::{JobState, PendingKind, WorkerJob};
use crate::checkin::{CheckinView, Sighting, WorkerState, worker_state};
use crate::command::WorkerOptions;
use crate::pools::{
    Failure, FailureClass, FailureSignature, LaunchMode, MISCONFIGURED_AFTER, ObservedJob,
    PoolDecision, PoolHealth, PoolObservation, PoolPolicy,
};
use crate::status::{FailureRecord, PoolStatus, RECENT_FAILURES, TickEvent};
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::BTreeMap;
use std::collections::{HashSet, VecDeque};
use std::time::Duration;

/// A pool as the engine knows it: its rules, the settings of its workers and the name of
/// its backend (the engine never calls a backend: its driver does).
#[derive(Debug, Clone)]
pub(crate) struct PoolSpec {
    /// The rules.
    pub policy: PoolPolicy,
    /// The `cl-worker` settings of its workers (tag and tag-exclusive included).
    pub worker: WorkerOptions,
    /// Its backend's name, for the status.
    pub backend: String,
}

/// A pool and its memory.
#[derive(Debug)]
pub(crate) struct PoolRuntime {
    pub pool: PoolSpec,
    /// Pending jobs of the last listing that its backend says are not merely queued (see
    /// [`crate::backend::WorkerBackend::pending_kind`]).
    pub pending_kinds: FxHashMap<String, PendingKind>,
    /// When the platform expects pending jobs of the last listing to start, on the manager's
    /// clock, when it says ([`WorkerJob::expected_start`]).
    pub forecasts: FxHashMap<String, Duration>,
    pub last_launch: Option<Duration>,
    pub health: PoolHealth,
    /// Jobs stopped by the manager and still listed with a capacity state.
    pub stopping: HashSet<String>,
    pending_since: FxHashMap<String, Duration>,
    active_since: FxHashMap<String, Duration>,
    seen_active: FxHashSet<String>,
    failed_seen: FxHashSet<String>,
    /// The last listing (stopping jobs included), for stops.
    pub listed: Vec<WorkerJob>,
    pub failed_listed: usize,
    pub last_decision: Option<PoolDecision>,
    /// Since when (manager clock) every decision found pending jobs the pool no longer
    /// needs ([`PoolDecision::surplus`]): they are withdrawn once that lasts `withdraw_after`.
    pub surplus_since: Option<Duration>,
    /// When the pool launched for hedges in the last day, in seconds on the manager clock
    /// (`engine/hedges.rs`).
    pub hedge_times: Vec<i64>,
    pub assigned: Vec<String>,
    /// Check-ins of the pool's workers.
    pub checkins: CheckinMemory,
    /// The manager has a view of the server's workers: a job whose check-in can be matched
    /// succeeds at its first check-in, not when it becomes active.
    pub checkin_aware: bool,
    /// Jobs by worker state at the last observation.
    pub worker_states: BTreeMap<WorkerState, usize>,
    /// A `pool_backing_off` event is out and no `pool_recovered` yet.
    pub announced_backoff: bool,
    /// Active worker time in the budget's rolling day.
    pub usage: crate::budget::UsageWindow,
    /// When the pool's active workers were last metered (manager clock).
    pub metered_at: Option<Duration>,
    /// Which jobs this manager launched and which checked in, and the budget use, kept
    /// across restarts when the manager has a state dir.
    pub record: LaunchRecord,
    /// Jobs a rule would stop but may not, already said (see `act.rs`).
    pub kept_noted: FxHashSet<String>,
    /// Listed jobs this manager did not launch, already said (`note_foreign`).
    pub foreign_noted: FxHashSet<String>,
    /// Where new launches go, for a pool with a `fallback` (`capacity.rs`).
    pub capacity: crate::pools::fallback::Capacity,
    /// A hash of the pool's settings, when the manager's caller gave one: kept with a
    /// suspension, so that a restart with other settings resumes the pool (`suspension.rs`).
    pub settings: Option<u64>,
}

/// What a new listing showed, besides the observation.
#[derive(Debug, Default)]
pub(crate) struct ListingNews {
    /// Jobs seen failed for the first time.
    pub newly_failed: Vec<WorkerJob>,
    pub events: Vec<TickEvent>,
    pub failures: Vec<FailureRecord>,
}

impl PoolRuntime {
    pub fn new(pool: PoolSpec) -> Self {
        let record = LaunchRecord::in_memory(&pool.policy.name);
        Self {
            pending_kinds: FxHashMap::default(),
            forecasts: FxHashMap::default(),
            record,
            kept_noted: FxHashSet::default(),
            foreign_noted: FxHashSet::default(),
            pool,
            last_launch: None,
            health: PoolHealth::default(),
            stopping: HashSet::new(),
            pending_since: FxHashMap::default(),
            active_since: FxHashMap::default(),
            seen_active: FxHashSet::default(),
            failed_seen: FxHashSet::default(),
            listed: Vec::new(),
            failed_listed: 0,
            last_decision: None,
            surplus_since: None,
            hedge_times: Vec::new(),
            assigned: Vec::new(),
            checkins: CheckinMemory::default(),
            checkin_aware: false,
            worker_states: BTreeMap::new(),
            announced_backoff: false,
            usage: crate::budget::UsageWindow::default(),
            metered_at: None,
            capacity: Default::default(),
            settings: None,
        }
    }

    /// What the backend said of `job` while it is pending; queued otherwise.
    pub fn pending_kind(&self, job: &WorkerJob) -> PendingKind {
        match job.state {
            JobState::Pending => (self.pending_kinds.get(&job.id).copied()).unwrap_or_default(),
            _ => PendingKind::Queued,
        }
    }

    pub fn name(&self) -> &str {
        &self.pool.policy.name
    }

    fn target_mode(&self) -> bool {
        self.pool.policy.launch_mode == LaunchMode::Target
    }

    /// Records a failure of the pool (`kind`: what failed) and, in target mode, its backoff
    /// and what its class does: a misconfiguration may suspend the pool
    /// ([`crate::pools::PoolHealth::record_failure`]). Returns its events.
    pub fn fail(
        &mut self,
        now: Duration,
        kind: &'static str,
        class: FailureClass,
        detail: String,
    ) -> ListingNews {
        let mut news = ListingNews::default();
        news.events.push(TickEvent::Failure {
            pool: self.name().to_owned(),
            class,
        });
        let signature = FailureSignature::of(kind, &detail);
        news.failures.push(FailureRecord {
            pool: self.name().to_owned(),
            at_seconds: now.as_secs(),
            kind,
            class,
            detail,
        });
        if self.target_mode() {
            let suspends = self
                .health
                .record_failure(now, Failure { class, signature });
            let until = self.health.backoff_until.unwrap_or(now);
            let streak = match class {
                FailureClass::Misconfiguration => format!(
                    "; {} of {MISCONFIGURED_AFTER} in a row with this error suspend it",
                    self.health.misconfigured
                ),
                _ => String::new(),
            };
            tracing::warn!(
                pool = self.name(),
                failures = self.health.failures,
                class = class.code(),
                until_seconds = until.as_secs(),
                "pool {} backs off for {} s after {} failure(s) ({kind}: {}{streak})",
                self.name(),
                until.saturating_sub(now).as_secs(),
                self.health.failures,
                class.code()
            );
            // A suspension outlasts any backoff: its event is the one said.
            let event = match suspends {
                true => self.suspend(news.failures.last().map_or("", |f| f.detail.as_str())),
                false => TickEvent::BackoffStarted {
                    pool: self.name().to_owned(),
                    failures: self.health.failures,
                    until_seconds: until.as_secs(),
                },
            };
            news.events.push(event);
        }
        news
    }

    /// Takes in a listing: forgets gone jobs, notes pending times, successes and failures.
    /// `start` is the clock's zero as time since the Unix epoch.
    pub fn take_listing(
        &mut self,
        jobs: Vec<WorkerJob>,
        now: Duration,
        start: Duration,
    ) -> ListingNews {
        // Ids are cloned into the maps only when first seen: a steady listing allocates nothing.
        let listed: FxHashSet<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
        let live: FxHashSet<&str> = jobs
            .iter()
            .filter(|j| j.state.is_capacity())
            .map(|j| j.id.as_str())
            .collect();
        // A job this manager stopped is over by its hand: its end is no failed start.
        let stopped: Vec<String> = self
            .stopping
            .extract_if(|id| !live.contains(id.as_str()))
            .collect();
        self.failed_seen
            .retain(|id| listed.contains(id.as_str()) && !live.contains(id.as_str()));
        self.failed_seen.extend(stopped);
        self.seen_active.retain(|id| listed.contains(id.as_str()));
        self.active_since
            .retain(|id, _| listed.contains(id.as_str()));
        self.checkins.retain(&listed, &live);
        self.record.forget_gone(&jobs, start + now);
        self.kept_noted.retain(|id| live.contains(id.as_str()));
        self.foreign_noted.retain(|id| live.contains(id.as_str()));
        self.pending_since
            .retain(|id, _| live.contains(id.as_str()));
        let mut news = ListingNews::default();
        for job in &jobs {
            if job.state.is_capacity() && self.record.checked_in(job) {
                self.checkins.note_checked_in_before(job);
            }
            self.note_foreign(job);
            match job.state {
                JobState::Pending => {
                    if !self.pending_since.contains_key(&job.id) {
                        self.pending_since.insert(job.id.clone(), now);
                    }
                }
                JobState::Active => {
                    self.pending_since.remove(&job.id);
                    if !self.active_since.contains_key(&job.id) {
                        self.active_since.insert(job.id.clone(), now);
                    }
                    let first_seen_active = !self.seen_active.contains(&job.id);
                    if first_seen_active {
                        self.seen_active.insert(job.id.clone());
                    }
                    let awaits_checkin = self.checkin_aware && matchable(job);
                    if first_seen_active && self.health.failures > 0 && !awaits_checkin {
                        tracing::info!(pool = self.name(), job = %job.id, "a job became active; the pool's failure streak is forgotten");
                        self.health.record_success();
                    }
                }
                JobState::Failed => {
                    if !self.failed_seen.contains(&job.id) {
                        self.failed_seen.insert(job.id.clone());
                        self.note_failed(job, now, &mut news);
                    }
                }
                JobState::Preempted => {
                    if !self.failed_seen.contains(&job.id) {
                        self.failed_seen.insert(job.id.clone());
                        self.note_preempted(job, now, &mut news);
                    }
                }
                JobState::Ended => {
                    if self.ended_unready(job) && self.failed_seen.insert(job.id.clone()) {
                        self.note_failed(job, now, &mut news);
                    }
                }
            }
        }
        self.failed_listed = jobs.iter().filter(|j| j.state == JobState::Failed).count();
        self.listed = jobs;
        news
    }

    /// Says once per job that a pending or running job listed under this pool's identity
    /// was not launched by this manager: it counts toward `max` (so this pool launches fewer)
    /// and no rule stops it. Most often another deployment shares the identity (a staging
    /// and a production manager with Slurm's default job name, say), or the job predates
    /// the launch record.
    fn note_foreign(&mut self, job: &WorkerJob) {
        if !job.state.is_capacity()
            || self.record.holds(job)
            || !self.foreign_noted.insert(job.id.clone())
        {
            return;
        }
        tracing::warn!(
            pool = self.name(),
            job = %job.id,
            name = %job.name,
            "job {} ({}) is listed under this pool's identity but this manager did not launch \
             it: it counts toward max and no rule stops it. If another deployment (another \
             server or account) shares the identity, give each its own (Slurm: --job-name; \
             else the backend's manager id)",
            job.id,
            job.name
        );
    }

    /// Whether an ended job ended before its worker was ever ready: this manager launched it
    /// (or saw it run), its check-ins can be matched, and it never checked in (a clean exit
    /// before the first check-in is a failed start: a missing grant, a wrong image, an
    /// unreachable server).
    fn ended_unready(&self, job: &WorkerJob) -> bool {
        let ours = self.record.holds(job) || self.seen_active.contains(&job.id);
        ours && self.checkin_aware && matchable(job) && !self.ever_checked_in(job)
    }

    /// Whether the worker of `job` ever checked in (in this process, or before a restart).
    fn ever_checked_in(&self, job: &WorkerJob) -> bool {
        self.checkins.ever_checked_in(&job.id) || self.record.checked_in(job)
    }

    /// Whether `job` failed before its worker was ready: before its first check-in when
    /// check-ins are seen and can be matched, else before the platform said it runs.
    fn failed_unready(&self, job: &WorkerJob) -> bool {
        match self.checkin_aware && matchable(job) {
            true => !self.ever_checked_in(job),
            false => !self.seen_active.contains(&job.id),
        }
    }

    fn note_failed(&mut self, job: &WorkerJob, now: Duration, news: &mut ListingNews) {
        let before_active = self.failed_unready(job);
        let ended = job.state == JobState::Ended;
        let reason = job.reason.clone().unwrap_or_else(|| match ended {
            true => "ended before its worker checked in".into(),
            false => "unknown".into(),
        });
        let how = if ended { "ended" } else { "failed" };
        // Only a job whose worker never got ready is a failed start: one whose worker checked
        // in (busy or idle) failed at work, and its runs are the server's to settle.
        let when = match (before_active, self.ever_checked_in(job)) {
            (true, _) => "before its worker was ready",
            (false, true) => "after its worker checked in",
            (false, false) => "after it started running",
        };
        tracing::error!(pool = self.name(), job = %job.id, reason = %reason, before_active, "worker job {how} {when}");
        news.newly_failed.push(job.clone());
        news.events.push(TickEvent::JobFailed {
            pool: self.name().to_owned(),
            job_id: job.id.clone(),
            before_active,
        });
        if before_active {
            let kind = match ended {
                true => "ended_before_checkin",
                false => "job_failed_before_active",
            };
            // Once is a failed start; the same exit again and again is the pool's settings.
            let class = FailureClass::Misconfiguration;
            let more = self.fail(now, kind, class, format!("job {}: {reason}", job.id));
            news.events.extend(more.events);
            news.failures.extend(more.failures);
        }
    }

    /// A preempted job, once: logged and counted, but neither a failure nor a reason to back
    /// off (the worker did run, or would have; the platform took it away). Its demand is
    /// served again by the normal rules, as it is no longer capacity.
    fn note_preempted(&mut self, job: &WorkerJob, now: Duration, news: &mut ListingNews) {
        let reason = job.reason.clone();
        tracing::warn!(pool = self.name(), job = %job.id, reason = reason.as_deref().unwrap_or("unknown"), "worker job was preempted; its demand is launched again by the normal rules");
        let what = match &reason {
            Some(reason) => format!("job {} preempted ({reason})", job.id),
            None => format!("job {} preempted", job.id),
        };
        news.events.push(TickEvent::JobPreempted {
            pool: self.name().to_owned(),
            job_id: job.id.clone(),
            reason,
        });
        news.events.extend(self.capacity_event(now, what));
    }

    /// Takes in a fresh view of the server's workers: a first check-in forgets the pool's
    /// failure streak; a worker that checked in and vanished is noted once.
    pub fn take_checkins(&mut self, view: &CheckinView, now: Duration) -> Vec<TickEvent> {
        let news = self.checkins.take(view, &self.listed, now);
        let first = |j: &&WorkerJob| news.first_checkins.contains(&j.id);
        self.record.checked_in_now(self.listed.iter().filter(first));
        let mut events = match news.first_checkins.is_empty() {
            true => Vec::new(),
            false => self.capacity_checked_in(),
        };
        if let Some(job) = news.first_checkins.first() {
            events.extend(self.resume("a worker of the pool checked in"));
            if self.health.failures > 0 {
                tracing::info!(pool = self.name(), job = %job, "a worker checked in; the pool's failure streak is forgotten");
                self.health.record_success();
            }
        }
        events.extend(news.vanished.into_iter().map(|job_id| {
            tracing::warn!(pool = self.name(), job = %job_id, "the worker of job {job_id} checked in, then vanished from the server's list (a network partition, a worker's nap?); it is presumed busy and not stopped: its bundles resume when it checks in again");
            TickEvent::WorkerVanished {
                pool: self.name().to_owned(),
                job_id,
            }
        }));
        events
    }

    /// The pure observation of this pool, its jobs' check-ins judged by `sighting`.
    pub fn observation(
        &mut self,
        now: Duration,
        unobserved: Option<String>,
        sighting: Option<Sighting<'_>>,
    ) -> PoolObservation {
        self.health.expire(now);
        let jobs = self
            .listed
            .iter()
            .filter(|j| !self.stopping.contains(&j.id))
            .map(|j| ObservedJob {
                id: j.id.clone(),
                state: j.state,
                pending_for: self
                    .pending_since
                    .get(&j.id)
                    .map(|since| now.saturating_sub(*since))
                    .unwrap_or_default(),
                active_for: self
                    .active_since
                    .get(&j.id)
                    .map(|since| now.saturating_sub(*since))
                    .unwrap_or_default(),
                checkin: self.checkins.job_checkin(
                    sighting,
                    j,
                    self.active_since.get(&j.id).copied(),
                    now,
                ),
                launched_here: self.record.holds(j),
                pending: self.pending_kind(j),
            })
            .collect::<Vec<ObservedJob>>();
        self.note_worker_states(&jobs);
        PoolObservation {
            jobs,
            stopping: self.stopping.len(),
            since_last_launch: self.last_launch.map(|t| now.saturating_sub(t)),
            health: self.health,
            unobserved,
            // Set by the manager's budgets before the plan.
            budget_reached: None,
            budget_room: None,
            checkins_seen: self.record.checkins_seen(),
            capacity: self.capacity.state.clone(),
            surplus_for: self.surplus_since.map(|since| now.saturating_sub(since)),
            hedge_room: self.hedge_room(now),
        }
    }

    /// Counts the jobs by check-in state; logs the counts when they change (the pool's
    /// check-in status line).
    fn note_worker_states(&mut self, jobs: &[ObservedJob]) {
        let timeout = self.pool.policy.checkin_timeout;
        let mut states = BTreeMap::new();
        for job in jobs {
            if let Some(state) = worker_state(job.state, job.checkin, timeout) {
                *states.entry(state).or_insert(0usize) += 1;
            }
        }
        if states != self.worker_states && !states.is_empty() {
            let count = |s: WorkerState| states.get(&s).copied().unwrap_or(0);
            let (starting, idle, busy, vanished, lost) = (
                count(WorkerState::Starting),
                count(WorkerState::ReadyIdle),
                count(WorkerState::Busy),
                count(WorkerState::Vanished),
                count(WorkerState::Lost),
            );
            tracing::info!(
                pool = self.name(),
                starting,
                ready_idle = idle,
                busy,
                vanished,
                lost,
                "pool {} workers: {starting} starting, {idle} ready idle, {busy} busy, {vanished} vanished, {lost} lost",
                self.name()
            );
        }
        self.worker_states = states;
    }

    /// Notes a job this manager just started.
    pub fn launched(&mut self, job: &WorkerJob, now: Duration) {
        self.last_launch = Some(now);
        if job.state == JobState::Pending {
            self.pending_since.insert(job.id.clone(), now);
        }
    }

    /// The pool's part of the status snapshot.
    pub fn status(&self, now: Duration) -> PoolStatus {
        let policy = &self.pool.policy;
        let decision = self.last_decision.as_ref();
        PoolStatus {
            name: policy.name.clone(),
            backend: self.pool.backend.clone(),
            launch_mode: policy.launch_mode,
            shape: policy.shape.into(),
            min: policy.min,
            max: policy.max,
            tag: policy.tag.clone(),
            tag_exclusive: policy.tag_exclusive,
            cost: policy.cost,
            cost_per_hour: policy.cost_per_hour,
            spill_after_seconds: policy.spill_after.map(|d| d.as_secs()),
            fallback: (policy.fallback.as_ref()).map(|f| crate::status::FallbackStatus {
                pool: f.pool.clone(),
                capacity: self.capacity.state.clone(),
            }),
            active: decision.map_or(0, |d| d.active),
            pending: decision.map_or(0, |d| d.pending),
            failed: self.failed_listed,
            stopping: self.stopping.len(),
            workers: self.worker_states.clone(),
            health: self.health,
            backing_off_until: self.health.backing_off(now).map(|u| u.as_secs()),
            suspended: self.suspension().map(|s| crate::status::SuspensionStatus {
                since_unix_seconds: s.since,
                failures: s.failures,
                error: s.detail.clone(),
            }),
            last_decision: self.last_decision.clone(),
            assigned: self.assigned.clone(),
        }
    }
}

/// Appends `records` to a bounded list of recent failures.
pub(crate) fn remember(recent: &mut VecDeque<FailureRecord>, records: Vec<FailureRecord>) {
    for record in records {
        if recent.len() == RECENT_FAILURES {
            recent.pop_front();
        }
        recent.push_back(record);
    }
}
