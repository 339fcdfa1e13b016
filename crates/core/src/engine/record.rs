//! The launch record of one pool: which jobs this manager launched (by launch unique, see
//! [`crate::checkin::launch_unique`]), whether each one's worker ever checked in, and the
//! pool's budget use, kept in `<record-dir>/pool-<hash of the pool identity>.json` so that it survives a
//! restart, a crash or `--restart-after-seconds`.
//!
//! The record is what makes the manager's first invariant checkable: it stops a job only if
//! the record holds it (this manager launched it) and its worker never checked in. A job
//! listed under the pool's identity (name prefix, label, filter) that the record does not hold
//! is another manager's, a person's, or was launched before the record was lost: it counts
//! toward `max` and is never stopped. A record that cannot be read or written is an error at
//! start, never a silent "nothing is ours": losing it only makes the manager stop less.
//!
//! A launch is written before the job is submitted (a crash in between leaves an entry for a
//! job that may exist, never a job without an entry). An entry is forgotten once its job has
//! left the platform's listing and an hour has passed since the launch. The file is held by one
//! process at a time (an exclusive lock on `<file>.lock`): two managers serving the same pool
//! identity from one record dir would each count only what they launched and together exceed
//! `max`; the second is refused at start. Without a record dir (an embedder's default, a dry
//! run), the record lives in memory.

use crate::backend::WorkerJob;
use crate::checkin::unique_of;
use crate::error::{Error, Result};
use crate::hash::fnv1a;
use crate::pools::fallback::CapacityRecord;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// An entry whose job is no longer listed is forgotten this long after its launch (a job can
/// take a while to appear in a listing after it is submitted).
const FORGET_AFTER: Duration = Duration::from_secs(3600);

/// Version of the file format.
const VERSION: u32 = 1;

/// One launch.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
struct Launch {
    /// When it was launched (seconds since the Unix epoch).
    at: u64,
    /// Its worker checked in with the server at least once.
    #[serde(default)]
    checked_in: bool,
    /// Worker-seconds of its minimum life charged to the budget use before it was submitted
    /// (write-ahead) and not yet metered: its active time uses this up before it is charged
    /// again (see [`LaunchRecord::reserve`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    reserved: f64,
}

fn is_zero(seconds: &f64) -> bool {
    *seconds == 0.0
}

/// The file's content.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Contents {
    version: u32,
    /// What the record belongs to (the pool's identity, in words), for people reading it.
    identity: String,
    /// Launches by unique.
    launches: BTreeMap<String, Launch>,
    /// Budget use: `(hour since the Unix epoch, worker-seconds)`, oldest first.
    #[serde(default)]
    usage: Vec<(u64, f64)>,
    /// A worker of the pool has been seen checking in (the pool's check-ins are visible).
    #[serde(default)]
    checkins_seen: bool,
    /// Until when (seconds since the Unix epoch) `usage` holds the metered use: the next
    /// process meters from there (see [`crate::budget::MAX_METERED_GAP`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    metered_until: Option<u64>,
    /// The pool's capacity memory, for a pool with a `fallback` (review §8: a restart must
    /// not send its launches back to a pool that keeps being preempted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    capacity: Option<CapacityRecord>,
    /// Staged bundles the server had not started on a checked-in worker that this pool
    /// launched a worker for (review §4: one launch for such a bundle, ever; a restart must
    /// not launch another). Kept while the bundles are staged.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    overdue_launches: BTreeSet<String>,
    /// The pool is suspended for misconfiguration (a restart must not launch again into the
    /// same error): kept until it is resumed, or a restart finds other settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    suspended: Option<Suspension>,
    /// When the pool launched for hedges (seconds since the Unix epoch), as last counted: its
    /// `hedges_per_day` is spent over a rolling day, across restarts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    hedges: Vec<i64>,
}

/// A pool suspended for misconfiguration ([`crate::pools::PoolHealth::suspended`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Suspension {
    /// When (seconds since the Unix epoch).
    pub since: u64,
    /// Misconfiguration failures in a row, with the same error.
    pub failures: u32,
    /// The last of them, in words.
    pub detail: String,
    /// A hash of the pool's settings then (see `Manager::keep_records`), if known: a restart
    /// with other settings resumes the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<u64>,
}

/// One pool's launch record.
#[derive(Debug, Default)]
pub(crate) struct LaunchRecord {
    contents: Contents,
    /// Where it is kept, with the held lock; `None`: in memory only.
    file: Option<(PathBuf, File)>,
}

impl LaunchRecord {
    /// A record kept in memory only.
    pub fn in_memory(identity: &str) -> Self {
        Self {
            contents: Contents {
                version: VERSION,
                identity: identity.to_owned(),
                ..Contents::default()
            },
            file: None,
        }
    }

    /// The record of the pool with `identity` in `dir` (created private if needed), locked for
    /// this process; read from its file when there is one.
    pub fn open(dir: &Path, identity: &str) -> Result<Self> {
        Self::open_as(dir, identity, true)
    }

    /// [`LaunchRecord::open`] without taking the lock, for tests whose "processes" run one
    /// at a time by construction: another test's child process, between its fork and its
    /// exec, can hold the lock of a record just closed for a moment.
    #[cfg(test)]
    pub(crate) fn open_unlocked(dir: &Path, identity: &str) -> Result<Self> {
        Self::open_as(dir, identity, false)
    }

    fn open_as(dir: &Path, identity: &str, locked: bool) -> Result<Self> {
        create_private(dir)?;
        let path = file_of(dir, identity);
        let lock = match locked {
            true => lock(&path, identity)?,
            false => lock_file(&path)?,
        };
        let (contents, new) = match std::fs::read(&path) {
            Ok(bytes) => (parse(&bytes, &path)?, false),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                (Self::in_memory(identity).contents, true)
            }
            Err(e) => return Err(invalid(format!("cannot read {}: {e}", path.display()))),
        };
        let record = Self {
            contents,
            file: Some((path, lock)),
        };
        if new {
            // A record dir that cannot be written is refused now, not at the first launch.
            record.save()?;
        }
        Ok(record)
    }

    /// The record of the pool with `identity` in `dir` as it is now, kept in memory (a dry
    /// run): no lock taken, nothing ever written.
    pub fn read_only(dir: &Path, identity: &str) -> Result<Self> {
        let path = file_of(dir, identity);
        let contents = match std::fs::read(&path) {
            Ok(bytes) => parse(&bytes, &path)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Self::in_memory(identity).contents
            }
            Err(e) => return Err(invalid(format!("cannot read {}: {e}", path.display()))),
        };
        Ok(Self {
            contents,
            file: None,
        })
    }

    /// Where the record is kept, if on disk.
    pub fn path(&self) -> Option<&Path> {
        self.file.as_ref().map(|(path, _)| path.as_path())
    }

    /// Whether this manager launched `job` (the record holds its launch unique).
    pub fn holds(&self, job: &WorkerJob) -> bool {
        unique_of(job).is_some_and(|u| self.contents.launches.contains_key(u))
    }

    /// Whether the worker of `job` checked in before (as recorded).
    pub fn checked_in(&self, job: &WorkerJob) -> bool {
        unique_of(job)
            .and_then(|u| self.contents.launches.get(u))
            .is_some_and(|l| l.checked_in)
    }

    /// Whether a worker of the pool has been seen checking in.
    pub fn checkins_seen(&self) -> bool {
        self.contents.checkins_seen
    }

    /// Records a launch of `unique` with `reserved` worker-seconds of its minimum life already
    /// charged to `usage` (the budget use with that charge), in one write before the job is
    /// submitted: a process killed at any point after this has recorded the launch's use.
    /// When the file cannot be written, the launch is still recorded in memory (after a
    /// restart the job is then not this manager's: it is never stopped, which is the safe
    /// side). `at` is the time of the launch since the Unix epoch.
    pub fn reserve(
        &mut self,
        unique: &str,
        reserved: f64,
        usage: Option<Vec<(u64, f64)>>,
        at: Duration,
    ) {
        let launch = Launch {
            at: at.as_secs(),
            checked_in: false,
            reserved,
        };
        self.contents.launches.insert(unique.to_owned(), launch);
        if let Some(usage) = usage {
            self.contents.usage = usage;
        }
        self.save_or_warn();
    }

    /// The reservation of `unique` (its submit failed: no job), taken back; returns its
    /// worker-seconds. Not saved: the caller saves the budget use without it.
    pub fn unreserve(&mut self, unique: &str) -> f64 {
        self.contents
            .launches
            .get_mut(unique)
            .map_or(0.0, |l| std::mem::take(&mut l.reserved))
    }

    /// Meters `seconds` of active time of `job`: what its reservation covers is used up from
    /// it, and the rest returned, to be charged.
    pub fn consume(&mut self, job: &WorkerJob, seconds: f64) -> f64 {
        let Some(launch) = unique_of(job).and_then(|u| self.contents.launches.get_mut(u)) else {
            return seconds;
        };
        let covered = launch.reserved.min(seconds);
        launch.reserved -= covered;
        seconds - covered
    }

    /// Worker-seconds of `job`'s reservation not yet used up.
    pub fn outstanding(&self, job: &WorkerJob) -> f64 {
        unique_of(job)
            .and_then(|u| self.contents.launches.get(u))
            .map_or(0.0, |l| l.reserved)
    }

    /// Until when the recorded use is metered (time since the Unix epoch), if known.
    pub fn metered_until(&self) -> Option<Duration> {
        self.contents.metered_until.map(Duration::from_secs)
    }

    /// The pool's capacity memory, as last saved.
    pub fn capacity(&self) -> Option<&CapacityRecord> {
        self.contents.capacity.as_ref()
    }

    /// The overdue bundles this pool launched a worker for, as last saved.
    pub fn overdue_launches(&self) -> impl Iterator<Item = &String> {
        self.contents.overdue_launches.iter()
    }

    /// Notes that this pool launched a worker for the overdue bundles `uuids`; saves when
    /// that is news.
    pub fn launched_for_overdue(&mut self, uuids: &[String]) {
        let before = self.contents.overdue_launches.len();
        (self.contents.overdue_launches).extend(uuids.iter().cloned());
        if self.contents.overdue_launches.len() != before {
            self.save_or_warn();
        }
    }

    /// Forgets the overdue bundles no longer staged (`staged` says which still are); saves
    /// when one was forgotten.
    pub fn keep_overdue_launches(&mut self, staged: impl Fn(&str) -> bool) {
        let before = self.contents.overdue_launches.len();
        (self.contents.overdue_launches).retain(|uuid| staged(uuid));
        if self.contents.overdue_launches.len() != before {
            self.save_or_warn();
        }
    }

    /// When the pool launched for hedges, as last saved (seconds since the Unix epoch).
    pub fn hedges(&self) -> &[i64] {
        &self.contents.hedges
    }

    /// Saves when the pool launched for hedges.
    pub fn set_hedges(&mut self, hedges: Vec<i64>) {
        if self.contents.hedges != hedges {
            self.contents.hedges = hedges;
            self.save_or_warn();
        }
    }

    /// The pool's suspension, as last saved.
    pub fn suspension(&self) -> Option<&Suspension> {
        self.contents.suspended.as_ref()
    }

    /// Saves the pool's suspension (or its end) when it changed.
    pub fn set_suspension(&mut self, suspension: Option<Suspension>) {
        if self.contents.suspended != suspension {
            self.contents.suspended = suspension;
            self.save_or_warn();
        }
    }

    /// Saves the pool's capacity memory when it changed.
    pub fn set_capacity(&mut self, capacity: CapacityRecord) {
        if self.contents.capacity.as_ref() != Some(&capacity) {
            self.contents.capacity = Some(capacity);
            self.save_or_warn();
        }
    }

    /// Sets the budget use, metered until `until` (time since the Unix epoch), and saves it
    /// when `save`.
    pub fn metered(&mut self, usage: Vec<(u64, f64)>, until: Duration, save: bool) {
        self.contents.usage = usage;
        self.contents.metered_until = Some(until.as_secs());
        if save {
            self.save_or_warn();
        }
    }

    /// Records that the workers of `jobs` checked in (those the record holds); saves when
    /// that is news.
    pub fn checked_in_now<'a>(&mut self, jobs: impl IntoIterator<Item = &'a WorkerJob>) {
        let mut news = false;
        for unique in jobs.into_iter().filter_map(unique_of) {
            if let Some(launch) = self.contents.launches.get_mut(unique)
                && !launch.checked_in
            {
                launch.checked_in = true;
                self.contents.checkins_seen = true;
                news = true;
            }
        }
        if news {
            self.save_or_warn();
        }
    }

    /// Forgets launches whose job is not in `listed` (a successful listing of the pool) and
    /// that are older than [`FORGET_AFTER`] at `now` (since the Unix epoch); saves when
    /// something was forgotten.
    pub fn forget_gone(&mut self, listed: &[WorkerJob], now: Duration) {
        let live: std::collections::HashSet<&str> = listed.iter().filter_map(unique_of).collect();
        let oldest_kept = now.saturating_sub(FORGET_AFTER).as_secs();
        let before = self.contents.launches.len();
        self.contents
            .launches
            .retain(|unique, launch| launch.at > oldest_kept || live.contains(unique.as_str()));
        if self.contents.launches.len() != before {
            self.save_or_warn();
        }
    }

    /// The recorded budget use: `(hour since the Unix epoch, worker-seconds)`.
    pub fn usage(&self) -> &[(u64, f64)] {
        &self.contents.usage
    }

    fn save_or_warn(&self) {
        if let Err(error) = self.save() {
            tracing::warn!(%error, "cannot save the launch record; it is kept in memory");
        }
    }

    /// Writes the record (a temporary file renamed over the old one), if it is on disk.
    fn save(&self) -> Result<()> {
        let Some((path, _)) = &self.file else {
            return Ok(());
        };
        let tmp = path.with_extension("json.tmp");
        let bytes = serde_json::to_vec_pretty(&self.contents)
            .map_err(|e| invalid(format!("cannot encode {}: {e}", path.display())))?;
        let written = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| f.write_all(&bytes).and_then(|()| f.sync_all()))
            .and_then(|()| std::fs::rename(&tmp, path));
        written.map_err(|e| invalid(format!("cannot write {}: {e}", path.display())))
    }
}

/// The record file of the pool with `identity` in `dir`.
fn file_of(dir: &Path, identity: &str) -> PathBuf {
    dir.join(format!("pool-{:016x}.json", fnv1a(identity.as_bytes())))
}

/// Time since the Unix epoch.
pub(crate) fn unix_now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

fn parse(bytes: &[u8], path: &Path) -> Result<Contents> {
    let contents: Contents = serde_json::from_slice(bytes).map_err(|e| {
        invalid(format!(
            "cannot read launch record {}: {e}; move it away to start a new one (the jobs it \
             holds will then never be stopped by this manager)",
            path.display()
        ))
    })?;
    if contents.version != VERSION {
        return Err(invalid(format!(
            "launch record {} has version {}, this manager writes {VERSION}",
            path.display(),
            contents.version
        )));
    }
    Ok(contents)
}

/// Creates `dir` private (0700) if it does not exist.
fn create_private(dir: &Path) -> Result<()> {
    crate::settings::create_private_dir(dir).map_err(|e| {
        invalid(format!(
            "cannot create the launch record dir {} (--record-dir): {e}",
            dir.display()
        ))
    })
}

/// Takes the exclusive lock on `<path>.lock` for this process.
/// The lock file of the record at `path`, opened (not locked).
fn lock_file(path: &Path) -> Result<File> {
    let lock_path = path.with_extension("json.lock");
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&lock_path)
        .map_err(|e| invalid(format!("cannot open {}: {e}", lock_path.display())))
}

fn lock(path: &Path, identity: &str) -> Result<File> {
    let lock_path = path.with_extension("json.lock");
    let file = lock_file(path)?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(invalid(format!(
            "another manager serves the pool {identity} from this record dir (it holds {}): two \
             managers of one pool would together exceed its max; stop that one, or give this \
             one its own identity (job name, labels …) and --record-dir",
            lock_path.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(invalid(format!("cannot lock {}: {e}", lock_path.display())))
        }
    }
}

fn invalid(message: String) -> Error {
    Error::InvalidConfig(message)
}

#[cfg(test)]
mod tests;
