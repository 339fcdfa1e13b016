//! What the manager remembers of its workers' check-ins between ticks: the last view of the
//! server's workers (`GET /rest/workers/info`, kept when a call fails) and since when the views
//! have been fresh, and per pool when each job's worker was last listed, which workers ever
//! checked in and which vanished (noted once), and which ended while the server still lists
//! them.
//!
//! CodaLab 1.7.5's `cl-worker` never checks out: one that exits (idle, or its job ended) stays
//! in the server's list until the server forgets it, 60 s after its last check-in by default
//! (`_cleanup_dead_workers`). Its room is gone with it, so [`CheckinMemory::ended`] names it,
//! and where a new worker would outlive that minute
//! ([`crate::checkin::outlives_the_listing`]) the dispatch model leaves it out: bundles staged
//! in that minute are planned on launches, not on a worker that will never take them.

use crate::backend::WorkerJob;
use crate::checkin::{CheckinView, JobCheckin, JobTimes, Sighting, job_checkin, unique_of};
use rustc_hash::{FxHashMap, FxHashSet};
use std::time::Duration;

/// The manager's last view of the server's workers.
#[derive(Debug, Default)]
pub(crate) struct LastView {
    /// The last view the server gave; `None` before the first successful call.
    pub view: Option<CheckinView>,
    /// The view is this tick's.
    pub fresh: bool,
    /// When the current run of fresh views began (manager clock).
    pub fresh_since: Duration,
    /// The last call failed with this error (logged once per streak).
    pub failing: Option<String>,
}

impl LastView {
    /// The view to judge this tick's jobs by, if any.
    pub fn sighting(&self) -> Option<Sighting<'_>> {
        self.view.as_ref().map(|view| Sighting {
            view,
            fresh: self.fresh,
            fresh_since: self.fresh_since,
        })
    }

    /// Takes the result of this tick's call at `now`: a new view, or an error that keeps the
    /// last one. A fresh view after a stale stretch (or none) starts a new run of fresh views.
    pub fn take(&mut self, result: Option<Result<CheckinView, String>>, now: Duration) {
        match result {
            None => self.fresh = false,
            Some(Ok(view)) => {
                if self.failing.take().is_some() {
                    tracing::info!(
                        "the server lists its workers again; every job's check-in clock starts again now"
                    );
                }
                if !self.fresh {
                    self.fresh_since = now;
                }
                self.view = Some(view);
                self.fresh = true;
            }
            Some(Err(error)) => {
                if self.failing.is_none() {
                    tracing::warn!(%error, "cannot list the server's workers; keeping the last view (no worker is judged lost until it answers)");
                }
                self.failing = Some(error);
                self.fresh = false;
            }
        }
    }
}

/// One pool's check-in memory.
#[derive(Debug, Default)]
pub(crate) struct CheckinMemory {
    /// When each job's worker was last listed by the server (manager clock).
    last_seen: FxHashMap<String, Duration>,
    /// Jobs whose worker checked in before this process started (the launch record says so).
    checked_in_before: FxHashSet<String>,
    /// Jobs whose worker vanished from the server's list, already noted.
    vanished: FxHashSet<String>,
    /// The launch unique of each live job whose worker checked in.
    unique: FxHashMap<String, String>,
    /// The launch uniques of workers that checked in and whose job then ended, while the
    /// server's last fresh view lists them.
    ended: FxHashSet<String>,
}

/// What a fresh view showed of a pool's jobs.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct CheckinNews {
    /// Jobs whose worker checked in for the first time.
    pub first_checkins: Vec<String>,
    /// Jobs whose worker checked in before and is no longer listed (each once).
    pub vanished: Vec<String>,
}

impl CheckinMemory {
    /// Forgets jobs no longer listed by the platform; those no longer `live` whose worker
    /// checked in have ended.
    pub fn retain(&mut self, listed: &FxHashSet<&str>, live: &FxHashSet<&str>) {
        let ended = &mut self.ended;
        self.unique.retain(|id, unique| {
            let alive = live.contains(id.as_str());
            if !alive {
                ended.insert(std::mem::take(unique));
            }
            alive
        });
        self.last_seen.retain(|id, _| listed.contains(id.as_str()));
        self.checked_in_before
            .retain(|id| listed.contains(id.as_str()));
        self.vanished.retain(|id| listed.contains(id.as_str()));
    }

    /// Takes in a fresh `view` of the server's workers for `jobs` (capacity jobs only) at `now`.
    pub fn take(&mut self, view: &CheckinView, jobs: &[WorkerJob], now: Duration) -> CheckinNews {
        let mut news = CheckinNews::default();
        self.ended.retain(|unique| view.lists(unique));
        for job in jobs.iter().filter(|j| j.state.is_capacity()) {
            let listed = view.worker_of(&job.id, &job.name).is_some();
            if let Some(unique) = unique_of(job).filter(|_| listed) {
                self.note_unique(&job.id, unique);
            }
            match (listed, self.ever_checked_in(&job.id)) {
                (true, _) => {
                    if !self.last_seen.contains_key(&job.id) {
                        news.first_checkins.push(job.id.clone());
                    }
                    self.last_seen.insert(job.id.clone(), now);
                    self.vanished.remove(&job.id);
                }
                (false, true) => {
                    if self.vanished.insert(job.id.clone()) {
                        news.vanished.push(job.id.clone());
                    }
                }
                (false, false) => {}
            }
        }
        news
    }

    /// Notes that the worker of `job` checked in before this process saw it (the launch
    /// record says so).
    pub fn note_checked_in_before(&mut self, job: &WorkerJob) {
        if !self.checked_in_before.contains(&job.id) {
            self.checked_in_before.insert(job.id.clone());
        }
        if let Some(unique) = unique_of(job) {
            self.note_unique(&job.id, unique);
        }
    }

    /// Notes that live job `id`'s worker has launch unique `unique` (so it has not ended).
    fn note_unique(&mut self, id: &str, unique: &str) {
        if !self.unique.contains_key(id) {
            self.unique.insert(id.to_owned(), unique.to_owned());
            self.ended.remove(unique);
        }
    }

    /// The launch uniques of workers that checked in and whose job has since ended, while the
    /// server still lists them: they take no bundle, whatever room the list gives them.
    pub fn ended(&self) -> impl Iterator<Item = &str> {
        self.ended.iter().map(String::as_str)
    }

    /// Whether the worker of job `id` ever checked in, as far as the manager knows.
    pub fn ever_checked_in(&self, id: &str) -> bool {
        self.last_seen.contains_key(id) || self.checked_in_before.contains(id)
    }

    /// The job's check-in as the policy sees it.
    pub fn job_checkin(
        &self,
        sighting: Option<Sighting<'_>>,
        job: &WorkerJob,
        active_since: Option<Duration>,
        now: Duration,
    ) -> JobCheckin {
        let times = JobTimes {
            active_since,
            last_seen: self.last_seen.get(&job.id).copied(),
            checked_in: self.checked_in_before.contains(&job.id),
        };
        job_checkin(sighting, (&job.id, &job.name, job.state), times, now)
    }
}

/// Whether the job's check-in can be matched (its id or name ends in a launch unique): then
/// its first check-in, not its first platform activity, is the pool's success.
pub(crate) fn matchable(job: &WorkerJob) -> bool {
    unique_of(job).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::JobState;
    use crate::checkin::CheckedInWorker;

    const U: &str = "0123456789abcdef0123456789abcdef";

    fn view(ids: &[&str]) -> CheckinView {
        CheckinView::new(
            ids.iter()
                .map(|id| CheckedInWorker {
                    worker_id: (*id).to_owned(),
                    ..CheckedInWorker::default()
                })
                .collect(),
        )
    }

    #[test]
    fn first_check_in_then_vanished_is_noted_once() {
        let job = WorkerJob::new(format!("cl-worker-{U}"), JobState::Active);
        let jobs = vec![job.clone()];
        let mut memory = CheckinMemory::default();
        let listed = view(&[&format!("host-{U}")]);
        let secs = Duration::from_secs;
        assert_eq!(
            memory.take(&view(&[]), &jobs, secs(1)),
            CheckinNews::default()
        );
        let news = memory.take(&listed, &jobs, secs(2));
        assert_eq!(news.first_checkins, vec![job.id.clone()]);
        assert_eq!(memory.take(&listed, &jobs, secs(3)), CheckinNews::default());
        assert_eq!(
            memory.take(&view(&[]), &jobs, secs(4)).vanished,
            vec![job.id.clone()]
        );
        assert_eq!(
            memory.take(&view(&[]), &jobs, secs(5)),
            CheckinNews::default(),
            "noted once"
        );
        let stale_listed = Some(Sighting {
            view: &listed,
            fresh: false,
            fresh_since: secs(0),
        });
        let empty = CheckinView::default();
        let fresh_empty = Some(Sighting {
            view: &empty,
            fresh: true,
            fresh_since: secs(0),
        });
        assert_eq!(
            memory.job_checkin(fresh_empty, &job, Some(secs(0)), secs(10)),
            JobCheckin::Vanished {
                unseen_for: secs(7)
            },
            "unseen since its last listing at 3 s; it checked in, so it is vanished, not lost"
        );
        assert!(matches!(
            memory.job_checkin(stale_listed, &job, Some(secs(0)), secs(10)),
            JobCheckin::CheckedIn { .. }
        ));
    }

    #[test]
    fn a_worker_whose_job_ended_is_named_while_the_server_lists_it() {
        let job = WorkerJob::new(format!("cl-worker-{U}"), JobState::Active);
        let id = job.id.as_str();
        let never = WorkerJob::new(
            "cl-worker-fedcba9876543210fedcba9876543210",
            JobState::Active,
        );
        let jobs = vec![job.clone(), never.clone()];
        let listed = view(&[&format!("host-{U}")]);
        let mut memory = CheckinMemory::default();
        let ended = |m: &CheckinMemory| m.ended().map(str::to_owned).collect::<Vec<_>>();
        let (both, one) = (
            FxHashSet::from_iter([id, never.id.as_str()]),
            FxHashSet::from_iter([id]),
        );
        memory.take(&listed, &jobs, Duration::ZERO);
        memory.retain(&both, &both);
        assert!(ended(&memory).is_empty(), "live");
        // Listed once more as ended, then gone; the one that never checked in is not named.
        memory.retain(&both, &FxHashSet::default());
        memory.retain(&one, &FxHashSet::default());
        assert_eq!(ended(&memory), [U]);
        memory.take(&listed, &[], Duration::ZERO);
        assert_eq!(ended(&memory), [U], "still listed");
        memory.take(&view(&[]), &[], Duration::ZERO);
        assert!(
            ended(&memory).is_empty(),
            "forgotten with the server's list"
        );
        // A job missing from one listing and back (a platform's hiccup) is live again.
        memory.take(&listed, &jobs, Duration::ZERO);
        memory.retain(&FxHashSet::default(), &FxHashSet::default());
        assert_eq!(ended(&memory), [U]);
        memory.take(&listed, &jobs, Duration::ZERO);
        assert!(ended(&memory).is_empty(), "back");
    }

    #[test]
    fn time_without_a_view_is_not_time_without_a_check_in() {
        // The review's case (1.2): listed at 0 s; the list cannot be read from 1 s to 400 s;
        // at 401 s it is read and the worker is not back yet.
        let secs = Duration::from_secs;
        let never = WorkerJob::new(format!("cl-worker-{U}"), JobState::Active);
        let mut last = LastView::default();
        last.take(Some(Ok(view(&[]))), secs(0));
        for t in 1..=400 {
            last.take(Some(Err("503".into())), secs(t));
        }
        last.take(Some(Ok(view(&[]))), secs(401));
        let memory = CheckinMemory::default();
        assert_eq!(
            memory.job_checkin(last.sighting(), &never, Some(secs(0)), secs(401)),
            JobCheckin::NotYet {
                unseen_for: secs(0)
            },
            "the clock starts again with the first fresh view after the outage"
        );
        last.take(None, secs(402));
        last.take(Some(Ok(view(&[]))), secs(410));
        assert_eq!(
            last.sighting().unwrap().fresh_since,
            secs(410),
            "no call is no view"
        );
    }

    #[test]
    fn a_failed_call_keeps_the_last_view() {
        let mut last = LastView::default();
        assert!(last.sighting().is_none());
        last.take(Some(Ok(view(&[&format!("h-{U}")]))), Duration::ZERO);
        assert!(last.sighting().unwrap().fresh);
        last.take(Some(Err("503".into())), Duration::ZERO);
        let sighting = last.sighting().unwrap();
        assert!(!sighting.fresh);
        assert_eq!(sighting.view.len(), 1, "the last view is kept");
        last.take(None, Duration::ZERO);
        assert!(!last.sighting().unwrap().fresh, "no call: not fresh");
    }
}
