//! The run of misfits over several reads (ticks), as tables: the client's read over a list
//! that stands in for the server ([`read_remembering`]), the list changed between reads as a
//! server's would.

use super::*;
use crate::codalab::staged::MAX_SEARCH_PAGES;
use crate::codalab::staged::read::{Memory, Pages, read};
use crate::codalab::staged::tests::{
    COMPAT, TARGET, at_once, jobs, pool, queue, read_list, read_remembering,
};
use crate::pools::{Need, PoolObservation, PoolPolicy};
use std::time::Duration;

const NOW: Duration = Duration::from_secs(1000);

/// One idle compat pool of 4 CPUs (upstream's defaults): bundles of 64 CPUs fit no pool.
fn compat() -> (Vec<PoolPolicy>, Vec<PoolObservation>) {
    (vec![pool("cpu", COMPAT, 10, 4, 0)], vec![jobs(0, 0)])
}

fn fitting(read: &[StagedBundle]) -> Vec<&str> {
    read.iter()
        .filter(|b| b.request_cpus <= 4)
        .map(|b| b.uuid.as_str())
        .collect()
}

fn page(offset: usize, limit: usize) -> Page {
    Page { offset, limit }
}

/// 1,500 misfits in front: the first read crosses them in 8 pages, as every read did before
/// the run was remembered; every read after asks one page, from the run's last bundle, and
/// sees the same bundles.
#[test]
fn a_run_of_misfits_is_crossed_once_then_each_read_asks_one_page() {
    let (pools, observed) = compat();
    let need = Need::new(&pools, &observed, NOW);
    let list = queue(&[(1500, 64, 0), (100, 1, 0)]);
    let mut run = None;
    let (first, read, _) = read_remembering(&list, &need, 1000, &mut run, false);
    assert_eq!(first.len(), 8, "{first:?}");
    assert_eq!(read_list(&list, &need, 1000).0, first, "as without memory");
    for _ in 0..10 {
        let (pages, again, complete) = read_remembering(&list, &need, 1000, &mut run, false);
        assert_eq!(pages, [page(1499, 11)]);
        assert_eq!((again.len(), complete), (1510, false));
        assert_eq!(again[..], read[..1510]);
    }
}

/// A queue where nothing fits is read whole once; then one page that returns the run's last
/// bundle alone: the end of the list.
#[test]
fn a_queue_of_misfits_only_costs_one_page_per_read() {
    let (pools, observed) = compat();
    let need = Need::new(&pools, &observed, NOW);
    let list = queue(&[(300, 64, 0)]);
    let mut run = None;
    let (_, read, complete) = read_remembering(&list, &need, 1000, &mut run, false);
    assert_eq!((read.len(), complete), (300, true));
    let (pages, again, complete) = read_remembering(&list, &need, 1000, &mut run, false);
    assert_eq!(pages, [page(299, 11)]);
    assert_eq!((again, complete), (read, true));
}

/// Fitting bundles behind more misfits than one read's page limit reaches (~94,000 with
/// pages of 1,000; 1,000 here with pages of 10) are found a few reads later, each read
/// within the limit; without the run, never.
#[test]
fn fitting_bundles_behind_any_number_of_misfits_are_found() {
    let (pools, observed) = compat();
    let need = Need::new(&pools, &observed, NOW);
    let list = queue(&[(2500, 64, 0), (5, 1, 0)]);
    assert!(fitting(&read_list(&list, &need, 10).1).is_empty());
    let mut run = None;
    let mut reads = 0;
    let found = loop {
        reads += 1;
        let (pages, read, _) = read_remembering(&list, &need, 10, &mut run, false);
        assert!(pages.len() <= MAX_SEARCH_PAGES, "{}", pages.len());
        if !fitting(&read).is_empty() || reads == 5 {
            break read;
        }
    };
    assert_eq!((reads, fitting(&found).is_empty()), (3, false));
}

/// How the list changes between two reads.
type Change = fn(&mut Vec<StagedBundle>);

fn newcomer() -> StagedBundle {
    StagedBundle {
        request_cpus: 1,
        ..StagedBundle::new("0xnew")
    }
}

/// Whatever changes inside the run, the next read sees what a read from the head would: a
/// move of the run's last bundle is seen at once; what does not move it (one misfit leaves
/// where an older fitting bundle becomes staged) is seen by the recheck; a misfit that leaves
/// or fitting bundles that arrive after the run change nothing.
#[test]
fn changes_inside_the_run_are_seen() {
    let rows: [(&str, Change, bool, Vec<Page>); 6] = [
        (
            "a misfit leaves: the anchor moved, read from the head",
            |list| drop(list.remove(700)),
            false,
            vec![page(1499, 11), page(0, 10), page(10, 20)],
        ),
        (
            "an older fitting bundle becomes staged inside the run",
            |list| list.insert(700, newcomer()),
            false,
            vec![page(1499, 11), page(0, 10), page(10, 20)],
        ),
        (
            "the run's last bundle leaves",
            |list| drop(list.remove(1499)),
            false,
            vec![page(1499, 11), page(0, 10), page(10, 20)],
        ),
        (
            "one leaves, one arrives inside the run: the recheck sees it",
            |list| {
                list.remove(10);
                list.insert(700, newcomer());
            },
            true,
            vec![page(0, 1000), page(0, 10), page(10, 20)],
        ),
        (
            "nothing changed: the recheck reads a page of the run, then one page",
            |_| {},
            true,
            vec![page(0, 1000), page(1499, 11)],
        ),
        (
            "fitting bundles arrive after the run",
            |list| list.insert(1500, newcomer()),
            false,
            vec![page(1499, 11)],
        ),
    ];
    for (what, change, recheck, pages) in rows {
        let (pools, observed) = compat();
        let need = Need::new(&pools, &observed, NOW);
        let mut list = queue(&[(1500, 64, 0), (100, 1, 0)]);
        let mut run = None;
        read_remembering(&list, &need, 1000, &mut run, false);
        change(&mut list);
        let (asked, read, _) = read_remembering(&list, &need, 1000, &mut run, recheck);
        assert_eq!(
            asked.get(..pages.len()),
            Some(&pages[..]),
            "{what}: {asked:?}"
        );
        let fresh = read_list(&list, &need, 1000).1;
        assert_eq!(
            fitting(&read),
            fitting(&fresh)[..fitting(&read).len()],
            "{what}"
        );
        assert_eq!(fitting(&read)[0], fitting(&fresh)[0], "{what}");
    }
}

/// A reload whose pools take bundles of the run cuts the run there at the next read, which
/// reads them from the list again; a target pool at max reads one page past the run too.
#[test]
fn a_reload_that_makes_misfits_fit_reads_them_again() {
    let list = queue(&[(1500, 64, 0), (100, 1, 0)]);
    let (pools, observed) = compat();
    let mut run = None;
    read_remembering(
        &list,
        &Need::new(&pools, &observed, NOW),
        1000,
        &mut run,
        false,
    );
    let big = vec![pool("cpu", COMPAT, 10, 64, 0)];
    let need = Need::new(&big, &observed, NOW);
    let (asked, read, _) = read_remembering(&list, &need, 1000, &mut run, false);
    assert_eq!(asked, [page(0, 10)]);
    assert_eq!(read[..], list[..10]);

    let at_max = vec![pool("cpu", TARGET, 2, 4, 0)];
    let busy = vec![jobs(2, 0)];
    let need = Need::new(&at_max, &busy, NOW);
    let mut run = None;
    read_remembering(&list, &need, 1000, &mut run, false);
    let (asked, _, _) = read_remembering(&list, &need, 1000, &mut run, false);
    assert_eq!(asked, [page(1499, 11)]);
}

/// A page's malformed bundles keep their place between the bundles read.
#[test]
fn skipped_bundles_keep_their_place() {
    let skipped = |uuid: &str, index| SkippedBundle {
        uuid: uuid.into(),
        reason: "request_cpus: not a number".into(),
        index,
    };
    let bundles = vec![StagedBundle::new("0xb"), StagedBundle::new("0xd")];
    let entries = in_order(
        bundles,
        vec![skipped("0xa", 0), skipped("0xc", 2), skipped("0xe", 4)],
    );
    let order: Vec<&str> = entries.iter().map(Entry::uuid).collect();
    assert_eq!(order, ["0xa", "0xb", "0xc", "0xd", "0xe"]);
    assert!(entries[0].is_misfit(&crate::codalab::everything));
    assert!(!entries[1].is_misfit(&crate::codalab::everything));
}

/// A server that answers no page (an outage).
struct Down;

impl Pages for Down {
    async fn page(&mut self, _: Page) -> crate::error::Result<Vec<Entry>> {
        Err(crate::error::Error::Server {
            what: "staged bundle search",
            status: 503,
            message: "Service Unavailable".into(),
        })
    }
}

/// A read that fails (the server is down for a tick) keeps the run: the tick after it asks
/// one page again, not the whole crossing.
#[test]
fn a_failed_read_keeps_the_run() {
    let (pools, observed) = compat();
    let need = Need::new(&pools, &observed, NOW);
    let list = queue(&[(1500, 64, 0), (100, 1, 0)]);
    let mut run = None;
    read_remembering(&list, &need, 1000, &mut run, false);
    let memory = Memory {
        run: &mut run,
        keywords: 0,
        recheck_every: Duration::ZERO,
    };
    assert!(at_once(read(&mut Down, &need, 1000, memory)).is_err());
    let (asked, _, _) = read_remembering(&list, &need, 1000, &mut run, false);
    assert_eq!(asked, [page(1499, 11)]);
}
