use super::history::{BUCKET_SECONDS, BUCKETS, Bucket, DECISIONS, MAX_REASONS, MAX_TEXT};
use super::*;
use crate::chart::{self, HEIGHT, Series, WIDTH, escape};
use codalab_wm_core::budget::{BudgetLimits, BudgetStatus};
use codalab_wm_core::checkin::WorkerState;
use codalab_wm_core::estimate::{BundleEstimate, StartEstimate};
use codalab_wm_core::events::{Event, EventKind};
use codalab_wm_core::policy::Reason;
use codalab_wm_core::pools::{
    BundleClass, LaunchMode, PoolDecision, PoolHealth, UnmetDemand, UnmetReason,
};
use codalab_wm_core::status::{Counter, PoolStatus, ShapeStatus, Status};
use std::time::Duration;

fn decision(pool: &str, launches: u32, reasons: Vec<Reason>) -> PoolDecision {
    PoolDecision {
        pool: pool.into(),
        launch_mode: LaunchMode::Target,
        launches,
        hedges: 0,
        stops: vec![],
        target: Some(3),
        demand: 5,
        workers_needed: 5,
        active: 1,
        pending: 1,
        stopping: 0,
        surplus: 0,
        watch: None,
        reasons,
    }
}

fn pool(name: &str) -> PoolStatus {
    PoolStatus {
        name: name.into(),
        backend: "slurm-batch".into(),
        launch_mode: LaunchMode::Target,
        shape: ShapeStatus {
            cpus: 4,
            gpus: 0,
            memory_bytes: 8 << 30,
        },
        min: 1,
        max: 3,
        tag: None,
        tag_exclusive: false,
        cost: 1.0,
        cost_per_hour: None,
        spill_after_seconds: None,
        fallback: None,
        active: 2,
        pending: 1,
        failed: 0,
        stopping: 0,
        workers: [
            (WorkerState::Starting, 1),
            (WorkerState::ReadyIdle, 0),
            (WorkerState::Busy, 2),
            (WorkerState::Lost, 0),
        ]
        .into(),
        health: PoolHealth::default(),
        backing_off_until: None,
        suspended: None,
        last_decision: Some(decision(
            name,
            0,
            vec![Reason::MaxReached { jobs: 3, max: 3 }],
        )),
        assigned: vec!["0xa".into(), "0xb".into()],
    }
}

fn counter(metric: &'static str, label: &str, value: u64) -> Counter {
    Counter {
        metric,
        pool: "cpu".into(),
        label: label.into(),
        value,
    }
}

/// A manager 2 hours in, one pool at its max with 2 bundles waiting, a budget, two events.
fn fixture() -> Status {
    Status {
        uptime_seconds: 7200,
        ticks: 1440,
        last_error: None,
        last_success_seconds: Some(7195),
        last_tick_duration_seconds: 0.25,
        sleep_time_seconds: 5.0,
        staged: 4,
        pools: vec![pool("cpu")],
        unserved: vec![],
        unmet: vec![UnmetDemand {
            pool: Some("cpu".into()),
            class: BundleClass {
                cpus: 1,
                gpus: 0,
                memory_bytes: 256 << 20,
                queue: String::new(),
            },
            bundles: 2,
            reason: UnmetReason::MaxReached { jobs: 3, max: 3 },
        }],
        recent_failures: vec![],
        counters: vec![
            counter("launches", "started", 7),
            counter("launches", "failed", 1),
        ],
        events: vec![
            Event::new(
                EventKind::WorkerLaunched {
                    pool: "cpu".into(),
                    job_id: "42".into(),
                },
                100,
                1_795_000_000,
            ),
            Event::new(
                EventKind::LaunchFailed {
                    pool: "cpu".into(),
                    error: "sbatch: error: <script>alert(1)</script>".into(),
                },
                200,
                1_795_000_000,
            ),
        ],
        budgets: vec![BudgetStatus {
            scope: "cpu".into(),
            worker_hours: 2.5,
            cost: None,
            limits: BudgetLimits {
                max_worker_hours_per_day: Some(10.0),
                max_cost_per_day: None,
            },
            reached: None,
            resumes_at_seconds: None,
        }],
        started_unix_seconds: 1_795_000_000,
        estimates: vec![
            BundleEstimate::new(
                "0xa",
                StartEstimate::WorkerCheckin {
                    pool: "cpu".into(),
                    job: Some("42".into()),
                    seconds: 25,
                    forecast: false,
                },
            ),
            BundleEstimate::new(
                "0xb",
                StartEstimate::AfterRuns {
                    pool: "cpu".into(),
                    ahead: 1,
                    seconds: 300,
                },
            ),
        ],
        scored: Vec::new(),
    }
}

#[test]
fn the_page_says_when_each_bundle_is_expected_to_start() {
    let html = render(&fixture(), &History::new(), &page());
    assert_eq!(
        text_after(&html, "<h2 id=\"estimates\""),
        "When they start "
    );
    assert!(html.contains("(1 after_runs, 1 worker_checkin)"), "{html}");
    assert_eq!(
        text_after(
            &html,
            "<tr data-bundle=\"0xa\" data-kind=\"worker_checkin\"><td><code>0xa</code></td><td"
        ),
        "in ~25 s, when job 42 of cpu checks in"
    );
    assert!(
        html.contains("in ~300 s, when runs on the workers of cpu end (1 ahead of it)"),
        "{html}"
    );
}

#[test]
fn a_pool_shows_its_price_and_how_long_a_wait_it_accepts() {
    let mut status = fixture();
    status.pools[0].cost_per_hour = Some(0.4);
    status.pools[0].spill_after_seconds = Some(600);
    let html = render(&status, &History::new(), &page());
    assert_eq!(
        text_after(&html, "<span data-field=\"price\""),
        "0.4 an hour"
    );
    assert_eq!(
        text_after(&html, "<span data-field=\"spill\""),
        "spills after 10 min"
    );
    // A Spot pool on its fallback says where its launches go, and why in the tooltip.
    status.pools[0].fallback = Some(codalab_wm_core::status::FallbackStatus {
        pool: "standard".into(),
        capacity: codalab_wm_core::pools::fallback::CapacityState::Fallback {
            since_seconds: 6000,
            retry_at_seconds: 9000,
            why: "3 capacity events in 30 min, the last: job 9 preempted".into(),
        },
    });
    let html = render(&status, &History::new(), &page());
    assert!(
        html.contains("<span data-field=\"capacity\" class=\"muted\" title=\"3 capacity events in 30 min, the last: job 9 preempted; for 20m 00s, one launch tries this pool again in 30m 00s\">launches go to standard</span>"),
        "{html}"
    );
    // Unset: nothing said (a free pool that takes any wait).
    let html = render(&fixture(), &History::new(), &page());
    assert!(!html.contains("data-field=\"price\""), "{html}");
    assert!(!html.contains("data-field=\"spill\""), "{html}");
    assert!(!html.contains("data-field=\"capacity\""), "{html}");
}

fn page() -> Page {
    Page::new(Duration::from_secs(5), 1_795_007_201)
}

/// The text of the element that starts with `start` (up to the next `<`).
fn text_after<'a>(html: &'a str, start: &str) -> &'a str {
    let from = html
        .find(start)
        .unwrap_or_else(|| panic!("no {start} in {html}"))
        + start.len();
    let rest = &html[from..];
    let rest = &rest[rest.find('>').unwrap() + 1..];
    &rest[..rest.find('<').unwrap()]
}

#[test]
fn the_history_keeps_six_hours_of_minutes_however_long_it_runs() {
    let mut history = History::new();
    let mut status = fixture();
    // Ten hours of 5-second ticks.
    for tick in 1..=7200u64 {
        status.ticks = tick;
        status.uptime_seconds = tick * 5;
        history.observe(&status);
        assert!(history.buckets().len() <= BUCKETS);
    }
    assert_eq!(history.buckets().len(), BUCKETS);
    let minutes: Vec<u64> = history.buckets().map(|b| b.minute).collect();
    assert_eq!(minutes.first(), Some(&(600 - BUCKETS as u64 + 1)));
    assert_eq!(minutes.last(), Some(&600));
    assert!(minutes.windows(2).all(|w| w[1] == w[0] + 1));
    // What the module doc promises an hour costs.
    assert_eq!(std::mem::size_of::<Bucket>(), 48);
    assert_eq!(BUCKET_SECONDS, 60);
}

#[test]
fn buckets_sum_launches_and_failures_and_keep_the_last_levels() {
    let mut history = History::new();
    let mut status = fixture();
    let ticks = [
        // (tick, uptime, launches started, launches failed, busy)
        (1, 10, 7, 1, 2),
        (2, 20, 9, 1, 3),
        (2, 25, 12, 4, 9), // the same tick again: ignored
        (3, 59, 10, 3, 1),
        (4, 61, 11, 3, 4),
    ];
    for (tick, uptime, started, failed, busy) in ticks {
        status.ticks = tick;
        status.uptime_seconds = uptime;
        status.counters = vec![
            counter("launches", "started", started),
            counter("launches", "failed", failed),
        ];
        status.pools[0].workers.insert(WorkerState::Busy, busy);
        status.pools[0]
            .workers
            .insert(WorkerState::Vanished, busy / 2);
        history.observe(&status);
    }
    let buckets: Vec<Bucket> = history.buckets().copied().collect();
    assert_eq!(buckets.len(), 2);
    assert_eq!((buckets[0].minute, buckets[1].minute), (0, 1));
    // The first snapshot's totals count (the manager had just started), then deltas.
    assert_eq!((buckets[0].launches, buckets[0].failures), (10, 3));
    assert_eq!((buckets[1].launches, buckets[1].failures), (1, 0));
    assert_eq!((buckets[0].busy, buckets[1].busy), (1, 4));
    assert_eq!((buckets[0].vanished, buckets[1].vanished), (0, 2));
    assert_eq!(
        (buckets[0].staged, buckets[0].pending, buckets[0].starting),
        (4, 1, 1)
    );
}

#[test]
fn an_unchanged_decision_is_one_record_and_the_records_are_bounded() {
    let mut history = History::new();
    let mut status = fixture();
    for tick in 1..=5 {
        status.ticks = tick;
        status.uptime_seconds = tick * 10;
        status.last_success_seconds = Some(tick * 10);
        let waited = Reason::RateLimited {
            waited_seconds: tick,
            min_seconds: 60,
        };
        status.pools[0].last_decision = Some(decision("cpu", 0, vec![waited]));
        history.observe(&status);
    }
    let records: Vec<_> = history.decisions().collect();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(
        (records[0].since_seconds, records[0].last_seconds),
        (10, 50)
    );
    assert_eq!(records[0].reasons[0].0, "rate_limited");
    assert!(
        records[0].reasons[0].1.contains("waited 5 < 60"),
        "the latest figures: {records:?}"
    );
    let html = render(&status, &history, &page());
    assert!(html.contains("<td>since 40s ago (current)</td>"), "{html}");
    status.ticks += 1;
    status.last_success_seconds = Some(60);
    status.uptime_seconds = 60;
    status.pools[0].last_decision = Some(decision("cpu", 1, vec![]));
    history.observe(&status);
    let html = render(&status, &history, &page());
    assert!(html.contains("<td>0s ago</td>"), "{html}");
    assert!(html.contains("<td>50s ago, for 40s</td>"), "{html}");
    for tick in 6..200 {
        status.ticks = tick;
        let error = format!("listing failed {tick}: {}", "x".repeat(1000));
        status.pools[0].last_decision = Some(decision(
            "cpu",
            (tick % 2) as u32,
            vec![Reason::Unobserved { error }],
        ));
        history.observe(&status);
    }
    let many = (0..20).map(|i| Reason::PendingTimeout {
        job_id: i.to_string(),
        pending_seconds: 900,
        timeout_seconds: 600,
    });
    status.ticks += 1;
    status.pools[0].last_decision = Some(decision("cpu", 9, many.collect()));
    history.observe(&status);
    assert_eq!(
        history.decisions().last().unwrap().reasons.len(),
        MAX_REASONS
    );
    assert_eq!(history.decisions().len(), DECISIONS);
    let last = history.decisions().nth(DECISIONS - 2).unwrap();
    assert!(
        last.reasons[0].1.len() <= MAX_TEXT + '…'.len_utf8(),
        "{last:?}"
    );
    assert!(last.reasons[0].1.contains("listing failed 199"), "{last:?}");
}

#[test]
fn the_page_has_every_section_and_the_fixtures_numbers() {
    let status = fixture();
    let mut history = History::new();
    history.observe(&status);
    let html = render(&status, &history, &page());
    for id in [
        "id=\"health\"",
        "id=\"pools\"",
        "id=\"unmet\"",
        "id=\"budget-table\"",
        "id=\"chart-workers\"",
        "id=\"chart-staged\"",
        "id=\"chart-launches\"",
        "id=\"decisions\"",
        "id=\"events\"",
    ] {
        assert!(html.contains(id), "{id} missing:\n{html}");
    }
    assert!(html.contains("<meta http-equiv=\"refresh\" content=\"5\">"));
    assert!(!html.contains("<script"), "no script, no CDN");
    assert!(
        !html.contains("http://") || !html.contains("src="),
        "nothing loaded"
    );
    let row = &html[html.find("<tr data-pool=\"cpu\">").expect("the pool's row")..];
    let fields = [
        ("min", "1"),
        ("max", "3"),
        ("target", "3"),
        ("starting", "1"),
        ("ready", "0"),
        ("busy", "2"),
        ("lost", "0"),
        ("pending", "1"),
        ("active", "2"),
        ("assigned", "2"),
        ("backoff", "no"),
        ("budget", "2.50 / 10 worker-h"),
    ];
    for (field, value) in fields {
        assert_eq!(
            text_after(row, &format!("data-field=\"{field}\"")),
            value,
            "{field}"
        );
    }
    assert_eq!(text_after(&html, "<b data-field=\"staged\""), "4");
    assert!(html.contains("<tr data-reason=\"max_reached\"><td>cpu</td><td class=\"n\" data-field=\"bundles\">2</td>"), "{html}");
    assert!(
        html.contains("the pool is at its max (3 jobs, max 3)"),
        "{html}"
    );
    assert!(
        html.contains(
            "<code>max_reached</code> don&#39;t launch because too many workers already (3 &gt;= 3)"
        ),
        "{html}"
    );
    assert!(
        html.contains("class=\"warning\" data-event=\"launch_failed\""),
        "{html}"
    );
    assert!(
        html.contains("class=\"info\" data-event=\"worker_launched\""),
        "{html}"
    );
    assert!(html.contains("since 2026-11-18 11:06:40 UTC"), "{html}");
    assert!(!html.contains("id=\"stale\""), "the snapshot is fresh");
}

#[test]
fn everything_from_outside_is_escaped() {
    let mut status = fixture();
    status.last_error = Some("server said <script>alert('x')</script> & more".into());
    status.pools[0].name = "<img src=x onerror=alert(1)>".into();
    status.unserved = vec![codalab_wm_core::pools::UnservedBundle {
        uuid: "0x<b>".into(),
        reason: Reason::NoFittingPool,
        pools: vec![codalab_wm_core::pools::PoolVerdict {
            pool: "cpu".into(),
            reason: Reason::Misfit {
                detail: "request_cpus=64 > worker cpus=4 <i>".into(),
            },
        }],
    }];
    let html = render(&status, &History::new(), &page());
    assert!(!html.contains("<script>"), "{html}");
    assert!(!html.contains("<img"), "{html}");
    assert!(
        html.contains("server said &lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; more")
    );
    assert!(html.contains("sbatch: error: &lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(html.contains("data-pool=\"&lt;img src=x onerror=alert(1)&gt;\""));
    assert!(
        html.contains("<summary>The bundle no pool takes this tick"),
        "{html}"
    );
    assert!(html.contains("<tr data-bundle=\"0x&lt;b&gt;\" data-reason=\"no_fitting_pool\">"));
    assert!(
        html.contains("cpu: request_cpus=64 &gt; worker cpus=4 &lt;i&gt;"),
        "{html}"
    );
    assert_eq!(escape("a\"b'c"), "a&quot;b&#39;c");
}

#[test]
fn an_old_snapshot_and_a_reached_budget_are_flagged() {
    let mut status = fixture();
    status.budgets[0].reached = Some("10.0 of 10 worker-hours".into());
    status.budgets[0].resumes_at_seconds = Some(7200 + 3600);
    status.pools[0].backing_off_until = Some(7500);
    status.pools[0].health.failures = 2;
    let late = Page::new(Duration::from_secs(5), 1_795_007_200 + 600);
    let html = render(&status, &History::new(), &late);
    assert!(
        html.contains("id=\"stale\">This snapshot is 10m 00s old"),
        "{html}"
    );
    assert!(
        html.contains("reached: 10.0 of 10 worker-hours; launches resume in 1h 00m"),
        "{html}"
    );
    assert!(
        html.contains("backing off, 5m 00s left (2 failures)"),
        "{html}"
    );
}

#[test]
fn a_chart_has_one_line_per_series_inside_its_view_box() {
    let series = [
        Series {
            name: "busy",
            color: "#00f",
            points: vec![(0.0, 0.0), (60.0, 5.0), (120.0, 2.0)],
        },
        Series {
            name: "lost",
            color: "#f00",
            points: vec![(-30.0, 1.0), (120.0, 0.0)],
        },
    ];
    let svg = chart::line_chart("c", "t", &series, (0.0, 120.0), &|x| format!("{x}"));
    assert_eq!(svg.matches("<polyline").count(), 2, "{svg}");
    assert!(svg.contains(&format!("viewBox=\"0 0 {WIDTH} {HEIGHT}\"")));
    for line in svg.split("<polyline").skip(1) {
        let points = line
            .split("points=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        for point in points.split(' ') {
            let (x, y) = point.split_once(',').unwrap();
            let (x, y): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
            assert!(
                (0.0..=WIDTH).contains(&x) && (0.0..=HEIGHT).contains(&y),
                "{point}"
            );
        }
    }
    // The largest value is at the top of the plot, zero at its bottom.
    assert!(
        svg.contains("points=\"40.0,130.0 215.0,10.0 390.0,82.0\""),
        "{svg}"
    );
}

#[test]
fn dates_are_utc() {
    assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
    assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
    assert_eq!(utc(1_795_000_100), "2026-11-18 11:08:20 UTC");
}

/// `advise`'s last answer: shown when saved, with its time, its words escaped, and its plot as
/// a data: image (an SVG read from the state dir runs no script there); absent otherwise.
#[test]
fn the_page_shows_advises_last_answer_escaped_and_its_plot_as_an_image() {
    use base64::Engine as _;
    let advice = crate::simulate::SavedAdvice {
        at_unix_seconds: 1_796_000_000,
        summary: "Recommended: set cpu.max = 20 <script>alert(1)</script>".into(),
        svg: "<svg xmlns=\"http://www.w3.org/2000/svg\"><script>alert(2)</script></svg>".into(),
    };
    let (status, history) = (fixture(), History::new());
    let html = render_with_advice(&status, &history, &page(), Some(&advice));
    let section = &html[html.find("<h2 id=\"advice\">").expect("an Advice section")..];
    assert!(section.contains("at 2026-11-30 00:53:20 UTC"), "{section}");
    assert!(
        section.contains("set cpu.max = 20 &lt;script&gt;"),
        "{section}"
    );
    let encoded = base64::engine::general_purpose::STANDARD.encode(&advice.svg);
    assert!(section.contains("<img class=\"chart\""));
    assert!(section.contains(&format!("src=\"data:image/svg+xml;base64,{encoded}\"")));
    assert!(!html.contains("<script"), "no script reaches the page");
    assert!(!render(&status, &history, &page()).contains("id=\"advice\""));
}
