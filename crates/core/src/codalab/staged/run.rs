//! The run of misfits at the head of the staged list, remembered from one read to the next.
//!
//! Bundles that fit no pool add nothing to what the pools miss, so a read crosses them to find
//! the bundles behind. The list's order is stable (creation order) and a misfit stays one while
//! the pools keep their shapes, so the run that opens the list is read once and then
//! remembered ([`MisfitRun`]): the next read starts at its last entry, the **anchor**, which
//! must come back first, at the same offset. Anything that adds or removes a bundle inside the
//! run moves the anchor, and the run is forgotten (the read starts again at the head). What
//! the anchor cannot see, a bundle added where another left or a bundle whose request was
//! edited, a **recheck** finds: one page of the run read again at a time
//! ([`MisfitRun::recheck_page`]), the whole run in turn. At every read the remembered bundles
//! are judged again against the pools of that read: a reload that makes one fit cuts the run
//! there.

use super::{Page, StagedNeed};
use crate::bundle::StagedBundle;
use crate::codalab::SkippedBundle;
use std::time::Instant;

/// One result of a search page, in the list's order.
#[derive(Debug, Clone)]
pub(crate) enum Entry {
    /// A bundle read.
    Bundle(StagedBundle),
    /// A bundle left out because a field is malformed.
    Skipped(SkippedBundle),
}

impl Entry {
    pub(crate) fn uuid(&self) -> &str {
        match self {
            Entry::Bundle(bundle) => &bundle.uuid,
            Entry::Skipped(skipped) => &skipped.uuid,
        }
    }

    /// Whether no pool of `need` can take it (a malformed bundle never).
    pub(crate) fn is_misfit(&self, need: &impl StagedNeed) -> bool {
        match self {
            Entry::Bundle(bundle) => !need.fits(bundle),
            Entry::Skipped(_) => true,
        }
    }
}

/// The results of one page in the list's order: `bundles` and `skipped` merged by the place
/// each skipped one had among them ([`SkippedBundle::index`]).
pub(crate) fn in_order(bundles: Vec<StagedBundle>, skipped: Vec<SkippedBundle>) -> Vec<Entry> {
    let mut entries = Vec::with_capacity(bundles.len() + skipped.len());
    let mut bundles = bundles.into_iter();
    let mut skipped = skipped.into_iter().peekable();
    loop {
        let next = match skipped.next_if(|s| s.index <= entries.len()) {
            Some(skipped) => Entry::Skipped(skipped),
            None => match bundles.next() {
                Some(bundle) => Entry::Bundle(bundle),
                None => break,
            },
        };
        entries.push(next);
    }
    entries.extend(skipped.map(Entry::Skipped));
    entries
}

/// The first entries of the list for some keywords, none of which fits a pool.
#[derive(Debug)]
pub(crate) struct MisfitRun {
    /// A hash of the keywords the run was read with.
    keywords: u64,
    /// The entries, from the head of the list on.
    entries: Vec<Entry>,
    /// Where the next recheck starts.
    cursor: usize,
    /// When a page of the run was last read (the run itself, or a recheck).
    pub(crate) checked_at: Instant,
}

impl MisfitRun {
    /// A run of no entries yet, for `keywords`.
    pub(crate) fn new(keywords: u64) -> Self {
        Self {
            keywords,
            entries: Vec::new(),
            cursor: 0,
            checked_at: Instant::now(),
        }
    }

    /// The hash of the keywords it was read with.
    pub(crate) fn keywords(&self) -> u64 {
        self.keywords
    }

    /// Whether the run was read with `keywords`.
    pub(crate) fn is_for(&self, keywords: u64) -> bool {
        self.keywords == keywords
    }

    /// How many entries the run holds (the offset of the first entry after it).
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The entries, oldest first.
    pub(crate) fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The offset and uuid of its last entry, which the next page must start with.
    pub(crate) fn anchor(&self) -> Option<(usize, &str)> {
        let last = self.entries.last()?;
        Some((self.entries.len() - 1, last.uuid()))
    }

    /// Cuts the run before the first entry the pools of `need` can now take (a reload).
    pub(crate) fn keep_misfits(&mut self, need: &impl StagedNeed) {
        if let Some(fits) = self.entries.iter().position(|e| !e.is_misfit(need)) {
            self.truncate(fits);
        }
    }

    /// Adds `entry`, read right after the run.
    pub(crate) fn push(&mut self, entry: Entry) {
        self.entries.push(entry);
    }

    /// Keeps the first `len` entries.
    pub(crate) fn truncate(&mut self, len: usize) {
        self.entries.truncate(len);
        self.cursor = 0;
    }

    /// The page a recheck reads: the next `max_page` entries of the run (from the head again
    /// after its end).
    pub(crate) fn recheck_page(&self, max_page: usize) -> Option<Page> {
        let left = self.entries.len().checked_sub(self.cursor)?;
        (left > 0).then(|| Page {
            offset: self.cursor,
            limit: left.min(max_page.max(1)),
        })
    }

    /// Takes in a recheck of `page` that returned `read`: the same bundles, each still fitting
    /// no pool, move the cursor on (and keep what the server says of them now); anything else
    /// returns `false`, and the run must be forgotten.
    pub(crate) fn confirm(&mut self, page: Page, read: Vec<Entry>, need: &impl StagedNeed) -> bool {
        let Some(remembered) = self.entries.get(page.offset..page.offset + page.limit) else {
            return false;
        };
        let same = read.len() == remembered.len()
            && read
                .iter()
                .zip(remembered)
                .all(|(now, was)| now.uuid() == was.uuid() && now.is_misfit(need));
        if !same {
            return false;
        }
        let end = page.offset + read.len();
        self.entries.splice(page.offset..end, read);
        self.cursor = if end >= self.entries.len() { 0 } else { end };
        self.checked_at = Instant::now();
        true
    }
}

#[cfg(test)]
mod tests;
