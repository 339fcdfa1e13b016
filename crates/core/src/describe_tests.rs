//! The backend contract's `describe`, through the local backend (the contract has no backend
//! of its own).

use crate::describe::*;
use crate::local::LocalConfig;
use serde_json::Value;

fn parse(kind: &dyn BackendKind, args: &[&str]) -> Value {
    let matches = kind
        .command()
        .no_binary_name(true)
        .try_get_matches_from(args)
        .unwrap();
    kind.given_flags(&matches).unwrap()
}

#[test]
fn only_the_flags_given_are_layered() {
    let given = parse(&crate::local::KIND, &["--cpus", "4", "--state-dir", "/s"]);
    assert_eq!(given, serde_json::json!({"cpus": 4, "state_dir": "/s"}));
    assert_eq!(parse(&crate::local::KIND, &[]), serde_json::json!({}));
}

#[test]
fn defaults_are_the_flags_defaults() {
    let local = LocalConfig::default();
    assert_eq!((local.cpus, local.gpus, local.memory_mb), (1, 0, 2048));
    let schema = crate::local::KIND.schema();
    assert_eq!(schema.fields, ["cpus", "gpus", "memory_mb", "state_dir"]);
    assert_eq!(schema.defaults["memory_mb"], 2048);
    assert_eq!(
        schema.docs["memory_mb"],
        "Memory per worker in MiB [default: 2048]"
    );
    assert!(schema.docs["state_dir"].ends_with(
        "[default: $STATE_DIRECTORY/local under systemd, else $XDG_STATE_HOME/codalab-wm/local]"
    ));
}

#[test]
fn a_table_is_read_with_the_config_type() {
    let kind: &dyn BackendKind = &crate::local::KIND;
    let figment = figment::Figment::from(figment::providers::Serialized::default(
        "local",
        serde_json::json!({"cpus": 3}),
    ));
    let table = kind.read(&figment, false).unwrap();
    assert_eq!(table.shape.cpus, 3);
    assert_eq!(table.get("memory_mb"), Some(&serde_json::json!(2048)));
    let error = kind.validate(&serde_json::json!({"cpu": 3})).unwrap_err();
    assert!(error.contains("unknown field `cpu`"), "{error}");
    let figment = figment::Figment::from(figment::providers::Serialized::default(
        "local",
        serde_json::json!({"cpu": 3}),
    ));
    let error = kind.read(&figment, false).unwrap_err().to_string();
    assert!(
        error.contains("`local.cpu` is not a setting (did you mean `cpus`?)"),
        "{error}"
    );
}

#[test]
fn a_pool_gets_its_own_state_dir() {
    let kind: &dyn BackendKind = &crate::local::KIND;
    let placement = |pool| Placement {
        pool,
        password_file: None,
    };
    let defaults = kind.placement_defaults(placement(Some("cpu")));
    assert!(
        defaults["state_dir"]
            .as_str()
            .unwrap()
            .ends_with("/local/cpu")
    );
    assert!(kind.placement_defaults(placement(None)).is_empty());
}
