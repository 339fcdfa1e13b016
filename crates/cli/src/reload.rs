//! Live reload on SIGHUP: re-read the config with the same layers as at start (defaults, the
//! `--config` file, `CODALAB_WM_*` environment, the flags given at start), and hand the running
//! manager a [`Reconfiguration`] that it applies before its next tick
//! ([`codalab_wm_core::Manager::reconfigure`]).
//!
//! What can change: every pool's (or the single backend's) `min`/`max`, shape (`cpus`, `gpus`,
//! `memory_mb`, and every other backend key that is not an identity key), rates and launch
//! mode, the `[worker]` settings, `search`, `sleep_time` … A backend whose table changed is
//! built again (as at start) and used for new launches; its running jobs are kept, as they are
//! found by the same names/labels. What cannot: the backend kind, the pools (added, removed),
//! the keys that say which jobs are this manager's (Slurm `job_name`, `partition`, `user`,
//! `ssh_host`; the AWS queue and manager id; the Kubernetes namespace and manager id; the
//! Azure job; the local state dir) and the process-wide settings (`server`, credentials, TLS,
//! logging, `--listen`, the record dir). Those refuse the whole reload with the reason, and the
//! old configuration keeps running; the rules are core's
//! ([`codalab_wm_core::layout::check_fixed_settings`], [`PoolLayout::check_same_jobs`]).

use crate::backends::catalogue;
use anyhow::{Context, Result, bail};
use codalab_wm_core::layout::{Layout, PoolLayout, check_fixed_settings};
use codalab_wm_core::manager::Reconfiguration;
use codalab_wm_core::settings::{Layers, Settings};
use codalab_wm_core::{Manager, Pool, WorkerBackend};
use std::sync::Arc;
use tokio::sync::mpsc;

/// Makes `manager`, built from `layout`, reload its configuration on SIGHUP (without a
/// `--config` file the settings are the flags' and stay as they are; the reload still resumes
/// the pools suspended for misconfiguration, which is how a person tells it to try again).
pub fn install(
    manager: &mut Manager,
    layers: Layers,
    settings: &Settings,
    layout: Layout,
) -> Result<()> {
    let reloader = Reloader::new(layers, settings, layout, manager);
    let (sender, receiver) = mpsc::unbounded_channel();
    manager.reload_from(receiver);
    reloader.spawn(sender)
}

/// Re-reads the configuration and turns it into [`Reconfiguration`]s.
#[derive(Debug)]
pub struct Reloader {
    layers: Layers,
    current: Settings,
    /// The pools as built: their layout and backend.
    built: Vec<(PoolLayout, Arc<dyn WorkerBackend>)>,
}

impl Reloader {
    /// A reloader for `manager`, started from `settings` laid out as `layout`.
    pub fn new(layers: Layers, settings: &Settings, layout: Layout, manager: &Manager) -> Self {
        let backends = manager.pool_backends();
        let built = layout
            .pools
            .into_iter()
            .filter_map(|pool| {
                let (_, handle) = backends.iter().find(|(n, _)| *n == pool.policy.name)?;
                Some((pool, handle.clone()))
            })
            .collect();
        Self {
            layers,
            current: settings.clone(),
            built,
        }
    }

    /// Listens for SIGHUP; each one reloads and sends the result to the manager.
    pub fn spawn(mut self, sender: mpsc::UnboundedSender<Reconfiguration>) -> Result<()> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hangup = signal(SignalKind::hangup()).context("cannot listen for SIGHUP")?;
        tokio::spawn(async move {
            while hangup.recv().await.is_some() {
                tracing::info!("SIGHUP received; reloading the configuration");
                match self.reload().await {
                    Ok(reconfiguration) => {
                        if sender.send(reconfiguration).is_err() {
                            break;
                        }
                    }
                    Err(error) => tracing::error!(
                        error = format!("{error:#}"),
                        "new configuration refused; the old one keeps running"
                    ),
                }
            }
        });
        Ok(())
    }

    /// Reads the configuration again and builds what changed.
    pub async fn reload(&mut self) -> Result<Reconfiguration> {
        let settings = crate::setup::settings(&self.layers)?;
        check_fixed_settings(&self.current, &settings)?;
        let layout = Layout::new(&settings, &self.layers, &catalogue())?;
        let credentials = crate::setup::credentials(settings.password_file.as_deref())?;
        let (mut built, mut pools) = (Vec::new(), Vec::new());
        let keys = layout.pools.iter().map(PoolLayout::record_key);
        let hashes = keys
            .filter_map(|key| Some((key.pool, key.settings?)))
            .collect();
        for pool in layout.pools {
            let handle = self.rebuilt(&pool, &credentials).await?;
            pools.push(Pool {
                policy: pool.policy.clone(),
                backend: handle.clone(),
                worker: pool.worker.clone(),
            });
            built.push((pool, handle));
        }
        self.current = settings;
        self.built = built;
        Ok(Reconfiguration {
            config: layout.config,
            pools,
            settings: hashes,
        })
    }

    /// The backend to use from now on: the one built before when its table is unchanged, else
    /// a new one, provided the pool existed, with the same backend and the same keys that
    /// identify its jobs.
    async fn rebuilt(
        &self,
        pool: &PoolLayout,
        credentials: &codalab_wm_core::secret::Credentials,
    ) -> Result<Arc<dyn WorkerBackend>> {
        let name = &pool.policy.name;
        let Some((old, handle)) = self.built.iter().find(|(p, _)| p.policy.name == *name) else {
            bail!("pool {name} is new: pools cannot be added while running (restart the manager)");
        };
        old.check_same_jobs(pool)?;
        if old.table.values() == pool.table.values() {
            return Ok(handle.clone());
        }
        tracing::info!(pool = %name, "[{}] changed; building the backend again for new launches", pool.kind.table());
        let built = pool
            .build(credentials)
            .await
            .with_context(|| format!("cannot set up the {} backend", pool.kind.name()))?;
        codalab_wm_core::backend::check_worker_account(&*built.backend, &credentials.username)
            .await
            .with_context(|| format!("pool {name}"))?;
        Ok(codalab_wm_app::metrics::metered(built.backend, name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::path::PathBuf;

    struct Files {
        dir: tempfile::TempDir,
        config: PathBuf,
    }

    impl Files {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let password = dir.path().join("password");
            std::fs::write(&password, "alice\nalicepw\n").unwrap();
            std::fs::set_permissions(&password, std::fs::Permissions::from_mode(0o600)).unwrap();
            let config = dir.path().join("wm.toml");
            Self { dir, config }
        }

        fn write(&self, top: &str, local: &str) {
            let text = format!(
                "server = \"http://127.0.0.1:1\"\nbackend = \"local\"\npassword_file = \"{}\"\nmin_workers = 0\n{top}\n[local]\nstate_dir = \"{}\"\n{local}\n",
                self.dir.path().join("password").display(),
                self.dir.path().join("state").display(),
            );
            std::fs::write(&self.config, text).unwrap();
        }

        /// A reloader attached to a local backend built from the file as it is now.
        async fn reloader(&self) -> Reloader {
            let layers = Layers {
                file: Some(self.config.clone()),
                flags: figment::Figment::new(),
                backend: None,
            };
            let settings = crate::setup::settings(&layers).unwrap();
            let layout = Layout::new(&settings, &layers, &catalogue()).unwrap();
            let credentials = crate::setup::credentials(settings.password_file.as_deref()).unwrap();
            let pool = layout.pools[0].build(&credentials).await.unwrap();
            let built = vec![(layout.pools[0].clone(), pool.backend)];
            Reloader {
                layers,
                current: settings,
                built,
            }
        }
    }

    #[tokio::test]
    async fn new_limits_keep_the_backend_and_a_new_shape_builds_it_again() {
        let files = Files::new();
        files.write("max_workers = 1", "cpus = 1");
        let mut reloader = files.reloader().await;
        let before = reloader.built[0].1.clone();
        files.write("max_workers = 3\nsleep_time = 2", "cpus = 1");
        let reload = reloader.reload().await.unwrap();
        assert_eq!(reload.pools[0].policy.max, 3);
        assert_eq!(reload.config.sleep_time, std::time::Duration::from_secs(2));
        assert!(
            Arc::ptr_eq(&reload.pools[0].backend, &before),
            "unchanged table: same backend"
        );
        files.write("max_workers = 3", "cpus = 4");
        let reload = reloader.reload().await.unwrap();
        assert_eq!(reload.pools[0].policy.shape.cpus, 4);
        assert!(!Arc::ptr_eq(&reload.pools[0].backend, &before));
    }

    #[tokio::test]
    async fn identity_and_process_settings_cannot_change() {
        let files = Files::new();
        files.write("", "");
        let mut reloader = files.reloader().await;
        let other = files.dir.path().join("elsewhere");
        std::fs::write(
            &files.config,
            std::fs::read_to_string(&files.config).unwrap().replace(
                "/state\"",
                &format!("/{}\"", other.file_name().unwrap().to_string_lossy()),
            ),
        )
        .unwrap();
        let err = reloader.reload().await.unwrap_err().to_string();
        assert!(
            err.contains("`local.state_dir` cannot change while running"),
            "{err}"
        );

        files.write("", "");
        let text = std::fs::read_to_string(&files.config).unwrap();
        std::fs::write(&files.config, text.replace("127.0.0.1:1", "127.0.0.1:2")).unwrap();
        let err = reloader.reload().await.unwrap_err().to_string();
        assert!(
            err.contains("`server` cannot change while the manager runs"),
            "{err}"
        );

        // The workers' server is part of the origin the jobs are listed by (#44, audit M4).
        files.write("worker_server = \"http://127.0.0.1:3\"", "");
        let err = reloader.reload().await.unwrap_err().to_string();
        assert!(
            err.contains("`worker_server` cannot change while the manager runs")
                && err.contains("no longer sees the jobs running now"),
            "{err}"
        );

        // A search longer than the server's request line (4,094 bytes) would stop the manager.
        files.write(&format!("search = [\"{}\"]", "x".repeat(4000)), "");
        let err = format!("{:#}", reloader.reload().await.unwrap_err());
        assert!(err.contains("`search`") && err.contains("4094"), "{err}");

        std::fs::write(&files.config, "max_workers = \"many\"").unwrap();
        let err = reloader.reload().await.unwrap_err().to_string();
        assert!(err.contains(":1: wrong type: `max_workers`"), "{err}");
        files.write("", "");
        reloader.reload().await.unwrap();
    }
}
