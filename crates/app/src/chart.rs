//! The one chart module of the application, drawn by hand as SVG (no script, no external
//! file): what the dashboard's charts and the simulator's plot share, one y scale
//! ([`YScale`], round steps from 0), one legend ([`legend`]), one number format ([`number`])
//! and one [`escape`] (quotes too); and the dashboard's line chart ([`line_chart`]: a frame,
//! time labels, one `<polyline>` per series with a dot on its last point, so that one point
//! shows). The simulator's panels are laid out in `simulate/svg.rs` on the same parts.

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

/// Opens a standalone SVG document of `width` × `height` on a white background (the plots'
/// files: the simulator's and `advise`'s), 12 px sans-serif.
pub fn open_svg(out: &mut String, width: f64, height: f64) {
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
}

/// `text` with `&`, `<`, `>`, `"` and `'` escaped, for HTML and SVG text and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// A vertical scale from 0: a step of 1, 2 or 5 times a power of ten giving at most 5 steps
/// up to the peak, and the top of the axis, a whole number of steps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct YScale {
    /// Between two grid lines.
    pub step: f64,
    /// The top of the axis (at least 1).
    pub max: f64,
}

impl YScale {
    /// The scale for values from 0 to `peak`.
    pub fn new(peak: f64) -> Self {
        let peak = peak.max(1.0);
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
        Self {
            step,
            max: (peak / step).ceil() * step,
        }
    }

    /// The values of the grid lines: 0, one step, …, the top.
    pub fn ticks(&self) -> impl Iterator<Item = f64> {
        let (step, steps) = (self.step, (self.max / self.step).round() as u32);
        (0..=steps).map(move |i| f64::from(i) * step)
    }

    /// Where `value` is between 0 (the axis) and 1 (the top), clamped.
    pub fn fraction(&self, value: f64) -> f64 {
        (value / self.max).clamp(0.0, 1.0)
    }
}

/// One entry of a legend: a line of `color` (dashed when `dash` is an SVG dash array) and its
/// label.
#[derive(Debug, Clone, Copy)]
pub struct Key<'a> {
    /// A CSS colour.
    pub color: &'a str,
    /// `stroke-dasharray`: empty for a solid line.
    pub dash: &'a str,
    /// The text.
    pub label: &'a str,
}

/// The sizes of a legend: its line's length, the space before the text and after it, and the
/// width of a character of its font.
#[derive(Debug, Clone, Copy)]
pub struct LegendSize {
    /// Length of the line.
    pub line: f64,
    /// Between the line and its label.
    pub pad: f64,
    /// After a label, before the next line.
    pub space: f64,
    /// Width of one character.
    pub char_width: f64,
}

/// The width of one key of a legend: its line, label and the space after it.
fn key_width(size: LegendSize, key: &Key<'_>) -> f64 {
    size.line + size.pad + size.space + size.char_width * key.label.len() as f64
}

/// The width of a legend on one row.
pub fn legend_width(size: LegendSize, keys: &[Key<'_>]) -> f64 {
    keys.iter().map(|key| key_width(size, key)).sum()
}

/// A legend on one row from `x`, its text on the baseline `y`: for each key a short line and
/// the label, one element a line.
pub fn legend(out: &mut String, (x, y): (f64, f64), size: LegendSize, keys: &[Key<'_>]) {
    let mut x = x;
    for key in keys {
        let _ = writeln!(
            out,
            r#"<line x1="{x:.1}" y1="{}" x2="{:.1}" y2="{}" stroke="{}" stroke-width="2.5" stroke-dasharray="{}"/><text x="{:.1}" y="{y}">{}</text>"#,
            y - 4.0,
            x + size.line,
            y - 4.0,
            key.color,
            key.dash,
            x + size.line + size.pad,
            escape(key.label)
        );
        x += key_width(size, key);
    }
}

/// A chart of `series` over x from `x_range.0` to `x_range.1` (seconds); `x_label` turns an x
/// into the text under the axis (e.g. `-3h`).
pub fn line_chart(
    id: &str,
    title: &str,
    series: &[Series],
    x_range: (f64, f64),
    x_label: &dyn Fn(f64) -> String,
) -> String {
    let peak = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0_f64, f64::max);
    let scale = Scale {
        x_range,
        y: YScale::new(peak),
    };
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
    series_legend(&mut out, series);
    out.push_str("</svg>");
    out
}

/// Maps data to the plot area.
struct Scale {
    x_range: (f64, f64),
    y: YScale,
}

impl Scale {
    fn at(&self, (x, y): (f64, f64)) -> (f64, f64) {
        let (x0, x1) = self.x_range;
        let fx = if x1 > x0 { (x - x0) / (x1 - x0) } else { 1.0 };
        let fy = self.y.fraction(y);
        (
            LEFT + fx.clamp(0.0, 1.0) * (WIDTH - LEFT - RIGHT),
            TOP + (1.0 - fy) * (HEIGHT - TOP - BOTTOM),
        )
    }
}

/// The axes, the y scale's grid and five time labels.
fn frame(out: &mut String, scale: &Scale, x_label: &dyn Fn(f64) -> String) {
    let bottom = HEIGHT - BOTTOM;
    let _ = write!(
        out,
        r##"<rect x="{LEFT}" y="{TOP}" width="{}" height="{}" fill="#fafafa" stroke="#ccc"/>"##,
        WIDTH - LEFT - RIGHT,
        bottom - TOP
    );
    for value in scale.y.ticks() {
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

/// The series' names under the time labels, in the dashboard's small font.
fn series_legend(out: &mut String, series: &[Series]) {
    let keys = series_keys(series);
    let size = SERIES_LEGEND;
    legend(out, (legend_start(size, &keys), HEIGHT - 10.0), size, &keys);
}

/// The legend's keys of `series`: a solid line of its colour and its name.
fn series_keys(series: &[Series]) -> Vec<Key<'_>> {
    series
        .iter()
        .map(|s| Key {
            color: s.color,
            dash: "",
            label: s.name,
        })
        .collect()
}

/// The sizes of a series legend, in the dashboard's small font.
const SERIES_LEGEND: LegendSize = LegendSize {
    line: 14.0,
    pad: 4.0,
    space: 10.0,
    char_width: 6.0,
};

/// Where a series legend starts: under the plot's left edge, or further left when it would
/// not fit before the chart's right edge (the workers chart has six series).
fn legend_start(size: LegendSize, keys: &[Key<'_>]) -> f64 {
    LEFT.min(WIDTH - legend_width(size, keys)).max(0.0)
}

/// `3`, `2.5`: whole numbers without decimals.
pub fn number(value: f64) -> String {
    if value.fract() == 0.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_are_round() {
        let scale = |peak| {
            let s = YScale::new(peak);
            (s.step, s.max)
        };
        assert_eq!(scale(0.0), (1.0, 1.0));
        assert_eq!(scale(7.0), (2.0, 8.0));
        assert_eq!(scale(20.0), (5.0, 20.0));
        assert_eq!(scale(130.0), (50.0, 150.0));
        assert_eq!(
            YScale::new(7.0).ticks().collect::<Vec<_>>(),
            [0.0, 2.0, 4.0, 6.0, 8.0]
        );
    }

    #[test]
    fn everything_is_escaped_quotes_too() {
        assert_eq!(
            escape("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
        let mut out = String::new();
        let size = LegendSize {
            line: 10.0,
            pad: 2.0,
            space: 4.0,
            char_width: 5.0,
        };
        let key = Key {
            color: "#000",
            dash: "",
            label: "a\"b",
        };
        legend(&mut out, (0.0, 20.0), size, &[key]);
        assert!(out.contains(">a&quot;b</text>"), "{out}");
    }

    /// The dashboard's workers chart has six series: its legend ends within the chart.
    #[test]
    fn a_long_series_legend_moves_left_to_fit() {
        let names = ["starting", "ready", "busy", "vanished", "lost", "pending"];
        let series: Vec<Series> = names
            .into_iter()
            .map(|name| Series {
                name,
                color: "#000",
                points: Vec::new(),
            })
            .collect();
        let mut out = String::new();
        series_legend(&mut out, &series);
        let keys = series_keys(&series);
        let size = SERIES_LEGEND;
        let start = legend_start(size, &keys);
        assert!(start < LEFT, "{start}");
        assert!(start + legend_width(size, &keys) <= WIDTH);
        assert!(out.contains(&format!(r#"<line x1="{start:.1}""#)), "{out}");
        // Three series fit from the plot's left edge.
        assert_eq!(legend_start(size, &keys[..3]), LEFT);
    }
}
