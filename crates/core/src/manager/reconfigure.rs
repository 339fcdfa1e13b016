//! Live reconfiguration: new limits, shapes and rates for a running manager, applied between
//! two ticks without forgetting its workers.
//!
//! [`Manager::reconfigure`] takes a whole new [`ManagerConfig`] and the pools (rules, backend
//! and worker settings), checks them as [`Manager::with_pools`] would, and either applies all
//! of it or nothing. What the manager remembers per pool (its jobs, when they became pending
//! or active, jobs being stopped, the last launch, the failure backoff) is kept: a pool is
//! matched by name. What would make the manager lose track of jobs it started is refused:
//! adding, removing or renaming a pool, or changing the kind of a pool's backend. (Whether a
//! backend's own identity, such as a Slurm job name, changed is the caller's to check: only
//! it knows the backend's settings.) [`Manager::reload_from`] hands the manager a channel of
//! [`Reconfiguration`]s that [`Manager::run`] applies before its next tick.

use super::Pool;
use super::{Manager, ManagerConfig};
use crate::engine::PoolSpec;
use crate::error::{Error, Result};
#[cfg(doc)]
use crate::pools::PoolPolicy;
use serde_json::Value;
use std::fmt;
use std::sync::Arc;
use tokio::sync::mpsc;

/// What to do instead of a change a running manager cannot take (a pool's backend or identity,
/// a pool added or removed): stop without losing a run. `down` alone stops busy workers, and
/// CodaLab marks their runs `worker_offline` for good (docs audit 2026-11-27, H1).
pub const DRAIN_THEN_RESTART: &str = "drain first: reload with max = 0, wait until `status` \
     shows no busy worker (idle workers exit by themselves), then `cl-worker-manager down` and \
     restart";

/// One setting that a reconfiguration changed, for the log: `pool gpu: max 1 → 3`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Where the setting lives: `manager`, or `pool <name>`.
    pub scope: String,
    /// The setting, as the config file names it.
    pub key: String,
    /// The value before.
    pub old: String,
    /// The value after.
    pub new: String,
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} {} → {}",
            self.scope, self.key, self.old, self.new
        )
    }
}

/// A new configuration for a running manager, sent to it through [`Manager::reload_from`].
#[derive(Debug)]
pub struct Reconfiguration {
    /// The manager settings.
    pub config: ManagerConfig,
    /// The pools: in the single-backend mode exactly one, made with [`Pool::single_backend`].
    pub pools: Vec<Pool>,
    /// A hash of each pool's settings by pool name, as [`Manager::keep_records`] takes them
    /// (a pool missing here keeps the hash it had).
    pub settings: Vec<(String, u64)>,
}

/// Collects the differences between two values of the same settings.
struct Diff<'a> {
    scope: String,
    changes: &'a mut Vec<Change>,
}

impl Diff<'_> {
    fn note<T: PartialEq + fmt::Debug>(&mut self, key: &str, old: &T, new: &T) {
        if old != new {
            self.push(key, format!("{old:?}"), format!("{new:?}"));
        }
    }

    fn push(&mut self, key: &str, old: String, new: String) {
        self.changes.push(Change {
            scope: self.scope.clone(),
            key: key.to_owned(),
            old,
            new,
        });
    }
}

impl Manager {
    /// Applies a new configuration at once, keeping every pool's memory, and returns what
    /// changed (empty when nothing did). On error nothing is applied: the pools must be the
    /// same ones (matched by name; their order may change), each pool's backend of the same
    /// kind, every policy valid, and the staged search within what the server accepts.
    ///
    /// A reload is an admin's act on the pools: every pool suspended for misconfiguration is
    /// resumed (fixed settings, or the same ones to try again).
    pub fn reconfigure(&mut self, config: ManagerConfig, pools: Vec<Pool>) -> Result<Vec<Change>> {
        self.check_reconfiguration(&pools)?;
        let keywords = super::observe::search_keywords(
            &config.search,
            pools.iter().map(|p| (&p.policy, &p.worker)),
            self.client.username(),
        );
        self.client.check_search(
            &keywords,
            "`search` (--search) or `worker.tag` (--worker-tag, sent twice with `tag_exclusive`)",
        )?;
        let mut changes = Vec::new();
        config_changes(&self.config, &config, &mut changes);
        let mut old = std::mem::take(&mut self.engine.pools);
        self.backends.clear();
        for pool in pools {
            let index = old
                .iter()
                .position(|r| r.pool.policy.name == pool.policy.name)
                .expect("checked above");
            let mut runtime = old.swap_remove(index);
            let spec = PoolSpec::from(&pool);
            pool_changes(&runtime.pool, &spec, &mut changes);
            runtime.pool = spec;
            self.engine.pools.push(runtime);
            self.backends.push(pool.backend);
        }
        self.config = config;
        (self.engine).reconfigure(self.config.budget, self.config.sleep_time);
        self.resume_suspended();
        self.history_settings();
        Ok(changes)
    }

    /// Resumes every suspended pool after a reload (its events counted and journaled).
    fn resume_suspended(&mut self) {
        let now = self.clock();
        let mut resumed = Vec::new();
        for runtime in &mut self.engine.pools {
            resumed.extend(runtime.resume("the configuration was reloaded"));
        }
        self.counters.add(&resumed);
        for event in super::tick::from_tick(&resumed, now.as_secs()) {
            self.journal.record(now, event);
        }
    }

    fn check_reconfiguration(&self, pools: &[Pool]) -> Result<()> {
        let drain = DRAIN_THEN_RESTART;
        let invalid = |message: String| Err(Error::InvalidConfig(message));
        super::check_pools(pools)?;
        for pool in pools {
            let name = pool.policy.name.as_str();
            let Some(runtime) = self.engine.pools.iter().find(|r| r.name() == name) else {
                return invalid(format!(
                    "pool {name} is new: pools cannot be added while running (restart the manager)"
                ));
            };
            let (was, is) = (runtime.pool.backend.as_str(), pool.backend.name());
            if was != is {
                return invalid(format!(
                    "pool {name}: the backend cannot change from {was} to {is} while running: \
                     the jobs it started would be orphaned ({drain})"
                ));
            }
        }
        if let Some(gone) =
            (self.engine.pools.iter()).find(|r| !pools.iter().any(|p| p.policy.name == r.name()))
        {
            return invalid(format!(
                "pool {} is gone: pools cannot be removed while running, its jobs would be \
                 orphaned ({drain})",
                gone.name()
            ));
        }
        Ok(())
    }

    /// Every pool's name and backend, in order (what a reload compares new settings with).
    pub fn pool_backends(&self) -> Vec<(String, Arc<dyn crate::backend::WorkerBackend>)> {
        (self.engine.pools.iter())
            .zip(&self.backends)
            .map(|(r, backend)| (r.name().to_owned(), backend.clone()))
            .collect()
    }

    /// Hands the manager a channel of new configurations; [`Manager::run`] applies each one
    /// before its next tick and logs what changed, or why it was refused (the old one keeps
    /// running).
    pub fn reload_from(&mut self, reloads: mpsc::UnboundedReceiver<Reconfiguration>) {
        self.reloads = Some(reloads);
    }

    /// Applies the reconfigurations waiting in the channel, logging each outcome.
    pub(super) fn apply_reloads(&mut self) {
        let mut waiting = Vec::new();
        if let Some(reloads) = &mut self.reloads {
            while let Ok(reload) = reloads.try_recv() {
                waiting.push(reload);
            }
        }
        for reload in waiting {
            let result = self.reconfigure(reload.config, reload.pools);
            if result.is_ok() {
                self.take_settings(&reload.settings);
            }
            if let Ok(changes) = &result {
                let changes = changes.iter().map(ToString::to_string).collect();
                let now = self.clock();
                self.journal
                    .record(now, crate::events::EventKind::ConfigReloaded { changes });
            }
            match result {
                Ok(changes) if changes.is_empty() => {
                    tracing::info!("configuration reloaded; nothing changed")
                }
                Ok(changes) => {
                    for change in &changes {
                        tracing::info!(scope = %change.scope, key = %change.key, old = %change.old, new = %change.new, "reconfigured {change}");
                    }
                    tracing::info!(
                        changes = changes.len(),
                        "configuration reloaded; applied from this tick on"
                    );
                }
                Err(error) => {
                    tracing::error!(%error, "new configuration refused; the old one keeps running")
                }
            }
        }
    }
}

impl Manager {
    /// Takes each pool's new settings hash (pool name → hash, as [`Manager::keep_records`]
    /// takes them), kept with a later suspension.
    fn take_settings(&mut self, settings: &[(String, u64)]) {
        for runtime in &mut self.engine.pools {
            if let Some((_, hash)) = settings.iter().find(|(pool, _)| pool == runtime.name()) {
                runtime.settings = Some(*hash);
            }
        }
    }
}

fn config_changes(old: &ManagerConfig, new: &ManagerConfig, changes: &mut Vec<Change>) {
    let mut diff = Diff {
        scope: "manager".into(),
        changes,
    };
    diff.note("search", &old.search, &new.search);
    diff.note("sleep_time", &old.sleep_time, &new.sleep_time);
    diff.note(
        "restart_after_seconds",
        &old.restart_after,
        &new.restart_after,
    );
    diff.note(
        "exit_after_num_failed",
        &old.exit_after_num_failed,
        &new.exit_after_num_failed,
    );
    diff.note("dry_run", &old.dry_run, &new.dry_run);
    diff.note("max_backoff", &old.max_backoff, &new.max_backoff);
    diff.note("budget", &old.budget, &new.budget);
}

/// Every key of a pool's rules that differs, by its config-file name: the policy's
/// serialization ([`PoolPolicy`] serializes as the file names its keys), so that a key added
/// to it is shown without a word here (a reload that changed only `checkin_timeout` once
/// logged "nothing changed").
fn pool_changes(old: &PoolSpec, new: &PoolSpec, changes: &mut Vec<Change>) {
    let b = &new.policy;
    let mut diff = Diff {
        scope: format!("pool {}", b.name),
        changes,
    };
    // The single-backend pool's limits are upstream's flags.
    let key = |key: &str| match (b.is_single_backend(), key) {
        (true, "min") => "min_workers".to_owned(),
        (true, "max") => "max_workers".to_owned(),
        _ => key.to_owned(),
    };
    let (Ok(Value::Object(before)), Ok(Value::Object(after))) =
        (serde_json::to_value(&old.policy), serde_json::to_value(b))
    else {
        return;
    };
    for (name, value) in &after {
        let was = before.get(name).unwrap_or(&Value::Null);
        if was != value {
            diff.push(&key(name), shown(was), shown(value));
        }
    }
    worker_changes(&old.worker, &new.worker, &mut diff);
}

/// A setting's value as the log shows it: a string without quotes, `unset` for none.
fn shown(value: &Value) -> String {
    match value {
        Value::Null => "unset".to_owned(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

fn worker_changes(
    old: &crate::command::WorkerOptions,
    new: &crate::command::WorkerOptions,
    diff: &mut Diff<'_>,
) {
    if old == new {
        return;
    }
    let (Ok(Value::Object(a)), Ok(Value::Object(b))) =
        (serde_json::to_value(old), serde_json::to_value(new))
    else {
        return;
    };
    for (key, value) in &b {
        let before = a.get(key).unwrap_or(&Value::Null);
        if before != value {
            diff.push(
                &format!("worker.{key}"),
                before.to_string(),
                value.to_string(),
            );
        }
    }
}
