//! The plot of a simulation, written by hand as SVG (polylines, axes, a legend). Each pool gets
//! two panels with their own vertical scale: its staged bundles, then its workers, so that a
//! backlog of thousands does not flatten a max of 20 workers against the time axis. In the
//! workers panel the jobs (pending + active) are a shaded area with a wide outline under the
//! active workers' line: where both are equal (nothing pending) the outline still shows. The
//! scale, the legend and the escaping are the dashboard's ([`crate::chart`]).

use super::text::human;
use crate::chart::{Key, LegendSize, YScale, escape, legend, number, open_svg};
use codalab_wm_core::simulate::SimReport;
use std::fmt::Write as _;

const WIDTH: f64 = 960.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 84.0;
/// Height of the staged-bundles panel and of the workers panel of a pool.
const STAGED_PANEL: f64 = 110.0;
const WORKERS_PANEL: f64 = 130.0;
/// Between the two panels of a pool, and between pools.
const INNER_GAP: f64 = 20.0;
const GAP: f64 = 44.0;
const POOL: f64 = STAGED_PANEL + INNER_GAP + WORKERS_PANEL;
const BOTTOM: f64 = 40.0;

const STAGED: &str = "#e6550d";
const JOBS: &str = "#3182bd";
const JOBS_FILL: &str = "#c6dbef";
const ACTIVE: &str = "#006d2c";
const MAX: &str = "#777777";

/// One panel: where it is and its vertical scale.
struct Panel {
    top: f64,
    height: f64,
    scale: YScale,
}

impl Panel {
    fn new(top: f64, height: f64, peak: u32) -> Self {
        Self {
            top,
            height,
            scale: YScale::new(f64::from(peak)),
        }
    }

    fn y_of(&self, v: u32) -> f64 {
        self.top + self.height - f64::from(v) / self.scale.max * self.height
    }

    fn bottom(&self) -> f64 {
        self.top + self.height
    }
}

/// The time axis shared by every panel.
struct TimeAxis {
    end_ms: u64,
    step: f64,
}

impl TimeAxis {
    fn x_of(&self, t: u64) -> f64 {
        LEFT + t as f64 / self.end_ms as f64 * (WIDTH - LEFT - RIGHT)
    }
}

/// The plot of `report` as a standalone SVG document.
pub fn svg(report: &SimReport) -> String {
    Plot(report).svg()
}

/// A report being drawn (its fields read through `Deref`).
struct Plot<'a>(&'a SimReport);

impl std::ops::Deref for Plot<'_> {
    type Target = SimReport;
    fn deref(&self) -> &SimReport {
        self.0
    }
}

impl Plot<'_> {
    fn svg(&self) -> String {
        let pools = self.pools.len().max(1);
        let height = TOP + pools as f64 * (POOL + GAP) - GAP + BOTTOM;
        let end_ms = self
            .series
            .times_ms
            .last()
            .copied()
            .unwrap_or(0)
            .max((self.simulated_seconds * 1000.0) as u64)
            .max(1);
        let axis = TimeAxis {
            end_ms,
            step: time_step(end_ms as f64 / 1000.0),
        };
        let mut svg = String::new();
        open_svg(&mut svg, WIDTH, height);
        let _ = writeln!(
            svg,
            r#"<text x="{LEFT}" y="20" font-size="15" font-weight="bold">cl-worker-manager simulate: {} bundles, {} simulated, seed {}</text>"#,
            self.bundles,
            human(self.simulated_seconds),
            self.seed
        );
        keys(&mut svg);
        for p in 0..self.pools.len() {
            self.pool_panels(&mut svg, p, &axis);
        }
        let _ = writeln!(
            svg,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="end" fill="#555">time since the first arrival (each point: the max over {} tick{})</text>"##,
            WIDTH - RIGHT,
            height - 6.0,
            self.series.ticks_per_row,
            if self.series.ticks_per_row == 1 {
                ""
            } else {
                "s"
            }
        );
        svg.push_str("</svg>\n");
        svg
    }

    /// Column `c` of pool `p` (0 staged, 1 jobs, 2 active) as `(time ms, value)`.
    fn column(&self, p: usize, c: usize) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.series.rows().map(move |(t, v)| (t, v[3 * p + c]))
    }

    /// The title and the two panels of pool `p`.
    fn pool_panels(&self, svg: &mut String, p: usize, axis: &TimeAxis) {
        let pool = &self.pools[p];
        let top = TOP + p as f64 * (POOL + GAP);
        let _ = writeln!(
            svg,
            r##"<text x="{LEFT}" y="{:.1}" font-weight="bold">{}</text><text x="{:.1}" y="{:.1}" fill="#555">{} · {} · min {} max {} · {} launches · wait p90 {}</text>"##,
            top - 8.0,
            escape(&pool.name),
            LEFT + 8.0 + 8.0 * pool.name.len() as f64,
            top - 8.0,
            escape(&pool.shape),
            pool.launch_mode,
            pool.min,
            pool.max,
            pool.launches,
            pool.wait.p90_seconds.map_or_else(|| "-".into(), human)
        );
        let last = p + 1 == self.pools.len();
        let staged_peak = self.column(p, 0).map(|(_, v)| v).max().unwrap_or(0);
        let staged = Panel::new(top, STAGED_PANEL, staged_peak);
        frame(svg, &staged, axis, "staged bundles", false);
        let points = self.points(p, 0, &staged, axis);
        let _ = writeln!(
            svg,
            r#"<polyline data-series="staged" fill="none" stroke="{STAGED}" stroke-width="1.5" stroke-linejoin="round" points="{points}"/>"#
        );
        let workers_peak = (1..3)
            .flat_map(|c| self.column(p, c).map(|(_, v)| v))
            .chain([pool.max])
            .max()
            .unwrap_or(0);
        // headroom: lines at max stay clear of the panel's top edge
        let headroom = workers_peak + workers_peak / 10 + 1;
        let workers = Panel::new(top + STAGED_PANEL + INNER_GAP, WORKERS_PANEL, headroom);
        frame(svg, &workers, axis, "workers", last);
        self.workers_series(svg, p, &workers, axis);
    }

    /// Jobs as a shaded area with a wide outline, active workers on top, then the max dashed.
    fn workers_series(&self, svg: &mut String, p: usize, panel: &Panel, axis: &TimeAxis) {
        let jobs = self.points(p, 1, panel, axis);
        let (first, last) = (axis.x_of(0), axis.x_of(axis.end_ms));
        let bottom = panel.bottom();
        let _ = writeln!(
            svg,
            r#"<polygon data-series="jobs" fill="{JOBS_FILL}" stroke="none" points="{first:.1},{bottom:.1} {jobs} {last:.1},{bottom:.1}"/>"#
        );
        let _ = writeln!(
            svg,
            r#"<polyline data-series="jobs" fill="none" stroke="{JOBS}" stroke-width="4" stroke-linejoin="round" points="{jobs}"/>"#
        );
        let active = self.points(p, 2, panel, axis);
        let _ = writeln!(
            svg,
            r#"<polyline data-series="active" fill="none" stroke="{ACTIVE}" stroke-width="1.5" stroke-linejoin="round" points="{active}"/>"#
        );
        let max_y = panel.y_of(self.pools[p].max);
        let _ = writeln!(
            svg,
            r#"<line data-series="max" x1="{LEFT}" y1="{max_y:.1}" x2="{:.1}" y2="{max_y:.1}" stroke="{MAX}" stroke-dasharray="6 4"/>"#,
            WIDTH - RIGHT
        );
    }

    fn points(&self, p: usize, c: usize, panel: &Panel, axis: &TimeAxis) -> String {
        let mut points = String::new();
        for (t, v) in self.column(p, c) {
            let _ = write!(points, "{:.1},{:.1} ", axis.x_of(t), panel.y_of(v));
        }
        points.trim_end().to_owned()
    }
}

/// A panel's background, its horizontal grid with labels, its vertical time grid (labelled
/// under the last panel) and its name.
fn frame(svg: &mut String, panel: &Panel, axis: &TimeAxis, name: &str, time_labels: bool) {
    let (top, plot_width) = (panel.top, WIDTH - LEFT - RIGHT);
    let _ = writeln!(
        svg,
        r##"<rect data-panel="{name}" x="{LEFT}" y="{top:.1}" width="{plot_width:.1}" height="{}" fill="#fafafa" stroke="#ccc"/>"##,
        panel.height
    );
    for value in panel.scale.ticks() {
        let y = panel.bottom() - value / panel.scale.max * panel.height;
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#e4e4e4"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="#555">{}</text>"##,
            LEFT + plot_width,
            LEFT - 6.0,
            y + 4.0,
            number(value)
        );
    }
    let mut t = 0.0;
    while t * 1000.0 <= axis.end_ms as f64 + 1e-6 {
        let x = axis.x_of((t * 1000.0) as u64);
        let _ = writeln!(
            svg,
            r##"<line x1="{x:.1}" y1="{top:.1}" x2="{x:.1}" y2="{:.1}" stroke="#e4e4e4"/>"##,
            panel.bottom()
        );
        if time_labels {
            let _ = writeln!(
                svg,
                r##"<text x="{x:.1}" y="{:.1}" text-anchor="middle" fill="#555">{}</text>"##,
                panel.bottom() + 16.0,
                axis_label(t)
            );
        }
        t += axis.step;
    }
    let (x, y) = (14.0, top + panel.height / 2.0);
    let _ = writeln!(
        svg,
        r##"<text x="{x:.1}" y="{y:.1}" transform="rotate(-90 {x:.1} {y:.1})" text-anchor="middle" fill="#555" font-style="italic">{name}</text>"##
    );
}

/// What the lines are, above the panels.
fn keys(svg: &mut String) {
    let keys = [
        (STAGED, "", "staged bundles (this pool preferred)"),
        (JOBS, "", "jobs (pending + active, shaded)"),
        (ACTIVE, "", "active workers"),
        (MAX, "6 4", "max"),
    ]
    .map(|(color, dash, label)| Key { color, dash, label });
    let size = LegendSize {
        line: 22.0,
        pad: 6.0,
        space: 20.0,
        char_width: 6.6,
    };
    legend(svg, (LEFT, 42.0), size, &keys);
}

/// A time step (seconds) giving at most 10 ticks over `seconds`.
fn time_step(seconds: f64) -> f64 {
    const STEPS: [f64; 13] = [
        60.0,
        300.0,
        600.0,
        1800.0,
        3600.0,
        7200.0,
        10800.0,
        21600.0,
        43200.0,
        86400.0,
        172_800.0,
        604_800.0,
        2_592_000.0,
    ];
    STEPS
        .iter()
        .copied()
        .find(|s| seconds / s <= 10.0)
        .unwrap_or_else(|| (seconds / 10.0 / 2_592_000.0).ceil() * 2_592_000.0)
}

/// `0`, `30m`, `1h`, `1h30m`, `2d`, `2d12h`.
fn axis_label(seconds: f64) -> String {
    let s = seconds.round() as u64;
    let (days, hours, minutes) = (s / 86400, s % 86400 / 3600, s % 3600 / 60);
    let mut label = String::new();
    for (value, unit) in [(days, "d"), (hours, "h"), (minutes, "m")] {
        if value > 0 {
            let _ = write!(label, "{value}{unit}");
        }
    }
    if label.is_empty() {
        label.push('0');
    }
    label
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_scales_are_round() {
        assert_eq!(time_step(3000.0), 300.0);
        assert_eq!(time_step(7.0 * 86400.0), 86400.0);
        assert_eq!(axis_label(0.0), "0");
        assert_eq!(axis_label(1800.0), "30m");
        assert_eq!(axis_label(5400.0), "1h30m");
        assert_eq!(axis_label(2.5 * 86400.0), "2d12h");
    }
}
