//! The owners' `parallel_run_quota` left for shared workers, as the root user reads it for
//! the dispatch model ([`crate::dispatch`]). The server's rule
//! (`BundleModel.get_user_parallel_run_quota_left`): an owner's quota less their runs on
//! workers that are not their own. Here: less their runs on the root user's (shared) workers;
//! runs on another user's group-shared workers are not counted.
//!
//! A quota is read once per [`QUOTA_TTL`] per owner of a staged bundle (`GET
//! /rest/users/<id>`); the owner of each run on a shared worker once in the run's life (one
//! search for the runs new since the last tick). A failed read is logged once per streak and
//! leaves what it would have read unknown: an owner whose quota is unknown is not held back.

use crate::checkin::CheckedInWorker;
use crate::codalab::CodaLabClient;
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// How long a user's `parallel_run_quota` is taken as read (admins change it rarely).
pub const QUOTA_TTL: Duration = Duration::from_secs(300);

/// What the manager remembers of quotas and run owners between ticks.
#[derive(Debug, Default)]
pub(crate) struct QuotaMemory {
    /// The owner of each run on a shared worker (run uuid → owner id).
    run_owners: FxHashMap<String, String>,
    /// Each owner's quota (`None`: the server did not show one) and when it was read.
    quotas: FxHashMap<String, (Option<i64>, Duration)>,
    /// The last read's error, logged once per streak.
    failing: Option<String>,
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
        for owner in owners.iter().filter(|o| o.as_str() != root) {
            let stale = (self.quotas.get(owner))
                .is_none_or(|(_, read)| now.saturating_sub(*read) >= QUOTA_TTL);
            if !stale {
                continue;
            }
            match client.parallel_run_quota(owner).await {
                Ok(quota) => {
                    self.quotas.insert(owner.clone(), (quota, now));
                }
                Err(e) => error = Some(e.to_string()),
            }
        }
        self.note(error);
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
            (owner.clone(), quota - spent)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
