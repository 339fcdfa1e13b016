//! The what-if flags of `cl-worker-manager simulate` about the simulated world:
//! `--start-latency` (`N` or `MIN-MAX` seconds: how long a simulated job pends), `--platform`
//! and `--quota`. Pure; errors name the bad flag. (`--set`, a change of the config, is read
//! with the config: [`crate::settings::Edit`].)

use super::{Platform, SimError};
use crate::pools::PoolPolicy;
use std::collections::BTreeMap;
use std::time::Duration;

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
        "forecast" | "bills_start" => {
            let on = (value.trim().parse())
                .map_err(|_| format!("{key} `{value}` is not true or false"))?;
            match key.trim() {
                "forecast" => platform.forecast = on,
                _ => platform.bills_start = on,
            }
        }
        other => {
            return Err(format!(
                "unknown key `{other}`: use latency, slots, busy, stockout, preempt, reclaim, \
                 forecast, bills_start"
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
    use crate::WorkerShape;

    fn pools() -> Vec<PoolPolicy> {
        let shape = WorkerShape::from_flags(1, 0, 1024);
        vec![PoolPolicy::new("a", shape), PoolPolicy::new("b", shape)]
    }

    #[test]
    fn platforms_are_pool_colon_keys() {
        let spec = |s: &str| vec![s.to_owned()];
        let text = "a:latency=30-60,slots=4,busy=7200/3600,stockout=3600/600,preempt=0.2,reclaim=7200,\
             forecast=true,bills_start=true";
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
                forecast: true,
                bills_start: true,
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
            ("a:forecast=yes", "forecast `yes` is not true or false"),
            ("a:bills_start=1", "bills_start `1` is not true or false"),
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
