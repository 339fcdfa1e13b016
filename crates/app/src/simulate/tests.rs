//! The simulator's plot of a real simulation (core's engine on a trace): panels, scales, series.

use codalab_wm_core::simulate::{SimConfig, Workload, simulate};
use codalab_wm_core::{PoolPolicy, WorkerShape};

fn pool(name: &str, max: u32) -> PoolPolicy {
    PoolPolicy {
        max,
        min_seconds_between_workers: 0,
        max_launches_per_tick: 10,
        ..PoolPolicy::new(name, WorkerShape::from_flags(2, 0, 4096))
    }
}

fn trace(rows: &[(f64, f64)]) -> Workload {
    let mut csv = String::from("time,cpus,duration\n");
    for (time, duration) in rows {
        csv.push_str(&format!("{time},1,{duration}\n"));
    }
    Workload::parse(&csv).unwrap()
}

/// The `points` of the first element with `data-series="{series}"` as (x, y) pairs.
fn series_points(svg: &str, series: &str) -> Vec<(f64, f64)> {
    let at = svg
        .find(&format!("data-series=\"{series}\""))
        .unwrap_or_else(|| panic!("no {series} series"));
    let rest = &svg[at..];
    let start = rest.find("points=\"").unwrap() + 8;
    let end = start + rest[start..].find('"').unwrap();
    rest[start..end]
        .split(' ')
        .map(|p| {
            let (x, y) = p.split_once(',').unwrap();
            (x.parse().unwrap(), y.parse().unwrap())
        })
        .collect()
}

/// `(top, height)` of the panel named `name`.
fn panel(svg: &str, name: &str) -> (f64, f64) {
    let at = svg
        .find(&format!("data-panel=\"{name}\""))
        .unwrap_or_else(|| panic!("no {name} panel"));
    let attribute = |key: &str| -> f64 {
        let rest = &svg[at..];
        let start = rest.find(&format!(" {key}=\"")).unwrap() + key.len() + 3;
        rest[start..start + rest[start..].find('"').unwrap()]
            .parse()
            .unwrap()
    };
    (attribute("y"), attribute("height"))
}

#[test]
fn with_a_large_backlog_workers_get_their_own_scale_and_both_lines_show() {
    let rows: Vec<(f64, f64)> = (0..3000).map(|i| (f64::from(i) * 0.5, 600.0)).collect();
    let report = simulate(&trace(&rows), &[pool("cpu", 10)], &SimConfig::default()).unwrap();
    let svg = super::svg(&report);
    let (staged_top, staged_height) = panel(&svg, "staged bundles");
    let (workers_top, workers_height) = panel(&svg, "workers");
    assert!(workers_top >= staged_top + staged_height, "separate panels");
    let inside = |points: &[(f64, f64)], top: f64, height: f64| {
        points
            .iter()
            .all(|(_, y)| *y >= top - 0.1 && *y <= top + height + 0.1)
    };
    let staged = series_points(&svg, "staged");
    assert!(inside(&staged, staged_top, staged_height));
    // 10 workers against thousands of staged bundles: the workers' lines still reach the top
    // third of their own panel instead of lying flat on the time axis.
    for series in ["jobs", "active"] {
        let points = series_points(&svg, series);
        assert!(inside(&points, workers_top, workers_height), "{series}");
        let highest = points.iter().map(|(_, y)| *y).fold(f64::MAX, f64::min);
        assert!(
            highest <= workers_top + workers_height / 3.0,
            "{series} peaks at y={highest} in a panel from {workers_top} to {}",
            workers_top + workers_height
        );
    }
    // Jobs (pending + active) is a shaded area with a wide outline drawn before the thin
    // active line: where the two are equal, the outline still shows around it.
    assert!(svg.contains(r##"<polygon data-series="jobs" fill="#"##));
    let jobs_line = svg.find(r#"<polyline data-series="jobs""#).unwrap();
    let active_line = svg.find(r#"<polyline data-series="active""#).unwrap();
    assert!(jobs_line < active_line, "active is drawn on top of jobs");
    let width = |at: usize| -> f64 {
        let rest = &svg[at..];
        let start = rest.find("stroke-width=\"").unwrap() + 14;
        rest[start..start + rest[start..].find('"').unwrap()]
            .parse()
            .unwrap()
    };
    assert!(width(jobs_line) >= 2.0 * width(active_line));
}

#[test]
fn names_are_escaped_quotes_too() {
    let mut report = simulate(
        &trace(&[(0.0, 60.0)]),
        &[pool("cpu", 2)],
        &SimConfig::default(),
    )
    .unwrap();
    report.pools[0].name = "<a \"b\" & 'c'>".into();
    let svg = super::svg(&report);
    assert!(
        svg.contains("&lt;a &quot;b&quot; &amp; &#39;c&#39;&gt;"),
        "{svg}"
    );
    assert!(!svg.contains("\"b\""), "{svg}");
}
