//! The workload a simulation replays: bundle arrivals from a trace (CSV, JSON array or JSON
//! lines) or from a seeded Poisson generator.
//!
//! A trace row is one bundle: `time` (seconds, relative or since the epoch; the first arrival
//! becomes time 0), `cpus`, `gpus`, `memory` (bytes or a CodaLab size such as `4g`), `queue`
//! (the `request_queue`, empty for none), `owner` (the user who staged it, for quotas; empty
//! for none) and `duration` (seconds it runs once a worker has it). Only `time` and `duration`
//! are required.
//!
//! The manager's history ([`crate::history`]) is such a trace as it is: JSON lines with a
//! `kind`, of which the `bundle` lines are the arrivals (their other keys, `uuid`, `wait` …,
//! are the history's) and every other kind is skipped.

use super::SimError;
use super::rng::SplitMix64;
use crate::size::parse_size;
use std::str::FromStr;

/// One bundle arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// When it is staged, in milliseconds since the first arrival.
    pub at_ms: u64,
    /// CPUs requested.
    pub cpus: u32,
    /// GPUs requested.
    pub gpus: u32,
    /// Memory requested, bytes.
    pub memory_bytes: u64,
    /// Index of its `request_queue` in [`Workload::queues`] (0 is the empty queue).
    pub queue: u32,
    /// Index of its owner in [`Workload::owners`] (0 is no owner given).
    pub owner: u32,
    /// How long it runs, in milliseconds.
    pub duration_ms: u64,
}

/// Bundle arrivals in time order.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Distinct `request_queue` values; index 0 is `""`.
    pub queues: Vec<String>,
    /// Distinct owners; index 0 is `""` (none given).
    pub owners: Vec<String>,
    /// Arrivals sorted by time (ties keep input order).
    pub arrivals: Vec<Arrival>,
}

impl Default for Workload {
    fn default() -> Self {
        Self {
            queues: vec![String::new()],
            owners: vec![String::new()],
            arrivals: Vec::new(),
        }
    }
}

/// A bundle request as read from a trace or a generator template, before interning.
#[derive(Debug, Clone, PartialEq, Default)]
struct Row {
    time: f64,
    cpus: u32,
    gpus: u32,
    memory_bytes: u64,
    queue: String,
    owner: String,
    duration: f64,
}

impl Workload {
    /// Parses a trace: a JSON array of objects, JSON lines (one object per line), or CSV with
    /// a header naming the columns. Lines starting with `#` and blank lines are skipped.
    pub fn parse(text: &str) -> Result<Self, SimError> {
        let trimmed = text.trim_start();
        if trimmed.starts_with('[') {
            Self::from_json_array(text)
        } else if trimmed.starts_with('{') {
            Self::from_json_lines(text)
        } else {
            Self::from_csv(text)
        }
    }

    /// Parses CSV with a header (`time,cpus,gpus,memory,queue,duration`, any order).
    pub fn from_csv(text: &str) -> Result<Self, SimError> {
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
        let Some((header_line, header)) = lines.next() else {
            return Ok(Self::default());
        };
        let columns: Vec<String> = split_csv(header)
            .iter()
            .map(|c| c.to_ascii_lowercase())
            .collect();
        for required in ["time", "duration"] {
            if !columns.iter().any(|c| c == required) {
                return Err(trace_error(
                    header_line + 1,
                    format!("the header has no `{required}` column"),
                ));
            }
        }
        let mut workload = Self::default();
        for (index, line) in lines {
            let fields = split_csv(line);
            if fields.len() != columns.len() {
                return Err(trace_error(
                    index + 1,
                    format!("{} fields, the header has {}", fields.len(), columns.len()),
                ));
            }
            let mut row = Row::default();
            for (column, value) in columns.iter().zip(&fields) {
                set_field(&mut row, column, value).map_err(|m| trace_error(index + 1, m))?;
            }
            workload.push(row).map_err(|m| trace_error(index + 1, m))?;
        }
        workload.finish();
        Ok(workload)
    }

    /// Parses a JSON array of objects.
    pub fn from_json_array(text: &str) -> Result<Self, SimError> {
        let values: Vec<serde_json::Value> =
            serde_json::from_str(text).map_err(|e| trace_error(e.line(), e.to_string()))?;
        let mut workload = Self::default();
        for (index, value) in values.iter().enumerate() {
            workload
                .push_json(value)
                .map_err(|m| trace_error(index + 1, format!("element {}: {m}", index + 1)))?;
        }
        workload.finish();
        Ok(workload)
    }

    /// Parses JSON lines: one object per line.
    pub fn from_json_lines(text: &str) -> Result<Self, SimError> {
        let mut workload = Self::default();
        for (index, line) in text.lines().enumerate() {
            if line.trim().is_empty() || line.trim_start().starts_with('#') {
                continue;
            }
            let value: serde_json::Value =
                serde_json::from_str(line).map_err(|e| trace_error(index + 1, e.to_string()))?;
            workload
                .push_json(&value)
                .map_err(|m| trace_error(index + 1, m))?;
        }
        workload.finish();
        Ok(workload)
    }

    /// `count` arrivals of a Poisson process at `rate`, each bundle drawn from `mix` (by
    /// weight) with an exponentially distributed duration around the template's mean.
    /// Deterministic for a seed.
    pub fn poisson(rate: PoissonRate, count: usize, mix: &[BundleTemplate], seed: u64) -> Self {
        let default = [BundleTemplate::default()];
        let mix = if mix.is_empty() { &default[..] } else { mix };
        let total_weight: u64 = mix.iter().map(|t| u64::from(t.weight.max(1))).sum();
        let mut rng = SplitMix64::new(seed);
        let mut workload = Self::default();
        workload.arrivals.reserve(count);
        let mean_gap = 1.0 / rate.per_second;
        let mut time = 0.0;
        for _ in 0..count {
            let mut pick = rng.between(0, total_weight - 1);
            let template = mix
                .iter()
                .find(|t| {
                    let w = u64::from(t.weight.max(1));
                    if pick < w {
                        true
                    } else {
                        pick -= w;
                        false
                    }
                })
                .unwrap_or(&mix[0]);
            let duration = rng.exponential(template.duration_seconds).max(0.001);
            let row = Row {
                time,
                cpus: template.cpus,
                gpus: template.gpus,
                memory_bytes: template.memory_bytes,
                queue: template.queue.clone(),
                owner: String::new(),
                duration,
            };
            // Rows made here are always valid.
            let _ = workload.push(row);
            time += rng.exponential(mean_gap);
        }
        workload.finish();
        workload
    }

    fn push_json(&mut self, value: &serde_json::Value) -> Result<(), String> {
        let object = value
            .as_object()
            .ok_or_else(|| "expected an object".to_owned())?;
        let history = match object.get("kind") {
            None => false,
            Some(serde_json::Value::String(kind)) if kind == "bundle" => true,
            // The history's other lines: no arrival.
            Some(_) => return Ok(()),
        };
        let mut row = Row::default();
        let mut seen = (false, false);
        for (key, value) in object {
            if history && !TRACE_KEYS.contains(&key.as_str()) {
                continue;
            }
            let text = match value {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Null => String::new(),
                other => other.to_string(),
            };
            let key = key.to_ascii_lowercase();
            seen.0 |= key == "time";
            seen.1 |= key == "duration";
            set_field(&mut row, &key, &text)?;
        }
        if !seen.0 || !seen.1 {
            return Err("`time` and `duration` are required".into());
        }
        self.push(row)
    }

    fn push(&mut self, row: Row) -> Result<(), String> {
        let queue = intern(&mut self.queues, row.queue);
        let owner = intern(&mut self.owners, row.owner);
        self.arrivals.push(Arrival {
            at_ms: seconds_to_ms(row.time, "time")?,
            cpus: row.cpus,
            gpus: row.gpus,
            memory_bytes: row.memory_bytes,
            queue: u32::try_from(queue).map_err(|_| "too many distinct queues".to_owned())?,
            owner: u32::try_from(owner).map_err(|_| "too many distinct owners".to_owned())?,
            duration_ms: seconds_to_ms(row.duration, "duration")?,
        });
        Ok(())
    }

    /// Sorts by time (stable) and moves the first arrival to time 0.
    fn finish(&mut self) {
        self.arrivals.sort_by_key(|a| a.at_ms);
        if let Some(first) = self.arrivals.first().map(|a| a.at_ms) {
            for arrival in &mut self.arrivals {
                arrival.at_ms -= first;
            }
        }
    }

    /// The request queue of `arrival`.
    pub fn queue_of(&self, arrival: &Arrival) -> &str {
        &self.queues[arrival.queue as usize]
    }

    /// The owner of `arrival` ("" when the trace gave none).
    pub fn owner_of(&self, arrival: &Arrival) -> &str {
        &self.owners[arrival.owner as usize]
    }
}

/// The keys of a trace row (a history's `bundle` line has others, not read).
const TRACE_KEYS: [&str; 7] = [
    "time", "cpus", "gpus", "memory", "queue", "owner", "duration",
];

/// The index of `value` in `values`, added at the end when new.
fn intern(values: &mut Vec<String>, value: String) -> usize {
    match values.iter().position(|v| *v == value) {
        Some(index) => index,
        None => {
            values.push(value);
            values.len() - 1
        }
    }
}

fn seconds_to_ms(seconds: f64, what: &str) -> Result<u64, String> {
    if !seconds.is_finite() || !(0.0..=1e13).contains(&seconds) {
        return Err(format!("{what} {seconds} is not a number of seconds >= 0"));
    }
    Ok((seconds * 1000.0).round() as u64)
}

fn set_field(row: &mut Row, column: &str, value: &str) -> Result<(), String> {
    let value = value.trim();
    let number = |what: &str| -> Result<f64, String> {
        value
            .parse::<f64>()
            .map_err(|_| format!("{what} `{value}` is not a number"))
    };
    let count = |what: &str| -> Result<u32, String> {
        if value.is_empty() {
            return Ok(0);
        }
        value
            .parse::<u32>()
            .map_err(|_| format!("{what} `{value}` is not a whole number"))
    };
    match column {
        "time" => row.time = number("time")?,
        "duration" => row.duration = number("duration")?,
        "cpus" => row.cpus = count("cpus")?,
        "gpus" => row.gpus = count("gpus")?,
        "memory" => row.memory_bytes = parse_size(value).map_err(|e| e.to_string())?,
        "queue" | "request_queue" => row.queue = value.to_owned(),
        "owner" => row.owner = value.to_owned(),
        other => {
            return Err(format!(
                "unknown column `{other}`: use time, cpus, gpus, memory, queue, owner, duration"
            ));
        }
    }
    Ok(())
}

/// Splits one CSV line on commas; fields may be wrapped in double quotes (no commas inside).
fn split_csv(line: &str) -> Vec<String> {
    line.split(',')
        .map(|f| f.trim().trim_matches('"').to_owned())
        .collect()
}

fn trace_error(line: usize, message: String) -> SimError {
    SimError::Trace { line, message }
}

/// A Poisson arrival rate: `poisson:RATE` with RATE in bundles per minute, or with a unit:
/// `poisson:2/s`, `poisson:30/m`, `poisson:100/h`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PoissonRate {
    /// Mean arrivals per second.
    pub per_second: f64,
}

impl FromStr for PoissonRate {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let usage = || {
            format!(
                "invalid arrivals `{s}`: expected poisson:RATE[/s|/m|/h], e.g. poisson:30 (per minute) or poisson:2/s"
            )
        };
        let rest = s.strip_prefix("poisson:").ok_or_else(usage)?;
        let (number, per) = match rest.split_once('/') {
            Some((n, "s")) => (n, 1.0),
            Some((n, "m")) => (n, 60.0),
            Some((n, "h")) => (n, 3600.0),
            Some(_) => return Err(usage()),
            None => (rest, 60.0),
        };
        let rate: f64 = number.trim().parse().map_err(|_| usage())?;
        if !rate.is_finite() || rate <= 0.0 {
            return Err(usage());
        }
        Ok(Self {
            per_second: rate / per,
        })
    }
}

/// One kind of generated bundle: `cpus=4,gpus=1,memory=16g,duration=1800,queue=gpu,weight=2`
/// (`duration` is the mean, in seconds; unnamed keys keep their defaults: 1 CPU, no GPU,
/// 1g, 600 s, no queue, weight 1).
#[derive(Debug, Clone, PartialEq)]
pub struct BundleTemplate {
    /// CPUs requested.
    pub cpus: u32,
    /// GPUs requested.
    pub gpus: u32,
    /// Memory requested, bytes.
    pub memory_bytes: u64,
    /// `request_queue`.
    pub queue: String,
    /// Mean run time in seconds (durations are exponential).
    pub duration_seconds: f64,
    /// Relative frequency in the mix.
    pub weight: u32,
}

impl Default for BundleTemplate {
    fn default() -> Self {
        Self {
            cpus: 1,
            gpus: 0,
            memory_bytes: 1 << 30,
            queue: String::new(),
            duration_seconds: 600.0,
            weight: 1,
        }
    }
}

impl FromStr for BundleTemplate {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let mut template = Self::default();
        for pair in s.split(',').filter(|p| !p.trim().is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("invalid mix entry `{pair}`: expected KEY=VALUE"))?;
            let value = value.trim();
            let bad = || format!("invalid mix value `{pair}`");
            match key.trim() {
                "cpus" => template.cpus = value.parse().map_err(|_| bad())?,
                "gpus" => template.gpus = value.parse().map_err(|_| bad())?,
                "memory" => template.memory_bytes = parse_size(value).map_err(|e| e.to_string())?,
                "queue" => template.queue = value.to_owned(),
                "duration" => {
                    template.duration_seconds = value
                        .parse()
                        .ok()
                        .filter(|d: &f64| d.is_finite() && *d > 0.0)
                        .ok_or_else(bad)?
                }
                "weight" => template.weight = value.parse().map_err(|_| bad())?,
                other => {
                    return Err(format!(
                        "unknown mix key `{other}`: use cpus, gpus, memory, queue, duration, weight"
                    ));
                }
            }
        }
        Ok(template)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_json_and_json_lines_agree() {
        let csv = "# a trace\ntime,cpus,gpus,memory,queue,duration\n100,1,0,2g,,60\n90.5,4,1,1024,gpu,30\n";
        let json = r#"[{"time":100,"cpus":1,"memory":"2g","duration":60},
            {"time":90.5,"cpus":4,"gpus":1,"memory":1024,"queue":"gpu","duration":30}]"#;
        let lines = "{\"time\":100,\"cpus\":1,\"memory\":\"2g\",\"duration\":60}\n{\"time\":90.5,\"cpus\":4,\"gpus\":1,\"memory\":1024,\"queue\":\"gpu\",\"duration\":30}\n";
        let a = Workload::parse(csv).unwrap();
        assert_eq!(a, Workload::parse(json).unwrap());
        assert_eq!(a, Workload::parse(lines).unwrap());
        assert_eq!(a.arrivals.len(), 2);
        assert_eq!(a.arrivals[0].at_ms, 0, "sorted and rebased");
        assert_eq!(a.queue_of(&a.arrivals[0]), "gpu");
        assert_eq!(a.arrivals[1].at_ms, 9500);
        assert_eq!(a.arrivals[1].memory_bytes, 2 << 30);
    }

    #[test]
    fn errors_name_the_line() {
        let err = Workload::parse("time,duration\n1,2\n3,x\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "trace line 3: duration `x` is not a number"
        );
        let err = Workload::parse("time,cpus\n1,2\n").unwrap_err();
        assert!(err.to_string().contains("no `duration` column"), "{err}");
        let err = Workload::parse("time,duration,colour\n1,2,red\n").unwrap_err();
        assert!(err.to_string().contains("unknown column `colour`"), "{err}");
    }

    #[test]
    fn rates_and_templates_parse() {
        let rate = |s: &str| s.parse::<PoissonRate>().map(|r| r.per_second);
        assert_eq!(rate("poisson:60"), Ok(1.0));
        assert_eq!(rate("poisson:2/s"), Ok(2.0));
        assert_eq!(rate("poisson:7200/h"), Ok(2.0));
        assert!(rate("poisson:0").is_err());
        assert!(rate("uniform:3").is_err());
        let t: BundleTemplate = "cpus=4,gpus=1,memory=16g,queue=gpu,duration=30,weight=3"
            .parse()
            .unwrap();
        assert_eq!((t.cpus, t.gpus, t.memory_bytes), (4, 1, 16 << 30));
        assert_eq!(
            (t.queue.as_str(), t.duration_seconds, t.weight),
            ("gpu", 30.0, 3)
        );
        assert!("colour=red".parse::<BundleTemplate>().is_err());
    }

    #[test]
    fn poisson_is_deterministic_per_seed() {
        let mix = [
            BundleTemplate::default(),
            "gpus=1,queue=gpu,weight=2".parse().unwrap(),
        ];
        let rate = PoissonRate { per_second: 0.5 };
        let a = Workload::poisson(rate, 500, &mix, 42);
        assert_eq!(a, Workload::poisson(rate, 500, &mix, 42));
        assert_ne!(a, Workload::poisson(rate, 500, &mix, 43));
        let last = a.arrivals.last().unwrap().at_ms as f64 / 1000.0;
        assert!((600.0..1400.0).contains(&last), "about 1000 s: {last}");
        let gpu = a.arrivals.iter().filter(|x| x.gpus == 1).count();
        assert!((250..420).contains(&gpu), "about 2/3: {gpu}");
    }
}
