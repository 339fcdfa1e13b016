//! The server's side of a tick for the dispatch model ([`ServerView`]): the checked-in workers
//! of the last fresh `GET /rest/workers/info` and who the manager is (`GET /rest/user`), and
//! what the manager remembers between ticks: since when the model has put each bundle on a
//! checked-in worker (a bundle the server has not started there within [`ON_WORKER_GRACE`] is
//! launched for), and whether it has said why it falls back to one bundle a worker.

use crate::checkin::CheckedInWorker;
use crate::codalab::UserIdentity;
use crate::dispatch::{Owners, ServerWorker};
use crate::pools::{BundleOnWorker, ServerView};
use rustc_hash::FxHashMap;
use std::time::Duration;

/// How long the model may say a checked-in worker takes a bundle that the server has not
/// started: the server dispatches every few seconds and workers check in every few, so past
/// this something the model does not see (disk, a permission, a group) holds the bundle back,
/// and the pools launch for it.
pub const ON_WORKER_GRACE: Duration = Duration::from_secs(60);

/// What the manager remembers of the model's placements between ticks.
#[derive(Debug, Default)]
pub(crate) struct ServerMemory {
    /// Since when (manager clock) the model has put each bundle on a checked-in worker.
    on_worker_since: FxHashMap<String, Duration>,
    /// Why the last tick had no server view, as logged (each reason once in a row).
    fallback: Option<String>,
}

impl ServerMemory {
    /// The view for this tick, or `None` (logged once per reason) when the model cannot run:
    /// no identity, no fresh worker list, or a worker entry without a field the model needs.
    pub fn view(
        &mut self,
        identity: Option<&UserIdentity>,
        workers: Option<&[CheckedInWorker]>,
        group_shared: bool,
        now: Duration,
    ) -> Option<ServerView> {
        match server_view(identity, workers, group_shared) {
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

    /// Takes the tick's placements on checked-in workers at `now`; logs each bundle that
    /// turned overdue this tick.
    pub fn take(&mut self, placed: &[BundleOnWorker], overdue: &[String], now: Duration) {
        let mut since = FxHashMap::default();
        for placed in placed {
            let start = self.on_worker_since.get(&placed.uuid).copied();
            since.insert(placed.uuid.clone(), start.unwrap_or(now));
        }
        for uuid in overdue {
            let start = self.on_worker_since.get(uuid).copied().unwrap_or(now);
            if since.insert(uuid.clone(), start).is_none() {
                tracing::info!(bundle = %uuid, grace_seconds = ON_WORKER_GRACE.as_secs(), "the server has not started this bundle on a checked-in worker the dispatch model gives it to; the pools launch for it");
            }
        }
        self.on_worker_since = since;
    }
}

/// The server view of `workers` for the manager `identity`, or why there is none.
pub fn server_view(
    identity: Option<&UserIdentity>,
    workers: Option<&[CheckedInWorker]>,
    group_shared: bool,
) -> Result<ServerView, String> {
    let identity = identity
        .ok_or("the server did not say who the manager is (GET /rest/user gave no data.id)")?;
    let workers = workers.ok_or("no fresh list of the server's workers")?;
    let workers = workers
        .iter()
        .map(|worker| {
            // The reply does not say what memory the runs hold: counted as none.
            ServerWorker::from_checkin(worker, 0).map_err(|field| {
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
    })
}
