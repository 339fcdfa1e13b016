//! Bundles that fit no pool in front of the staged queue (`CodaLabClient::staged_for` with the
//! pools' `Need`): crossed once, then remembered, so that a steady tick asks one page, as
//! upstream's does, and fitting bundles behind any number of them are found. Against the
//! in-process fake CodaLab server (`codalab-wm-fake-codalab`), which pages with `.offset` and
//! `.limit` in the order it was given, as the real server pages in creation order.

use codalab_wm_core::bundle::WorkerShape;
use codalab_wm_core::codalab::{ClientOptions, CodaLabClient, CountEvery, staged_keywords};
use codalab_wm_core::pools::{LaunchMode, Need, PoolObservation, PoolPolicy};
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_fake_codalab::{FakeBundle, FakeCodaLab};
use std::time::Duration;

const HOUR: Duration = Duration::from_secs(3600);

/// A client whose count and recheck of the misfits last an hour (no timer fires mid-test),
/// with pages of at most `page_size`.
fn client(server: &FakeCodaLab, page_size: usize) -> CodaLabClient {
    let options = ClientOptions {
        count_every: CountEvery {
            moving: HOUR,
            steady: HOUR,
        },
        recheck_misfits_every: HOUR,
        search_page_size: page_size,
        ..ClientOptions::default()
    };
    let credentials = Credentials {
        username: "alice".into(),
        password: Secret::new("alicepw"),
    };
    CodaLabClient::with_options(&server.url(), credentials, &options).unwrap()
}

/// `misfits` bundles of 64 CPUs, then `fitting` bundles of 1 CPU, oldest first.
async fn server(misfits: u64, fitting: u64) -> FakeCodaLab {
    let server = FakeCodaLab::start().await.unwrap();
    let big = |n| FakeBundle {
        cpus: 64,
        ..FakeBundle::new("alice", n)
    };
    let mut bundles: Vec<FakeBundle> = (0..misfits).map(big).collect();
    bundles.extend((misfits..misfits + fitting).map(|n| FakeBundle::new("alice", n)));
    server.set_bundles(bundles);
    server
}

/// Upstream's single pool (compat mode, 4 CPUs), idle.
fn policies() -> Vec<PoolPolicy> {
    vec![PoolPolicy {
        launch_mode: LaunchMode::Compat,
        ..PoolPolicy::new("cpu", WorkerShape::from_flags(4, 0, 8192))
    }]
}

/// The search pages the server was asked for (the `.count` left out).
fn pages(server: &FakeCodaLab) -> usize {
    let requests = server.requests();
    let search = requests.iter().filter(|r| r.path == "/rest/bundles");
    search.filter(|r| !r.query.contains(".count")).count()
}

/// 1,500 misfits in front: the first tick crosses them in 8 pages; each of 20 steady ticks
/// after asks one page (before the run was remembered: 8 at every tick) and still sees the
/// fitting bundles behind them.
#[tokio::test]
async fn misfits_in_front_cost_one_page_per_steady_tick() {
    let server = server(1500, 1000).await;
    let client = client(&server, 1000);
    let policies = policies();
    let observed = vec![PoolObservation::default()];
    let need = Need::new(&policies, &observed, Duration::from_secs(1000));
    let keywords = staged_keywords(&[], "alice", None, false);
    let first = client.staged_for(&keywords, &need).await.unwrap();
    assert_eq!((pages(&server), first.requests, first.total), (8, 9, 2500));
    for tick in 1..=20 {
        let read = client.staged_for(&keywords, &need).await.unwrap();
        assert_eq!(pages(&server), 8 + tick, "tick {tick}: one page");
        assert_eq!(read.requests, 1, "tick {tick}: the count is reused");
        assert_eq!(read.bundles.len(), 1510, "tick {tick}");
        assert!(read.bundles[1500..].iter().all(|b| b.request_cpus == 1));
    }
    let last = server.requests().pop().unwrap();
    assert!(
        last.query
            .ends_with("keywords=.limit%3D11&keywords=.offset%3D1499"),
        "{}",
        last.query
    );
}

/// Fitting bundles behind more misfits than one tick may read (100 pages; of 10 here, so
/// 1,000 bundles, as 100 pages of 1,000 reach ~94,000) are found at the third tick, each tick
/// within the page limit; before, every tick stopped at the same place and never found them.
#[tokio::test]
async fn a_fitting_bundle_behind_any_number_of_misfits_is_found() {
    let server = server(2500, 1).await;
    let client = client(&server, 10);
    let policies = policies();
    let observed = vec![PoolObservation::default()];
    let need = Need::new(&policies, &observed, Duration::from_secs(1000));
    let keywords = staged_keywords(&[], "alice", None, false);
    let mut ticks = 0;
    let found = loop {
        ticks += 1;
        let before = pages(&server);
        let read = client.staged_for(&keywords, &need).await.unwrap();
        assert!(pages(&server) - before <= 100, "tick {ticks}");
        if read.bundles.iter().any(|b| b.request_cpus == 1) || ticks == 5 {
            break read;
        }
    };
    assert_eq!(ticks, 3);
    assert_eq!((found.total, found.complete), (2501, true));
}
