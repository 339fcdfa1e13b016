//! The plot of a simulation, written by hand as SVG (polylines, axes, a legend): one panel per
//! pool with its staged bundles, its jobs (pending + active), its active workers and its max.

use super::report::{SimReport, human};
use std::fmt::Write as _;

const WIDTH: f64 = 960.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 84.0;
const PANEL: f64 = 170.0;
const GAP: f64 = 44.0;
const BOTTOM: f64 = 40.0;

const STAGED: &str = "#e6550d";
const JOBS: &str = "#3182bd";
const ACTIVE: &str = "#31a354";
const MAX: &str = "#777777";

impl SimReport {
    /// The plot as a standalone SVG document.
    pub fn to_svg(&self) -> String {
        let pools = self.pools.len().max(1);
        let height = TOP + pools as f64 * (PANEL + GAP) - GAP + BOTTOM;
        let plot_width = WIDTH - LEFT - RIGHT;
        let end_ms = self
            .series
            .times_ms
            .last()
            .copied()
            .unwrap_or(0)
            .max((self.simulated_seconds * 1000.0) as u64)
            .max(1);
        let mut svg = String::new();
        let _ = writeln!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            svg,
            r#"<text x="{LEFT}" y="20" font-size="15" font-weight="bold">cl-worker-manager simulate: {} bundles, {} simulated, seed {}</text>"#,
            self.bundles,
            human(self.simulated_seconds),
            self.seed
        );
        legend(&mut svg);
        let x_of = |t: u64| LEFT + t as f64 / end_ms as f64 * plot_width;
        let time_step = time_step(end_ms as f64 / 1000.0);
        for (p, pool) in self.pools.iter().enumerate() {
            let top = TOP + p as f64 * (PANEL + GAP);
            let column = |c: usize| self.series.rows().map(move |(t, v)| (t, v[3 * p + c]));
            let peak = (0..3)
                .flat_map(|c| column(c).map(|(_, v)| v))
                .chain([pool.max])
                .max()
                .unwrap_or(0);
            let (step, y_max) = y_scale(peak);
            let y_of = |v: u32| top + PANEL - f64::from(v) / y_max * PANEL;
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
            let _ = writeln!(
                svg,
                r##"<rect x="{LEFT}" y="{top:.1}" width="{plot_width:.1}" height="{PANEL}" fill="#fafafa" stroke="#ccc"/>"##
            );
            let mut value = 0.0;
            while value <= y_max + 1e-9 {
                let y = top + PANEL - value / y_max * PANEL;
                let _ = writeln!(
                    svg,
                    r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#e4e4e4"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="#555">{value}</text>"##,
                    LEFT + plot_width,
                    LEFT - 6.0,
                    y + 4.0
                );
                value += step;
            }
            let mut t = 0.0;
            while t * 1000.0 <= end_ms as f64 + 1e-6 {
                let x = x_of((t * 1000.0) as u64);
                let _ = writeln!(
                    svg,
                    r##"<line x1="{x:.1}" y1="{top:.1}" x2="{x:.1}" y2="{:.1}" stroke="#e4e4e4"/>"##,
                    top + PANEL
                );
                if p + 1 == self.pools.len() {
                    let _ = writeln!(
                        svg,
                        r##"<text x="{x:.1}" y="{:.1}" text-anchor="middle" fill="#555">{}</text>"##,
                        top + PANEL + 16.0,
                        axis_label(t)
                    );
                }
                t += time_step;
            }
            let max_y = y_of(pool.max);
            let _ = writeln!(
                svg,
                r#"<line x1="{LEFT}" y1="{max_y:.1}" x2="{:.1}" y2="{max_y:.1}" stroke="{MAX}" stroke-dasharray="6 4"/>"#,
                LEFT + plot_width
            );
            for (c, colour, width) in [(0, STAGED, 1.5), (1, JOBS, 2.0), (2, ACTIVE, 1.2)] {
                let mut points = String::new();
                for (t, v) in column(c) {
                    let _ = write!(points, "{:.1},{:.1} ", x_of(t), y_of(v));
                }
                let _ = writeln!(
                    svg,
                    r#"<polyline fill="none" stroke="{colour}" stroke-width="{width}" stroke-linejoin="round" points="{}"/>"#,
                    points.trim_end()
                );
            }
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
}

fn legend(svg: &mut String) {
    let items = [
        (STAGED, "", "staged bundles (this pool preferred)"),
        (JOBS, "", "jobs (pending + active)"),
        (ACTIVE, "", "active workers"),
        (MAX, "6 4", "max"),
    ];
    let mut x = LEFT;
    for (colour, dash, label) in items {
        let _ = writeln!(
            svg,
            r#"<line x1="{x:.1}" y1="38" x2="{:.1}" y2="38" stroke="{colour}" stroke-width="2.5" stroke-dasharray="{dash}"/><text x="{:.1}" y="42">{label}</text>"#,
            x + 22.0,
            x + 28.0
        );
        x += 48.0 + 6.6 * label.len() as f64;
    }
}

/// A tick step (1, 2 or 5 times a power of ten) giving at most 5 ticks, and the axis top.
fn y_scale(peak: u32) -> (f64, f64) {
    let peak = f64::from(peak.max(1));
    let mut step = 1.0;
    'outer: loop {
        for factor in [1.0, 2.0, 5.0] {
            if peak / (step * factor) <= 5.0 {
                step *= factor;
                break 'outer;
            }
        }
        step *= 10.0;
    }
    (step, (peak / step).ceil() * step)
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

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_are_round() {
        assert_eq!(y_scale(0), (1.0, 1.0));
        assert_eq!(y_scale(7), (2.0, 8.0));
        assert_eq!(y_scale(20), (5.0, 20.0));
        assert_eq!(y_scale(130), (50.0, 150.0));
        assert_eq!(time_step(3000.0), 300.0);
        assert_eq!(time_step(7.0 * 86400.0), 86400.0);
        assert_eq!(axis_label(0.0), "0");
        assert_eq!(axis_label(1800.0), "30m");
        assert_eq!(axis_label(5400.0), "1h30m");
        assert_eq!(axis_label(2.5 * 86400.0), "2d12h");
    }
}
