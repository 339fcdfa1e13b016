//! What every command that reads the configuration shares: the layers, the settings, the
//! credentials, the TLS options, logging, and the manager built from a layout.

use crate::args::GlobalArgs;
use crate::backends::{BackendCommand, catalogue};
use anyhow::{Context, Result, bail};
use codalab_wm_core::codalab::{ClientOptions, CodaLabClient};
use codalab_wm_core::layout::Layout;
use codalab_wm_core::secret::Credentials;
use codalab_wm_core::settings::{Edit, Layers, Settings};
use codalab_wm_core::{Manager, Pool};
use figment::Figment;
use figment::providers::Serialized;
use std::path::Path;

/// The layers the settings come from: defaults < `--config` file < `CODALAB_WM_*` < flags.
pub fn layers(global: &GlobalArgs, backend: Option<&BackendCommand>) -> Layers {
    Layers {
        file: global.process.config.clone(),
        flags: Figment::from(Serialized::defaults(global)),
        backend: backend.map(|b| (b.kind, b.flags.clone())),
    }
}

/// The settings the layers give; a config file's problems are all listed with their lines.
pub fn settings(layers: &Layers) -> Result<Settings> {
    settings_with(layers, &[])
}

/// [`settings`] with `simulate`'s what-if edits.
pub fn settings_with(layers: &Layers, edits: &[Edit]) -> Result<Settings> {
    if let Some(path) = layers.file.as_deref().filter(|p| p.is_file()) {
        crate::diagnose::file_problems(path)?;
    }
    Ok(layers.settings_with(&catalogue(), edits)?)
}

/// The manager the layout describes, each backend metered (`/metrics`), its launch records
/// kept in the state dir.
pub async fn build_manager(
    layout: Layout,
    settings: &Settings,
    credentials: Credentials,
) -> Result<Manager> {
    let pools = build_pools(&layout, &credentials).await?;
    for pool in &pools {
        codalab_wm_core::backend::check_worker_account(&*pool.backend, &credentials.username)
            .await
            .with_context(|| format!("pool {}", pool.policy.name))?;
    }
    let records: Vec<_> = layout.pools.iter().map(|p| p.record_key()).collect();
    let client =
        CodaLabClient::with_options(&settings.server, credentials, &client_options(settings)?)?;
    let server = codalab_wm_core::secret::redact_url(client.server()).into_owned();
    let user = client.username().to_owned();
    let (count, first) = (pools.len(), pools.first().context("no pools")?);
    let name = first.backend.name().to_owned();
    let shape = first.backend.worker_shape().to_string();
    let (min_workers, max_workers) = (first.policy.min, first.policy.max);
    let launch_mode = first.policy.launch_mode;
    let single = layout.single;
    let mut manager = Manager::with_pools(layout.config, client, pools)?;
    manager.keep_records(&settings.record_dir(), &records)?;
    if let Some((dir, limits)) = settings.history() {
        manager.keep_history(&dir, limits)?;
    }
    // Said once the server answered and took the credentials, not before.
    manager.on_ready(move || match single {
        false => tracing::info!(server, user, pools = count, "started worker manager; {count} pools"),
        true => tracing::info!(backend = name, server, user, min_workers, max_workers, launch_mode = %launch_mode, "started worker manager; workers get {shape}"),
    });
    Ok(manager)
}

/// Every pool's backend, built and metered; each pool of `[[pools]]` is logged.
pub async fn build_pools(layout: &Layout, credentials: &Credentials) -> Result<Vec<Pool>> {
    let mut pools = Vec::new();
    for pool in &layout.pools {
        let (name, backend) = (&pool.policy.name, pool.kind.name());
        let built = pool
            .build(credentials)
            .await
            .with_context(|| match layout.single {
                true => format!("cannot set up the {backend} backend"),
                false => format!("cannot set up pool {name} ({backend})"),
            })?;
        let backend = codalab_wm_app::metrics::metered(built.backend, name);
        if !layout.single {
            log_pool(&built.policy, &*backend);
        }
        if built.worker.preemptible {
            let why = match (pool.table.reclaimable, built.policy.fallback.is_some()) {
                (true, _) => "the platform may reclaim them",
                (false, true) => "it has a fallback: it is the Spot side of a pair",
                (false, false) => "--worker-preemptible",
            };
            tracing::info!(pool = %name, "pool {name}'s workers start with `cl-worker --preemptible` ({why}): CodaLab stages the runs of a reclaimed worker again instead of losing them");
        }
        pools.push(Pool { backend, ..built });
    }
    Ok(pools)
}

fn log_pool(policy: &codalab_wm_core::PoolPolicy, backend: &dyn codalab_wm_core::WorkerBackend) {
    tracing::info!(
        pool = %policy.name,
        backend = backend.name(),
        min = policy.min,
        max = policy.max,
        tag = policy.tag.as_deref().unwrap_or(""),
        tag_exclusive = policy.tag_exclusive,
        cost = policy.cost,
        launch_mode = %policy.launch_mode,
        max_launches_per_tick = policy.max_launches_per_tick,
        pending_timeout_seconds = policy.pending_timeout.map(|d| d.as_secs()),
        "pool {} ready; workers get {}",
        policy.name,
        backend.worker_shape()
    );
}

/// TLS options of the CodaLab connection.
pub fn client_options(settings: &Settings) -> Result<ClientOptions> {
    let mut options = ClientOptions::default();
    if let Some(path) = &settings.ca_cert {
        let pem = std::fs::read(path)
            .with_context(|| format!("cannot read --ca-cert {}", path.display()))?;
        if let Err(error) = codalab_wm_core::codalab::tls::parse_ca_certificates(&pem) {
            bail!("--ca-cert {}: {error}", path.display());
        }
        options.ca_certificates.push(pem);
    }
    if settings.insecure_skip_tls_verify {
        tracing::warn!(
            server = %codalab_wm_core::secret::redact_url(&settings.server),
            "--insecure-skip-tls-verify: the CodaLab server's certificate is NOT verified; \
             anyone on the network path can read the credentials"
        );
        options.insecure_skip_tls_verify = true;
    }
    Ok(options)
}

/// Credentials from `--password-file` or `CODALAB_USERNAME`/`CODALAB_PASSWORD`.
pub fn credentials(password_file: Option<&Path>) -> Result<Credentials> {
    Ok(Credentials::load(password_file)?)
}

/// Raises the soft limit of open files to the hard one (systemd and most shells start at
/// 1024), so that the manager's own steps (the server, the state dir, the workers it starts)
/// run out of descriptors only where the system would.
pub fn raise_open_files_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current == limit.maximum {
        return;
    }
    let raised = Rlimit {
        current: limit.maximum,
        ..limit
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => {
            tracing::debug!(from = ?limit.current, to = ?limit.maximum, "raised the soft limit of open files to the hard one")
        }
        Err(error) => {
            tracing::warn!(%error, soft = ?limit.current, hard = ?limit.maximum, "cannot raise the soft limit of open files")
        }
    }
}
