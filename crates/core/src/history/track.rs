//! What the history follows between ticks (pure: times are passed in, in seconds since the
//! Unix epoch): each bundle from the first tick that sees it (staged, or already on a worker)
//! until its run is read back from the server; each job of each pool from its first listing
//! until it leaves the listing; each pool's last decision. Its steps hand back the lines to
//! write.

use super::{BundleLine, DecisionLine, EventLine, Line, SettingsLine, UnmodelledLine, WorkerLine};
use crate::backend::{JobState, WorkerJob};
use crate::bundle::StagedBundle;
use crate::checkin::{CheckedInWorker, launch_unique};
pub use crate::codalab::jsonapi::RunInfo;
use crate::pools::{PoolPolicy, PoolsDecision};
use rustc_hash::{FxHashMap, FxHashSet};
use std::time::UNIX_EPOCH;

/// Bundles followed at most (beyond, new ones are not followed, and a line says so once).
pub const MAX_FOLLOWED: usize = 100_000;

/// Uuids looked up per tick at most (one search request).
pub const LOOKUPS_PER_TICK: usize = 64;

/// A bundle whose run cannot be read this many times is given up (the waits between,
/// [`FIRST_RETRY`] doubling to an hour, add up to about three and a half hours).
const MAX_FAILED_LOOKUPS: u32 = 12;

/// The wait before a run found still in flight is looked up again, doubled each time: a run
/// usually leaves the worker's list while the server still finalizes it, seconds before it is
/// `ready`.
const FIRST_RETRY: f64 = 10.0;

/// The states of a run that ended.
const ENDED: [&str; 3] = ["ready", "failed", "killed"];

/// One bundle followed.
#[derive(Debug, Clone)]
struct Followed {
    /// It was staged after this (the last complete read before the tick that first saw it),
    /// when known.
    staged_after: Option<f64>,
    /// The tick that first saw it.
    seen_at: f64,
    /// The last tick that saw it staged or on a worker.
    present_at: f64,
    /// The pool whose worker ran it, when one did.
    pool: Option<String>,
    /// Not looked up before this.
    lookup_at: f64,
    /// Lookups that found it still in flight, or failed.
    lookups: u32,
}

/// One job followed.
#[derive(Debug, Clone)]
struct Life {
    launched: f64,
    active_at: Option<f64>,
    checked_in: Option<f64>,
    runs: FxHashSet<String>,
    present_at: f64,
}

/// What the history follows (see the module doc).
#[derive(Debug, Default)]
pub struct Tracker {
    bundles: FxHashMap<String, Followed>,
    /// Per pool, its jobs by id.
    jobs: FxHashMap<String, FxHashMap<String, Life>>,
    /// Per pool, the jobs written as ended (failed, preempted, ended) while the platform still
    /// lists them.
    ended: FxHashMap<String, FxHashSet<String>>,
    /// When the last complete read of the staged bundles was made.
    last_complete_read: Option<f64>,
    /// Per pool, its last decision (launches, stops, reason codes).
    decisions: FxHashMap<String, (u32, usize, Vec<&'static str>)>,
    /// [`MAX_FOLLOWED`] was reached and said.
    full_said: bool,
    lines: Vec<Line>,
}

impl Tracker {
    /// The lines made since the last call.
    pub fn take_lines(&mut self) -> Vec<Line> {
        std::mem::take(&mut self.lines)
    }

    /// Bundles followed now.
    pub fn followed(&self) -> usize {
        self.bundles.len()
    }

    /// The settings in force from `now` on.
    pub fn settings(&mut self, now: f64, sleep_time: f64, policies: &[PoolPolicy]) {
        let pools = policies.iter().map(SettingsLine::pool).collect();
        self.lines.push(Line::Settings(SettingsLine {
            time: now,
            sleep_time,
            pools,
        }));
    }

    /// Something that happened to `pool`.
    pub fn event(&mut self, now: f64, pool: &str, event: &str, detail: &str) {
        self.lines.push(Line::Event(EventLine {
            time: now,
            pool: pool.to_owned(),
            event: event.to_owned(),
            detail: detail.to_owned(),
        }));
    }

    /// Pool `pool`'s listing at `now`: new jobs are followed, jobs that left it (or failed,
    /// or were preempted) are written. Only a pool whose listing was read is handed here.
    pub fn listed(&mut self, pool: &str, jobs: &[WorkerJob], now: f64) {
        let lives = self.jobs.entry(pool.to_owned()).or_default();
        let written = self.ended.entry(pool.to_owned()).or_default();
        let listed: FxHashSet<&str> = jobs.iter().map(|job| job.id.as_str()).collect();
        written.retain(|id| listed.contains(id.as_str()));
        let mut ended = Vec::new();
        for job in jobs.iter().filter(|job| !written.contains(&job.id)) {
            let life = lives.entry(job.id.clone()).or_insert_with(|| Life {
                launched: job.submitted_at.map_or(now, unix_seconds).min(now),
                active_at: None,
                checked_in: None,
                runs: Default::default(),
                present_at: now,
            });
            life.present_at = now;
            match job.state {
                JobState::Active => {
                    life.active_at.get_or_insert(now);
                }
                JobState::Failed => ended.push((job.id.clone(), "failed")),
                JobState::Preempted => ended.push((job.id.clone(), "preempted")),
                JobState::Ended => ended.push((job.id.clone(), "gone")),
                JobState::Pending => {}
            }
        }
        let gone: Vec<String> = (lives.iter())
            .filter(|(_, life)| life.present_at < now)
            .map(|(id, _)| id.clone())
            .collect();
        ended.extend(gone.into_iter().map(|id| (id, "gone")));
        for (id, end) in ended {
            written.insert(id.clone());
            if let Some(life) = lives.remove(&id) {
                self.lines.push(worker_line(pool, id, life, end, now));
            }
        }
    }

    /// The server's workers at `now` (a fresh list): check-ins of the pools' jobs, their
    /// runs, and the bundles on workers.
    pub fn workers(&mut self, workers: &[CheckedInWorker], now: f64) {
        let mut by_unique: FxHashMap<&str, (&str, &str)> = FxHashMap::default();
        for (pool, lives) in &self.jobs {
            for id in lives.keys() {
                if let Some(unique) = launch_unique(id) {
                    by_unique.insert(unique, (pool, id));
                }
            }
        }
        let mut runs: Vec<(String, Option<String>)> = Vec::new();
        let mut checked_in: Vec<(String, String, Vec<String>)> = Vec::new();
        for worker in workers {
            let owner = launch_unique(&worker.worker_id).and_then(|u| by_unique.get(u));
            if let Some((pool, id)) = owner {
                checked_in.push((
                    (*pool).to_owned(),
                    (*id).to_owned(),
                    worker.run_uuids.clone(),
                ));
            }
            let pool = owner.map(|(pool, _)| (*pool).to_owned());
            runs.extend(worker.run_uuids.iter().map(|r| (r.clone(), pool.clone())));
        }
        for (pool, id, uuids) in checked_in {
            if let Some(life) = self.jobs.get_mut(&pool).and_then(|l| l.get_mut(&id)) {
                life.checked_in.get_or_insert(now);
                life.runs.extend(uuids);
            }
        }
        for (uuid, pool) in runs {
            if let Some(followed) = self.follow(uuid, now) {
                followed.present_at = now;
                if pool.is_some() {
                    followed.pool = pool;
                }
            }
        }
    }

    /// The staged bundles read at `now` (`complete`: the read covered every staged bundle).
    pub fn staged(&mut self, bundles: &[StagedBundle], complete: bool, now: f64) {
        for bundle in bundles {
            if let Some(followed) = self.follow(bundle.uuid.clone(), now) {
                followed.present_at = now;
            }
        }
        if complete {
            self.last_complete_read = Some(now);
        }
    }

    /// The bundles to look up at `now`: followed, and neither staged nor on a worker this
    /// tick, at most [`LOOKUPS_PER_TICK`]. Call it only after a fresh list of the workers.
    pub fn to_look_up(&self, now: f64) -> Vec<String> {
        let mut due: Vec<(&String, &Followed)> = (self.bundles.iter())
            .filter(|(_, f)| f.present_at < now && f.lookup_at <= now)
            .collect();
        due.sort_by(|a, b| a.1.seen_at.total_cmp(&b.1.seen_at).then(a.0.cmp(b.0)));
        due.into_iter()
            .take(LOOKUPS_PER_TICK)
            .map(|(uuid, _)| uuid.clone())
            .collect()
    }

    /// What the server said of the bundles `asked` at `now` (`Err`: the lookup failed): a
    /// run that ended is written; one still in flight is looked up again later; one the
    /// server no longer has is given up.
    pub fn looked_up(&mut self, asked: &[String], found: Result<Vec<RunInfo>, ()>, now: f64) {
        let found = match found {
            Ok(found) => found,
            Err(()) => {
                for uuid in asked {
                    self.again(uuid, now, "its run could not be read from the server");
                }
                return;
            }
        };
        let mut by_uuid: FxHashMap<&str, &RunInfo> =
            found.iter().map(|r| (r.bundle.uuid.as_str(), r)).collect();
        for uuid in asked {
            match by_uuid.remove(uuid.as_str()) {
                None => self.give_up(uuid, now, "the server no longer lists it (deleted)"),
                Some(run) if !ENDED.contains(&run.state.as_str()) => {
                    self.again(uuid, now, "its run could not be followed to its end")
                }
                Some(run) => match run.started {
                    None => self.give_up(uuid, now, "it ended before a worker took it"),
                    Some(started) => self.ended(run, started, now),
                },
            }
        }
    }

    /// Pools' decisions at `now`: a pool's line when its decision changed.
    pub fn decided(&mut self, decision: &PoolsDecision, now: f64) {
        for pool in &decision.pools {
            let codes: Vec<&'static str> = pool.reasons.iter().map(|r| r.code()).collect();
            let current = (pool.launches, pool.stops.len(), codes);
            if self.decisions.get(&pool.pool) == Some(&current) {
                continue;
            }
            self.lines.push(Line::Decision(DecisionLine {
                time: now,
                pool: pool.pool.clone(),
                launch: current.0,
                stop: current.1 as u32,
                reasons: current.2.iter().map(|c| (*c).to_owned()).collect(),
            }));
            self.decisions.insert(pool.pool.clone(), current);
        }
    }

    /// The bundle `uuid`, followed from `now` on if it is new (and there is room).
    fn follow(&mut self, uuid: String, now: f64) -> Option<&mut Followed> {
        if !self.bundles.contains_key(&uuid) && self.bundles.len() >= MAX_FOLLOWED {
            if !self.full_said {
                self.full_said = true;
                let why =
                    format!("{MAX_FOLLOWED} bundles are followed already; newer ones are not");
                self.give_up(&uuid, now, &why);
            }
            return None;
        }
        let staged_after = self.last_complete_read;
        Some(self.bundles.entry(uuid).or_insert(Followed {
            staged_after,
            seen_at: now,
            present_at: now,
            pool: None,
            lookup_at: now,
            lookups: 0,
        }))
    }

    /// `uuid` is looked up again later, after a backoff; given up after
    /// [`MAX_FAILED_LOOKUPS`].
    fn again(&mut self, uuid: &str, now: f64, why: &str) {
        let Some(followed) = self.bundles.get_mut(uuid) else {
            return;
        };
        followed.lookups += 1;
        if followed.lookups >= MAX_FAILED_LOOKUPS {
            self.give_up(uuid, now, why);
            return;
        }
        let backoff = FIRST_RETRY * f64::from(1u32 << (followed.lookups - 1).min(9));
        followed.lookup_at = now + backoff.min(3600.0);
    }

    fn give_up(&mut self, uuid: &str, now: f64, why: &str) {
        self.bundles.remove(uuid);
        self.lines.push(Line::Unmodelled(UnmodelledLine {
            time: now,
            uuid: uuid.to_owned(),
            why: why.to_owned(),
        }));
    }

    /// The line of a run that ended: staged at its `created` (within what the ticks saw),
    /// started and ended at the server's times.
    fn ended(&mut self, run: &RunInfo, started: f64, now: f64) {
        let Some(followed) = self.bundles.remove(&run.bundle.uuid) else {
            return;
        };
        let bundle = &run.bundle;
        let created = bundle.created.map(|c| c as f64);
        let staged = match created {
            Some(created) => created
                .max(followed.staged_after.unwrap_or(f64::MIN))
                .min(followed.seen_at),
            None => followed.seen_at,
        };
        let ended = run.last_updated.unwrap_or(now).max(started);
        self.lines.push(Line::Bundle(BundleLine {
            time: staged,
            uuid: bundle.uuid.clone(),
            cpus: bundle.request_cpus,
            gpus: bundle.request_gpus,
            memory: bundle.request_memory,
            queue: bundle.request_queue.clone(),
            owner: (bundle.owner.clone().or_else(|| bundle.owner_id.clone())).unwrap_or_default(),
            duration: ended - started,
            wait: (started - staged).max(0.0),
            pool: followed.pool.unwrap_or_default(),
            state: run.state.clone(),
        }));
    }
}

fn worker_line(pool: &str, job: String, life: Life, end: &str, now: f64) -> Line {
    let since = |at: Option<f64>| at.map(|at| (at - life.launched).max(0.0));
    Line::Worker(WorkerLine {
        time: life.launched,
        pool: pool.to_owned(),
        job,
        placed: since(life.active_at),
        checked_in: since(life.checked_in),
        active: life.active_at.map_or(0.0, |at| (now - at).max(0.0)),
        runs: life.runs.len() as u32,
        end: end.to_owned(),
    })
}

fn unix_seconds(at: std::time::SystemTime) -> f64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
