//! `backends_are_described_once`: a backend the binary has never heard of, described here
//! in one place (its config type and a `BackendConfig` impl, as a backend crate would), gets
//! its flags, its config table, `config init`'s template, `config check`, the layout `run`
//! builds, a simulation and `down`, through core's generic code and this crate's config tools
//! only. The backend itself is core's in-memory `FakeBackend` (no platform: this test is about
//! the description).

use codalab_wm_app::config::check::{Kind as Problem, check};
use codalab_wm_app::config::schema::Program;
use codalab_wm_app::config::template;
use codalab_wm_core::LaunchRequest;
use codalab_wm_core::describe::{
    BackendConfig, BackendContext, BackendKind, Catalogue, Entry, Kind, PLACEHOLDER,
};
use codalab_wm_core::down::down_pool;
use codalab_wm_core::layout::Layout;
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_core::settings::Layers;
use codalab_wm_core::simulate::{SimConfig, Workload, simulate};
use codalab_wm_core::testing::FakeBackend;
use codalab_wm_core::{Result, WorkerBackend, WorkerShape, async_trait};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// The settings of the `dummy` backend: its flags and its `[dummy]` table.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, clap::Args)]
#[serde(deny_unknown_fields, default)]
struct DummyConfig {
    /// Slots of each dummy worker
    #[arg(long, default_value_t = 2)]
    slots: u32,
    /// The dummy cluster to run on (required)
    #[arg(long)]
    cluster: Option<String>,
}

impl Default for DummyConfig {
    fn default() -> Self {
        codalab_wm_core::describe::defaults()
    }
}

#[async_trait]
impl BackendConfig for DummyConfig {
    const NAME: &'static str = "dummy";
    const TABLE: &'static str = "dummy";
    const ABOUT: &'static str = "Start workers on the dummy cluster";
    const REQUIRED: &'static [(&'static str, &'static str)] =
        &[("cluster", "\"XXX-CUSTOMIZE-THIS-XXX\"")];
    const IDENTITY: &'static [&'static str] = &["cluster"];

    fn validate(&self) -> std::result::Result<(), String> {
        match &self.cluster {
            Some(_) => Ok(()),
            None => Err("dummy needs --cluster (or `cluster` in [dummy])".into()),
        }
    }

    fn shape(&self) -> WorkerShape {
        WorkerShape::from_flags(self.slots, 0, 1024)
    }

    async fn build(self, _context: &BackendContext) -> Result<Arc<dyn WorkerBackend>> {
        Ok(Arc::new(FakeBackend::named("dummy", self.shape())))
    }
}

static DUMMY: Kind<DummyConfig> = Kind::new();

fn program() -> Program {
    let entry = |kind: &'static dyn BackendKind| Entry {
        name: kind.name(),
        table: kind.table(),
        feature: "",
        kind: Some(kind),
    };
    Program {
        catalogue: Catalogue::new(vec![entry(&codalab_wm_core::local::KIND), entry(&DUMMY)]),
        top_docs: HashMap::new(),
        worker_docs: HashMap::new(),
    }
}

/// The layout of `file` with the dummy's flags `flags` given on the command line.
fn layout(dir: &std::path::Path, file: &str, flags: &[&str]) -> Result<Layout> {
    let path = dir.join("wm.toml");
    std::fs::write(&path, file).unwrap();
    let matches = DUMMY
        .command()
        .no_binary_name(true)
        .try_get_matches_from(flags)
        .unwrap();
    let layers = Layers {
        file: Some(path),
        flags: figment::Figment::new(),
        backend: Some((&DUMMY, DUMMY.given_flags(&matches).unwrap())),
    };
    let program = program();
    let settings = layers.settings(&program.catalogue)?;
    Layout::new(&settings, &layers, &program.catalogue)
}

#[test]
fn backends_are_described_once_template_and_check() {
    let program = program();
    let text = template::render(&DUMMY, false, &program);
    assert!(text.contains("backend = \"dummy\""), "{text}");
    assert!(text.contains("[dummy]\n"), "{text}");
    assert!(text.contains("slots = 2"), "{text}");
    let found = check(&text, &program);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].kind, Problem::Placeholder);
    let filled = text.replace(PLACEHOLDER, "c1");
    assert_eq!(check(&filled, &program), vec![]);
    let broken = filled.replace("slots = 2", "slot = 2");
    let found = check(&broken, &program);
    assert!(
        found[0].message.contains("did you mean `slots`?"),
        "{found:?}"
    );
    let pools = template::render(&DUMMY, true, &program).replace(PLACEHOLDER, "c1");
    let found = check(&pools, &program);
    assert!(
        found
            .iter()
            .any(|d| d.message.contains("would own each other's jobs")),
        "{found:?}"
    );
}

#[tokio::test]
async fn backends_are_described_once_flags_layout_simulate_down() {
    let dir = tempfile::tempdir().unwrap();
    let file = "backend = \"dummy\"\nmax_workers = 3\n[dummy]\ncluster = \"c1\"\nslots = 8\n";
    let error = layout(dir.path(), "backend = \"dummy\"\n", &[]).unwrap_err();
    assert!(
        error.to_string().contains("dummy needs --cluster"),
        "{error}"
    );
    let layout = layout(dir.path(), file, &["--slots", "4"]).unwrap();
    let pool = &layout.pools[0];
    assert_eq!((pool.policy.name.as_str(), pool.policy.max), ("dummy", 3));
    assert_eq!(pool.policy.shape.cpus, 4, "the flag wins over the file");
    let credentials = Credentials {
        username: "u".into(),
        password: Secret::new("p"),
    };
    let built = pool.build(&credentials).await.unwrap();
    assert_eq!(built.backend.name(), "dummy");
    let unique = "0123456789abcdef0123456789abcdef";
    let request = LaunchRequest {
        unique,
        worker: &built.worker,
        dry_run: false,
    };
    let job = built.backend.start_worker_job(&request).await.unwrap();
    let rows = down_pool("dummy", built.backend.as_ref(), true, Duration::ZERO).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(rows[0].name.contains(&job.id), "{rows:?}");
    let rows = down_pool("dummy", built.backend.as_ref(), false, Duration::ZERO).await;
    assert!(rows.iter().all(|r| !r.failed), "{rows:?}");
    let live = built.backend.get_worker_jobs().await.unwrap();
    assert!(
        live.iter().all(|j| !j.state.is_capacity()),
        "down stopped it: {live:?}"
    );
    // 512m each: the simulated server gives a bundle that asks no memory 2 GiB, more than a
    // dummy worker's 1 GiB.
    let trace = "time,cpus,memory,duration\n0,1,512m,60\n10,4,512m,60\n20,5,512m,60\n";
    let workload = Workload::parse(trace).unwrap();
    let policies: Vec<_> = layout.pools.iter().map(|p| p.policy.clone()).collect();
    let report = simulate(&workload, &policies, &SimConfig::default()).unwrap();
    assert_eq!(
        report.pools[0].bundles_run, 2,
        "the 5-slot bundle fits no dummy worker"
    );
}
