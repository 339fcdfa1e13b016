//! One staged read over any source of pages (the server, or a list in the tests): the pages
//! of the [`Pager`], started after the remembered [`MisfitRun`] when there is one, and the run
//! checked, rechecked and extended on the way.

use super::run::{Entry, MisfitRun};
use super::{Page, Pager, StagedNeed};
use crate::bundle::StagedBundle;
use crate::codalab::{SkippedBundle, dedup_by_uuid};
use crate::error::Result;
use std::time::Duration;

/// Where pages come from.
pub(crate) trait Pages {
    /// The results of `page`, in the list's order.
    async fn page(&mut self, page: Page) -> Result<Vec<Entry>>;
}

/// What a read found.
#[derive(Debug, Default)]
pub(crate) struct Read {
    /// The bundles, oldest first: the run's, then those read.
    pub bundles: Vec<StagedBundle>,
    /// The bundles left out because a field is malformed.
    pub skipped: Vec<SkippedBundle>,
    /// Whether the read reached the end of the list.
    pub complete: bool,
    /// The offset up to which the list was read (or known from the run).
    pub reached: usize,
    /// Requests made.
    pub requests: usize,
}

/// The run a read starts from and leaves for the next one.
#[derive(Debug)]
pub(crate) struct Memory<'a> {
    /// The run remembered (`None`: none yet).
    pub run: &'a mut Option<MisfitRun>,
    /// A hash of this read's keywords: a run read with others is forgotten.
    pub keywords: u64,
    /// A page of the run is read again when its last check is older than this.
    pub recheck_every: Duration,
}

/// Reads what `need` misses, in pages of at most `max_page`, from `pages`; see the module doc.
/// The run is kept for the next read even when this one fails (what it holds was read in
/// order from the head of the list).
pub(crate) async fn read(
    pages: &mut impl Pages,
    need: &impl StagedNeed,
    max_page: usize,
    memory: Memory<'_>,
) -> Result<Read> {
    let mut run = memory
        .run
        .take()
        .filter(|run| run.is_for(memory.keywords))
        .unwrap_or_else(|| MisfitRun::new(memory.keywords));
    run.keep_misfits(need);
    let read = read_after(pages, need, max_page, &mut run, memory.recheck_every).await;
    *memory.run = (run.len() > 0).then_some(run);
    read
}

/// The recheck of a page of `run` when it is due, then the pages after it.
async fn read_after(
    pages: &mut impl Pages,
    need: &impl StagedNeed,
    max_page: usize,
    run: &mut MisfitRun,
    recheck_every: Duration,
) -> Result<Read> {
    let mut read = Read::default();
    let keywords = run.keywords();
    if run.checked_at.elapsed() >= recheck_every
        && let Some(page) = run.recheck_page(max_page)
    {
        let entries = pages.page(page).await?;
        read.requests += 1;
        if !run.confirm(page, entries, need) {
            *run = MisfitRun::new(keywords);
        }
    }
    if !read_on(pages, need, max_page, run, &mut read).await? {
        // The anchor moved: something was added to or removed from the run.
        *run = MisfitRun::new(keywords);
        read_on(pages, need, max_page, run, &mut read).await?;
    }
    Ok(read)
}

/// The pages after `run` (from the head of the list when it is empty), extending it with the
/// misfits that follow it; `false` when the first page does not start with its anchor.
async fn read_on(
    pages: &mut impl Pages,
    need: &impl StagedNeed,
    max_page: usize,
    run: &mut MisfitRun,
    read: &mut Read,
) -> Result<bool> {
    (read.bundles, read.skipped) = split(run.entries());
    let mut anchor = run.anchor().map(|(_, uuid)| uuid.to_owned());
    let mut pager = match run.anchor() {
        Some((offset, _)) => Pager::resume(offset, need.missing(&read.bundles), max_page),
        None => Pager::new(need.missing(&[]), max_page),
    };
    let mut extending = true;
    while let Some(page) = pager.page() {
        let mut entries = pages.page(page).await?;
        read.requests += 1;
        let returned = entries.len();
        if let Some(uuid) = anchor.take() {
            if entries.first().map(Entry::uuid) != Some(uuid.as_str()) {
                return Ok(false);
            }
            entries.remove(0);
        }
        extending = take_page(entries, need, run, extending, read);
        read.reached = page.offset + returned;
        pager.advance(returned, need.missing(&read.bundles));
    }
    read.complete = pager.complete();
    Ok(true)
}

/// Takes in the `entries` of one page (after the anchor): all of them into `read`, and while
/// `extending`, the misfits that open them into `run`. Returns whether the run still reaches
/// the end of what was read.
fn take_page(
    entries: Vec<Entry>,
    need: &impl StagedNeed,
    run: &mut MisfitRun,
    extending: bool,
    read: &mut Read,
) -> bool {
    let (run_len, fresh) = (run.len(), entries.len());
    let misfits = if extending {
        leading_misfits(&entries, need)
    } else {
        0
    };
    for (i, entry) in entries.into_iter().enumerate() {
        if i < misfits {
            run.push(entry.clone());
        }
        match entry {
            Entry::Bundle(bundle) => read.bundles.push(bundle),
            Entry::Skipped(bundle) => read.skipped.push(bundle),
        }
    }
    let before = read.bundles.len();
    dedup_by_uuid(&mut read.bundles);
    if read.bundles.len() < before {
        // The list moved between two pages: what was added may be hidden in the run.
        run.truncate(run_len);
        return false;
    }
    extending && misfits == fresh
}

/// How many of `entries` fit no pool, from the first on.
fn leading_misfits(entries: &[Entry], need: &impl StagedNeed) -> usize {
    entries
        .iter()
        .position(|e| !e.is_misfit(need))
        .unwrap_or(entries.len())
}

/// The bundles and the malformed ones of `entries`.
fn split(entries: &[Entry]) -> (Vec<StagedBundle>, Vec<SkippedBundle>) {
    let mut bundles = Vec::with_capacity(entries.len());
    let mut skipped = Vec::new();
    for entry in entries {
        match entry {
            Entry::Bundle(bundle) => bundles.push(bundle.clone()),
            Entry::Skipped(bundle) => skipped.push(bundle.clone()),
        }
    }
    (bundles, skipped)
}
