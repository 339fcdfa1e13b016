//! Request equivalence with the official Python client: for each flag combination in
//! `tests/data/insert-vectors.json` (captured once by `tests/data/make_insert_vectors.py`
//! from `google-cloud-compute`'s REST transport, see its header), the backend's
//! `instances.insert` body equals the client's field for field, and its path is the same.
//! Both bodies also pass the discovery document's checks (the fake's validator). No network.

use codalab_wm_fake_gce::discovery::Discovery;
use codalab_wm_gce::GceConfig;
use codalab_wm_gce::spec::instance_resource;
use serde_json::{Map, Value};

const VECTORS: &str = include_str!("../data/insert-vectors.json");

/// The backend's config of a vector's flags (`zone` is the one zone of `zones`).
fn config(flags: &Value) -> (GceConfig, String) {
    let mut table: Map<String, Value> = flags.as_object().unwrap().clone();
    let zone = table.remove("zone").unwrap().as_str().unwrap().to_owned();
    table.retain(|_, v| !v.is_null());
    table.insert("project".into(), "test-project".into());
    table.insert("zones".into(), vec![zone.clone()].into());
    table.insert("password_secret".into(), "codalab-password".into());
    let config: GceConfig = serde_json::from_value(Value::Object(table)).unwrap();
    config.validate().unwrap();
    (config, zone)
}

/// The first path at which `ours` and `theirs` differ, with both values.
fn first_difference(ours: &Value, theirs: &Value, at: &str) -> Option<String> {
    match (ours, theirs) {
        (Value::Object(a), Value::Object(b)) => a.keys().chain(b.keys()).find_map(|k| {
            let (x, y) = (
                a.get(k).unwrap_or(&Value::Null),
                b.get(k).unwrap_or(&Value::Null),
            );
            first_difference(x, y, &format!("{at}.{k}"))
        }),
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .enumerate()
            .find_map(|(i, (x, y))| first_difference(x, y, &format!("{at}[{i}]"))),
        _ if ours == theirs => None,
        _ => Some(format!("{at}: ours {ours}, the official client's {theirs}")),
    }
}

#[test]
fn insert_bodies_equal_the_official_clients_field_for_field() {
    let vectors: Value = serde_json::from_str(VECTORS).unwrap();
    let unique = vectors["unique"].as_str().unwrap();
    let cases = vectors["vectors"].as_array().unwrap();
    assert_eq!(cases.len(), 4);
    let doc = Discovery::compute();
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let (config, zone) = config(&case["flags"]);
        let ours = serde_json::to_value(instance_resource(
            &config,
            &zone,
            unique,
            "STARTUP_SCRIPT".into(),
        ))
        .unwrap();
        let theirs = &case["request"]["body"];
        if let Some(difference) = first_difference(&ours, theirs, "body") {
            panic!("{name}: {difference}");
        }
        assert_eq!(ours, *theirs, "{name}");
        let path = format!("/compute/v1/projects/test-project/zones/{zone}/instances");
        assert_eq!(case["request"]["path"], path.as_str(), "{name}");
        assert_eq!(case["request"]["method"], "POST", "{name}");
        let method = doc.method("compute.instances.insert").unwrap();
        doc.check_body(method, Some(&ours))
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
    }
}

#[test]
fn a_difference_is_named_by_its_field() {
    let ours =
        serde_json::json!({"scheduling": {"provisioningModel": "SPOT"}, "disks": [{"boot": true}]});
    let theirs = serde_json::json!({"scheduling": {"provisioningModel": "STANDARD"}, "disks": [{"boot": true}]});
    let difference = first_difference(&ours, &theirs, "body").unwrap();
    assert!(
        difference.starts_with("body.scheduling.provisioningModel:"),
        "{difference}"
    );
    assert_eq!(first_difference(&ours, &ours, "body"), None);
}
