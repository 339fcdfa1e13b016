//! `cl-worker-manager simulate`, completions and the man page, as a user runs them.
//!
//! Golden files live in `tests/golden/`; regenerate them with
//! `UPDATE_GOLDEN=1 cargo test -p codalab-wm --test it simulate` and review the diff.

use codalab_wm_core::simulate::{
    BundleTemplate, PoissonRate, SimConfig, SimReport, Workload, simulate,
};
use codalab_wm_core::{LaunchMode, PoolPolicy, WorkerShape};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_cl-worker-manager");

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn manager(args: &[&str]) -> Output {
    let mut command = Command::new(BIN);
    command.args(args).env("NO_COLOR", "1");
    for (key, _) in std::env::vars() {
        if key.starts_with("CODALAB_WM_") {
            command.env_remove(key);
        }
    }
    let output = command.output().expect("run cl-worker-manager");
    assert!(
        output.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Runs the golden scenario; returns stdout and the SVG.
fn golden_run(dir: &Path, seed: &str) -> (Vec<u8>, Vec<u8>) {
    let golden = golden_dir();
    let svg = dir.join(format!("plot-{seed}.svg"));
    let output = manager(&[
        "--config",
        golden.join("pools.toml").to_str().unwrap(),
        "simulate",
        "--trace",
        golden.join("trace.csv").to_str().unwrap(),
        "--seed",
        seed,
        "--start-latency",
        "30-120",
        "--failure-rate",
        "0.1",
        "--stuck-rate",
        "0.1",
        "--drain-seconds",
        "7200",
        "--svg",
        svg.to_str().unwrap(),
    ]);
    (output.stdout, std::fs::read(svg).unwrap())
}

#[test]
fn golden_trace_text_and_svg_are_byte_identical_per_seed() {
    let dir = tempfile::tempdir().unwrap();
    let (text, svg) = golden_run(dir.path(), "8");
    let regenerate = "cargo test -p codalab-wm --features full --test it -- simulate::golden";
    codalab_wm_core::testing::check_generated(
        &golden_dir().join("simulate.txt"),
        std::str::from_utf8(&text).unwrap(),
        regenerate,
    );
    // The plot is the book's picture of `simulate --svg` (operate/simulate.md).
    let plot = super::support::repo().join("docs/src/images/simulate.svg");
    codalab_wm_core::testing::check_generated(
        &plot,
        std::str::from_utf8(&svg).unwrap(),
        regenerate,
    );
    let (again_text, again_svg) = golden_run(dir.path(), "8");
    assert_eq!(text, again_text, "same seed, same text");
    assert_eq!(svg, again_svg, "same seed, same SVG");
    let svg = String::from_utf8(svg).unwrap();
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(svg.trim_end().ends_with("</svg>"));
    for pool in ["cpu", "overflow", "gpu"] {
        assert!(svg.contains(&format!(">{pool}</text>")), "panel {pool}");
    }
    assert_eq!(svg.matches("<polyline").count(), 9, "3 lines per pool");
    let text = String::from_utf8(text).unwrap();
    assert!(text.contains("1 no pool can run"), "{text}");
}

#[test]
fn json_output_has_every_pool_and_the_same_figures() {
    let golden = golden_dir();
    let config = golden.join("pools.toml");
    let trace = golden.join("trace.csv");
    let output = manager(&[
        "--config",
        config.to_str().unwrap(),
        "simulate",
        "--trace",
        trace.to_str().unwrap(),
        "--set",
        "cpu.max=1",
        "--set",
        "gpu.pending_timeout=600",
        "--json",
    ]);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let pools = report["pools"].as_array().unwrap();
    let names: Vec<&str> = pools.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["cpu", "overflow", "gpu"]);
    assert_eq!(pools[0]["max"], 1, "--set cpu.max=1 applies");
    assert!(pools[0]["peak_workers"].as_u64().unwrap() <= 1);
    assert_eq!(pools[2]["shape"], "8 CPUs, 1 GPUs, 32.0 GiB");
    assert_eq!(report["bundles"], 37);
}

/// No pool ever has more jobs (pending + active) than its max, over seeds and settings:
/// bursts, pending timeouts with stuck jobs, failures with backoff, compat pools.
#[test]
fn no_pool_exceeds_its_max() {
    let shape = |cpus, gpus| WorkerShape::from_flags(cpus, gpus, 16 * 1024);
    let mix: Vec<BundleTemplate> = [
        "cpus=1,duration=300,weight=6",
        "cpus=4,duration=900,weight=2",
        "gpus=1,queue=gpu,duration=1200,weight=1",
    ]
    .iter()
    .map(|s| s.parse().unwrap())
    .collect();
    let variants: Vec<(&str, Vec<PoolPolicy>, SimConfig)> = vec![
        (
            "burst",
            vec![PoolPolicy {
                max: 7,
                max_launches_per_tick: 5,
                min_seconds_between_workers: 0,
                ..PoolPolicy::new("cpu", shape(4, 0))
            }],
            SimConfig::default(),
        ),
        (
            "pending timeout with stuck jobs and fallback",
            vec![
                PoolPolicy {
                    max: 4,
                    max_launches_per_tick: 4,
                    pending_timeout: Some(Duration::from_secs(120)),
                    min_seconds_between_workers: 0,
                    ..PoolPolicy::new("cheap", shape(4, 0))
                },
                PoolPolicy {
                    max: 3,
                    cost: 2.0,
                    max_launches_per_tick: 3,
                    pending_timeout: Some(Duration::from_secs(300)),
                    ..PoolPolicy::new("dear", shape(4, 0))
                },
                PoolPolicy {
                    max: 2,
                    tag: Some("gpu".into()),
                    tag_exclusive: true,
                    ..PoolPolicy::new("gpu", shape(8, 1))
                },
            ],
            SimConfig {
                stuck_rate: 0.3,
                failure_rate: 0.1,
                start_latency: (Duration::from_secs(10), Duration::from_secs(400)),
                ..SimConfig::default()
            },
        ),
        (
            "compat with min",
            vec![PoolPolicy {
                min: 2,
                max: 3,
                launch_mode: LaunchMode::Compat,
                ..PoolPolicy::new("compat", shape(4, 1))
            }],
            SimConfig {
                failure_rate: 0.2,
                worker_idle: Duration::from_secs(30),
                ..SimConfig::default()
            },
        ),
    ];
    for seed in 1..=6 {
        let workload = Workload::poisson(PoissonRate { per_second: 0.05 }, 400, &mix, seed);
        for (name, pools, config) in &variants {
            let config = SimConfig {
                seed,
                drain: Duration::from_secs(6 * 3600),
                ..config.clone()
            };
            let report = simulate(&workload, pools, &config).unwrap();
            assert_within_max(&report, pools, &format!("{name}, seed {seed}"));
        }
    }
}

fn assert_within_max(report: &SimReport, pools: &[PoolPolicy], what: &str) {
    let mut launched = 0;
    for (p, (pool, policy)) in report.pools.iter().zip(pools).enumerate() {
        assert!(
            pool.peak_workers <= policy.max as usize,
            "{what}: pool {} peaked at {} > max {}",
            pool.name,
            pool.peak_workers,
            policy.max
        );
        for (_, row) in report.series.rows() {
            assert!(row[3 * p + 1] <= policy.max, "{what}: {}", pool.name);
            assert!(
                row[3 * p + 2] <= row[3 * p + 1],
                "{what}: active within jobs"
            );
        }
        launched += pool.launches;
    }
    assert!(launched > 0, "{what}: something was launched");
}

#[test]
fn poisson_generator_is_deterministic_per_seed() {
    let mix = vec!["cpus=2,duration=60".parse().unwrap()];
    let rate: PoissonRate = "poisson:10".parse().unwrap();
    let a = Workload::poisson(rate, 1000, &mix, 11);
    assert_eq!(a, Workload::poisson(rate, 1000, &mix, 11));
    assert_ne!(a, Workload::poisson(rate, 1000, &mix, 12));
    let args = |seed| {
        manager(&[
            "--max-workers",
            "5",
            "simulate",
            "--arrivals",
            "poisson:10",
            "--bundles",
            "300",
            "--seed",
            seed,
            "--json",
        ])
        .stdout
    };
    assert_eq!(args("3"), args("3"));
    assert_ne!(args("3"), args("4"));
}

#[test]
fn help_says_what_simulate_answers_with_an_example() {
    let help = String::from_utf8(manager(&["simulate", "--help"]).stdout).unwrap();
    assert!(help.contains("what would these min/max/burst/timeout settings have done"));
    assert!(help.contains("simulate --trace last-week.csv"), "{help}");
}

#[test]
fn completions_name_backends_and_flags() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = String::from_utf8(manager(&["completions", shell]).stdout).unwrap();
        assert!(script.len() > 1000, "{shell}: short script");
        assert!(script.contains("slurm-batch"), "{shell}: no slurm-batch");
        assert!(script.contains("max-workers"), "{shell}: no --max-workers");
        assert!(script.contains("simulate"), "{shell}: no simulate");
    }
}

/// Every flag of upstream's `cl-worker-manager` is in the man page.
#[test]
fn man_page_mentions_every_upstream_global_flag() {
    let page = String::from_utf8(manager(&["man"]).stdout).unwrap();
    let page = page.replace("\\-", "-");
    assert!(page.starts_with(".ie") || page.contains(".TH"), "roff");
    let upstream = [
        "--server",
        "--temp-session",
        "--min-workers",
        "--max-workers",
        "--search",
        "--verbose",
        "--sleep-time",
        "--restart-after-seconds",
        "--no-prefilter",
        "--once",
        "--min-seconds-between-workers",
        "--password-file",
        "--exit-after-num-failed",
        "--worker-tag",
        "--worker-work-dir-prefix",
        "--worker-max-work-dir-size",
        "--worker-delete-work-dir-on-exit",
        "--worker-idle-seconds",
        "--worker-download-dependencies-max-retries",
        "--worker-checkin-frequency-seconds",
        "--worker-exit-after-num-runs",
        "--worker-pass-down-termination",
        "--worker-exit-on-exception",
        "--worker-tag-exclusive",
        "--worker-group",
        "--worker-executable",
        "--worker-shared-memory-size-gb",
        "--worker-preemptible",
    ];
    let missing: Vec<&str> = upstream
        .iter()
        .copied()
        .filter(|flag| !page.contains(flag))
        .collect();
    assert!(missing.is_empty(), "missing from the man page: {missing:?}");
    for subcommand in ["slurm-batch", "simulate", "completions"] {
        assert!(page.contains(subcommand), "{subcommand}");
    }
}

/// Two priced pools (a free queued Slurm partition and a paid cloud), as an admin asks
/// "what would spilling have cost?": the CLI's `--platform` and `--set spill_after`.
#[test]
fn spill_after_and_a_queued_platform_are_what_ifs_with_a_cost_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("wm.toml");
    std::fs::write(
        &config,
        "[[pools]]\nname = \"slurm\"\nbackend = \"local\"\nmax = 100\nmax_launches_per_tick = 10\n\
         [pools.local]\ncpus = 4\nstate_dir = \"/tmp/a\"\n\
         [[pools]]\nname = \"cloud\"\nbackend = \"local\"\nmax = 10\nmax_launches_per_tick = 10\n\
         cost_per_hour = 0.8\n[pools.local]\ncpus = 4\nstate_dir = \"/tmp/b\"\n",
    )
    .unwrap();
    // 200 bundles on the two pools, and `extra`.
    let simulate = |extra: &[&str]| {
        let mut args = vec!["--config", config.to_str().unwrap(), "simulate"];
        args.extend(["--arrivals", "poisson:2", "--bundles", "200"]);
        args.extend_from_slice(extra);
        manager(&args)
    };
    let run = |spill: &str| {
        let output = simulate(&[
            "--platform",
            "slurm:latency=30-60,busy=7200/3600",
            "--set",
            &format!("slurm.spill_after={spill}"),
            "--json",
        ]);
        serde_json::from_slice::<serde_json::Value>(&output.stdout).unwrap()
    };
    let hours = |report: &serde_json::Value, pool: usize| {
        report["pools"][pool]["worker_hours"].as_f64().unwrap()
    };
    let (stays, spills) = (run(""), run("300"));
    // Without spill_after (`--set slurm.spill_after=` removes it) the paid pool buys nothing while the free one has room (max 100);
    // with it, the bundles that meet the busy hour spill, and the paid pool has a cost.
    assert_eq!(hours(&stays, 1), 0.0, "{stays}");
    assert!(hours(&spills, 1) > 0.0, "{spills}");
    assert!(spills["pools"][1]["cost"].as_f64().unwrap() > 0.0);
    assert!(
        stays["pools"][0].get("cost").is_none(),
        "a free pool has no cost"
    );
    let p90 = |r: &serde_json::Value| r["total_wait"]["p90_seconds"].as_f64().unwrap();
    assert!(
        p90(&spills) < p90(&stays),
        "{} vs {}",
        p90(&spills),
        p90(&stays)
    );
    // A platform that reclaims active workers loses the runs on them, and says so.
    let output = simulate(&["--platform", "cloud:reclaim=600", "--set", "slurm.max=0"]);
    let text = String::from_utf8_lossy(&output.stdout);
    let lost = (text.split(" lost with a reclaimed worker").next())
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|n| n.parse::<u32>().ok())
        .unwrap_or_else(|| panic!("no lost runs in:\n{text}"));
    assert!(lost > 0, "{text}");
    assert!(
        text.contains(&format!(
            "runs lost with reclaimed workers (worker_offline on the server, not staged again): cloud {lost}\n"
        )),
        "{text}"
    );
    // The same with workers started preemptible (`--worker-preemptible`, as the manager starts
    // them wherever the platform may reclaim them): the server stages their runs again.
    let output = Command::new(BIN)
        .args(["--config", config.to_str().unwrap(), "--worker-preemptible"])
        .args(["simulate", "--arrivals", "poisson:2", "--bundles", "200"])
        .args(["--platform", "cloud:reclaim=600", "--set", "slurm.max=0"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(!text.contains("lost"), "{text}");
    assert!(
        text.contains(
            "runs of reclaimed preemptible workers staged again and run elsewhere: cloud "
        ),
        "{text}"
    );
    // A bad platform names the flag and the key.
    let bad = Command::new(BIN)
        .args([
            "--config",
            config.to_str().unwrap(),
            "simulate",
            "--arrivals",
            "poisson:2",
        ])
        .args(["--platform", "slurm:busy=60"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success());
    assert!(
        stderr.contains("--platform slurm:busy=60: busy `60`: expected EVERY/FOR seconds"),
        "{stderr}"
    );
}

/// `--set` changes the config as the file would: any key of a pool, its backend's table as
/// `POOL.TABLE.KEY`, a top-level key without `[[pools]]`, read and checked as the file is.
#[test]
fn set_reads_any_key_as_the_file_does() {
    let config = golden_dir().join("pools.toml");
    let trace = golden_dir().join("trace.csv");
    let with = |sets: &[&str]| {
        let mut args = vec!["--config", config.to_str().unwrap(), "simulate"];
        args.extend(["--trace", trace.to_str().unwrap(), "--json"]);
        for set in sets {
            args.extend(["--set", set]);
        }
        args.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>()
    };
    let args = with(&[
        "cpu.slurm_batch.cpus=8",
        "gpu.max=1",
        "overflow.launch_mode=compat",
    ]);
    let output = manager(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["pools"][0]["shape"], "8 CPUs, 0 GPUs, 8.0 GiB");
    assert_eq!(report["pools"][2]["max"], 1);

    let args = with(&["cpu.max=lots"]);
    let output = Command::new(BIN).args(&args).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("max") && stderr.contains("--set"),
        "a bad value names the key and --set: {stderr}"
    );
    let args = with(&["cpu.launch_mode=compat"]);
    let output = Command::new(BIN).args(&args).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("pool cpu: pending_timeout needs launch_mode = \"target\""),
        "the pool's own checks hold: {stderr}"
    );

    let output = manager(&[
        "simulate",
        "--arrivals",
        "poisson:2",
        "--bundles",
        "20",
        "--set",
        "max_workers=2",
        "--set",
        "local.cpus=3",
        "--json",
    ]);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        report["pools"][0]["max"], 2,
        "a top-level key without [[pools]]"
    );
    let shape = report["pools"][0]["shape"].as_str().unwrap();
    assert!(shape.starts_with("3 CPUs"), "the backend's table: {shape}");
    let other = Command::new(BIN)
        .args(["simulate", "--arrivals", "poisson:2", "--bundles", "5"])
        .args(["--set", "slurm_batch.cpus=3"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&other.stderr);
    assert!(
        !other.status.success() && stderr.contains("whose table is [local]"),
        "another backend's table is refused, not ignored: {stderr}"
    );
}
