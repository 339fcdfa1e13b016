//! The owners' `parallel_run_quota` left for shared workers, as the root user reads it for
//! the dispatch model ([`crate::dispatch`]). The server's rule
//! (`BundleModel.get_user_parallel_run_quota_left`): an owner's quota less their runs on
//! workers that are not their own. Here: less their runs on the root user's (shared) workers;
//! runs on another user's group-shared workers are not counted.
//!
//! A quota is read once per [`QUOTA_TTL`] per owner of a staged bundle (`GET
//! /rest/users/<id>`), at most [`QUOTA_READS_PER_TICK`] owners a tick within
//! [`QUOTA_READ_BUDGET`] (review §12: hundreds of owners, or a slow users endpoint, must not
//! stall the tick); the owner of each run on a shared worker once in the run's life (one
//! search for the runs new since the last tick). A failed read is logged once per streak,
//! makes the users endpoint back off (30 s doubling up to [`QUOTA_TTL`]: no read before then)
//! and leaves what it would have read unknown: an owner whose quota is unknown (failed, or not
//! read yet) is not held back.

use crate::checkin::CheckedInWorker;
use crate::codalab::CodaLabClient;
use crate::retry::Backoff;
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// How long a user's `parallel_run_quota` is taken as read (admins change it rarely).
pub const QUOTA_TTL: Duration = Duration::from_secs(300);

/// At most this many owners' quotas are read per tick (the others wait for the next ticks,
/// planned meanwhile with their quota unknown).
pub const QUOTA_READS_PER_TICK: usize = 4;

/// The time a tick gives its quota reads (a slow users endpoint cannot stall the tick longer).
pub const QUOTA_READ_BUDGET: Duration = Duration::from_secs(10);

/// What the manager remembers of quotas and run owners between ticks.
#[derive(Debug, Default)]
pub(crate) struct QuotaMemory {
    /// The owner of each run on a shared worker (run uuid → owner id).
    run_owners: FxHashMap<String, String>,
    /// Each owner's quota (`None`: the server did not show one) and when it was read.
    quotas: FxHashMap<String, (Option<i64>, Duration)>,
    /// The last read's error, logged once per streak.
    failing: Option<String>,
    /// No quota is read before this (manager clock): the users endpoint failed.
    retry_at: Option<Duration>,
    /// The users endpoint's backoff.
    backoff: QuotaBackoff,
}

/// The users endpoint's backoff after a failed read: 30 s, doubling up to [`QUOTA_TTL`].
#[derive(Debug)]
struct QuotaBackoff(Backoff);

impl Default for QuotaBackoff {
    fn default() -> Self {
        Self(Backoff::new(Duration::from_secs(30), QUOTA_TTL))
    }
}

impl QuotaBackoff {
    fn failure(&mut self) -> Duration {
        self.0.failure()
    }

    fn success(&mut self) {
        self.0.success();
    }
}

impl QuotaMemory {
    /// Reads the quotas of `owners` not read for [`QUOTA_TTL`] and the owners of new runs on
    /// the `root` user's workers.
    pub async fn refresh(
        &mut self,
        client: &CodaLabClient,
        workers: &[CheckedInWorker],
        root: &str,
        owners: &BTreeSet<String>,
        now: Duration,
    ) {
        let shared = shared_runs(workers, root);
        self.run_owners
            .retain(|run, _| shared.contains(run.as_str()));
        let new: Vec<String> = (shared.iter())
            .filter(|run| !self.run_owners.contains_key(**run))
            .map(|run| (*run).to_owned())
            .collect();
        let mut error = None;
        if !new.is_empty() {
            match client.owners_of(&new).await {
                Ok(found) => self.run_owners.extend(found),
                Err(e) => error = Some(e.to_string()),
            }
        }
        if let Some(read_error) = self.read_quotas(client, root, owners, now).await {
            error = Some(read_error);
        }
        self.note(error);
    }

    /// Reads the quotas of at most [`QUOTA_READS_PER_TICK`] owners of `owners` whose quota is
    /// unknown or older than [`QUOTA_TTL`] (never read first, then the oldest), within
    /// [`QUOTA_READ_BUDGET`]; none while the users endpoint backs off after a failure.
    /// Returns the failure, if any.
    async fn read_quotas(
        &mut self,
        client: &CodaLabClient,
        root: &str,
        owners: &BTreeSet<String>,
        now: Duration,
    ) -> Option<String> {
        if self.retry_at.is_some_and(|at| now < at) {
            return None;
        }
        let read_at = |owner: &String| self.quotas.get(owner).map(|(_, read)| *read);
        let mut due: Vec<&String> = (owners.iter())
            .filter(|o| o.as_str() != root)
            .filter(|o| read_at(o).is_none_or(|read| now.saturating_sub(read) >= QUOTA_TTL))
            .collect();
        due.sort_by_key(|o| read_at(o));
        let deadline = tokio::time::Instant::now() + QUOTA_READ_BUDGET;
        let mut error = None;
        for owner in due.into_iter().take(QUOTA_READS_PER_TICK) {
            let read = client.parallel_run_quota(owner);
            match tokio::time::timeout_at(deadline, read).await {
                Ok(Ok(quota)) => {
                    self.quotas.insert(owner.clone(), (quota, now));
                }
                Ok(Err(e)) => error = Some(e.to_string()),
                Err(_) => {
                    error = Some(format!(
                        "the users endpoint took more than the {} s a tick gives its quota reads",
                        QUOTA_READ_BUDGET.as_secs()
                    ));
                }
            }
            if error.is_some() {
                break;
            }
        }
        match error {
            Some(_) => self.retry_at = Some(now + self.backoff.failure()),
            None => {
                self.backoff.success();
                self.retry_at = None;
            }
        }
        error
    }

    fn note(&mut self, error: Option<String>) {
        match error {
            Some(error) => {
                if self.failing.is_none() {
                    tracing::warn!(%error, "cannot read the owners' parallel_run_quota; bundles of owners whose quota is unknown are not held back");
                }
                self.failing = Some(error);
            }
            None => {
                if self.failing.take().is_some() {
                    tracing::info!("the owners' parallel_run_quota can be read again");
                }
            }
        }
    }

    /// The quota left of every owner whose quota is known, given the runs on `workers`.
    pub fn quota_left(&self, workers: &[CheckedInWorker], root: &str) -> BTreeMap<String, i64> {
        let quotas =
            (self.quotas.iter()).filter_map(|(owner, (quota, _))| Some((owner, (*quota)?)));
        quota_left(quotas, &self.run_owners, workers, root)
    }
}

/// The runs on the `root` user's workers.
fn shared_runs<'a>(workers: &'a [CheckedInWorker], root: &str) -> BTreeSet<&'a str> {
    workers
        .iter()
        .filter(|w| w.user_id.as_deref() == Some(root))
        .flat_map(|w| w.run_uuids.iter().map(String::as_str))
        .collect()
}

/// Each owner's quota less their runs on the `root` user's workers (`run_owners` names the
/// runs' owners). Pure.
pub fn quota_left<'a>(
    quotas: impl Iterator<Item = (&'a String, i64)>,
    run_owners: &FxHashMap<String, String>,
    workers: &[CheckedInWorker],
    root: &str,
) -> BTreeMap<String, i64> {
    let mut used: BTreeMap<&str, i64> = BTreeMap::new();
    for run in shared_runs(workers, root) {
        if let Some(owner) = run_owners.get(run) {
            *used.entry(owner.as_str()).or_default() += 1;
        }
    }
    quotas
        .map(|(owner, quota)| {
            let spent = used.get(owner.as_str()).copied().unwrap_or(0);
            // Saturating: a server's quota near the bottom of i64 leaves nothing, never wraps
            // round to "no limit" (review §17).
            (owner.clone(), quota.saturating_sub(spent))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secret::{Credentials, Secret};
    use codalab_wm_fake_codalab::FakeCodaLab;

    /// Requests to the users endpoint so far.
    fn user_reads(server: &FakeCodaLab) -> usize {
        let requests = server.requests();
        requests
            .iter()
            .filter(|r| r.path.starts_with("/rest/users/"))
            .count()
    }

    /// Twelve owners, a users endpoint that fails: one tick asks a bounded number of them,
    /// the ticks after it ask none until the backoff is over; once the endpoint answers, each
    /// tick reads at most the bound, and the owners not read yet stay unknown (not held back).
    #[tokio::test]
    async fn quota_reads_are_bounded_per_tick_and_a_failing_endpoint_backs_off() {
        let server = FakeCodaLab::start().await.unwrap();
        let credentials = Credentials {
            username: "alice".into(),
            password: Secret::new("alicepw"),
        };
        let client = CodaLabClient::new(&server.url(), credentials).unwrap();
        let owners: BTreeSet<String> = (1..=12).map(|n| n.to_string()).collect();
        let mut memory = QuotaMemory::default();
        let s = Duration::from_secs;
        server.fail_users(Some(502));
        memory.refresh(&client, &[], "0", &owners, s(0)).await;
        let first = user_reads(&server);
        assert!(
            (1..=QUOTA_READS_PER_TICK).contains(&first),
            "one failing tick: {first} reads"
        );
        memory.refresh(&client, &[], "0", &owners, s(1)).await;
        memory.refresh(&client, &[], "0", &owners, s(2)).await;
        assert_eq!(user_reads(&server), first, "backing off: no read");
        server.fail_users(None);
        memory.refresh(&client, &[], "0", &owners, s(600)).await;
        let after = user_reads(&server) - first;
        assert_eq!(after, QUOTA_READS_PER_TICK, "bounded per tick");
        let left = memory.quota_left(&[], "0");
        assert_eq!(left.len(), QUOTA_READS_PER_TICK, "the others are unknown");
        memory.refresh(&client, &[], "0", &owners, s(601)).await;
        assert_eq!(
            user_reads(&server) - first,
            2 * QUOTA_READS_PER_TICK,
            "the next owners"
        );
    }

    /// A quota near the bottom of i64 less the runs spent neither panics nor wraps round to
    /// a huge quota left (review §17).
    #[test]
    fn a_quota_at_the_bottom_of_i64_leaves_nothing() {
        let workers = [worker("0", &["0xa"])];
        let run_owners: FxHashMap<String, String> =
            [("0xa".to_owned(), "7".to_owned())].into_iter().collect();
        let carol = "7".to_owned();
        let left = quota_left([(&carol, i64::MIN)].into_iter(), &run_owners, &workers, "0");
        assert!(left[&carol] <= 0, "{left:?}");
    }

    fn worker(owner: &str, runs: &[&str]) -> CheckedInWorker {
        CheckedInWorker {
            worker_id: format!("w-{owner}"),
            user_id: Some(owner.into()),
            run_uuids: runs.iter().map(|r| (*r).to_owned()).collect(),
            ..CheckedInWorker::default()
        }
    }

    #[test]
    fn only_runs_on_shared_workers_spend_an_owners_quota() {
        // Carol (7) runs 0xa and 0xb on root's (0) workers and 0xc on her own: two of her
        // quota of 3 are spent. Dan (8) runs nothing shared.
        let workers = [
            worker("0", &["0xa"]),
            worker("0", &["0xb", "0xd"]),
            worker("7", &["0xc"]),
        ];
        let run_owners: FxHashMap<String, String> =
            [("0xa", "7"), ("0xb", "7"), ("0xc", "7"), ("0xd", "0")]
                .into_iter()
                .map(|(r, o)| (r.to_owned(), o.to_owned()))
                .collect();
        let (carol, dan) = ("7".to_owned(), "8".to_owned());
        let left = quota_left(
            [(&carol, 3), (&dan, 1)].into_iter(),
            &run_owners,
            &workers,
            "0",
        );
        assert_eq!(left, BTreeMap::from([(carol, 1), (dan, 1)]));
    }
}
