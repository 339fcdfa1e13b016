//! Property tests for the parsers that read what the CodaLab server sends: arbitrary JSON
//! documents (bundle pages, `/rest/user` and `.count` replies), bundle-shaped documents with
//! arbitrary field values, and arbitrary size strings.
//! They never panic, and what they return keeps its invariants. (The same parsers are also
//! fuzzed with cargo-fuzz: `cargo xtask fuzz`; these run with every `cargo test`.)

use codalab_wm_core::codalab::jsonapi::{parse_bundles, parse_count, parse_user_name};
use codalab_wm_core::size::{HumanBytes, parse_size};
use proptest::prelude::*;
use serde_json::{Value, json};

/// Any JSON value, a few levels deep.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::String),
        "(request_cpus|request_memory|uuid|data|metadata|attributes)".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::hash_map(
                "(data|included|attributes|metadata|uuid|id|type|users|relationships|owner|user_name|[a-z_]{1,8})",
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A value a CodaLab metadata field might (mis)hold.
fn field_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        "[0-9]{0,4}(\\.[0-9]{1,3})?[kmgtKMGT]?".prop_map(Value::String),
        ".{0,10}".prop_map(Value::String),
        any::<bool>().prop_map(Value::Bool),
        Just(json!([])),
        Just(json!({})),
    ]
}

/// A search reply whose bundles carry arbitrary resource requests.
fn bundle_document() -> impl Strategy<Value = Value> {
    let bundle = (
        prop::option::of("0x[0-9a-f]{32}"),
        prop::collection::hash_map(
            "(request_cpus|request_gpus|request_memory|request_disk|request_time|request_queue|tags|request_priority)",
            field_value(),
            0..8,
        ),
    )
        .prop_map(|(uuid, metadata)| {
            let mut attributes = json!({"metadata": Value::Object(metadata.into_iter().collect())});
            if let Some(uuid) = uuid {
                attributes["uuid"] = json!(uuid);
            }
            json!({"type": "bundles", "attributes": attributes,
                   "relationships": {"owner": {"data": {"type": "users", "id": "0x1"}}}})
        });
    prop::collection::vec(bundle, 0..8).prop_map(|data| {
        json!({"data": data, "included": [{"type": "users", "id": "0x1", "attributes": {"user_name": "alice"}}]})
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_json_document_parses_or_is_refused(document in any_json()) {
        if let Ok((bundles, skipped)) = parse_bundles(&document) {
            let entries = document["data"].as_array().map_or(0, Vec::len);
            prop_assert_eq!(bundles.len() + skipped.len(), entries);
        }
        let _ = parse_user_name(&document);
    }

    #[test]
    fn a_count_reply_is_a_count_exactly_when_meta_result_is_one(
        document in any_json(),
        count in any::<u32>(),
    ) {
        let text = document.to_string();
        let expected = document.pointer("/meta/result").and_then(Value::as_u64);
        prop_assert_eq!(parse_count(&text).ok().map(|n| n as u64), expected);
        let reply = json!({"meta": {"result": count, "version": "1.7.5"}}).to_string();
        prop_assert_eq!(parse_count(&reply), Ok(count as usize));
    }

    #[test]
    fn every_bundle_is_kept_or_skipped_with_a_reason(document in bundle_document()) {
        let (bundles, skipped) = parse_bundles(&document).expect("a list of bundles");
        let entries = document["data"].as_array().map_or(0, Vec::len);
        prop_assert_eq!(bundles.len() + skipped.len(), entries);
        for skip in &skipped {
            prop_assert!(!skip.reason.is_empty());
            prop_assert!(skip.uuid == "?" || skip.uuid.starts_with("0x"), "{:?}", skip);
        }
        for bundle in &bundles {
            prop_assert!(bundle.uuid.starts_with("0x"));
        }
    }

    #[test]
    fn arbitrary_bytes_are_never_a_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        if let Ok(document) = serde_json::from_slice::<Value>(&bytes) {
            let _ = parse_bundles(&document);
        }
        let _ = parse_size(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn size_strings_parse_or_are_refused_with_the_input(text in ".{0,16}") {
        match parse_size(&text) {
            Ok(bytes) => {
                let _ = HumanBytes(bytes).to_string();
            }
            Err(error) => prop_assert_eq!(error.input, text),
        }
    }

    #[test]
    fn sizes_with_units_scale_by_powers_of_1024(n in 0u64..1_000_000, unit in 0usize..4) {
        let (suffix, factor) = [("k", 1u64 << 10), ("m", 1 << 20), ("g", 1 << 30), ("t", 1 << 40)][unit];
        prop_assert_eq!(parse_size(&format!("{n}{suffix}")), Ok(n * factor));
        prop_assert_eq!(parse_size(&format!(" {n}{} ", suffix.to_uppercase())), Ok(n * factor));
        prop_assert_eq!(parse_size(&n.to_string()), Ok(n));
    }
}
