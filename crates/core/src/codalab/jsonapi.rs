//! Parsing the JSON:API documents the CodaLab REST server returns.

use crate::bundle::StagedBundle;
use crate::size::parse_size;
use serde_json::Value;
use std::collections::HashMap;

/// A bundle that was left out of a search result because a field is malformed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedBundle {
    /// The bundle uuid, or `?` when even that is missing.
    pub uuid: String,
    /// What is wrong, naming the field.
    pub reason: String,
}

/// Parses a `/rest/bundles` search result. Bundles with a malformed field are returned in the
/// second list with the reason; only a document that is not a bundle list at all is an error.
pub fn parse_bundles(document: &Value) -> Result<(Vec<StagedBundle>, Vec<SkippedBundle>), String> {
    let data = document
        .get("data")
        .ok_or("no `data` member")?
        .as_array()
        .ok_or("`data` is not a list")?;
    let owners = owner_names(document);
    let mut bundles = Vec::with_capacity(data.len());
    let mut skipped = Vec::new();
    for resource in data {
        match parse_bundle(resource, &owners) {
            Ok(bundle) => bundles.push(bundle),
            Err((uuid, reason)) => skipped.push(SkippedBundle { uuid, reason }),
        }
    }
    Ok((bundles, skipped))
}

fn owner_names(document: &Value) -> HashMap<&str, &str> {
    let mut owners = HashMap::new();
    for resource in document
        .get("included")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if resource.get("type").and_then(Value::as_str) != Some("users") {
            continue;
        }
        let id = resource.get("id").and_then(Value::as_str);
        let name = resource
            .pointer("/attributes/user_name")
            .and_then(Value::as_str);
        if let (Some(id), Some(name)) = (id, name) {
            owners.insert(id, name);
        }
    }
    owners
}

fn parse_bundle(
    resource: &Value,
    owners: &HashMap<&str, &str>,
) -> Result<StagedBundle, (String, String)> {
    let attributes = resource.get("attributes");
    let uuid = attributes
        .and_then(|a| a.get("uuid"))
        .or_else(|| resource.get("id"))
        .and_then(Value::as_str)
        .ok_or_else(|| ("?".to_owned(), "missing field `uuid`".to_owned()))?
        .to_owned();
    let fail = |field: &str, message: String| (uuid.clone(), format!("field `{field}`: {message}"));
    let metadata = attributes
        .and_then(|a| a.get("metadata"))
        .filter(|m| !m.is_null());
    let metadata = match metadata {
        Some(m) if m.is_object() => Some(m),
        Some(_) => return Err(fail("metadata", "not an object".into())),
        None => None,
    };
    let field = |name: &str| metadata.and_then(|m| m.get(name)).filter(|v| !v.is_null());
    let count = |name: &str| -> Result<u32, (String, String)> {
        match field(name) {
            None => Ok(0),
            Some(Value::Number(n)) => n
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| fail(name, format!("`{n}` is not a count"))),
            Some(Value::String(s)) if s.is_empty() => Ok(0),
            Some(Value::String(s)) => s
                .trim()
                .parse()
                .map_err(|_| fail(name, format!("`{s}` is not a count"))),
            Some(other) => Err(fail(name, format!("`{other}` is not a count"))),
        }
    };
    let request_cpus = count("request_cpus")?;
    let request_gpus = count("request_gpus")?;
    let request_memory = match field("request_memory") {
        None => 0,
        Some(Value::String(s)) => {
            parse_size(s).map_err(|e| fail("request_memory", e.to_string()))?
        }
        Some(Value::Number(n)) => n
            .as_u64()
            .ok_or_else(|| fail("request_memory", format!("`{n}` is not a size")))?,
        Some(other) => return Err(fail("request_memory", format!("`{other}` is not a size"))),
    };
    let request_queue = match field("request_queue") {
        None => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => return Err(fail("request_queue", format!("`{other}` is not a string"))),
    };
    let tags = match field("tags") {
        None => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        Some(other) => return Err(fail("tags", format!("`{other}` is not a list"))),
    };
    let created = field("created").and_then(Value::as_i64);
    let owner = resource
        .pointer("/relationships/owner/data/id")
        .and_then(Value::as_str)
        .and_then(|id| owners.get(id))
        .map(|name| (*name).to_owned());
    Ok(StagedBundle {
        uuid,
        owner,
        request_cpus,
        request_gpus,
        request_memory,
        request_queue,
        tags,
        created,
    })
}

/// The user name in a `/rest/user` document.
pub fn parse_user_name(document: &Value) -> Option<&str> {
    document
        .pointer("/data/attributes/user_name")
        .and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const RECORDED: &str = include_str!("../../tests/samples/bundles-staged-mine-gpuq.json");

    #[test]
    fn parses_the_recorded_server_reply() {
        let document: Value = serde_json::from_str(RECORDED).unwrap();
        let (bundles, skipped) = parse_bundles(&document).unwrap();
        assert!(skipped.is_empty());
        assert_eq!(bundles.len(), 1);
        let bundle = &bundles[0];
        assert_eq!(bundle.uuid, "0xcab15acbe7924834bb26345edf52a39d");
        assert_eq!(bundle.owner.as_deref(), Some("alice"));
        assert_eq!((bundle.request_cpus, bundle.request_gpus), (2, 1));
        assert_eq!(bundle.request_memory, 4 << 30);
        assert_eq!(bundle.request_queue, "gpuq");
        assert_eq!(bundle.tags, ["exp1"]);
        assert_eq!(bundle.created, Some(1795294308));
    }

    #[test]
    fn empty_result() {
        let (bundles, skipped) =
            parse_bundles(&json!({"data": [], "meta": {"version": "1.7.5"}})).unwrap();
        assert!(bundles.is_empty() && skipped.is_empty());
    }

    #[test]
    fn missing_fields_mean_nothing_requested() {
        let document = json!({"data": [{"type": "bundles", "id": "0x1", "attributes": {"uuid": "0x1", "metadata": {}}}]});
        let (bundles, _) = parse_bundles(&document).unwrap();
        assert_eq!(bundles[0], StagedBundle::new("0x1"));
    }

    #[test]
    fn malformed_bundles_are_skipped_with_the_field_named() {
        let bad = |metadata: Value| json!({"attributes": {"uuid": "0xbad", "metadata": metadata}});
        let good = json!({"attributes": {"uuid": "0xgood", "metadata": {"request_cpus": 1}}});
        let cases = [
            (
                json!({"request_cpus": "many"}),
                "field `request_cpus`: `many` is not a count",
            ),
            (
                json!({"request_cpus": -1}),
                "field `request_cpus`: `-1` is not a count",
            ),
            (
                json!({"request_gpus": [1]}),
                "field `request_gpus`: `[1]` is not a count",
            ),
            (
                json!({"request_memory": "4 gigs"}),
                "field `request_memory`: invalid size `4 gigs`",
            ),
            (
                json!({"request_queue": 7}),
                "field `request_queue`: `7` is not a string",
            ),
            (json!({"tags": "x"}), "field `tags`: `\"x\"` is not a list"),
            (json!("nope"), "field `metadata`: not an object"),
        ];
        for (metadata, reason) in cases {
            let document = json!({"data": [bad(metadata), good.clone()]});
            let (bundles, skipped) = parse_bundles(&document).unwrap();
            assert_eq!(bundles.len(), 1, "{reason}");
            assert_eq!(skipped[0].uuid, "0xbad");
            assert!(
                skipped[0].reason.starts_with(reason),
                "{} vs {reason}",
                skipped[0].reason
            );
        }
    }

    #[test]
    fn numeric_strings_are_accepted() {
        let document = json!({"data": [{"attributes": {"uuid": "0x1", "metadata": {"request_cpus": "2", "request_gpus": "", "request_memory": 1024}}}]});
        let (bundles, _) = parse_bundles(&document).unwrap();
        assert_eq!(
            (
                bundles[0].request_cpus,
                bundles[0].request_gpus,
                bundles[0].request_memory
            ),
            (2, 0, 1024)
        );
    }

    #[test]
    fn not_a_bundle_list_is_an_error() {
        assert_eq!(
            parse_bundles(&json!({"error": "x"})).unwrap_err(),
            "no `data` member"
        );
        assert_eq!(
            parse_bundles(&json!({"data": {}})).unwrap_err(),
            "`data` is not a list"
        );
    }

    #[test]
    fn user_name() {
        let document =
            json!({"data": {"type": "users", "id": "0", "attributes": {"user_name": "codalab"}}});
        assert_eq!(parse_user_name(&document), Some("codalab"));
    }
}
