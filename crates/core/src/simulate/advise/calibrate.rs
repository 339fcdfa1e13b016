//! How the replay is made like what ran: each pool's workers as the history's `settings` line
//! says they were, its start latency and failure share as the history measured them (where
//! the caller left the defaults), the server's dispatch as the real 1.7.5 server ran
//! ([`SimConfig::ghost`], [`SimConfig::checkin_gap`]), and where the settings given are not
//! those the history ran with ([`Gaps`]).

use super::{Gaps, Recorded, ShapeFromHistory};
use crate::pools::PoolPolicy;
use crate::simulate::SimConfig;
use std::time::Duration;

pub use crate::checkin::SERVER_FORGETS_AFTER;

/// How long after a check-in that brought it a bundle a `cl-worker` 1.7.5 checks in for the
/// next (`--checkin-frequency-seconds`' default): one bundle per check-in, the replay models
/// it ([`SimConfig::checkin_gap`]).
pub const WORKER_CHECKS_IN_AFTER: Duration = Duration::from_secs(5);

/// The history's platforms: each pool's workers as the history's settings say they were, its
/// start latency and the failure share (where the caller left the defaults), and what could
/// not be measured.
pub(super) fn calibrate(
    recorded: &Recorded,
    policies: &[PoolPolicy],
    config: &SimConfig,
) -> (Vec<PoolPolicy>, SimConfig, Gaps) {
    let mut config = config.clone();
    let mut gaps = Gaps {
        unmodelled: recorded.unmodelled.clone(),
        on_other_workers: recorded.on_other_workers,
        settings_changes: recorded.settings_changes,
        ..Gaps::default()
    };
    gaps.settings_differ = settings_differ(recorded, policies, &config);
    let mut policies = policies.to_vec();
    for policy in &mut policies {
        let ran = recorded.ran_shape(&policy.name);
        if let Some(ran) = ran.filter(|ran| *ran != policy.shape) {
            gaps.shapes_from_history.push(ShapeFromHistory {
                pool: policy.name.clone(),
                given: policy.shape.to_string(),
                ran: ran.to_string(),
            });
            policy.shape = ran;
        }
    }
    for policy in &policies {
        let platform = config.platforms.entry(policy.name.clone()).or_default();
        let measured = recorded
            .pools
            .get(&policy.name)
            .and_then(|p| p.start_latency());
        match (platform.start_latency, measured) {
            (Some(_), _) => {}
            (None, Some(latency)) => platform.start_latency = Some(latency),
            (None, None) => gaps.latency_unmeasured.push(policy.name.clone()),
        }
    }
    if config.failure_rate == 0.0 {
        config.failure_rate = recorded.failure_rate().min(1.0 - config.stuck_rate);
    }
    config
        .until
        .get_or_insert(Duration::from_secs_f64(recorded.until_seconds));
    config.ghost.get_or_insert(SERVER_FORGETS_AFTER);
    config.checkin_gap.get_or_insert(WORKER_CHECKS_IN_AFTER);
    gaps.pools_gone = (recorded.pools.keys())
        .filter(|name| !policies.iter().any(|p| &p.name == *name))
        .cloned()
        .collect();
    (policies, config, gaps)
}

/// The keys of a pool [`settings_differ`] does not compare.
const NOT_COMPARED: [&str; 3] = ["shape", "tag", "tag_exclusive"];

/// The settings given that differ from those the history ran with at its end (its last
/// `settings` line), as `pool.key: V given, the history ran with W`. Not compared: the worker
/// shapes ([`Gaps::shapes_from_history`]) and the tag, which a single-backend manager leaves
/// to the server's search (its policy has none) and the simulated server reads from the
/// policy; a queue no pool takes shows as runs no pool fits ([`Gaps::unrunnable`]).
fn settings_differ(
    recorded: &Recorded,
    policies: &[PoolPolicy],
    config: &SimConfig,
) -> Vec<String> {
    let Some(ran) = &recorded.settings else {
        return Vec::new();
    };
    let mut differ = Vec::new();
    if (ran.sleep_time - config.sleep_time.as_secs_f64()).abs() > 1e-3 {
        differ.push(format!(
            "sleep_time: {} given, the history ran with {}",
            config.sleep_time.as_secs_f64(),
            ran.sleep_time
        ));
    }
    for policy in policies {
        let (Some(pool), Ok(serde_json::Value::Object(given))) = (
            recorded.ran_pool(&policy.name),
            serde_json::to_value(policy),
        ) else {
            continue;
        };
        for (key, value) in &given {
            match pool.get(key) {
                Some(old) if old != value && !NOT_COMPARED.contains(&key.as_str()) => {
                    differ.push(format!(
                        "{}.{key}: {value} given, the history ran with {old}",
                        policy.name
                    ))
                }
                _ => {}
            }
        }
    }
    differ
}
