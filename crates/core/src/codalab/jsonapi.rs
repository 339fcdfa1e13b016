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
    /// Its place among the results of its reply (0-based): where it stands between the
    /// bundles read.
    pub index: usize,
}

/// Parses a `/rest/bundles` search result. Bundles with a malformed field are returned in the
/// second list with the reason; only a document that is not a bundle list at all is an error.
pub fn parse_bundles(document: &Value) -> Result<(Vec<StagedBundle>, Vec<SkippedBundle>), String> {
    let data = data(document)?;
    let owners = owner_names(document);
    let mut bundles = Vec::with_capacity(data.len());
    let mut skipped = Vec::new();
    for (index, resource) in data.iter().enumerate() {
        match parse_bundle(resource, &owners) {
            Ok(bundle) => bundles.push(bundle),
            Err((uuid, reason)) => skipped.push(SkippedBundle {
                uuid,
                reason,
                index,
            }),
        }
    }
    Ok((bundles, skipped))
}

/// A bundle as the server reports it by uuid once its run has left the workers: its request,
/// owner and `created`, its state and the server's times (the history's runs,
/// [`crate::history`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RunInfo {
    /// Its request, owner and `created`.
    pub bundle: StagedBundle,
    /// Its state (`ready`, `failed`, `killed`, `staged`, `running` …).
    pub state: String,
    /// When a worker took it (`started`), seconds since the epoch.
    pub started: Option<f64>,
    /// Its last update (`last_updated`): for a run that ended, when it ended.
    pub last_updated: Option<f64>,
}

/// Parses a `/rest/bundles` search by uuid into [`RunInfo`]s. A bundle with a malformed
/// request field or no state is left out (the history gives it up as not listed).
pub fn parse_runs(document: &Value) -> Result<Vec<RunInfo>, String> {
    let data = data(document)?;
    let owners = owner_names(document);
    let mut runs = Vec::with_capacity(data.len());
    for resource in data {
        let Ok(bundle) = parse_bundle(resource, &owners) else {
            continue;
        };
        let attributes = resource.get("attributes");
        let Some(state) = attributes
            .and_then(|a| a.get("state"))
            .and_then(Value::as_str)
        else {
            continue;
        };
        let time = |name: &str| {
            attributes
                .and_then(|a| a.get("metadata"))
                .and_then(|m| m.get(name))
                .and_then(Value::as_f64)
                .filter(|t| t.is_finite() && *t >= 0.0)
        };
        runs.push(RunInfo {
            state: state.to_owned(),
            started: time("started"),
            last_updated: time("last_updated"),
            bundle,
        });
    }
    Ok(runs)
}

/// Parses a `/rest/bundles` reply body: [`parse_bundles`] without building a
/// [`serde_json::Value`] of the whole document.
///
/// A typed model reads only the members the manager uses (a few of each bundle's ~20 metadata
/// fields, as small values, ids borrowed from the body) and skips the rest while parsing, with
/// sonic-rs's SIMD scanner: a fraction of the time and memory of a `Value` (this runs on every
/// page of every tick: ~1 MB per 1,000 bundles). A body the typed model does not accept (a
/// member of an unexpected type, or not JSON) goes through [`parse_bundles`], so the result
/// and every per-bundle reason are the same as the `Value` path's (checked by the tests and
/// the `jsonapi` fuzz target).
///
/// A body nested deeper than [`MAX_JSON_DEPTH`](super::limits::MAX_JSON_DEPTH) is refused
/// before either parser sees it (sonic-rs has no recursion limit of its own).
pub fn parse_bundles_slice(body: &[u8]) -> Result<(Vec<StagedBundle>, Vec<SkippedBundle>), String> {
    super::limits::check_json_depth(body)?;
    match sonic_rs::from_slice::<typed::Document>(body) {
        Ok(document) => Ok(document.into_bundles()),
        Err(_) => {
            let document: Value =
                serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
            parse_bundles(&document)
        }
    }
}

/// The members of a bundle search reply the manager reads; everything else is skipped.
mod typed {
    use super::{OwnerRef, SkippedBundle, bundle_from_fields};
    use crate::bundle::StagedBundle;
    use serde::Deserialize;
    use serde_json::Value;
    use std::borrow::Cow;
    use std::collections::HashMap;

    // Ids and names are borrowed from the body (`Cow`: owned only when a string has escapes)
    // and must be strings: a reply where one is not goes through the `Value` path, which
    // words the reason.
    //
    // Every struct starts with a `NotASequence` guard: serde also reads a struct from an
    // array (`[data, included]`), which the `Value` path does not, so an array fails here
    // and takes the `Value` path.

    /// Fails on any value; absent from every JSON:API object, so only the array form of a
    /// struct ever feeds it (as the struct's first element).
    #[derive(Default)]
    struct NotASequence;

    impl<'de> Deserialize<'de> for NotASequence {
        fn deserialize<D: serde::Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
            Err(serde::de::Error::custom("a JSON:API object, not an array"))
        }
    }

    #[derive(Deserialize)]
    pub(super) struct Document<'a> {
        #[serde(default, rename = "\u{0}")]
        _guard: NotASequence,
        #[serde(borrow)]
        data: Vec<Resource<'a>>,
        #[serde(default, borrow)]
        included: Option<Vec<Included<'a>>>,
    }

    #[derive(Deserialize)]
    struct Resource<'a> {
        #[serde(default, rename = "\u{0}")]
        _guard: NotASequence,
        #[serde(default, borrow)]
        id: Option<Cow<'a, str>>,
        #[serde(default, borrow)]
        attributes: Option<Attributes<'a>>,
        #[serde(default, borrow)]
        relationships: Option<Relationships<'a>>,
    }

    #[derive(Deserialize)]
    struct Attributes<'a> {
        #[serde(default, rename = "\u{0}")]
        _guard: NotASequence,
        /// `None` when absent (the resource `id` stands in), `Some(None)` when `null` (a
        /// missing uuid, as the `Value` path reads it).
        #[serde(default, borrow, deserialize_with = "present")]
        uuid: Option<Option<Cow<'a, str>>>,
        #[serde(default)]
        metadata: Option<Metadata>,
    }

    #[derive(Deserialize)]
    struct Metadata {
        #[serde(default, rename = "\u{0}")]
        _guard: NotASequence,
        #[serde(default)]
        request_cpus: Option<Value>,
        #[serde(default)]
        request_gpus: Option<Value>,
        #[serde(default)]
        request_memory: Option<Value>,
        #[serde(default)]
        request_queue: Option<Value>,
        #[serde(default)]
        tags: Option<Value>,
        #[serde(default)]
        created: Option<Value>,
        #[serde(default)]
        request_priority: Option<Value>,
    }

    #[derive(Deserialize)]
    struct Relationships<'a> {
        #[serde(default, rename = "\u{0}")]
        _guard: NotASequence,
        #[serde(default, borrow)]
        owner: Option<Owner<'a>>,
    }

    #[derive(Deserialize)]
    struct Owner<'a> {
        #[serde(default, rename = "\u{0}")]
        _guard: NotASequence,
        #[serde(default, borrow)]
        data: Option<OwnerData<'a>>,
    }

    #[derive(Deserialize)]
    struct OwnerData<'a> {
        #[serde(default, rename = "\u{0}")]
        _guard: NotASequence,
        #[serde(default, borrow)]
        id: Option<Cow<'a, str>>,
    }

    #[derive(Deserialize)]
    struct Included<'a> {
        #[serde(default, rename = "\u{0}")]
        _guard: NotASequence,
        #[serde(default, rename = "type", borrow)]
        kind: Option<Cow<'a, str>>,
        #[serde(default, borrow)]
        id: Option<Cow<'a, str>>,
        #[serde(default, borrow)]
        attributes: Option<IncludedAttributes<'a>>,
    }

    #[derive(Deserialize)]
    struct IncludedAttributes<'a> {
        #[serde(default, rename = "\u{0}")]
        _guard: NotASequence,
        #[serde(default, borrow)]
        user_name: Option<Cow<'a, str>>,
    }

    /// A member that is there, even as `null`.
    fn present<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
    where
        D: serde::Deserializer<'de>,
        T: Deserialize<'de>,
    {
        T::deserialize(deserializer).map(Some)
    }

    impl Document<'_> {
        pub(super) fn into_bundles(self) -> (Vec<StagedBundle>, Vec<SkippedBundle>) {
            let mut owners: HashMap<&str, &str> = HashMap::new();
            for user in self.included.iter().flatten() {
                if user.kind.as_deref() != Some("users") {
                    continue;
                }
                let name = user
                    .attributes
                    .as_ref()
                    .and_then(|a| a.user_name.as_deref());
                if let (Some(id), Some(name)) = (user.id.as_deref(), name) {
                    owners.insert(id, name);
                }
            }
            let mut bundles = Vec::with_capacity(self.data.len());
            let mut skipped = Vec::new();
            for (index, resource) in self.data.iter().enumerate() {
                match resource.bundle(&owners) {
                    Ok(bundle) => bundles.push(bundle),
                    Err((uuid, reason)) => skipped.push(SkippedBundle {
                        uuid,
                        reason,
                        index,
                    }),
                }
            }
            (bundles, skipped)
        }
    }

    impl Resource<'_> {
        fn bundle(&self, owners: &HashMap<&str, &str>) -> Result<StagedBundle, (String, String)> {
            let attributes = self.attributes.as_ref();
            let uuid = match attributes.and_then(|a| a.uuid.as_ref()) {
                Some(uuid) => uuid.as_deref(),
                None => self.id.as_deref(),
            }
            .ok_or_else(|| ("?".to_owned(), "missing field `uuid`".to_owned()))?
            .to_owned();
            let owner_id = self
                .relationships
                .as_ref()
                .and_then(|r| r.owner.as_ref())
                .and_then(|o| o.data.as_ref())
                .and_then(|d| d.id.as_deref());
            let owner = OwnerRef {
                name: owner_id
                    .and_then(|id| owners.get(id))
                    .map(|n| (*n).to_owned()),
                id: owner_id.map(str::to_owned),
            };
            let metadata = attributes.and_then(|a| a.metadata.as_ref());
            bundle_from_fields(uuid, owner, |name| {
                let metadata = metadata?;
                let value = match name {
                    "request_cpus" => &metadata.request_cpus,
                    "request_gpus" => &metadata.request_gpus,
                    "request_memory" => &metadata.request_memory,
                    "request_queue" => &metadata.request_queue,
                    "tags" => &metadata.tags,
                    "created" => &metadata.created,
                    "request_priority" => &metadata.request_priority,
                    _ => &None,
                };
                value.as_ref().filter(|v| !v.is_null())
            })
        }
    }
}

/// The `data` list of a search reply.
fn data(document: &Value) -> Result<&Vec<Value>, String> {
    let data = document.get("data").ok_or("no `data` member")?;
    Ok(data.as_array().ok_or("`data` is not a list")?)
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
    let metadata = attributes
        .and_then(|a| a.get("metadata"))
        .filter(|m| !m.is_null());
    let metadata = match metadata {
        Some(m) if m.is_object() => Some(m),
        Some(_) => return Err((uuid, "field `metadata`: not an object".into())),
        None => None,
    };
    let owner_id = resource
        .pointer("/relationships/owner/data/id")
        .and_then(Value::as_str);
    let owner = OwnerRef {
        name: owner_id
            .and_then(|id| owners.get(id))
            .map(|n| (*n).to_owned()),
        id: owner_id.map(str::to_owned),
    };
    bundle_from_fields(uuid, owner, |name| {
        metadata.and_then(|m| m.get(name)).filter(|v| !v.is_null())
    })
}

/// A bundle's owner as the search reply names it: the id always (`relationships.owner`),
/// the name only with `include=owner`.
struct OwnerRef {
    name: Option<String>,
    id: Option<String>,
}

/// The checks of one bundle's metadata fields, whatever the document was parsed into.
fn bundle_from_fields<'a>(
    uuid: String,
    owner: OwnerRef,
    field: impl Fn(&str) -> Option<&'a Value>,
) -> Result<StagedBundle, (String, String)> {
    let fail = |field: &str, message: String| (uuid.clone(), format!("field `{field}`: {message}"));
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
    let priority = match field("request_priority") {
        None => None,
        Some(Value::Number(n)) => Some(
            n.as_i64()
                .ok_or_else(|| fail("request_priority", format!("`{n}` is not an integer")))?,
        ),
        Some(Value::String(s)) if s.trim().is_empty() => None,
        Some(Value::String(s)) => Some(
            s.trim()
                .parse()
                .map_err(|_| fail("request_priority", format!("`{s}` is not an integer")))?,
        ),
        Some(other) => {
            return Err(fail(
                "request_priority",
                format!("`{other}` is not an integer"),
            ));
        }
    };
    Ok(StagedBundle {
        uuid,
        owner: owner.name,
        owner_id: owner.id,
        priority,
        request_cpus,
        request_gpus,
        request_memory,
        request_queue,
        tags,
        created,
    })
}

/// The number in a `.count` reply body: `{"meta": {"result": N, "version": "1.7.5"}}`.
pub fn parse_count(body: &str) -> Result<usize, String> {
    let document: Value = super::limits::parse_json(body)?;
    let result = document
        .pointer("/meta/result")
        .ok_or("no meta.result in the count reply")?;
    result
        .as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| format!("meta.result is {result}, not a count"))
}

/// The user name in a `/rest/user` document.
pub fn parse_user_name(document: &Value) -> Option<&str> {
    document
        .pointer("/data/attributes/user_name")
        .and_then(Value::as_str)
}

/// The user name in a `/rest/user` reply body, as the identity check reads it.
pub fn parse_user_reply(body: &str) -> Result<Option<String>, String> {
    let document: Value = super::limits::parse_json(body)?;
    Ok(parse_user_name(&document).map(str::to_owned))
}

/// Who the manager logs in as, from `GET /rest/user`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserIdentity {
    /// The user's id (`data.id`): what the worker list and bundles name owners by.
    pub id: String,
    /// The user is the root user (`data.attributes.is_root_user`): its workers are shared
    /// and it sees every user's workers and staged bundles.
    pub root: bool,
}

/// The id and root flag in a `/rest/user` document (`None` without an id).
pub fn parse_user_identity(document: &Value) -> Option<UserIdentity> {
    let id = match document.pointer("/data/id")? {
        Value::String(id) => id.clone(),
        Value::Number(id) => id.to_string(),
        _ => return None,
    };
    let root = document
        .pointer("/data/attributes/is_root_user")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Some(UserIdentity { id, root })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn counts_are_read_from_meta_result() {
        assert_eq!(
            parse_count(r#"{"meta": {"result": 1005, "version": "1.7.5"}}"#),
            Ok(1005)
        );
        for (body, message) in [
            (r#"{"meta": {"version": "1.7.5"}}"#, "no meta.result"),
            (
                r#"{"meta": {"result": -1}}"#,
                "meta.result is -1, not a count",
            ),
            (
                r#"{"meta": {"result": "7"}}"#,
                "meta.result is \"7\", not a count",
            ),
            ("Unexpected", "expected"),
        ] {
            let error = parse_count(body).unwrap_err();
            assert!(error.contains(message), "{body}: {error}");
        }
    }

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
        assert_eq!(
            bundle.owner_id.as_deref(),
            Some("0xf2963385ee0e49979daf9f126ff39117")
        );
        assert_eq!(bundle.priority, Some(0));
        assert_eq!((bundle.request_cpus, bundle.request_gpus), (2, 1));
        assert_eq!(bundle.request_memory, 4 << 30);
        assert_eq!(bundle.request_queue, "gpuq");
        assert_eq!(bundle.tags, ["exp1"]);
        assert_eq!(bundle.created, Some(1795294308));
    }

    /// The typed path and the `Value` path agree, on good and on malformed documents.
    fn both_paths(document: &Value) -> (Vec<StagedBundle>, Vec<SkippedBundle>) {
        let slow = parse_bundles(document).unwrap();
        let fast = parse_bundles_slice(&serde_json::to_vec(document).unwrap()).unwrap();
        assert_eq!(slow, fast, "{document}");
        slow
    }

    #[test]
    fn typed_path_agrees_with_the_value_path() {
        both_paths(&serde_json::from_str(RECORDED).unwrap());
        both_paths(&json!({"data": []}));
        both_paths(&json!({"data": [{"id": "0x2", "attributes": {"metadata": null}}]}));
        both_paths(
            &json!({"data": [{"attributes": {"uuid": "0x1", "metadata": {"request_cpus": "2", "request_gpus": "", "request_memory": 1024, "tags": null}}}],
                           "included": [{"type": "users", "id": "u", "attributes": {"user_name": 7}}, {"type": "groups"}]}),
        );
        // The owner's id without `include=owner`, and priorities as numbers or strings; one
        // that is not an integer skips the bundle, naming the field.
        let (bundles, skipped) = both_paths(&json!({"data": [
            {"attributes": {"uuid": "0xa1", "metadata": {"request_priority": -2}},
             "relationships": {"owner": {"data": {"type": "users", "id": "0"}}}},
            {"attributes": {"uuid": "0xa2", "metadata": {"request_priority": " 3 "}}},
            {"attributes": {"uuid": "0xa3", "metadata": {"request_priority": 1.5}}}]}));
        let read: Vec<_> = bundles
            .iter()
            .map(|b| (b.owner.as_deref(), b.owner_id.as_deref(), b.priority))
            .collect();
        assert_eq!(read, [(None, Some("0"), Some(-2)), (None, None, Some(3))]);
        assert_eq!(
            skipped[0].reason,
            "field `request_priority`: `1.5` is not an integer"
        );
        // A null uuid is missing (not replaced by the resource id); ids of another type, an
        // escaped uuid and a duplicated member go through whichever path takes them.
        both_paths(&json!({"data": [{"id": "0x3", "attributes": {"uuid": null}}]}));
        both_paths(&json!({"data": [{"id": 3, "attributes": {"uuid": "0x4"},
                                    "relationships": {"owner": {"data": {"id": 5}}}}]}));
        assert_eq!(
            parse_bundles_slice(br#"{"data": [{"attributes": {"uuid": "0x\u0035"}}]}"#)
                .unwrap()
                .0[0]
                .uuid,
            "0x5"
        );
        // Bodies as bytes: a duplicated member, and arrays where objects belong (serde reads
        // a struct from an array; the `Value` path does not).
        for body in [
            &br#"{"data": [{"attributes": {"uuid": "0x6", "uuid": "0x7"}}]}"#[..],
            br#"[[]]"#,
            br#"[[], []]"#,
            br#"{"data": [["0x8"]]}"#,
            br#"{"data": [[]]}"#,
            br#"{"data": [{"attributes": ["0x9"]}]}"#,
            br#"{"data": [{"attributes": {"uuid": "0xa", "metadata": [1, 2]}}]}"#,
            br#"{"data": [{"id": "0xb", "relationships": {"owner": {"data": ["u"]}}}], "included": [["users", "u"]]}"#,
        ] {
            let value: Value = serde_json::from_slice(body).unwrap();
            let text = String::from_utf8_lossy(body);
            assert_eq!(parse_bundles_slice(body), parse_bundles(&value), "{text}");
        }
        let bad = |metadata: Value| {
            json!({"data": [{"attributes": {"uuid": "0xbad", "metadata": metadata}},
                                                    {"attributes": {"uuid": "0xgood", "metadata": {"request_cpus": 1}}}]})
        };
        for metadata in [
            json!({"request_cpus": "many"}),
            json!({"request_cpus": -1}),
            json!({"request_gpus": [1]}),
            json!({"request_memory": "4 gigs"}),
            json!({"request_queue": 7}),
            json!({"tags": "x"}),
            json!("nope"),
        ] {
            let (bundles, skipped) = both_paths(&bad(metadata));
            assert_eq!((bundles.len(), skipped.len()), (1, 1));
        }
        assert_eq!(
            parse_bundles_slice(b"{\"data\": {}}").unwrap_err(),
            "`data` is not a list"
        );
        assert!(
            parse_bundles_slice(b"<html>")
                .unwrap_err()
                .starts_with("not JSON")
        );
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
