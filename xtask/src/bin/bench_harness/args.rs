//! What every bench process shares: the command-line helpers, the CodaLab user of the fake
//! server and its request counter. Also compiled into `bench-ours` (see `../bench_ours.rs`).

use anyhow::{Result, bail};
use std::collections::BTreeMap;

/// The owner of every bundle, and the user both managers log in as.
pub const USER: &str = "alice";
/// Alice's password on the fake.
pub const PASSWORD: &str = "alicepw";

/// `--max-launches-per-tick` of the burst reaction (measured and modelled).
pub const BURST_LAUNCHES_PER_TICK: u32 = 10;

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

/// The request counts a bench server (`serve`, `count-proxy`) at `server` has seen.
pub async fn request_counts(http: &reqwest::Client, server: &str) -> Result<BTreeMap<String, u64>> {
    Ok(http
        .get(format!("{server}/bench/requests"))
        .send()
        .await?
        .json()
        .await?)
}
