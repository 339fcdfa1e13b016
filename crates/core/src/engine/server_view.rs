//! The server's side of a tick for the dispatch model ([`ServerView`]): the checked-in workers
//! of the last `GET /rest/workers/info` that answered and who the manager is (`GET /rest/user`), and
//! what the manager remembers between ticks: since when the model has put each bundle on a
//! checked-in worker (a bundle the server has not started there within [`ON_WORKER_GRACE`] is
//! overdue: the pools launch one worker for it, once, remembered while it is staged), whether it has said why it falls back to one bundle a worker, and the
//! memory each bundle it read asks for: the worker list does not say what memory runs hold,
//! so a worker's is the sum of its runs' requests (the server's default for a run the
//! manager never read).

use crate::bundle::StagedBundle;
use crate::checkin::{CheckedInWorker, launch_unique};
use crate::codalab::UserIdentity;
use crate::dispatch::{DEFAULT_REQUEST_MEMORY, Owners, Resources, ServerWorker};
use crate::pools::{BundleOnWorker, ServerView};
use rustc_hash::{FxHashMap, FxHashSet};
use std::borrow::Cow;
use std::time::Duration;

/// How long the model may say a checked-in worker takes a bundle that the server has not
/// started: the server dispatches every few seconds and workers check in every few, so past
/// this something the model does not see (disk, a permission, a group) holds the bundle back,
/// and the pools launch one worker for it, once (the server may not start it there either).
pub const ON_WORKER_GRACE: Duration = Duration::from_secs(60);

/// What the manager remembers of the model's placements between ticks.
#[derive(Debug, Default)]
pub(crate) struct ServerMemory {
    /// Since when (manager clock) the model has put each bundle on a checked-in worker.
    on_worker_since: FxHashMap<String, Duration>,
    /// Overdue bundles already logged.
    overdue_noted: FxHashSet<String>,
    /// Overdue bundles a worker was launched for: no other is, while they are staged.
    launched_for: FxHashSet<String>,
    /// Why the last tick had no server view, as logged (each reason once in a row).
    fallback: Option<String>,
    /// Listed workers whose job ended, already logged.
    ended_noted: FxHashSet<String>,
    /// The memory each bundle read asks for, for the memory its run holds.
    requests: RunRequests,
}

/// The memory (bytes, as the server reserves it) each bundle the manager read asks for,
/// kept while a listed worker runs it: `GET /rest/workers/info` does not say what memory a
/// worker's runs hold, so it is the sum of their requests (the server's default for a run
/// never read, as one the server started before the manager read it).
#[derive(Debug, Default)]
pub(crate) struct RunRequests {
    memory: FxHashMap<String, i64>,
}

impl RunRequests {
    /// Notes the memory the bundles read this tick ask for (those asking for the default
    /// need no entry: a run not found counts the default).
    pub fn read(&mut self, bundles: &[StagedBundle]) {
        for bundle in bundles {
            let memory = Resources::requested(bundle).memory_bytes;
            if memory != DEFAULT_REQUEST_MEMORY {
                self.memory.insert(bundle.uuid.clone(), memory);
            }
        }
    }

    /// The memory `worker`'s runs hold.
    pub fn in_use(&self, worker: &CheckedInWorker) -> u64 {
        let held = (worker.run_uuids.iter())
            .map(|run| (self.memory.get(run).copied()).unwrap_or(DEFAULT_REQUEST_MEMORY))
            .sum::<i64>();
        u64::try_from(held).unwrap_or(0)
    }

    /// Forgets the bundles no listed worker runs (one still staged is read again after this,
    /// in the same tick).
    pub fn forget(&mut self, workers: &[CheckedInWorker]) {
        if self.memory.is_empty() {
            return;
        }
        let running: FxHashSet<&str> = (workers.iter())
            .flat_map(|w| w.run_uuids.iter().map(String::as_str))
            .collect();
        (self.memory).retain(|uuid, _| running.contains(uuid.as_str()));
    }
}

impl ServerMemory {
    /// The view for this tick, or `None` (logged once per reason) when the model cannot run:
    /// no identity, no worker list yet, or a worker entry without a field the model needs.
    /// The workers listed whose launch unique is in `ended` (their job ended) are left out.
    pub fn view(
        &mut self,
        identity: Option<&UserIdentity>,
        workers: Option<&[CheckedInWorker]>,
        ended: &FxHashSet<&str>,
        group_shared: bool,
        now: Duration,
    ) -> Option<ServerView> {
        self.requests.forget(workers.unwrap_or_default());
        let workers = workers.map(|all| self.without_ended(all, ended));
        let requests = &self.requests;
        match server_view(identity, workers.as_deref(), group_shared, &|w| {
            requests.in_use(w)
        }) {
            Ok(mut view) => {
                if self.fallback.take().is_some() {
                    tracing::info!(
                        "the server reports what the dispatch model needs again: workers hold several bundles"
                    );
                }
                view.overdue = self
                    .on_worker_since
                    .iter()
                    .filter(|(_, since)| now.saturating_sub(**since) >= ON_WORKER_GRACE)
                    .map(|(uuid, _)| uuid.clone())
                    .collect();
                view.launched_for = (view.overdue.iter())
                    .filter(|uuid| self.launched_for.contains(*uuid))
                    .cloned()
                    .collect();
                for uuid in &view.overdue {
                    if self.overdue_noted.insert(uuid.clone()) {
                        tracing::info!(bundle = %uuid, grace_seconds = ON_WORKER_GRACE.as_secs(), "the server has not started this bundle on a checked-in worker the dispatch model gives it to; the pools launch one worker for it, once");
                    }
                }
                Some(view)
            }
            Err(why) => {
                if self.fallback.as_deref() != Some(why.as_str()) {
                    tracing::warn!(%why, "planning one bundle a worker, as without the dispatch model");
                    self.fallback = Some(why);
                }
                None
            }
        }
    }

    /// `workers` without those whose job ended (`ended`: their launch uniques), each logged
    /// once: the server lists a worker that exited until it forgets it, and offers it
    /// bundles it will never take.
    fn without_ended<'w>(
        &mut self,
        workers: &'w [CheckedInWorker],
        ended: &FxHashSet<&str>,
    ) -> Cow<'w, [CheckedInWorker]> {
        self.ended_noted
            .retain(|unique| ended.contains(unique.as_str()));
        if ended.is_empty() {
            return Cow::Borrowed(workers);
        }
        let is_ended = |w: &CheckedInWorker| {
            launch_unique(&w.worker_id).is_some_and(|unique| ended.contains(unique))
        };
        for worker in workers.iter().filter(|w| is_ended(w)) {
            let unique = launch_unique(&worker.worker_id).unwrap_or_default();
            if self.ended_noted.insert(unique.to_owned()) {
                tracing::info!(worker = %worker.worker_id, "the server still lists this worker, whose job has ended (a worker never checks out; the server forgets it a minute after its last check-in): its room is not counted, and the bundles it would take are planned on launches");
            }
        }
        Cow::Owned(workers.iter().filter(|w| !is_ended(w)).cloned().collect())
    }

    /// Notes the memory the bundles read this tick ask for.
    pub fn read(&mut self, bundles: &[StagedBundle]) {
        self.requests.read(bundles);
    }

    /// Notes overdue bundles a worker was launched for ([`crate::pools::PoolsDecision::overdue_launches`]
    /// whose pool started one): no other is launched for them while they are read.
    pub fn launched_for(&mut self, uuids: &[String]) {
        (self.launched_for).extend(uuids.iter().cloned());
    }

    /// Takes the tick's placements on checked-in workers at `now`, and the bundles it read:
    /// an overdue bundle, and that a worker was launched for it, are remembered while it is
    /// read.
    pub fn take(&mut self, placed: &[BundleOnWorker], read: &FxHashSet<&str>, now: Duration) {
        (self.launched_for).retain(|uuid| read.contains(uuid.as_str()));
        let mut since = FxHashMap::default();
        for placed in placed {
            let start = self.on_worker_since.get(&placed.uuid).copied();
            since.insert(placed.uuid.clone(), start.unwrap_or(now));
        }
        for (uuid, start) in &self.on_worker_since {
            let overdue = now.saturating_sub(*start) >= ON_WORKER_GRACE;
            if overdue && read.contains(uuid.as_str()) {
                since.entry(uuid.clone()).or_insert(*start);
            }
        }
        self.on_worker_since = since;
        (self.overdue_noted).retain(|uuid| read.contains(uuid.as_str()));
    }
}

/// The server view of `workers` for the manager `identity`, each worker's runs holding
/// `memory_in_use` bytes, or why there is none.
pub fn server_view(
    identity: Option<&UserIdentity>,
    workers: Option<&[CheckedInWorker]>,
    group_shared: bool,
    memory_in_use: &dyn Fn(&CheckedInWorker) -> u64,
) -> Result<ServerView, String> {
    let identity = identity
        .ok_or("the server did not say who the manager is (GET /rest/user gave no data.id)")?;
    let workers = workers.ok_or("no list of the server's workers yet")?;
    let workers = workers
        .iter()
        .map(|worker| {
            ServerWorker::from_checkin(worker, memory_in_use(worker)).map_err(|field| {
                format!(
                    "the server's worker list gives worker {} no `{field}`",
                    worker.worker_id
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let root = if identity.root {
        identity.id.clone()
    } else {
        String::new()
    };
    Ok(ServerView {
        workers,
        owners: Owners {
            root,
            manager: identity.id.clone(),
            quota_left: Default::default(),
            group_shared,
        },
        overdue: Default::default(),
        launched_for: Default::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: fn(&CheckedInWorker) -> u64 = |_| 0;

    fn identity(root: bool) -> UserIdentity {
        UserIdentity {
            id: "0".into(),
            root,
        }
    }

    fn worker(cpus: Option<u32>) -> CheckedInWorker {
        CheckedInWorker {
            worker_id: "w1".into(),
            user_id: Some("0".into()),
            cpus,
            gpus: Some(0),
            memory_bytes: Some(8 << 30),
            cpus_in_use: Some(0),
            gpus_in_use: Some(0),
            ..CheckedInWorker::default()
        }
    }

    #[test]
    fn no_view_without_identity_list_or_field_and_the_reason_says_which() {
        let workers = [worker(Some(4))];
        let view = server_view(Some(&identity(true)), Some(&workers), false, &NONE).unwrap();
        assert_eq!(
            (view.owners.root.as_str(), view.owners.manager.as_str()),
            ("0", "0")
        );
        let private = server_view(Some(&identity(false)), Some(&workers), false, &NONE).unwrap();
        assert_eq!(
            private.owners.root, "",
            "a normal user's view names no root"
        );
        let errors = [
            server_view(None, Some(&workers), false, &NONE).unwrap_err(),
            server_view(Some(&identity(true)), None, false, &NONE).unwrap_err(),
            server_view(Some(&identity(true)), Some(&[worker(None)]), false, &NONE).unwrap_err(),
        ];
        assert!(errors[0].contains("who the manager is"), "{}", errors[0]);
        assert!(
            errors[1].contains("no list of the server's workers"),
            "{}",
            errors[1]
        );
        assert_eq!(
            errors[2],
            "the server's worker list gives worker w1 no `cpus`"
        );
    }

    /// `memory`'s view of `workers` for a root manager at `now`, no worker's job ended.
    fn view_at(
        memory: &mut ServerMemory,
        workers: &[CheckedInWorker],
        now: Duration,
    ) -> ServerView {
        let ended = FxHashSet::default();
        let view = memory.view(Some(&identity(true)), Some(workers), &ended, false, now);
        view.unwrap()
    }

    #[test]
    fn a_placement_the_server_does_not_take_up_within_the_grace_is_overdue_while_read() {
        let mut memory = ServerMemory::default();
        let workers = [worker(Some(4))];
        let placed = [BundleOnWorker {
            uuid: "0xa".into(),
            worker_id: "w1".into(),
        }];
        let read: FxHashSet<&str> = ["0xa"].into_iter().collect();
        let at = Duration::from_secs;
        let view = |memory: &mut ServerMemory, now| view_at(memory, &workers, now).overdue;
        assert!(view(&mut memory, at(0)).is_empty());
        memory.take(&placed, &read, at(0));
        memory.take(&placed, &read, at(30));
        assert!(
            view(&mut memory, at(59)).is_empty(),
            "placed since 0, not 30"
        );
        assert_eq!(view(&mut memory, at(60)), ["0xa".to_owned()].into());
        // Overdue, it is no longer placed; it stays overdue while it is read.
        memory.take(&[], &read, at(60));
        assert_eq!(view(&mut memory, at(65)), ["0xa".to_owned()].into());
        memory.take(&[], &FxHashSet::default(), at(70));
        assert!(view(&mut memory, at(75)).is_empty(), "forgotten once gone");
    }

    #[test]
    fn a_launch_made_for_an_overdue_bundle_is_remembered_while_it_is_read() {
        let mut memory = ServerMemory::default();
        let workers = [worker(Some(4))];
        let placed = [BundleOnWorker {
            uuid: "0xa".into(),
            worker_id: "w1".into(),
        }];
        let read: FxHashSet<&str> = ["0xa"].into_iter().collect();
        let at = Duration::from_secs;
        let launched_for =
            |memory: &mut ServerMemory, now| view_at(memory, &workers, now).launched_for;
        memory.take(&placed, &read, at(0));
        assert!(launched_for(&mut memory, at(60)).is_empty());
        memory.launched_for(&["0xa".to_owned()]);
        memory.take(&[], &read, at(60));
        assert_eq!(launched_for(&mut memory, at(80)), ["0xa".to_owned()].into());
        memory.take(&[], &read, at(80));
        assert_eq!(
            launched_for(&mut memory, at(3600)),
            ["0xa".to_owned()].into(),
            "ever, while it is staged"
        );
        memory.take(&[], &FxHashSet::default(), at(3600));
        assert!(launched_for(&mut memory, at(3620)).is_empty());
    }

    #[test]
    fn a_workers_memory_in_use_is_its_runs_requests_as_read() {
        let mut requests = RunRequests::default();
        let staged = |uuid: &str, memory: u64| StagedBundle {
            request_memory: memory,
            ..StagedBundle::new(uuid)
        };
        requests.read(&[staged("0xa", 8 << 30), staged("0xb", 0)]);
        let running = |runs: &[&str]| CheckedInWorker {
            run_uuids: runs.iter().map(|r| r.to_string()).collect(),
            ..worker(Some(4))
        };
        // Read with 8 GiB; read without a request (the server's default, 2 GiB); never read
        // (the default too).
        let worker = running(&["0xa", "0xb", "0xc"]);
        assert_eq!(requests.in_use(&worker), (8 + 2 + 2) << 30);
        let view = server_view(
            Some(&identity(true)),
            Some(std::slice::from_ref(&worker)),
            false,
            &|w| requests.in_use(w),
        )
        .unwrap();
        assert_eq!(view.workers[0].in_use.memory_bytes, 12 << 30);
        // Once no listed worker runs it, a request is forgotten.
        requests.forget(&[running(&["0xb"])]);
        assert_eq!(requests.in_use(&worker), (2 + 2 + 2) << 30);
    }
}
