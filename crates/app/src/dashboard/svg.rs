//! Line charts as inline SVG, drawn by hand: a frame, a y scale from 0 to the largest value,
//! time labels, one `<polyline>` per series (a dot on its last point, so that one
//! point shows) and a legend. No script, no external file.

use super::escape;
use std::fmt::Write as _;

/// Width of a chart (SVG user units; the page scales it to the column).
pub const WIDTH: f64 = 400.0;
/// Height of a chart.
pub const HEIGHT: f64 = 170.0;
const LEFT: f64 = 40.0;
const RIGHT: f64 = 10.0;
const TOP: f64 = 10.0;
const BOTTOM: f64 = 40.0;

/// One line: its name, its colour, and `(x, y)` points with x in seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// The legend's text, and the `data-series` attribute.
    pub name: &'static str,
    /// A CSS colour.
    pub color: &'static str,
    /// The points, x increasing.
    pub points: Vec<(f64, f64)>,
}

/// A chart of `series` over x from `x_range.0` to `x_range.1` (seconds); `x_label` turns an x
/// into the text under the axis (e.g. `-3h`).
pub fn chart(
    id: &str,
    title: &str,
    series: &[Series],
    x_range: (f64, f64),
    x_label: &dyn Fn(f64) -> String,
) -> String {
    let y_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(1.0_f64, f64::max)
        .ceil();
    let scale = Scale { x_range, y_max };
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<svg id="{id}" class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{}" xmlns="http://www.w3.org/2000/svg">"#,
        escape(title)
    );
    frame(&mut out, &scale, x_label);
    for s in series {
        let points: Vec<String> = s
            .points
            .iter()
            .map(|&p| {
                let (x, y) = scale.at(p);
                format!("{x:.1},{y:.1}")
            })
            .collect();
        let _ = write!(
            out,
            r#"<polyline data-series="{}" fill="none" stroke="{}" stroke-width="2" points="{}"/>"#,
            escape(s.name),
            s.color,
            points.join(" ")
        );
        if let Some(&last) = s.points.last() {
            let (x, y) = scale.at(last);
            let _ = write!(
                out,
                r#"<circle cx="{x:.1}" cy="{y:.1}" r="3" fill="{}"/>"#,
                s.color
            );
        }
    }
    legend(&mut out, series);
    out.push_str("</svg>");
    out
}

/// Maps data to the plot area.
struct Scale {
    x_range: (f64, f64),
    y_max: f64,
}

impl Scale {
    fn at(&self, (x, y): (f64, f64)) -> (f64, f64) {
        let (x0, x1) = self.x_range;
        let fx = if x1 > x0 { (x - x0) / (x1 - x0) } else { 1.0 };
        let fy = (y / self.y_max).clamp(0.0, 1.0);
        (
            LEFT + fx.clamp(0.0, 1.0) * (WIDTH - LEFT - RIGHT),
            TOP + (1.0 - fy) * (HEIGHT - TOP - BOTTOM),
        )
    }
}

/// The axes, the y scale (0, half, max) and five time labels.
fn frame(out: &mut String, scale: &Scale, x_label: &dyn Fn(f64) -> String) {
    let bottom = HEIGHT - BOTTOM;
    let _ = write!(
        out,
        r##"<rect x="{LEFT}" y="{TOP}" width="{}" height="{}" fill="#fafafa" stroke="#ccc"/>"##,
        WIDTH - LEFT - RIGHT,
        bottom - TOP
    );
    for fraction in [0.0, 0.5, 1.0] {
        let value = scale.y_max * fraction;
        let (_, y) = scale.at((scale.x_range.0, value));
        let _ = write!(
            out,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#e4e4e4"/><text x="{}" y="{:.1}" text-anchor="end" class="axis">{}</text>"##,
            WIDTH - RIGHT,
            LEFT - 4.0,
            y + 4.0,
            number(value)
        );
    }
    let (x0, x1) = scale.x_range;
    for i in 0..=4 {
        let x = x0 + (x1 - x0) * f64::from(i) / 4.0;
        let (px, _) = scale.at((x, 0.0));
        let anchor = match i {
            0 => "start",
            4 => "end",
            _ => "middle",
        };
        let _ = write!(
            out,
            r#"<text x="{px:.1}" y="{:.1}" text-anchor="{anchor}" class="axis">{}</text>"#,
            bottom + 14.0,
            escape(&x_label(x))
        );
    }
}

/// Coloured squares with the series' names, under the time labels.
fn legend(out: &mut String, series: &[Series]) {
    let y = HEIGHT - 10.0;
    let mut x = LEFT;
    for s in series {
        let _ = write!(
            out,
            r#"<rect x="{x:.1}" y="{:.1}" width="10" height="10" fill="{}"/><text x="{:.1}" y="{y:.1}" class="legend">{}</text>"#,
            y - 9.0,
            s.color,
            x + 14.0,
            escape(s.name)
        );
        x += 24.0 + 7.0 * s.name.chars().count() as f64;
    }
}

/// `3`, `2.5`: whole numbers without decimals.
fn number(value: f64) -> String {
    if value.fract() == 0.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}
