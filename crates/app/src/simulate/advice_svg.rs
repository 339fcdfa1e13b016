//! The frontier of `advise`, drawn as SVG: every setting simulated as a dot at its cost a day
//! (across) and wait p90 (up), the frontier as a line through the points no other beats, the
//! settings in force ringed and the recommendation marked and named. The scales, legend and
//! escaping are the charts' ([`crate::chart`]).

use super::advice::Names;
use super::text::human;
use crate::chart::{Key, LegendSize, YScale, escape, legend, number, open_svg};
use codalab_wm_core::simulate::advise::{Advice, Point};
use std::fmt::Write as _;

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 72.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 64.0;
const BOTTOM: f64 = 56.0;

const DOT: &str = "#9e9e9e";
const FRONTIER: &str = "#3182bd";
const IN_FORCE: &str = "#222222";
const RECOMMENDED: &str = "#e6550d";

/// Where a point goes: the scales across (cost a day) and up (wait p90, in `unit` seconds:
/// minutes once a wait passes two, so that the grid falls on whole minutes).
#[derive(Clone, Copy)]
struct Plot {
    x: YScale,
    y: YScale,
    unit: f64,
}

impl Plot {
    const W: f64 = WIDTH - LEFT - RIGHT;
    const H: f64 = HEIGHT - TOP - BOTTOM;

    fn at(&self, point: &Point) -> (f64, f64) {
        let cx = LEFT + self.x.fraction(point.figures.spend()) * Self::W;
        let wait = point.figures.wait_p90_seconds.unwrap_or(0.0) / self.unit;
        (cx, TOP + Self::H - self.y.fraction(wait) * Self::H)
    }
}

/// The plot (`advise --svg`).
pub fn advice_svg(advice: &Advice, names: &Names) -> String {
    let drawn: Vec<&Point> = (advice.points.iter())
        .filter(|p| p.figures.wait_p90_seconds.is_some())
        .collect();
    let spend = drawn.iter().map(|p| p.figures.spend()).fold(0.0, f64::max);
    let wait = (drawn.iter())
        .filter_map(|p| p.figures.wait_p90_seconds)
        .fold(0.0, f64::max);
    let unit = if wait > 120.0 { 60.0 } else { 1.0 };
    let plot = Plot {
        x: YScale::new(spend),
        y: YScale::new(wait / unit),
        unit,
    };
    let mut out = String::new();
    open_svg(&mut out, WIDTH, HEIGHT);
    let title = format!(
        "Wait p90 against {} a day: {} settings replayed on {} of history",
        if advice.priced {
            "cost"
        } else {
            "worker-hours"
        },
        advice.points.len(),
        human(advice.days * 86_400.0)
    );
    let _ = writeln!(
        out,
        r#"<text x="{LEFT}" y="22" font-size="14">{}</text>"#,
        escape(&title)
    );
    axes(&mut out, plot, advice.priced);
    points(&mut out, plot, advice, &drawn, names);
    let keys = [
        Key {
            color: FRONTIER,
            dash: "",
            label: "frontier (no point waits less for less)",
        },
        Key {
            color: IN_FORCE,
            dash: "",
            label: "settings in force (ringed)",
        },
        Key {
            color: RECOMMENDED,
            dash: "",
            label: "recommended",
        },
    ];
    let size = LegendSize {
        line: 18.0,
        pad: 6.0,
        space: 18.0,
        char_width: 6.6,
    };
    legend(&mut out, (LEFT, 44.0), size, &keys);
    out.push_str("</svg>\n");
    out
}

/// The frontier's line, every point (named in its tooltip), the settings in force ringed,
/// the recommendation marked and named.
fn points(out: &mut String, plot: Plot, advice: &Advice, drawn: &[&Point], names: &Names) {
    let mut frontier: Vec<&Point> = advice.points.iter().filter(|p| p.on_frontier).collect();
    frontier.sort_by(|a, b| a.figures.spend().total_cmp(&b.figures.spend()));
    let line: Vec<String> = (frontier.iter())
        .map(|p| plot.at(p))
        .map(|(cx, cy)| format!("{cx:.1},{cy:.1}"))
        .collect();
    let _ = writeln!(
        out,
        r#"<polyline points="{}" fill="none" stroke="{FRONTIER}" stroke-width="2"/>"#,
        line.join(" ")
    );
    for point in drawn {
        let (cx, cy) = plot.at(point);
        let color = if point.on_frontier { FRONTIER } else { DOT };
        let name = escape(&names.changes(point));
        let _ = writeln!(
            out,
            r#"<circle cx="{cx:.1}" cy="{cy:.1}" r="3.5" fill="{color}"><title>{name}</title></circle>"#
        );
    }
    let (cx, cy) = plot.at(advice.replayed());
    let _ = writeln!(
        out,
        r#"<circle cx="{cx:.1}" cy="{cy:.1}" r="8" fill="none" stroke="{IN_FORCE}" stroke-width="2"/>"#
    );
    if let Some(best) = advice.recommended.map(|i| &advice.points[i]) {
        let (cx, cy) = plot.at(best);
        let _ = writeln!(
            out,
            r#"<circle cx="{cx:.1}" cy="{cy:.1}" r="6" fill="{RECOMMENDED}"/>"#
        );
        let (anchor, dx) = match cx > LEFT + Plot::W * 0.6 {
            true => ("end", -10.0),
            false => ("start", 10.0),
        };
        let name = escape(&names.changes(best));
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="{anchor}" fill="{RECOMMENDED}">{name}</text>"#,
            cx + dx,
            cy - 8.0
        );
    }
}

/// The axes with their grid lines and labels: cost (or worker-hours) a day across, wait up.
fn axes(out: &mut String, plot: Plot, priced: bool) {
    let (x, y) = (plot.x, plot.y);
    let (plot_w, plot_h) = (Plot::W, Plot::H);
    let bottom = TOP + plot_h;
    for tick in y.ticks() {
        let ty = bottom - y.fraction(tick) * plot_h;
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{ty:.1}" x2="{:.1}" y2="{ty:.1}" stroke="#e0e0e0"/>"##,
            LEFT + plot_w
        );
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            LEFT - 6.0,
            ty + 4.0,
            human(tick * plot.unit)
        );
    }
    for tick in x.ticks() {
        let tx = LEFT + x.fraction(tick) * plot_w;
        let _ = writeln!(
            out,
            r##"<line x1="{tx:.1}" y1="{TOP}" x2="{tx:.1}" y2="{bottom:.1}" stroke="#f0f0f0"/>"##
        );
        let _ = writeln!(
            out,
            r#"<text x="{tx:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            bottom + 16.0,
            number(tick)
        );
    }
    let across = if priced {
        "cost a day"
    } else {
        "worker-hours a day"
    };
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{across}</text>"#,
        LEFT + plot_w / 2.0,
        bottom + 40.0
    );
    let _ = writeln!(
        out,
        r#"<text x="16" y="{:.1}" transform="rotate(-90 16 {:.1})" text-anchor="middle">wait p90 (staged → running)</text>"#,
        TOP + plot_h / 2.0,
        TOP + plot_h / 2.0
    );
    let _ = writeln!(
        out,
        r##"<line x1="{LEFT}" y1="{bottom:.1}" x2="{:.1}" y2="{bottom:.1}" stroke="#444"/>"##,
        LEFT + plot_w
    );
    let _ = writeln!(
        out,
        r##"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{bottom:.1}" stroke="#444"/>"##
    );
}
