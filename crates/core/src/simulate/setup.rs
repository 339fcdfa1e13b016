//! The pools and the simulated world of `simulate` and `advise`, from the settings as the
//! manager reads them: the pools' policies as the manager would lay them out (shapes read from
//! the backend tables, no backend built, the what-if edits applied) and the simulation's base
//! from the global settings (tick, workers' idle exit and runs, the overall budget).

use super::SimConfig;
use crate::describe::Catalogue;
use crate::error::{Error, Result};
use crate::layout::{Layout, Reading, single_placement};
use crate::pools::PoolPolicy;
use crate::settings::{Edit, Layers, Settings};
use std::collections::BTreeSet;
use std::time::Duration;

/// The pools the manager would run, as simulated.
#[derive(Debug, Clone, PartialEq)]
pub struct SimPools {
    /// Their policies, in declaration order.
    pub policies: Vec<PoolPolicy>,
    /// The pools whose workers start preemptible ([`SimConfig::preemptible`]).
    pub preemptible: BTreeSet<String>,
    /// The one pool of the single-backend mode (its keys are `min_workers`, `max_workers`).
    pub single: bool,
}

impl SimPools {
    /// The pools of `settings` (and `layers`, for the single backend's table, whose `edits`
    /// apply), without building any backend. `backend`: the single backend's name, when no
    /// `[[pools]]` (default: `backend` in the settings, else `local`).
    pub fn of(
        settings: &Settings,
        layers: &Layers,
        backend: Option<&str>,
        edits: &[Edit],
        catalogue: &Catalogue,
    ) -> Result<Self> {
        let preemptible = |layout: &Layout| {
            (layout.pools.iter())
                .filter(|p| p.worker.preemptible)
                .map(|p| p.policy.name.clone())
                .collect()
        };
        if !settings.pools.is_empty() {
            if backend.is_some() {
                return Err(Error::InvalidConfig(
                    "--backend is for the single-backend mode; the config file declares [[pools]]"
                        .into(),
                ));
            }
            let layout = Layout::pools(settings, catalogue, Reading::Shapes)?;
            return Ok(Self {
                preemptible: preemptible(&layout),
                policies: layout.pools.into_iter().map(|p| p.policy).collect(),
                single: false,
            });
        }
        let name = backend.or(settings.backend.as_deref()).unwrap_or("local");
        let kind = catalogue.get(name)?;
        let defaults = kind.placement_defaults(single_placement(settings));
        let tables = layers.tables_with(kind, defaults, edits, catalogue)?;
        let layout = Layout::single(settings, kind, &tables, Reading::Shapes)?;
        let preemptible = preemptible(&layout);
        let mut policy = (layout.pools.into_iter().next())
            .ok_or_else(|| Error::InvalidConfig("no pool".into()))?
            .policy;
        // The server's search does the queue filtering in this mode; the simulated server
        // still runs a bundle only on a worker with its tag.
        policy.tag = settings.worker.tag.clone();
        policy.tag_exclusive = settings.worker.tag_exclusive;
        Ok(Self {
            policies: vec![policy],
            preemptible,
            single: true,
        })
    }
}

impl SimConfig {
    /// The simulation's base from `settings`: the tick, the workers' idle exit and runs, the
    /// overall budget; the rest [`SimConfig::default`]'s.
    pub fn from_settings(settings: &Settings) -> Self {
        Self {
            sleep_time: Duration::from_secs(settings.sleep_time),
            worker_idle: Duration::from_secs(settings.worker.idle_seconds),
            worker_max_runs: (settings.worker.exit_after_num_runs)
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| *n > 0),
            budget: crate::layout::manager_config(settings).budget,
            ..Self::default()
        }
    }
}
