//! The observe step of a tick: log in once (the ready hook), list every pool's jobs and take
//! each listing into the pool's memory, then read the staged bundles the pools can absorb
//! ([`Need`](crate::pools::Need): the server renders no more), giving the pure [`PoolsObservation`] the plan step
//! hands to the policy.

use super::{Manager, ReadyHook, logs};
use crate::backend::{JobState, PendingKind, WorkerJob};
use crate::checkin::CheckinView;
use crate::codalab::CodaLabClient;
use crate::codalab::{SkippedBundle, staged_keywords};
use crate::command::WorkerOptions;
use crate::engine::runtime::ListingNews;
use crate::engine::{Engine, Listing};
use crate::error::{Error, Result};
use crate::pools::{PoolPolicy, PoolsObservation};
use crate::status::TickEvent;
use std::collections::HashSet;
use std::time::Duration;

/// What the observe step saw.
#[derive(Debug)]
pub(super) struct Observed {
    /// The search keywords used.
    pub keywords: Vec<String>,
    /// Bundles read and skipped because a field was malformed.
    pub malformed: usize,
    /// Staged bundles matching the search, read or not (the server's `.count`).
    pub staged: usize,
    /// Search requests: pages, and the count unless the pages read the whole list.
    pub search_requests: usize,
    /// Bundles read last tick that are no longer staged, as far as this read shows.
    pub removed: usize,
    /// The read covered every staged bundle.
    pub complete: bool,
    /// The staged bundles and every pool's jobs, as the policy sees them.
    pub pools: PoolsObservation,
    /// Jobs seen failed for the first time.
    pub newly_failed: Vec<WorkerJob>,
    /// What the listings showed, for metrics (failed and preempted jobs, backoffs).
    pub events: Vec<TickEvent>,
    /// The manager clock the observation is for.
    pub now: Duration,
}

impl Manager {
    /// Observes every pool, then the server. Fails when every pool's listing fails (with the
    /// first listing error), or when the search fails (the listings' events still count).
    pub(super) async fn observe(&mut self) -> Result<Observed> {
        self.ready().await?;
        let listings = self.list_pools().await?;
        let now = self.clock();
        let checkins = fetch(&self.client).await;
        let fresh = checkins.is_ok();
        let checkin_events = self.engine.take_checkins(Some(checkins), now);
        let identity = self.client.identity();
        let mut observation = self.engine.observe(listings, identity.as_ref(), now);
        if let Some(view) = observation.pools.server.as_mut()
            && identity.is_some_and(|i| i.root)
        {
            // The quotas read before, until this tick's read (the staged search's paging).
            let workers = self.engine.checkin_workers().unwrap_or_default();
            view.owners.quota_left = self.quota.quota_left(workers, &view.owners.root);
        }
        let mut events = checkin_events;
        events.append(&mut observation.events);
        let mut observed = Observed {
            keywords: self.keywords(),
            malformed: 0,
            staged: 0,
            search_requests: 0,
            removed: 0,
            complete: false,
            pools: observation.pools,
            newly_failed: observation.newly_failed,
            events,
            now,
        };
        self.read_staged(&mut observed).await?;
        self.read_quotas(&mut observed).await;
        let (bundles, complete) = (&observed.pools.bundles, observed.complete);
        self.history_observed(bundles, complete, fresh, now).await;
        Ok(observed)
    }

    /// As the root user, with a server view: the quotas of the staged bundles' owners
    /// ([`super::quota`]), into the view.
    async fn read_quotas(&mut self, observed: &mut Observed) {
        let Some(view) = observed.pools.server.as_mut() else {
            return;
        };
        let root = view.owners.root.clone();
        let Some(workers) = self.engine.checkin_workers() else {
            return;
        };
        if root.is_empty() || view.owners.manager != root {
            return;
        }
        let owners = (observed.pools.bundles.iter())
            .filter_map(|b| b.owner_id.clone())
            .collect();
        (self.quota)
            .refresh(&self.client, workers, &root, &owners, observed.now)
            .await;
        view.owners.quota_left = self.quota.quota_left(workers, &root);
    }

    /// Reads the staged bundles the pools can absorb into `observed` (oldest first, pages
    /// sized by their [`Need`]). On failure the listings' events are counted here: the tick
    /// reports no events of its own.
    async fn read_staged(&mut self, observed: &mut Observed) -> Result<()> {
        let policies = self.policies();
        let need = Engine::need(&policies, &observed.pools, observed.now);
        let search = match self.client.staged_for(&observed.keywords, &need).await {
            Ok(search) => search,
            Err(error) => {
                self.counters.add(&observed.events);
                return Err(error);
            }
        };
        observed.malformed = self.note_malformed(&search.skipped);
        observed.removed = logs::update_window(&mut self.window, &search.bundles, search.complete);
        observed.complete = search.complete;
        observed.staged = search.total;
        observed.search_requests = search.requests;
        observed.pools.bundles = search.bundles;
        Ok(())
    }

    /// At the first tick: logs in, then runs the ready hook ([`Manager::on_ready`]).
    async fn ready(&mut self) -> Result<()> {
        if self.on_ready.is_some() {
            self.client.login().await?;
            if let Some(ReadyHook(hook)) = self.on_ready.take() {
                hook();
            }
        }
        Ok(())
    }

    /// The staged search of this manager ([`search_keywords`]).
    fn keywords(&self) -> Vec<String> {
        let pools = (self.engine.pools.iter()).map(|r| (&r.pool.policy, &r.pool.worker));
        search_keywords(&self.config.search, pools, self.client.username())
    }

    /// Logs each malformed bundle once (while it stays malformed); returns how many there are.
    fn note_malformed(&mut self, skipped: &[SkippedBundle]) -> usize {
        for bundle in skipped {
            if self.reported_malformed.insert(bundle.uuid.clone()) {
                tracing::warn!(bundle = %bundle.uuid, reason = %bundle.reason, "skipping malformed bundle");
            }
        }
        let current: HashSet<&str> = skipped.iter().map(|s| s.uuid.as_str()).collect();
        self.reported_malformed
            .retain(|uuid| current.contains(uuid.as_str()));
        skipped.len()
    }

    /// Lists every pool's jobs into its memory. Returns per pool what its listing showed, or
    /// why it could not be listed; fails with the first error when no pool could be.
    async fn list_pools(&mut self) -> Result<Vec<Result<ListingNews, String>>> {
        let mut listings = Vec::with_capacity(self.engine.pools.len());
        let mut first_error: Option<Error> = None;
        let listed_at = self.clock();
        for index in 0..self.engine.pools.len() {
            let backend = &self.backends[index];
            match backend.get_worker_jobs().await {
                Ok(jobs) => {
                    let pending_kinds = (jobs.iter())
                        .filter(|j| j.state == JobState::Pending)
                        .map(|j| (j.id.clone(), backend.pending_kind(j)))
                        .filter(|(_, kind)| *kind != PendingKind::Queued)
                        .collect();
                    let reaped = backend.take_reaped();
                    self.history_listed(index, &jobs, listed_at);
                    let listing = Listing {
                        jobs,
                        pending_kinds,
                        reaped,
                    };
                    let start = super::unix_start(listed_at);
                    let news = (self.engine).listed(index, listing, listed_at, start);
                    listings.push(Ok(news));
                }
                Err(error) => {
                    let pool = self.engine.pools[index].name();
                    tracing::warn!(pool, %error, "cannot list the pool's jobs; skipping the pool this tick");
                    listings.push(Err(error.to_string()));
                    first_error.get_or_insert(error);
                }
            }
        }
        match first_error {
            Some(error) if listings.iter().all(Result::is_err) => Err(error),
            _ => Ok(listings),
        }
    }
}

/// The staged search: upstream's keywords, narrowed by the worker tag of the single-backend
/// pool (each of several pools matches `request_queue` itself).
pub(super) fn search_keywords<'a>(
    search: &[String],
    mut pools: impl Iterator<Item = (&'a PoolPolicy, &'a WorkerOptions)>,
    username: &str,
) -> Vec<String> {
    let narrowed = pools
        .find(|(policy, _)| policy.is_single_backend())
        .map(|(_, worker)| worker);
    staged_keywords(
        search,
        username,
        narrowed.and_then(|worker| worker.tag.as_deref()),
        narrowed.is_some_and(|worker| worker.tag_exclusive),
    )
}

/// The server's workers, as a view (a free function: see `observe::search_staged`).
async fn fetch(client: &CodaLabClient) -> Result<CheckinView, String> {
    client
        .workers_info()
        .await
        .map(CheckinView::new)
        .map_err(|error| error.to_string())
}
