//! Upstream's single-backend mode as one pool: the flags `cl-worker-manager` takes without
//! `[[pools]]` (`--min-workers`, `--launch-mode` …) and the one [`PoolPolicy`] they describe.
//!
//! That pool differs from a `[[pools]]` entry in one way: it does not match `request_queue`
//! itself (`match_request_queue = false`); as upstream, the manager's staged search is narrowed
//! by its workers' tag instead, and the manager logs and names its settings as upstream does
//! (`min_workers`, "Starting a worker!"). In compat mode (the default) its launch rules are
//! exactly [`crate::policy::plan`].

use super::{LaunchMode, PoolPolicy};
use crate::bundle::WorkerShape;
use crate::policy::PolicyConfig;
use std::time::Duration;

/// The flags of upstream's single-backend mode that shape its pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SingleBackendFlags {
    /// `--min-workers`, `--max-workers`, `--min-seconds-between-workers`.
    pub limits: PolicyConfig,
    /// `--no-prefilter`: do not drop bundles that ask more than a worker has.
    pub no_prefilter: bool,
    /// `--launch-mode` (compat is upstream's rules).
    pub launch_mode: LaunchMode,
    /// `--max-launches-per-tick` (target mode).
    pub max_launches_per_tick: u32,
    /// Stop jobs pending longer than this (target mode only).
    pub pending_timeout: Option<Duration>,
    /// `--worker-checkin-timeout`: a running job whose worker has not checked in for longer
    /// is lost (target mode only).
    pub checkin_timeout: Duration,
}

impl Default for SingleBackendFlags {
    fn default() -> Self {
        Self {
            limits: PolicyConfig::default(),
            no_prefilter: false,
            launch_mode: LaunchMode::Compat,
            max_launches_per_tick: 1,
            pending_timeout: None,
            checkin_timeout: crate::checkin::DEFAULT_CHECKIN_TIMEOUT,
        }
    }
}

impl SingleBackendFlags {
    /// Checks the flags; the message names the flag (`--max-workers (2) is less than …`).
    pub fn validate(&self) -> Result<(), String> {
        self.limits.validate()?;
        if self.max_launches_per_tick == 0 {
            return Err("--max-launches-per-tick must be at least 1".into());
        }
        if self.max_launches_per_tick > 1 && self.launch_mode == LaunchMode::Compat {
            return Err(format!(
                "--max-launches-per-tick {} needs --launch-mode target (compat launches at most one worker per tick, as upstream)",
                self.max_launches_per_tick
            ));
        }
        Ok(())
    }

    /// The pool's policy: named `name` (the backend's name), workers of `shape`.
    pub fn policy(&self, name: impl Into<String>, shape: WorkerShape) -> PoolPolicy {
        PoolPolicy {
            min: self.limits.min_workers,
            max: self.limits.max_workers,
            match_request_queue: false,
            check_shape: !self.no_prefilter,
            pending_timeout: self.pending_timeout,
            checkin_timeout: self.checkin_timeout,
            launch_mode: self.launch_mode,
            max_launches_per_tick: self.max_launches_per_tick,
            min_seconds_between_workers: self.limits.min_seconds_between_workers,
            ..PoolPolicy::new(name, shape)
        }
    }
}

impl PoolPolicy {
    /// Whether this is the pool of upstream's single-backend mode
    /// ([`SingleBackendFlags::policy`]): the server search, not the pool, matches
    /// `request_queue`, so the pool must be the manager's only one.
    pub fn is_single_backend(&self) -> bool {
        !self.match_request_queue
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flags_name_themselves_in_errors() {
        let flags = |min, max, burst, launch_mode| SingleBackendFlags {
            limits: PolicyConfig {
                min_workers: min,
                max_workers: max,
                min_seconds_between_workers: 0,
            },
            launch_mode,
            max_launches_per_tick: burst,
            ..SingleBackendFlags::default()
        };
        let cases = [
            (
                flags(3, 2, 1, LaunchMode::Compat),
                "--max-workers (2) is less than --min-workers (3)",
            ),
            (
                flags(0, 2, 0, LaunchMode::Target),
                "--max-launches-per-tick must be at least 1",
            ),
            (
                flags(0, 2, 4, LaunchMode::Compat),
                "--max-launches-per-tick 4 needs --launch-mode target (compat launches at most one worker per tick, as upstream)",
            ),
        ];
        for (flags, message) in cases {
            assert_eq!(flags.validate().unwrap_err(), message);
        }
        assert!(flags(0, 2, 4, LaunchMode::Target).validate().is_ok());
        assert!(SingleBackendFlags::default().validate().is_ok());
    }

    #[test]
    fn the_pool_is_upstreams() {
        let flags = SingleBackendFlags {
            no_prefilter: true,
            ..SingleBackendFlags::default()
        };
        let policy = flags.policy("slurm-batch", WorkerShape::from_flags(2, 0, 1024));
        assert!(policy.is_single_backend());
        assert!(!policy.check_shape);
        assert_eq!(policy.name, "slurm-batch");
        assert_eq!(
            (policy.min, policy.max, policy.min_seconds_between_workers),
            (1, 10, 60)
        );
        assert_eq!(policy.launch_mode, LaunchMode::Compat);
        assert_eq!(policy.tag, None, "the server search matches the queue");
        assert!(policy.validate().is_ok());
        assert!(!PoolPolicy::new("cpu", policy.shape).is_single_backend());
    }
}
