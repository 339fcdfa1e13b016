//! The staged search of a tick, cheap for the server: oldest first, in pages sized to what the
//! pools can still take, then `.count` for the true total.
//!
//! The server's cost grows with the bundles it renders (~0.35 ms of REST server and MariaDB CPU
//! per bundle on CodaLab 1.7.5, above ~10 ms per request; BENCH.md, "Server CPU per tick"), so
//! a tick reads only what the pool policy needs ([`crate::pools::Need`]): the first page asks
//! what the pools miss, at least [`MIN_PAGE`] (the server's own default, what upstream reads
//! every tick); a full page that leaves some pool short is followed by one at least twice as
//! large, so that a run of bundles no pool can take (they add nothing to the need) is crossed in
//! a few requests; the read stops at a short page (the end of the list), when nothing is missed
//! any more, or after [`MAX_SEARCH_PAGES`].
//!
//! **Misfits.** A run of bundles that fit no pool at the head of the list is crossed once, then
//! remembered (`staged/run.rs`): the next reads start at its last bundle, which must come back first
//! (anything added to or removed from the run moves it, and the run is read again), so a
//! steady tick with any number of misfits in front costs one page, as upstream's. The run grows
//! by what each read crosses, so the page limit bounds a tick, not how far the reads reach:
//! fitting bundles behind N misfits are found after about N / 94,000 ticks. Every
//! [`RECHECK_MISFITS_EVERY`], one page of the run (at most [`super::SEARCH_PAGE_SIZE`]) is read
//! again, in turn, for what the last bundle cannot show (a bundle added where another left, a
//! request edited); a reload that makes remembered bundles fit cuts the run there at once. The
//! run of one set of keywords only; misfits between fitting bundles are read at every tick, as
//! long as the pools miss bundles behind them. (The server's search cannot leave misfits out:
//! its keywords compare metadata for equality or `LIKE` only, and AND them, so "fits one of
//! these pools" cannot be asked.)
//!
//! **Order.** Pages carry no sort keyword: the server then returns a user's staged bundles in
//! the order of their permission rows, which is creation order (oldest first, the order in
//! which its bundle manager dispatches a user's bundles; the real-server test
//! `real_server_pages_by_need_oldest_first_and_counts` checks it), one stable order for
//! consecutive pages and ticks, and MariaDB stops after the page. `id=.sort` would make it read
//! and sort every staged bundle for every page: +46 ms of server CPU per request at 10,000
//! staged, twice upstream's whole tick.
//!
//! **Count.** `.count` gives the true total, unless the read reached the end of the list (the
//! total is then what was read). It costs what reading the whole list costs the database (8 ms
//! at 1,000 staged, 48 ms at 10,000), so it is not made at every tick: while the bundles read
//! stay the same it is reused for up to [`CountEvery::steady`] (60 s), and when they change
//! (the queue moves) it is made again, at most every [`CountEvery::moving`] (15 s). A steady
//! tick costs the server one page, about what upstream's tick costs; the total is at most 15 s
//! old while the queue moves, 60 s while only what lies past the bundles read changes.

use super::{CodaLabClient, SearchResult};
use crate::bundle::StagedBundle;
use crate::error::{Error, Result};
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

/// The smallest page asked: the server's own default `.limit`, which upstream reads every tick.
pub const MIN_PAGE: usize = 10;
/// Pages read at most per search, so a misbehaving server cannot keep the loop busy forever.
pub const MAX_SEARCH_PAGES: usize = 100;

/// How often one page of the remembered run of misfits is read again (see the module doc): a
/// bundle hidden in the run is found within a minute per 1,000 misfits.
pub const RECHECK_MISFITS_EVERY: Duration = Duration::from_secs(60);

/// How often the staged total is counted (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountEvery {
    /// While the bundles read change: a count at most this often.
    pub moving: Duration,
    /// While they stay the same: a count at least this often.
    pub steady: Duration,
}

impl CountEvery {
    /// A count at every read that stops short of the end of the list.
    pub const ALWAYS: Self = Self {
        moving: Duration::ZERO,
        steady: Duration::ZERO,
    };
}

impl Default for CountEvery {
    fn default() -> Self {
        Self {
            moving: Duration::from_secs(15),
            steady: Duration::from_secs(60),
        }
    }
}

/// A count, and what it was counted for.
#[derive(Debug)]
pub(super) struct LastCount {
    /// A hash of the keywords and of the uuids read, in order.
    read: u64,
    total: usize,
    at: Instant,
}

impl LastCount {
    /// Whether this count still stands for a read with key `read` (see [`CountEvery`]).
    fn reusable(&self, read: u64, every: CountEvery) -> bool {
        let age = self.at.elapsed();
        let limit = if read == self.read {
            every.steady
        } else {
            every.moving
        };
        age < limit
    }
}

/// The search pages of one client and keywords.
struct Server<'a> {
    client: &'a CodaLabClient,
    keywords: &'a [String],
}

impl read::Pages for Server<'_> {
    async fn page(&mut self, page: Page) -> Result<Vec<run::Entry>> {
        let (bundles, skipped) = self
            .client
            .search_page(self.keywords, page.offset, page.limit)
            .await?;
        Ok(run::in_order(bundles, skipped))
    }
}

/// A hash of the search keywords.
fn keywords_key(keywords: &[String]) -> u64 {
    let mut hasher = rustc_hash::FxHasher::default();
    keywords.hash(&mut hasher);
    hasher.finish()
}

/// What a count is reused for: the same keywords and the same bundles read, in order.
fn read_key(keywords: &[String], read: &[StagedBundle]) -> u64 {
    let mut hasher = rustc_hash::FxHasher::default();
    keywords.hash(&mut hasher);
    for bundle in read {
        bundle.uuid.hash(&mut hasher);
    }
    hasher.finish()
}

/// What the pools still miss, given the staged bundles read so far (oldest first).
pub trait StagedNeed {
    /// How many more bundles the pools miss after `read`; zero stops the read.
    fn missing(&self, read: &[StagedBundle]) -> usize;

    /// Whether some pool could take `bundle` at all (its shape and queue). A bundle no pool
    /// can take adds nothing to [`StagedNeed::missing`], and the run of them that opens the
    /// list is remembered from one read to the next (see the module doc). Every bundle, unless
    /// said otherwise.
    fn fits(&self, bundle: &StagedBundle) -> bool {
        let _ = bundle;
        true
    }
}

impl StagedNeed for crate::pools::Need<'_> {
    fn missing(&self, read: &[StagedBundle]) -> usize {
        crate::pools::Need::missing(self, read)
    }

    fn fits(&self, bundle: &StagedBundle) -> bool {
        self.fits_some_pool(bundle)
    }
}

impl<F: Fn(&[StagedBundle]) -> usize> StagedNeed for F {
    fn missing(&self, read: &[StagedBundle]) -> usize {
        self(read)
    }
}

/// Every bundle: a need that is never met (the read goes to the end of the list).
pub fn everything(_: &[StagedBundle]) -> usize {
    usize::MAX
}

/// One search request: `.offset` and `.limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    /// Bundles skipped (`.offset`).
    pub offset: usize,
    /// Bundles asked (`.limit`).
    pub limit: usize,
}

/// The pages of one read (pure; the client sends them, tests run them over a list): the first
/// asks what the pools miss, at least [`MIN_PAGE`]; after a full page that leaves the pools
/// short, the next asks the larger of what they still miss and twice the last page; every page
/// holds at most `max_page`. The read ends at a short page (the end of the list:
/// [`Pager::complete`]), when the pools miss nothing more, or after [`MAX_SEARCH_PAGES`].
#[derive(Debug, Clone)]
pub struct Pager {
    page: Option<Page>,
    max_page: usize,
    pages: usize,
    complete: bool,
}

impl Pager {
    /// A read for pools that miss `missing` bundles, in pages of at most `max_page`.
    pub fn new(missing: usize, max_page: usize) -> Self {
        let max_page = max_page.max(1);
        Self {
            page: Some(Page {
                offset: 0,
                limit: missing.max(MIN_PAGE).min(max_page),
            }),
            max_page,
            pages: 0,
            complete: false,
        }
    }

    /// A read that starts at offset `anchor`, the last bundle already known, which the first
    /// page must return first (so that page asks one more).
    pub fn resume(anchor: usize, missing: usize, max_page: usize) -> Self {
        let max_page = max_page.max(1);
        Self {
            page: Some(Page {
                offset: anchor,
                limit: (missing.max(MIN_PAGE) + 1).min(max_page),
            }),
            max_page,
            pages: 0,
            complete: false,
        }
    }

    /// The page to read now, or `None` when the read is over.
    pub fn page(&self) -> Option<Page> {
        self.page
    }

    /// Takes in the current page: it returned `returned` results, and the pools now miss
    /// `missing` bundles.
    pub fn advance(&mut self, returned: usize, missing: usize) {
        let Some(last) = self.page.take() else {
            return;
        };
        self.pages += 1;
        if returned < last.limit {
            self.complete = true;
        } else if missing > 0 && self.pages < MAX_SEARCH_PAGES {
            self.page = Some(Page {
                offset: last.offset + returned,
                limit: missing.max(last.limit.saturating_mul(2)).min(self.max_page),
            });
        } else if missing > 0 {
            tracing::warn!(
                pages = MAX_SEARCH_PAGES,
                read = last.offset + returned,
                "staged search stopped after the page limit"
            );
        }
    }

    /// Whether the read reached the end of the list.
    pub fn complete(&self) -> bool {
        self.complete
    }
}

impl CodaLabClient {
    /// The staged bundles matching `keywords` (ANDed) that the pools need, oldest first, and
    /// the true total (see the module doc); [`super::SearchResult::complete`] says whether the
    /// read reached the end of the list.
    ///
    /// When a read comes back empty after an earlier one found bundles, the identity is
    /// checked: an expired or revoked token makes the server answer as anonymous, and `.mine`
    /// then matches nothing. If the token was bad, the client logs in again and reads once more.
    /// A request answered 401 likewise logs in again and reads once more.
    ///
    /// A refused server certificate or redirect is fatal until the client has once completed a
    /// search (a misconfiguration at start), temporary after (retried with backoff).
    pub async fn staged_for(
        &self,
        keywords: &[String],
        need: &impl StagedNeed,
    ) -> Result<SearchResult> {
        let result = self.read_checked(keywords, need).await;
        self.settle(result)
    }

    async fn read_checked(
        &self,
        keywords: &[String],
        need: &impl StagedNeed,
    ) -> Result<SearchResult> {
        let mut result = match self.read(keywords, need).await {
            // A dead token (expired early, revoked, server restarted with new keys): log in
            // again once instead of waiting for the scheduled refresh.
            Err(Error::Server { status: 401, .. }) => {
                tracing::warn!(
                    "the server refused our token (401 to the search); logging in again"
                );
                *self.token.lock().await = None;
                self.login_once().await?;
                self.read(keywords, need).await?
            }
            other => other?,
        };
        let mut last_nonempty = self.last_search_nonempty.lock().await;
        if result.total == 0 && *last_nonempty {
            match self.check_identity().await {
                Ok(()) => {}
                Err(Error::Server { status: 401, .. }) => {
                    tracing::warn!(
                        "the server no longer accepts our token (empty search); logging in again"
                    );
                    self.login_once().await?;
                    result = self.read(keywords, need).await?;
                }
                Err(e) => return Err(e),
            }
        }
        *last_nonempty = result.total > 0;
        Ok(result)
    }

    /// The pages (after the remembered run of misfits: [`run`]), then the count when they did
    /// not reach the end of the list.
    async fn read(&self, keywords: &[String], need: &impl StagedNeed) -> Result<SearchResult> {
        let mut run = self.misfit_run.lock().await;
        let memory = read::Memory {
            run: &mut run,
            keywords: keywords_key(keywords),
            recheck_every: self.recheck_misfits_every,
        };
        let mut server = Server {
            client: self,
            keywords,
        };
        let read = read::read(&mut server, need, self.page_size, memory).await?;
        drop(run);
        let result = SearchResult {
            bundles: read.bundles,
            skipped: read.skipped,
            total: read.reached,
            complete: read.complete,
            requests: read.requests,
        };
        if result.complete {
            return Ok(result);
        }
        self.counted(keywords, result).await
    }

    /// `result` with the total: the last count while it still stands ([`CountEvery`]), else a
    /// new one.
    async fn counted(&self, keywords: &[String], mut result: SearchResult) -> Result<SearchResult> {
        let read = read_key(keywords, &result.bundles);
        let mut last = self.last_count.lock().await;
        if let Some(last) = last.as_ref().filter(|l| l.reusable(read, self.count_every)) {
            result.total = last.total;
            return Ok(result);
        }
        result.total = self.count(keywords).await?;
        result.requests += 1;
        *last = Some(LastCount {
            read,
            total: result.total,
            at: Instant::now(),
        });
        Ok(result)
    }
}

pub(crate) mod read;
pub(crate) mod run;

#[cfg(test)]
pub(crate) mod tests;
