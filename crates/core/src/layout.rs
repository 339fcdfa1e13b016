//! From settings to what runs: [`Layout::new`] is the one pure assembly of a manager's
//! configuration (which pools, each with its backend table read and checked, its rules and
//! its workers' settings), used by `run`, `down`, `status`, `simulate`, a reload and `config
//! check`. Every rule about a combination of settings lives here, once, and so do those about
//! a reload's old and new settings ([`check_fixed_settings`], [`PoolLayout::check_same_jobs`]);
//! [`PoolLayout::build`] then builds the backends (the only I/O).

use crate::WorkerOptions;
use crate::describe::{BackendContext, BackendKind, Catalogue, Placement, Table};
use crate::error::{Error, Result};
use crate::manager::ManagerConfig;
use crate::policy::PolicyConfig;
use crate::pools::{PoolPolicy, SingleBackendFlags};
use crate::secret::Credentials;
use crate::settings::{Layers, PoolSettings, Settings, suggestion};
use crate::{Pool, RecordKey};
use figment::Figment;
use figment::providers::Serialized;
use std::time::Duration;

mod reload;
pub use reload::check_fixed_settings;

/// What the settings describe.
#[derive(Debug, Clone)]
pub struct Layout {
    /// The manager's own settings.
    pub config: ManagerConfig,
    /// The pools, in declaration order (one, named after its backend, in upstream's
    /// single-backend mode).
    pub pools: Vec<PoolLayout>,
    /// Upstream's single-backend mode: the server search is narrowed by the worker tag.
    pub single: bool,
}

/// How much of each backend table is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// Everything the backend checks (to run, stop or reload).
    Checked,
    /// The types only: enough for the worker shapes (a simulation builds no backend).
    Shapes,
}

/// One pool: its backend and table, its rules, its workers' settings.
#[derive(Debug, Clone)]
pub struct PoolLayout {
    /// The backend.
    pub kind: &'static dyn BackendKind,
    /// Its table, read and checked.
    pub table: Table,
    /// The pool's rules.
    pub policy: PoolPolicy,
    /// The `cl-worker` settings of its workers.
    pub worker: WorkerOptions,
    /// A dry run (`--dry-run`, `status --dry-tick`, `down --dry-run`): the backend changes
    /// nothing on its platform ([`BackendContext::read_only`]).
    pub read_only: bool,
    /// The backend lists the jobs of every [`origin`](crate::backend::origin), not only of the
    /// workers' server and user (`down` that does not know them: `--all-origins`, a dry run).
    pub every_origin: bool,
}

impl Layout {
    /// The layout `settings` describe, the single backend's table read from `layers`.
    pub fn new(settings: &Settings, layers: &Layers, catalogue: &Catalogue) -> Result<Self> {
        if let Some(url) = &settings.worker_server {
            crate::codalab::server_url("--worker-server", url)?;
        }
        if settings.pools.is_empty() {
            let kind = single_kind(settings, layers, catalogue)?;
            let placement = single_placement(settings);
            let tables = layers.tables(kind, kind.placement_defaults(placement))?;
            return Self::single(settings, kind, &tables, Reading::Checked);
        }
        if layers.backend.is_some() || settings.backend.is_some() {
            return Err(invalid(
                "choose either a backend (a subcommand or `backend = \"…\"`) or [[pools]] in the config file, not both",
            ));
        }
        Self::pools(settings, catalogue, Reading::Checked)
    }

    /// Upstream's mode: one backend, its table at `tables`' key [`BackendKind::table`].
    pub fn single(
        settings: &Settings,
        kind: &'static dyn BackendKind,
        tables: &Figment,
        reading: Reading,
    ) -> Result<Self> {
        let flags = single_flags(settings);
        flags.validate().map_err(Error::InvalidConfig)?;
        let table = kind.read(tables, reading == Reading::Shapes)?;
        let pool = PoolLayout {
            kind,
            policy: crate::PoolPolicy {
                cost_per_hour: settings.cost_per_hour,
                ..flags.policy(kind.name(), table.shape)
            },
            worker: worker_options(settings, &table, false)?,
            table,
            read_only: settings.dry_run,
            every_origin: false,
        };
        Ok(Self {
            config: manager_config(settings),
            pools: vec![pool],
            single: true,
        })
    }

    /// Several pools, from `[[pools]]`.
    pub fn pools(settings: &Settings, catalogue: &Catalogue, reading: Reading) -> Result<Self> {
        if settings.worker.tag.is_some() || settings.worker.tag_exclusive {
            return Err(invalid(
                "with [[pools]], set `tag` and `tag_exclusive` per pool, not --worker-tag/--worker-tag-exclusive or [worker] tag",
            ));
        }
        let pools = settings
            .pools
            .iter()
            .map(|entry| pool(settings, entry, catalogue, reading))
            .collect::<Result<Vec<_>>>()?;
        if let Some(why) = conflicts(&pools).into_iter().next() {
            return Err(Error::InvalidConfig(why));
        }
        for warning in fallback_warnings(&pools) {
            tracing::warn!("{warning}");
        }
        Ok(Self {
            config: manager_config(settings),
            pools,
            single: false,
        })
    }
}

impl PoolLayout {
    /// The pool's identity on its platform, in words: its backend and the values of the keys
    /// that name its jobs (two pools of the same identity list the same jobs). Names the pool's
    /// launch record.
    pub fn identity(&self) -> String {
        let mut identity = self.kind.name().to_owned();
        for key in self.kind.identity() {
            let value = self
                .table
                .get(key)
                .map(|v| v.to_string())
                .unwrap_or_default();
            identity.push_str(&format!(" {key}={value}"));
        }
        identity
    }

    /// The key of the pool's launch record: its [`PoolLayout::identity`], and a hash of its
    /// settings (backend, table, rules, worker settings) that a suspension for misconfiguration
    /// is kept with ([`crate::RecordKey::settings`]).
    pub fn record_key(&self) -> RecordKey {
        // Secrets included (a credential fixed is a setting changed); only the hash is kept.
        let table = self.table.values();
        let settings = serde_json::json!([self.kind.name(), table, self.policy, self.worker]);
        RecordKey {
            pool: self.policy.name.clone(),
            identity: self.identity(),
            settings: Some(crate::hash::fnv1a(settings.to_string().as_bytes())),
        }
    }

    /// The pool, its backend built.
    pub async fn build(&self, credentials: &Credentials) -> Result<Pool> {
        let context = BackendContext {
            credentials: credentials.clone(),
            worker: self.worker.clone(),
            read_only: self.read_only,
            origin: (!self.every_origin)
                .then(|| crate::backend::origin(&self.worker.server, &credentials.username)),
        };
        let backend = self.kind.build(self.table.clone(), &context).await?;
        Ok(Pool {
            policy: self.policy.clone(),
            backend,
            worker: self.worker.clone(),
        })
    }
}

fn invalid(message: &str) -> Error {
    Error::InvalidConfig(message.to_owned())
}

/// The single backend: the subcommand, else `backend = "…"`.
fn single_kind(
    settings: &Settings,
    layers: &Layers,
    catalogue: &Catalogue,
) -> Result<&'static dyn BackendKind> {
    if let Some((kind, _)) = &layers.backend {
        return Ok(*kind);
    }
    let name = settings.backend.as_deref().ok_or_else(|| {
        Error::InvalidConfig(format!(
            "no backend given: name one of {} (or set `backend = \"…\"` or [[pools]] in the config file)",
            catalogue.names().join(", ")
        ))
    })?;
    catalogue.get(name)
}

/// Where the single backend's table is used (no pool).
pub fn single_placement(settings: &Settings) -> Placement<'_> {
    placement(None, settings)
}

fn placement<'a>(pool: Option<&'a str>, settings: &'a Settings) -> Placement<'a> {
    Placement {
        pool,
        password_file: settings.password_file.as_deref(),
    }
}

/// The manager settings both modes share.
pub fn manager_config(settings: &Settings) -> ManagerConfig {
    ManagerConfig {
        search: settings.search.clone(),
        sleep_time: Duration::from_secs(settings.sleep_time),
        // 0 is off, as upstream (`if args.restart_after_seconds and …`).
        restart_after: settings
            .restart_after_seconds
            .filter(|s| *s > 0)
            .map(Duration::from_secs),
        exit_after_num_failed: settings.exit_after_num_failed,
        dry_run: settings.dry_run,
        budget: crate::budget::BudgetLimits {
            max_worker_hours_per_day: settings.max_worker_hours_per_day,
            max_cost_per_day: settings.max_cost_per_day,
        },
        ..ManagerConfig::default()
    }
}

/// The flags of upstream's single-backend mode, from the global settings.
pub fn single_flags(settings: &Settings) -> SingleBackendFlags {
    SingleBackendFlags {
        limits: PolicyConfig {
            min_workers: settings.min_workers,
            max_workers: settings.max_workers,
            min_seconds_between_workers: settings.min_seconds_between_workers,
        },
        no_prefilter: settings.no_prefilter,
        launch_mode: settings.launch_mode,
        max_launches_per_tick: settings.max_launches_per_tick,
        pending_timeout: None,
        checkin_timeout: Duration::from_secs(settings.worker_checkin_timeout),
    }
}

/// One `[[pools]]` entry: its name, backend, table and rules.
fn pool(
    settings: &Settings,
    entry: &PoolSettings,
    catalogue: &Catalogue,
    reading: Reading,
) -> Result<PoolLayout> {
    let name = &entry.rules.name;
    check_pool_name(name).map_err(Error::InvalidConfig)?;
    let kind = catalogue
        .get(&entry.rules.backend)
        .map_err(|e| Error::InvalidConfig(format!("pool {name}: {}", strip(&e))))?;
    let value = pool_table(entry, kind, catalogue).map_err(Error::InvalidConfig)?;
    let defaults = kind.placement_defaults(placement(Some(name), settings));
    let tables = Figment::from(Serialized::default(kind.table(), defaults))
        .merge(Serialized::default(kind.table(), value));
    let table = kind
        .read(&tables, reading == Reading::Shapes)
        .map_err(|e| Error::InvalidConfig(format!("pool {name}: {}", strip(&e))))?;
    let policy = entry.rules.policy(settings, table.shape);
    policy.validate().map_err(Error::InvalidConfig)?;
    let mut worker = worker_options(settings, &table, policy.fallback.is_some())?;
    worker.tag = entry.rules.tag.clone();
    worker.tag_exclusive = entry.rules.tag_exclusive;
    Ok(PoolLayout {
        kind,
        table,
        policy,
        worker,
        read_only: settings.dry_run,
        every_origin: false,
    })
}

/// The `cl-worker` settings of a pool's workers (tag aside): the global ones, for the
/// workers' server, `--preemptible` when the pool's workers may be reclaimed ([`preemptible`]);
/// the names of `[worker] env` checked.
fn worker_options(settings: &Settings, table: &Table, fallback: bool) -> Result<WorkerOptions> {
    let mut worker = settings.worker.for_server(settings.worker_server());
    worker.check_env().map_err(Error::InvalidConfig)?;
    worker.preemptible = preemptible(worker.preemptible, table.reclaimable, fallback);
    Ok(worker)
}

/// Whether a pool's workers start with `cl-worker --preemptible`: when the admin says so
/// (`--worker-preemptible`, `[worker] preemptible`), when the backend's table says the
/// platform may take them away (GCE Spot VMs, the default), and for every pool with a
/// `fallback` (the Spot side of a Spot/on-demand pair: its capacity events are why it falls
/// back). CodaLab 1.7.5 stages the runs of a preemptible worker that went offline again
/// (`transition_bundle_worker_offline`); a worker that is not preemptible loses them
/// (`worker_offline`, never staged again).
pub fn preemptible(admin: bool, reclaimable: bool, fallback: bool) -> bool {
    admin || reclaimable || fallback
}

/// An error's message without the `invalid configuration: ` of its display.
fn strip(error: &Error) -> String {
    match error {
        Error::InvalidConfig(message) => message.clone(),
        other => other.to_string(),
    }
}

/// A pool name: letters, digits and `_`.
pub fn check_pool_name(name: &str) -> std::result::Result<(), String> {
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!(
            "pool name `{name}` must be letters, digits and `_`"
        ));
    }
    Ok(())
}

/// The pool's backend table (empty when not given); any other key is named.
pub fn pool_table(
    entry: &PoolSettings,
    kind: &dyn BackendKind,
    catalogue: &Catalogue,
) -> std::result::Result<serde_json::Value, String> {
    let (name, table) = (&entry.rules.name, kind.table());
    if let Some(key) = entry.tables.keys().find(|k| *k != table) {
        if catalogue.by_table(key).is_some() {
            return Err(format!(
                "pool {name}: [pools.{key}] does not belong to backend {}; its settings go in [pools.{table}]",
                kind.name()
            ));
        }
        let mut known: Vec<&str> =
            crate::describe::fields_of::<crate::settings::PoolRules>().to_vec();
        known.push(table);
        return Err(format!(
            "`pools.{key}` of pool `{name}` is not a setting{}",
            suggestion(key, &known)
        ));
    }
    Ok(entry
        .tables
        .get(table)
        .cloned()
        .unwrap_or_else(|| serde_json::json!({})))
}

/// Every pair of pools that would list (and so count, stop and adopt) each other's jobs.
pub fn conflicts(pools: &[PoolLayout]) -> Vec<String> {
    let mut found = Vec::new();
    for (i, a) in pools.iter().enumerate() {
        for b in &pools[i + 1..] {
            let (x, y) = (&a.policy.name, &b.policy.name);
            if x == y {
                found.push(format!("two pools are named {x}"));
            } else if a.kind.name() == b.kind.name()
                && let Some(why) = a.kind.shares_jobs(a.table.values(), b.table.values())
            {
                found.push(format!(
                    "pools {x} and {y} would own each other's jobs: {why}"
                ));
            }
        }
        let names: Vec<&str> = pools.iter().map(|p| p.policy.name.as_str()).collect();
        if let Some(fallback) = &a.policy.fallback {
            found.extend(crate::pools::fallback::unknown(
                &a.policy.name,
                &fallback.pool,
                &names,
            ));
        }
    }
    found.extend(fallback_errors(pools));
    found
}

/// Fallback rules that cannot work: a cycle (all its pools can be on their fallbacks at
/// once, and none then takes those bundles), a `min_on_demand` above the fallback's `max`
/// (the fallback would come first for every bundle, for ever), a compat fallback.
fn fallback_errors(pools: &[PoolLayout]) -> Vec<String> {
    fn fallback_of<'a>(
        pools: &'a [PoolLayout],
        pool: &'a PoolLayout,
    ) -> Option<(&'a crate::pools::fallback::Fallback, &'a PoolLayout)> {
        let rules = pool.policy.fallback.as_ref()?;
        let fallback = pools.iter().find(|p| p.policy.name == rules.pool)?;
        Some((rules, fallback))
    }
    let mut found = Vec::new();
    let mut cycled: Vec<&str> = Vec::new();
    for pool in pools {
        let Some((rules, fallback)) = fallback_of(pools, pool) else {
            continue;
        };
        let (name, to) = (pool.policy.name.as_str(), fallback.policy.name.as_str());
        if !cycled.contains(&name) {
            let mut chain = vec![name];
            let mut next = Some(fallback);
            while let Some(at) = next {
                let at_name = at.policy.name.as_str();
                chain.push(at_name);
                if at_name == name {
                    found.push(format!(
                        "pools fall back in a cycle: {} (they can all be on their fallbacks at once, and none then takes those bundles)",
                        chain.join(" → ")
                    ));
                    cycled.extend(&chain);
                    break;
                }
                if chain[..chain.len() - 1].contains(&at_name) {
                    break;
                }
                next = fallback_of(pools, at).map(|(_, f)| f);
            }
        }
        if rules.min_on_demand > fallback.policy.max {
            found.push(format!(
                "pool {name}: min_on_demand {} is above the max {} of its fallback {to}: the fallback would come first for every bundle, for ever",
                rules.min_on_demand, fallback.policy.max
            ));
        }
        if fallback.policy.launch_mode == crate::pools::LaunchMode::Compat {
            found.push(format!(
                "pool {name}: its fallback {to} is a compat pool (launch_mode = \"compat\"): a fallback must be a target pool"
            ));
        }
    }
    found
}

/// Fallbacks that take fewer of their pool's bundles than the pool: a smaller shape or
/// another tag (warned of, not refused: such a pair may be meant).
pub fn fallback_warnings(pools: &[PoolLayout]) -> Vec<String> {
    let mut found = Vec::new();
    for pool in pools {
        let Some(rules) = &pool.policy.fallback else {
            continue;
        };
        let Some(fallback) = pools.iter().find(|p| p.policy.name == rules.pool) else {
            continue;
        };
        let (name, to) = (&pool.policy.name, &fallback.policy.name);
        let (mine, theirs) = (&pool.policy.shape, &fallback.policy.shape);
        let words = |s: &crate::bundle::WorkerShape| {
            format!(
                "{} CPUs, {} GPUs, {} MiB",
                s.cpus,
                s.gpus,
                s.memory_bytes >> 20
            )
        };
        if theirs.cpus < mine.cpus
            || theirs.gpus < mine.gpus
            || theirs.memory_bytes < mine.memory_bytes
        {
            found.push(format!(
                "pool {name}: its fallback {to} has workers of {}, less than the pool's {}: the pool's bundles that need more wait for the pool",
                words(theirs),
                words(mine)
            ));
        }
        let tag = |p: &PoolPolicy| p.tag.clone().filter(|t| !t.is_empty());
        match (tag(&pool.policy), tag(&fallback.policy)) {
            (Some(mine), theirs) if theirs.as_ref() != Some(&mine) => found.push(format!(
                "pool {name}: its fallback {to} has tag {}, not the pool's {mine}: bundles with request_queue {mine} do not run there",
                theirs.as_deref().unwrap_or("(none)")
            )),
            (None, Some(theirs)) if fallback.policy.tag_exclusive => found.push(format!(
                "pool {name}: its fallback {to} is exclusive to tag {theirs}: the pool's bundles without that request_queue do not run there"
            )),
            _ => {}
        }
    }
    found
}

#[cfg(test)]
mod tests;
