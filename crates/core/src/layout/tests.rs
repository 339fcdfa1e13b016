//! The rules of [`Layout`], table-tested on settings as a config file gives them (the `local`
//! backend, the one core has).

use super::*;
use crate::describe::Entry;
use crate::settings::PoolRules;
use serde_json::json;

fn catalogue() -> Catalogue {
    Catalogue::new(vec![
        Entry {
            name: "local",
            table: "local",
            feature: "",
            kind: Some(&crate::local::KIND),
        },
        Entry {
            name: "slurm-batch",
            table: "slurm_batch",
            feature: "slurm",
            kind: None,
        },
    ])
}

fn pool(name: &str, backend: &str, tables: serde_json::Value) -> PoolSettings {
    let rules: PoolRules =
        serde_json::from_value(serde_json::json!({"name": name, "backend": backend})).unwrap();
    let tables = match tables {
        serde_json::Value::Object(map) => map.into_iter().collect(),
        _ => Default::default(),
    };
    PoolSettings { rules, tables }
}

fn settings(pools: Vec<PoolSettings>) -> Settings {
    Settings {
        pools,
        ..Settings::default()
    }
}

fn error(settings: &Settings) -> String {
    Layout::pools(settings, &catalogue(), Reading::Checked)
        .unwrap_err()
        .to_string()
}

#[test]
fn pools_each_get_their_own_state_dir_and_the_pool_rules() {
    let settings = settings(vec![
        pool("cpu", "local", serde_json::json!({"local": {"cpus": 2}})),
        pool("big", "local", serde_json::json!({})),
    ]);
    let layout = Layout::pools(&settings, &catalogue(), Reading::Checked).unwrap();
    assert!(!layout.single);
    let dirs: Vec<String> = layout
        .pools
        .iter()
        .map(|p| {
            p.table
                .get("state_dir")
                .unwrap()
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert!(
        dirs[0].ends_with("/local/cpu") && dirs[1].ends_with("/local/big"),
        "{dirs:?}"
    );
    assert_eq!(layout.pools[0].policy.shape.cpus, 2);
    assert_eq!(
        layout.pools[1].policy.max,
        PolicyConfig::default().max_workers
    );
}

/// A dry run reaches every pool's backend as read-only (a dry run's listing deleted
/// finished pods and reaped instances).
#[test]
fn a_dry_run_builds_read_only_backends() {
    for dry_run in [false, true] {
        let settings = Settings {
            dry_run,
            ..settings(vec![pool("cpu", "local", serde_json::json!({}))])
        };
        let layout = Layout::pools(&settings, &catalogue(), Reading::Checked).unwrap();
        assert_eq!(layout.pools[0].read_only, dry_run);
    }
}

#[test]
fn every_broken_combination_is_named() {
    let same_dir = serde_json::json!({"local": {"state_dir": "/tmp/x"}});
    let cases: Vec<(Settings, &str)> = vec![
        (
            settings(vec![pool("a b", "local", serde_json::json!({}))]),
            "pool name `a b` must be letters, digits and `_`",
        ),
        (
            settings(vec![pool("a", "lokal", serde_json::json!({}))]),
            "pool a: unknown backend `lokal`: use one of local, slurm-batch",
        ),
        (
            settings(vec![pool("a", "slurm-batch", serde_json::json!({}))]),
            "pool a: backend `slurm-batch` is not compiled in: rebuild with `--features slurm`",
        ),
        (
            settings(vec![pool(
                "a",
                "local",
                serde_json::json!({"slurm_batch": {}}),
            )]),
            "pool a: [pools.slurm_batch] does not belong to backend local; its settings go in [pools.local]",
        ),
        (
            settings(vec![pool("a", "local", serde_json::json!({"maxx": 3}))]),
            "`pools.maxx` of pool `a` is not a setting (did you mean `max`?)",
        ),
        (
            settings(vec![pool(
                "a",
                "local",
                serde_json::json!({"local": {"cpu": 1}}),
            )]),
            "pool a: [local] settings: `local.cpu` is not a setting (did you mean `cpus`?)",
        ),
        (
            settings(vec![
                pool("a", "local", serde_json::json!({})),
                pool("a", "local", serde_json::json!({})),
            ]),
            "two pools are named a",
        ),
        (
            settings(vec![
                pool("a", "local", same_dir.clone()),
                pool("b", "local", same_dir),
            ]),
            "pools a and b would own each other's jobs: the same state_dir",
        ),
    ];
    for (settings, expected) in cases {
        let said = error(&settings);
        assert!(
            said.contains(expected),
            "expected {expected:?}, got {said:?}"
        );
    }
    let mut tagged = settings(vec![pool("a", "local", serde_json::json!({}))]);
    tagged.worker.tag = Some("gpu".into());
    assert!(error(&tagged).contains("set `tag` and `tag_exclusive` per pool"));
}

#[test]
fn the_single_mode_takes_the_global_limits_and_refuses_bad_ones() {
    let layers = Layers {
        file: None,
        flags: Figment::new(),
        backend: Some((&crate::local::KIND, serde_json::json!({"cpus": 3}))),
    };
    let mut settings = settings(Vec::new());
    settings.max_workers = 4;
    let layout = Layout::new(&settings, &layers, &catalogue()).unwrap();
    let only = &layout.pools[0];
    assert!(layout.single);
    assert_eq!((only.policy.name.as_str(), only.policy.max), ("local", 4));
    assert_eq!(only.policy.shape.cpus, 3);
    settings.min_workers = 5;
    let said = Layout::new(&settings, &layers, &catalogue())
        .unwrap_err()
        .to_string();
    assert!(
        said.contains("--max-workers (4) is less than --min-workers (5)"),
        "{said}"
    );
    settings.min_workers = 0;
    settings.pools = vec![pool("a", "local", serde_json::json!({}))];
    let said = Layout::new(&settings, &layers, &catalogue())
        .unwrap_err()
        .to_string();
    assert!(said.contains("not both"), "{said}");
    let none = Layers {
        backend: None,
        ..layers
    };
    settings.pools.clear();
    let said = Layout::new(&settings, &none, &catalogue())
        .unwrap_err()
        .to_string();
    assert!(
        said.contains("no backend given: name one of local, slurm-batch"),
        "{said}"
    );
}

/// Pool `name` of the local backend with the pool keys `rules` and `[pools.local]` `local`.
fn pool_with(name: &str, rules: serde_json::Value, local: serde_json::Value) -> PoolSettings {
    let mut keys = serde_json::json!({"name": name, "backend": "local"});
    if let (Some(keys), serde_json::Value::Object(rules)) = (keys.as_object_mut(), rules) {
        keys.extend(rules);
    }
    PoolSettings {
        rules: serde_json::from_value(keys).unwrap(),
        tables: [("local".to_owned(), local)].into_iter().collect(),
    }
}

#[test]
fn fallback_rules_that_cannot_work_are_refused_naming_the_pools() {
    // Review 2026-11-27 §8.

    let cases: Vec<(Vec<PoolSettings>, &str)> = vec![
        (
            vec![
                pool_with("a", json!({"fallback": "b"}), json!({})),
                pool_with("b", json!({"fallback": "a"}), json!({})),
            ],
            "pools fall back in a cycle: a → b → a (they can all be on their fallbacks at once",
        ),
        (
            vec![
                pool_with("a", json!({"fallback": "b"}), json!({})),
                pool_with("b", json!({"fallback": "c"}), json!({})),
                pool_with("c", json!({"fallback": "a"}), json!({})),
            ],
            "pools fall back in a cycle: a → b → c → a",
        ),
        (
            vec![
                pool_with(
                    "spot",
                    json!({"fallback": "std", "min_on_demand": 5}),
                    json!({}),
                ),
                pool_with("std", json!({"max": 3}), json!({})),
            ],
            "pool spot: min_on_demand 5 is above the max 3 of its fallback std",
        ),
        (
            vec![
                pool_with("spot", json!({"fallback": "std"}), json!({})),
                pool_with("std", json!({"launch_mode": "compat"}), json!({})),
            ],
            "pool spot: its fallback std is a compat pool (launch_mode = \"compat\")",
        ),
    ];
    for (pools, expected) in cases {
        let said = error(&settings(pools));
        assert!(
            said.contains(expected),
            "expected {expected:?}, got {said:?}"
        );
    }
    let fine = settings(vec![
        pool_with(
            "spot",
            json!({"fallback": "std", "min_on_demand": 2}),
            json!({}),
        ),
        pool_with("std", json!({"max": 3}), json!({})),
    ]);
    assert!(Layout::pools(&fine, &catalogue(), Reading::Checked).is_ok());
}

#[test]
fn a_fallback_that_fits_fewer_bundles_than_its_pool_is_warned_of() {
    let layout = |spot: serde_json::Value, std: serde_json::Value, std_local| {
        let settings = settings(vec![
            pool_with(
                "spot",
                spot,
                json!({"cpus": 4, "gpus": 1, "memory_mb": 16384}),
            ),
            pool_with("std", std, std_local),
        ]);
        Layout::pools(&settings, &catalogue(), Reading::Checked).unwrap()
    };
    let same = json!({"cpus": 4, "gpus": 1, "memory_mb": 16384});
    let covering = layout(json!({"fallback": "std"}), json!({}), same.clone());
    assert!(fallback_warnings(&covering.pools).is_empty());
    let smaller = layout(
        json!({"fallback": "std"}),
        json!({}),
        json!({"cpus": 2, "gpus": 0, "memory_mb": 16384}),
    );
    assert_eq!(
        fallback_warnings(&smaller.pools),
        [
            "pool spot: its fallback std has workers of 2 CPUs, 0 GPUs, 16384 MiB, less than the pool's 4 CPUs, 1 GPUs, 16384 MiB: the pool's bundles that need more wait for the pool"
        ]
    );
    let tagged = layout(json!({"fallback": "std", "tag": "gpu"}), json!({}), same);
    assert_eq!(
        fallback_warnings(&tagged.pools),
        [
            "pool spot: its fallback std has tag (none), not the pool's gpu: bundles with request_queue gpu do not run there"
        ]
    );
}

/// The rule of `cl-worker --preemptible`: whoever says the workers may be reclaimed.
#[test]
fn workers_are_preemptible_when_they_may_be_reclaimed() {
    // (admin's --worker-preemptible, the table says reclaimable, the pool has a fallback)
    let cases = [
        ((false, false, false), false),
        ((true, false, false), true),
        ((false, true, false), true),
        ((false, false, true), true),
        ((false, true, true), true),
        ((true, true, true), true),
    ];
    for ((admin, reclaimable, fallback), expected) in cases {
        assert_eq!(
            preemptible(admin, reclaimable, fallback),
            expected,
            "admin {admin}, reclaimable {reclaimable}, fallback {fallback}"
        );
    }
}

/// A pool with a `fallback` is the Spot side of a pair: its workers start preemptible, its
/// fallback's (and a plain local pool's) do not, unless the admin says so for all.
#[test]
fn the_spot_side_of_a_fallback_pair_starts_preemptible_workers() {
    let mut spot = pool("spot", "local", serde_json::json!({}));
    spot.rules.fallback = Some("ondemand".into());
    let pools = vec![spot, pool("ondemand", "local", serde_json::json!({}))];
    let layout = Layout::pools(&settings(pools.clone()), &catalogue(), Reading::Checked).unwrap();
    let flags: Vec<bool> = layout.pools.iter().map(|p| p.worker.preemptible).collect();
    assert_eq!(flags, [true, false]);
    let argv = layout.pools[0].worker.build_command("u", "d");
    assert_eq!(argv.last().map(String::as_str), Some("--preemptible"));

    let mut all = settings(pools);
    all.worker.preemptible = true;
    let layout = Layout::pools(&all, &catalogue(), Reading::Checked).unwrap();
    assert!(layout.pools.iter().all(|p| p.worker.preemptible));
}
