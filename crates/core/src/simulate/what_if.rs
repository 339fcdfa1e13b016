//! The what-if edits of `cl-worker-manager simulate`: `--set [POOL.]KEY=VALUE` changes one
//! setting of one pool's policy (no POOL: of every pool), and `--start-latency` (`N` or
//! `MIN-MAX` seconds) is how long a simulated job pends. Pure; errors name the bad flag.

use super::{Platform, SimError};
use crate::pools::PoolPolicy;
use std::collections::BTreeMap;
use std::time::Duration;

/// The keys `--set` knows, as the error for an unknown one lists them.
const KEYS: &str = "min, max, cost, cost_per_hour, spill_after, pending_timeout, startup_grace, launch_mode, max_launches_per_tick, min_seconds_between_workers, cpus, gpus, memory_mb";

/// Applies one `--set [POOL.]KEY=VALUE` to the named pool, or to every pool without `POOL.`.
pub fn apply(policies: &mut [PoolPolicy], change: &str) -> Result<(), SimError> {
    let invalid =
        |message: String| SimError::Config(format!("invalid --set `{change}`: {message}"));
    let (target, value) = change
        .split_once('=')
        .ok_or_else(|| invalid("expected [POOL.]KEY=VALUE".into()))?;
    let (pool, key) = match target.split_once('.') {
        Some((pool, key)) => (Some(pool), key),
        None => (None, target),
    };
    if let Some(pool) = pool
        && !policies.iter().any(|p| p.name == pool)
    {
        let names: Vec<&str> = policies.iter().map(|p| p.name.as_str()).collect();
        return Err(SimError::Config(format!(
            "--set `{change}`: no pool named {pool} (pools: {})",
            names.join(", ")
        )));
    }
    for policy in policies
        .iter_mut()
        .filter(|p| pool.is_none_or(|name| p.name == name))
    {
        set(policy, key.trim(), value.trim()).map_err(invalid)?;
    }
    Ok(())
}

/// Sets `key` of one policy to `value`.
fn set(policy: &mut PoolPolicy, key: &str, value: &str) -> Result<(), String> {
    let number = || -> Result<u64, String> {
        value
            .parse()
            .map_err(|_| format!("`{value}` is not a whole number"))
    };
    let small = || -> Result<u32, String> { u32::try_from(number()?).map_err(|e| e.to_string()) };
    match key {
        "min" => policy.min = small()?,
        "max" => policy.max = small()?,
        "cost" => {
            policy.cost = value
                .parse()
                .map_err(|_| format!("`{value}` is not a number"))?
        }
        "cost_per_hour" => {
            let price: f64 = (value.parse()).map_err(|_| format!("`{value}` is not a number"))?;
            policy.cost_per_hour = Some(price).filter(|p| *p > 0.0)
        }
        "spill_after" => {
            policy.spill_after = Some(number()?).filter(|s| *s > 0).map(Duration::from_secs)
        }
        "pending_timeout" => {
            policy.pending_timeout = Some(number()?).filter(|s| *s > 0).map(Duration::from_secs)
        }
        "startup_grace" => policy.startup_grace = Duration::from_secs(number()?),
        "launch_mode" => policy.launch_mode = value.parse()?,
        "max_launches_per_tick" => policy.max_launches_per_tick = small()?,
        "min_seconds_between_workers" => policy.min_seconds_between_workers = number()?,
        "cpus" => policy.shape.cpus = small()?,
        "gpus" => policy.shape.gpus = small()?,
        "memory_mb" => policy.shape.memory_bytes = number()?.saturating_mul(1 << 20),
        other => return Err(format!("unknown key `{other}`: use {KEYS}")),
    }
    Ok(())
}

/// `--start-latency`: `60` or `30-120` seconds, as the bounds of a uniform pending time.
pub fn start_latency(text: &str) -> Result<(Duration, Duration), SimError> {
    let seconds = |s: &str| -> Result<Duration, SimError> {
        let invalid =
            |why: &str| SimError::Config(format!("invalid --start-latency `{text}`: {why}"));
        let value: f64 = s
            .trim()
            .parse()
            .map_err(|_| invalid("expected N or MIN-MAX seconds"))?;
        if !value.is_finite() || value < 0.0 {
            return Err(invalid("seconds must be >= 0"));
        }
        Ok(Duration::from_millis((value * 1000.0).round() as u64))
    };
    match text.split_once('-') {
        Some((low, high)) => Ok((seconds(low)?, seconds(high)?)),
        None => seconds(text).map(|d| (d, d)),
    }
}

/// Pools' platforms from `POOL:latency=MIN-MAX,slots=N,busy=EVERY/FOR,stockout=EVERY/FOR,
/// preempt=SHARE,reclaim=MEAN` specs (`simulate --platform`, seconds; any subset of the keys): the pool
/// must be one of `policies`.
pub fn platforms(
    specs: &[String],
    policies: &[PoolPolicy],
) -> Result<BTreeMap<String, Platform>, SimError> {
    let bad = |spec: &str, why: String| SimError::Config(format!("--platform {spec}: {why}"));
    let mut platforms = BTreeMap::new();
    for spec in specs {
        let (pool, keys) =
            (spec.split_once(':')).ok_or_else(|| bad(spec, "expected POOL:KEY=VALUE,…".into()))?;
        if !policies.iter().any(|p| p.name == pool) {
            let names: Vec<&str> = policies.iter().map(|p| p.name.as_str()).collect();
            let why = format!("no pool named {pool} (pools: {})", names.join(", "));
            return Err(bad(spec, why));
        }
        let mut platform = Platform::default();
        for pair in keys.split(',') {
            platform_key(&mut platform, pair.trim()).map_err(|why| bad(spec, why))?;
        }
        platforms.insert(pool.to_owned(), platform);
    }
    Ok(platforms)
}

/// Sets one `KEY=VALUE` of a `--platform` spec.
fn platform_key(platform: &mut Platform, pair: &str) -> Result<(), String> {
    let (key, value) = pair
        .split_once('=')
        .ok_or_else(|| format!("`{pair}` is not KEY=VALUE"))?;
    let seconds = |s: &str| -> Result<Duration, String> {
        (s.trim().parse().map(Duration::from_secs))
            .map_err(|_| format!("`{s}` is not a whole number of seconds"))
    };
    match key.trim() {
        "latency" => {
            let latency = start_latency(value).map_err(|e| e.to_string())?;
            platform.start_latency = Some(latency);
        }
        "slots" => {
            let slots = value.trim().parse();
            platform.slots = Some(slots.map_err(|_| format!("`{value}` is not a whole number"))?);
        }
        "busy" | "stockout" => {
            let (every, spell) = (value.split_once('/'))
                .ok_or_else(|| format!("{key} `{value}`: expected EVERY/FOR seconds"))?;
            let spells = Some((seconds(every)?, seconds(spell)?));
            match key.trim() {
                "busy" => platform.busy = spells,
                _ => platform.stockout = spells,
            }
        }
        "preempt" => {
            let share: f64 =
                (value.trim().parse()).map_err(|_| format!("`{value}` is not a number"))?;
            if !(0.0..=1.0).contains(&share) {
                return Err(format!("preempt `{value}` is not a share between 0 and 1"));
            }
            platform.preempt = share;
        }
        "reclaim" => {
            let mean = seconds(value)?;
            if mean.is_zero() {
                return Err(format!("reclaim `{value}`: the mean must be positive"));
            }
            platform.reclaim = Some(mean);
        }
        other => {
            return Err(format!(
                "unknown key `{other}`: use latency, slots, busy, stockout, preempt, reclaim"
            ));
        }
    }
    Ok(())
}

/// Owners' quotas from `OWNER=N` specs (`simulate --quota`).
pub fn quotas(specs: &[String]) -> Result<BTreeMap<String, u32>, SimError> {
    let bad = |spec: &str, why: &str| SimError::Config(format!("--quota {spec}: {why}"));
    let mut quotas = BTreeMap::new();
    for spec in specs {
        let (owner, n) = spec
            .split_once('=')
            .ok_or_else(|| bad(spec, "expected OWNER=N"))?;
        let n = (n.trim().parse::<u32>()).map_err(|_| bad(spec, "N is not a whole number"))?;
        if owner.trim().is_empty() {
            return Err(bad(spec, "no owner"));
        }
        quotas.insert(owner.trim().to_owned(), n);
    }
    Ok(quotas)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LaunchMode, WorkerShape};

    fn pools() -> Vec<PoolPolicy> {
        let shape = WorkerShape::from_flags(1, 0, 1024);
        vec![PoolPolicy::new("a", shape), PoolPolicy::new("b", shape)]
    }

    #[test]
    fn platforms_are_pool_colon_keys() {
        let spec = |s: &str| vec![s.to_owned()];
        let text =
            "a:latency=30-60,slots=4,busy=7200/3600,stockout=3600/600,preempt=0.2,reclaim=7200";
        let parsed = platforms(&spec(text), &pools()).unwrap();
        let s = Duration::from_secs;
        assert_eq!(
            parsed["a"],
            Platform {
                start_latency: Some((s(30), s(60))),
                slots: Some(4),
                busy: Some((s(7200), s(3600))),
                stockout: Some((s(3600), s(600))),
                preempt: 0.2,
                reclaim: Some(s(7200)),
            }
        );
        for (bad, says) in [
            ("a", "expected POOL:KEY=VALUE"),
            ("zz:slots=1", "no pool named zz (pools: a, b)"),
            ("a:slots", "`slots` is not KEY=VALUE"),
            ("a:slots=x", "`x` is not a whole number"),
            ("a:busy=60", "expected EVERY/FOR"),
            ("a:color=red", "unknown key `color`"),
            ("a:preempt=2", "not a share between 0 and 1"),
            ("a:reclaim=0", "reclaim `0`: the mean must be positive"),
            ("a:reclaim=soon", "`soon` is not a whole number of seconds"),
        ] {
            let error = platforms(&spec(bad), &pools()).unwrap_err().to_string();
            assert!(error.contains(says) && error.contains(bad), "{error}");
        }
    }

    #[test]
    fn quotas_are_owner_equals_count() {
        let specs = ["carol=1".to_owned(), " bob = 3".to_owned()];
        let parsed = quotas(&specs).unwrap();
        assert_eq!(parsed.get("carol"), Some(&1));
        assert_eq!(parsed.get("bob"), Some(&3));
        for bad in ["carol", "=1", "carol=x", "carol=-1"] {
            let error = quotas(&[bad.to_owned()]).unwrap_err().to_string();
            assert!(error.contains(bad), "{error}");
        }
    }

    #[test]
    fn set_changes_one_pool_or_all() {
        let mut pools = pools();
        apply(&mut pools, "a.max=3").unwrap();
        apply(&mut pools, "pending_timeout=600").unwrap();
        apply(&mut pools, "b.launch_mode=compat").unwrap();
        apply(&mut pools, " memory_mb = 2048 ").unwrap();
        assert_eq!((pools[0].max, pools[1].max), (3, 10));
        assert_eq!(pools[1].pending_timeout, Some(Duration::from_secs(600)));
        assert_eq!(pools[1].launch_mode, LaunchMode::Compat);
        assert_eq!(pools[0].shape.memory_bytes, 2048 << 20);
        apply(&mut pools, "pending_timeout=0").unwrap();
        assert_eq!(pools[0].pending_timeout, None);
        apply(&mut pools, "spill_after=600").unwrap();
        assert_eq!(pools[1].spill_after, Some(Duration::from_secs(600)));
        apply(&mut pools, "spill_after=0").unwrap();
        assert_eq!(pools[0].spill_after, None);
        apply(&mut pools, "cost_per_hour=0.5").unwrap();
        assert_eq!(pools[1].cost_per_hour, Some(0.5));
    }

    #[test]
    fn bad_changes_are_named() {
        let cases = [
            ("max", "invalid --set `max`: expected [POOL.]KEY=VALUE"),
            ("c.max=1", "--set `c.max=1`: no pool named c (pools: a, b)"),
            ("max=x", "invalid --set `max=x`: `x` is not a whole number"),
            (
                "cost=cheap",
                "invalid --set `cost=cheap`: `cheap` is not a number",
            ),
            (
                "a.cpus=5000000000",
                "invalid --set `a.cpus=5000000000`: out of range integral type conversion attempted",
            ),
            (
                "colour=red",
                "invalid --set `colour=red`: unknown key `colour`: use min, max",
            ),
        ];
        for (change, message) in cases {
            let error = apply(&mut pools(), change).unwrap_err().to_string();
            assert!(error.starts_with(message), "{change}: {error}");
        }
    }

    #[test]
    fn start_latency_is_one_value_or_a_range() {
        let s = Duration::from_secs;
        assert_eq!(start_latency("60").unwrap(), (s(60), s(60)));
        assert_eq!(start_latency("30-90").unwrap(), (s(30), s(90)));
        assert_eq!(start_latency("0.5").unwrap().0, Duration::from_millis(500));
        let cases = [
            (
                "x",
                "invalid --start-latency `x`: expected N or MIN-MAX seconds",
            ),
            ("inf", "invalid --start-latency `inf`: seconds must be >= 0"),
        ];
        for (text, message) in cases {
            assert_eq!(start_latency(text).unwrap_err().to_string(), message);
        }
    }
}
