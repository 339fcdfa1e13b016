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
//! logging, `--listen`). Those refuse the whole reload with the reason, and the old
//! configuration keeps running.

use super::schema;
use crate::backends::{self, BackendCommand, BackendContext};
use crate::settings::Settings;
use anyhow::{Context, Result, anyhow, bail};
use codalab_wm_core::manager::Reconfiguration;
use codalab_wm_core::{Manager, Pool, WorkerBackend};
use figment::Figment;
use figment::providers::Serialized;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Makes `manager` reload its configuration on SIGHUP. `path` is the `--config` file (without
/// one a SIGHUP only logs that there is nothing to reload), `flags` the start's flag layers and
/// `figment` the start's whole configuration.
pub fn install(
    manager: &mut Manager,
    path: Option<PathBuf>,
    flags: Figment,
    figment: &Figment,
    settings: &Settings,
) -> Result<()> {
    let mut reloader = Reloader::new(path, flags, settings);
    reloader.attach(figment, manager);
    let (sender, receiver) = mpsc::unbounded_channel();
    manager.reload_from(receiver);
    reloader.spawn(sender)
}

/// A backend as built, with the table it was built from.
#[derive(Debug, Clone)]
struct Built {
    /// Pool name (single mode: the backend name).
    pool: String,
    /// Backend name (`slurm-batch`).
    backend: String,
    table: &'static str,
    settings: Value,
    handle: Arc<dyn WorkerBackend>,
}

/// Re-reads the configuration and turns it into [`Reconfiguration`]s.
#[derive(Debug)]
pub struct Reloader {
    path: Option<PathBuf>,
    flags: Figment,
    current: Settings,
    single: bool,
    built: Vec<Built>,
}

impl Reloader {
    /// A reloader for a manager started from `settings`; `flags` are the start's flag layers.
    pub fn new(path: Option<PathBuf>, flags: Figment, settings: &Settings) -> Self {
        Self {
            path,
            flags,
            current: settings.clone(),
            single: settings.pools.is_empty(),
            built: Vec::new(),
        }
    }

    /// Remembers the backends as the manager was built with them (`figment`: the start's).
    pub fn attach(&mut self, figment: &Figment, manager: &Manager) {
        let backends = manager.pool_backends();
        if self.single {
            let Some((pool, handle)) = backends.into_iter().next() else {
                return;
            };
            let backend = handle.name().to_owned();
            let Some(table) = backends::table_of(&backend) else {
                return;
            };
            self.built = vec![Built {
                pool,
                backend,
                table,
                settings: single_table(figment, table, &self.current),
                handle,
            }];
            return;
        }
        self.built = self
            .current
            .pools
            .iter()
            .filter_map(|entry| {
                let (_, handle) = backends.iter().find(|(name, _)| *name == entry.name)?;
                let (table, settings) = pool_table(entry, &self.current).ok()?;
                Some(Built {
                    pool: entry.name.clone(),
                    backend: entry.backend.clone(),
                    table,
                    settings,
                    handle: handle.clone(),
                })
            })
            .collect();
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
        let Some(path) = &self.path else {
            bail!("no --config file to reload");
        };
        let figment = crate::run::layered(Some(path), self.flags.clone())?;
        let settings = crate::run::settings(&figment)?;
        fixed_settings(&self.current, &settings)?;
        let config = crate::run::manager_config(&settings);
        let flags = crate::run::single_backend_flags(&settings);
        flags.limits.validate().map_err(|e| anyhow!(e))?;
        let credentials = crate::run::credentials(settings.password_file.as_deref())?;
        let mut built = Vec::new();
        let mut pools = Vec::new();
        if self.single {
            let old = self.built.first().context("no backend to reload")?.clone();
            let table = single_table(&figment, old.table, &settings);
            let worker = settings.worker.for_server(&settings.server);
            let context = BackendContext {
                credentials,
                worker: worker.clone(),
            };
            let handle = self.rebuilt(&old, &table, &figment, &context).await?;
            pools.push(Pool::single_backend(&flags, handle.clone(), worker));
            built.push(Built {
                settings: table,
                handle,
                ..old
            });
        } else {
            if settings.worker.tag.is_some() || settings.worker.tag_exclusive {
                bail!("with [[pools]], set `tag` and `tag_exclusive` per pool, not in [worker]");
            }
            for entry in &settings.pools {
                let old = self
                    .built
                    .iter()
                    .find(|b| b.pool == entry.name)
                    .cloned()
                    .ok_or_else(|| {
                        anyhow!("pool {} is new: pools cannot be added while running (restart the manager)", entry.name)
                    })?;
                if old.backend != entry.backend {
                    bail!(
                        "pool {}: the backend cannot change from {} to {} while running: its jobs would be orphaned (run `cl-worker-manager down`, then restart)",
                        entry.name,
                        old.backend,
                        entry.backend
                    );
                }
                let (_, table) = pool_table(entry, &settings)?;
                let mut worker = settings.worker.for_server(&settings.server);
                worker.tag = entry.tag.clone();
                worker.tag_exclusive = entry.tag_exclusive;
                let context = BackendContext {
                    credentials: credentials.clone(),
                    worker: worker.clone(),
                };
                let root = Figment::from(Serialized::default(old.table, &table));
                let handle = self.rebuilt(&old, &table, &root, &context).await?;
                let policy = entry.policy(&settings, handle.worker_shape());
                policy.validate().map_err(|e| anyhow!(e))?;
                pools.push(Pool {
                    policy,
                    backend: handle.clone(),
                    worker,
                });
                built.push(Built {
                    settings: table,
                    handle,
                    ..old
                });
            }
        }
        self.current = settings;
        self.built = built;
        Ok(Reconfiguration { config, pools })
    }

    /// The backend to use from now on: the one built before when its table is unchanged, else
    /// a new one built from `figment` (whose `old.table` is the new table), provided the keys
    /// that identify its jobs did not change.
    async fn rebuilt(
        &self,
        old: &Built,
        table: &Value,
        figment: &Figment,
        context: &BackendContext,
    ) -> Result<Arc<dyn WorkerBackend>> {
        if *table == old.settings {
            return Ok(old.handle.clone());
        }
        if let Some(backend) = schema::backend_named(&old.backend) {
            let resolved = |value: &Value, key: &str| {
                value
                    .get(key)
                    .cloned()
                    .or_else(|| backend.table.defaults.get(key).cloned())
                    .unwrap_or(Value::Null)
            };
            for key in backend.identity {
                let (was, is) = (resolved(&old.settings, key), resolved(table, key));
                if was != is {
                    bail!(
                        "pool {}: `{}.{key}` cannot change while running ({was} → {is}): the manager would lose track of the jobs it started (run `cl-worker-manager down`, then restart)",
                        old.pool,
                        old.table
                    );
                }
            }
        }
        let command = BackendCommand::from_name(&old.backend)
            .ok_or_else(|| anyhow!("backend {} is not compiled in", old.backend))?;
        tracing::info!(pool = %old.pool, "[{}] changed; building the backend again for new launches", old.table);
        let backend = command
            .build(figment, context)
            .await
            .with_context(|| format!("cannot set up the {} backend", old.backend))?;
        Ok(codalab_wm_core::metrics::metered(backend, &old.pool))
    }
}

/// The single backend's table as it is built: the file's table, env and flags, plus the
/// global password file (as `run` merges it).
fn single_table(figment: &Figment, table: &str, settings: &Settings) -> Value {
    let mut value: Value = figment
        .focus(table)
        .extract()
        .unwrap_or(Value::Object(Default::default()));
    if let (Some(path), Some(object)) = (&settings.password_file, value.as_object_mut())
        && table == "slurm_batch"
    {
        object
            .entry("password_file")
            .or_insert_with(|| path.display().to_string().into());
    }
    value
}

/// A pool's backend table as `build_pools` builds it (with the per-pool job ownership).
fn pool_table(
    entry: &crate::settings::PoolSettings,
    settings: &Settings,
) -> Result<(&'static str, Value)> {
    let table = backends::table_of(&entry.backend)
        .ok_or_else(|| anyhow!("pool {}: unknown backend `{}`", entry.name, entry.backend))?;
    let mut value = serde_json::Map::new();
    for (given, settings) in entry.tables() {
        if given != table {
            bail!(
                "pool {}: [pools.{given}] does not belong to backend {}",
                entry.name,
                entry.backend
            );
        }
        value = settings
            .as_object()
            .cloned()
            .ok_or_else(|| anyhow!("pool {}: [pools.{table}] must be a table", entry.name))?;
    }
    crate::run::own_jobs(&entry.name, table, &mut value, settings);
    Ok((table, Value::Object(value)))
}

/// Settings that are the process's, not the policy's: they cannot change while it runs.
fn fixed_settings(old: &Settings, new: &Settings) -> Result<()> {
    let (Ok(Value::Object(a)), Ok(Value::Object(b))) =
        (serde_json::to_value(old), serde_json::to_value(new))
    else {
        return Ok(());
    };
    for key in [
        "server",
        "password_file",
        "ca_cert",
        "insecure_skip_tls_verify",
        "log_format",
        "verbose",
        "once",
        "backend",
        "listen",
    ] {
        let (was, is) = (a.get(key), b.get(key));
        if was != is {
            let show = |v: Option<&Value>| v.map_or_else(|| "unset".to_owned(), Value::to_string);
            bail!(
                "`{key}` cannot change while the manager runs ({} → {}): restart it to apply",
                show(was),
                show(is)
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

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
            let figment = crate::run::layered(Some(&self.config), Figment::new()).unwrap();
            let settings: Settings = figment.extract().unwrap();
            let mut reloader = Reloader::new(Some(self.config.clone()), Figment::new(), &settings);
            let credentials = crate::run::credentials(settings.password_file.as_deref()).unwrap();
            let context = BackendContext {
                credentials,
                worker: settings.worker.for_server(&settings.server),
            };
            let handle = BackendCommand::from_name("local")
                .unwrap()
                .build(&figment, &context)
                .await
                .unwrap();
            reloader.built = vec![Built {
                pool: "local".into(),
                backend: "local".into(),
                table: "local",
                settings: single_table(&figment, "local", &settings),
                handle,
            }];
            reloader
        }
    }

    #[tokio::test]
    async fn new_limits_keep_the_backend_and_a_new_shape_builds_it_again() {
        let files = Files::new();
        files.write("max_workers = 1", "cpus = 1");
        let mut reloader = files.reloader().await;
        let before = reloader.built[0].handle.clone();
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

        std::fs::write(&files.config, "max_workers = \"many\"").unwrap();
        let err = reloader.reload().await.unwrap_err().to_string();
        assert!(err.contains(":1: wrong type: `max_workers`"), "{err}");
        files.write("", "");
        reloader.reload().await.unwrap();
    }
}
