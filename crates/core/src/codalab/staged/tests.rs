//! The pages of a staged read, as tables over pools, their jobs and where the bundles that fit
//! no pool stand in the queue: the client's own read ([`read::read`]) run over a list that
//! stands in for the server, one read or several (ticks) with the run of misfits remembered.

use super::read::{Memory, Pages, read};
use super::run::{Entry, MisfitRun};
use super::*;
use crate::backend::{JobState, PendingKind};
use crate::bundle::WorkerShape;
use crate::pools::{LaunchMode, Need, ObservedJob, PoolObservation, PoolPolicy};
use std::time::Duration;

/// A list as the server: the pages asked, and each page's results.
struct List<'a> {
    queue: &'a [StagedBundle],
    asked: Vec<Page>,
}

impl Pages for List<'_> {
    async fn page(&mut self, page: Page) -> Result<Vec<Entry>> {
        self.asked.push(page);
        let entries = self.queue.iter().skip(page.offset).take(page.limit);
        Ok(entries.cloned().map(Entry::Bundle).collect())
    }
}

/// Runs `future`, which never waits (the list answers at once).
pub(crate) fn at_once<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut context) {
        std::task::Poll::Ready(output) => output,
        std::task::Poll::Pending => unreachable!("the list answers at once"),
    }
}

/// One read over `queue` (oldest first) with the run `run` remembered from the last one,
/// rechecking a page of it when `recheck`: the pages asked, the bundles read and whether the
/// read reached the end of the queue.
pub(crate) fn read_remembering(
    queue: &[StagedBundle],
    need: &impl StagedNeed,
    max_page: usize,
    run: &mut Option<MisfitRun>,
    recheck: bool,
) -> (Vec<Page>, Vec<StagedBundle>, bool) {
    let mut list = List {
        queue,
        asked: Vec::new(),
    };
    let memory = Memory {
        run,
        keywords: 0,
        recheck_every: if recheck {
            Duration::ZERO
        } else {
            Duration::MAX
        },
    };
    let found = at_once(read(&mut list, need, max_page, memory)).expect("a list never fails");
    (list.asked, found.bundles, found.complete)
}

/// What a first read over `queue` asks and gets (nothing remembered).
pub(crate) fn read_list(
    queue: &[StagedBundle],
    need: &impl StagedNeed,
    max_page: usize,
) -> (Vec<Page>, Vec<StagedBundle>, bool) {
    read_remembering(queue, need, max_page, &mut None, false)
}

pub(crate) fn pool(name: &str, mode: LaunchMode, max: u32, cpus: u32, gpus: u32) -> PoolPolicy {
    PoolPolicy {
        max,
        launch_mode: mode,
        ..PoolPolicy::new(name, WorkerShape::from_flags(cpus, gpus, 8192))
    }
}

/// `busy` jobs active for an hour (past the startup grace), `pending` pending.
pub(crate) fn jobs(busy: usize, pending: usize) -> PoolObservation {
    let job = |i: usize, state| ObservedJob {
        id: format!("j{i}"),
        state,
        pending_for: Duration::ZERO,
        active_for: Duration::from_secs(if state == JobState::Active { 3600 } else { 0 }),
        checkin: Default::default(),
        launched_here: true,
        pending: PendingKind::Queued,
    };
    PoolObservation {
        jobs: (0..busy)
            .map(|i| job(i, JobState::Active))
            .chain((busy..busy + pending).map(|i| job(i, JobState::Pending)))
            .collect(),
        ..PoolObservation::default()
    }
}

/// A queue of `(count, cpus, gpus)` runs, oldest first.
pub(crate) fn queue(runs: &[(usize, u32, u32)]) -> Vec<StagedBundle> {
    let mut n = 0;
    let mut bundles = Vec::new();
    for &(count, cpus, gpus) in runs {
        for _ in 0..count {
            n += 1;
            bundles.push(StagedBundle {
                request_cpus: cpus,
                request_gpus: gpus,
                ..StagedBundle::new(format!("0x{n:04}"))
            });
        }
    }
    bundles
}

fn pages(list: &[(usize, usize)]) -> Vec<Page> {
    list.iter()
        .map(|&(offset, limit)| Page { offset, limit })
        .collect()
}

pub(crate) const COMPAT: LaunchMode = LaunchMode::Compat;
pub(crate) const TARGET: LaunchMode = LaunchMode::Target;

struct Row {
    what: &'static str,
    pools: Vec<PoolPolicy>,
    /// (busy, pending) per pool.
    jobs: Vec<(usize, usize)>,
    queue: Vec<(usize, u32, u32)>,
    pages: Vec<(usize, usize)>,
    read: usize,
    complete: bool,
}

/// Page sizes and early stop: upstream's defaults read what upstream reads whatever the queue;
/// larger pools read what they can absorb; bundles that fit no pool (64 CPUs here, or GPU
/// bundles with no GPU pool) are paged past in doubling pages, wherever they stand.
#[test]
fn pages_table() {
    let cpu = |mode, max| pool("cpu", mode, max, 4, 0);
    let gpu = |max| pool("gpu", TARGET, max, 8, 2);
    let rows = [
        Row {
            what: "defaults (compat, max 10), idle: one page of 10 out of 10,000",
            pools: vec![cpu(COMPAT, 10)],
            jobs: vec![(0, 0)],
            queue: vec![(10_000, 1, 0)],
            pages: vec![(0, 10)],
            read: 10,
            complete: false,
        },
        Row {
            what: "compat at max with 9 pending: pending + 1 = 10",
            pools: vec![cpu(COMPAT, 10)],
            jobs: vec![(1, 9)],
            queue: vec![(1000, 1, 0)],
            pages: vec![(0, 10)],
            read: 10,
            complete: false,
        },
        Row {
            what: "compat with 30 pending (max lowered by a reload): 31",
            pools: vec![cpu(COMPAT, 10)],
            jobs: vec![(0, 30)],
            queue: vec![(1000, 1, 0)],
            pages: vec![(0, 31)],
            read: 31,
            complete: false,
        },
        Row {
            what: "target max 100, 50 busy, 50 pending: max(100 - 50, 50) + 1",
            pools: vec![cpu(TARGET, 100)],
            jobs: vec![(50, 50)],
            queue: vec![(10_000, 1, 0)],
            pages: vec![(0, 51)],
            read: 51,
            complete: false,
        },
        Row {
            what: "target max 100, idle: 101",
            pools: vec![cpu(TARGET, 100)],
            jobs: vec![(0, 0)],
            queue: vec![(1000, 1, 0)],
            pages: vec![(0, 101)],
            read: 101,
            complete: false,
        },
        Row {
            what: "target max 10, all 10 busy: still 1 + the floor of 10",
            pools: vec![cpu(TARGET, 10)],
            jobs: vec![(10, 0)],
            queue: vec![(1000, 1, 0)],
            pages: vec![(0, 10)],
            read: 10,
            complete: false,
        },
        Row {
            what: "25 staged, pools that take 25: all 25 in one short page, no count",
            pools: vec![cpu(TARGET, 25)],
            jobs: vec![(0, 0)],
            queue: vec![(25, 1, 0)],
            pages: vec![(0, 26)],
            read: 25,
            complete: true,
        },
        Row {
            what: "30 misfits first (compat, idle): pages double until a fitting one",
            pools: vec![cpu(COMPAT, 10)],
            jobs: vec![(0, 0)],
            queue: vec![(30, 64, 0), (1000, 1, 0)],
            pages: vec![(0, 10), (10, 20), (30, 40)],
            read: 70,
            complete: false,
        },
        Row {
            what: "misfits after the need: not read",
            pools: vec![cpu(COMPAT, 10)],
            jobs: vec![(0, 0)],
            queue: vec![(12, 1, 0), (500, 64, 0)],
            pages: vec![(0, 10)],
            read: 10,
            complete: false,
        },
        Row {
            what: "misfits interleaved with fitting ones, target max 10 (need 11)",
            pools: vec![cpu(TARGET, 10)],
            jobs: vec![(0, 0)],
            queue: vec![(5, 1, 0), (20, 64, 0), (5, 1, 0), (40, 64, 0), (100, 1, 0)],
            pages: vec![(0, 11), (11, 22), (33, 44)],
            read: 77,
            complete: false,
        },
        Row {
            what: "only misfits: the whole list, in doubling pages",
            pools: vec![cpu(COMPAT, 10)],
            jobs: vec![(0, 0)],
            queue: vec![(100, 64, 0)],
            pages: vec![(0, 10), (10, 20), (30, 40), (70, 80)],
            read: 100,
            complete: true,
        },
        Row {
            what: "cpu + gpu pools, GPU bundles behind 100 CPU ones: read on to them",
            pools: vec![cpu(TARGET, 4), gpu(2)],
            jobs: vec![(0, 0), (0, 0)],
            queue: vec![(100, 1, 0), (3, 1, 2), (900, 1, 0)],
            pages: vec![(0, 10), (10, 20), (30, 40), (70, 80)],
            read: 150,
            complete: false,
        },
        Row {
            what: "cpu + gpu pools, the GPU pool full and busy: its cap is 1",
            pools: vec![cpu(TARGET, 4), gpu(2)],
            jobs: vec![(0, 0), (2, 0)],
            queue: vec![(8, 1, 0), (1, 1, 2), (900, 1, 0)],
            pages: vec![(0, 10)],
            read: 10,
            complete: false,
        },
        Row {
            what: "pages never exceed the largest page (1,000)",
            pools: vec![cpu(TARGET, 3000)],
            jobs: vec![(0, 0)],
            queue: vec![(5000, 1, 0)],
            pages: vec![(0, 1000), (1000, 1000), (2000, 1000), (3000, 1000)],
            read: 4000,
            complete: false,
        },
    ];
    for row in rows {
        let observed: Vec<PoolObservation> = row.jobs.iter().map(|&(b, p)| jobs(b, p)).collect();
        let need = Need::new(&row.pools, &observed, Duration::from_secs(1000));
        let (got, read, complete) = read_list(&queue(&row.queue), &need, 1000);
        assert_eq!(got, pages(&row.pages), "{}", row.what);
        assert_eq!(
            (read.len(), complete),
            (row.read, row.complete),
            "{}",
            row.what
        );
    }
}

#[test]
fn a_need_that_is_never_met_reads_everything_in_the_largest_pages() {
    let list = queue(&[(2500, 1, 0)]);
    let (got, read, complete) = read_list(&list, &everything, 1000);
    assert_eq!(got, pages(&[(0, 1000), (1000, 1000), (2000, 1000)]));
    assert_eq!((read.len(), complete), (2500, true));
}

#[test]
fn the_read_stops_after_the_page_limit() {
    let list = queue(&[(200, 1, 0)]);
    let (got, read, complete) = read_list(&list, &everything, 1);
    assert_eq!(got.len(), MAX_SEARCH_PAGES);
    assert_eq!((read.len(), complete), (MAX_SEARCH_PAGES, false));
}
