//! `bench-harness`: the processes behind `cargo xtask bench`.
//!
//! Built in release mode with the `bench` feature by `cargo xtask bench`, which then runs
//! `bench-harness run [--quick]`. Every measured side runs in its own process so that its CPU
//! time and peak RSS are its own:
//! - `serve`: the fake CodaLab server (core's `FakeCodaLab`) behind a small front that counts
//!   requests, applies a large default `.limit` (upstream sends none) and caches bundle pages;
//! - `ours`: our manager's tick loop (core `Manager` + `FakeBackend`), or one tick after
//!   process start (`--first-tick`), or the reaction count (`--reaction`);
//! - `python …/bench/peer_iteration.py`: the Python peer, same measurements;
//! - `ours-backends`: backend calls per tick (Slurm against stub commands, Azure against its fake);
//! - `run`: spawns all of the above over the grid, prints the table, writes
//!   `bench/results.json` and the table in `BENCH.md` (quick runs: `target/bench/results-quick.json`
//!   only).

mod backends;
mod ours;
mod report;
mod run;
mod serve;
mod stats;

use anyhow::{Result, bail};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((command, rest)) = args.split_first() else {
        bail!("usage: bench-harness run [--quick] | serve … | ours …");
    };
    match command.as_str() {
        "run" => run::run(rest),
        "serve" => serve::run(rest),
        "ours" => ours::run(rest),
        "ours-backends" => backends::run(rest, &run::backend_sizes(rest)),
        other => bail!("unknown bench-harness command `{other}`"),
    }
}

/// `--name value` from `args`, parsed.
pub fn flag<T: std::str::FromStr>(args: &[String], name: &str) -> Result<Option<T>>
where
    T::Err: std::fmt::Display,
{
    match args.iter().position(|a| a == name) {
        None => Ok(None),
        Some(i) => {
            let Some(value) = args.get(i + 1) else {
                bail!("{name} needs a value");
            };
            match value.parse() {
                Ok(v) => Ok(Some(v)),
                Err(e) => bail!("{name} {value}: {e}"),
            }
        }
    }
}

/// A required `--name value`.
pub fn required<T: std::str::FromStr>(args: &[String], name: &str) -> Result<T>
where
    T::Err: std::fmt::Display,
{
    flag(args, name)?.ok_or_else(|| anyhow::anyhow!("missing {name}"))
}
