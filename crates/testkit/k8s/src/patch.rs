//! The patch formats the fake applies to JSON objects: JSON merge patch (RFC 7386, what
//! `kubectl apply`/`edit`/`patch --type merge` send for custom resources, and what a
//! strategic merge patch or a server-side apply of plain fields amounts to) and JSON patch
//! (RFC 6902: `add`, `replace`, `remove`, `test`).

use serde_json::Value;

/// `target` with the merge patch `patch` applied.
pub(crate) fn merge_patch(mut target: Value, patch: &Value) -> Value {
    let Some(fields) = patch.as_object() else {
        return patch.clone();
    };
    if !target.is_object() {
        target = Value::Object(Default::default());
    }
    let object = target.as_object_mut().expect("made an object above");
    for (key, value) in fields {
        if value.is_null() {
            object.remove(key);
        } else {
            let old = object.remove(key).unwrap_or(Value::Null);
            object.insert(key.clone(), merge_patch(old, value));
        }
    }
    target
}

/// `target` with the JSON patch `patch` applied, or why it does not apply.
pub(crate) fn json_patch(mut target: Value, patch: &Value) -> Result<Value, String> {
    for operation in patch.as_array().ok_or("a JSON patch is an array")? {
        let op = operation["op"].as_str().unwrap_or_default();
        let path = operation["path"]
            .as_str()
            .ok_or("a JSON patch operation needs a path")?;
        let value = operation.get("value").cloned().unwrap_or(Value::Null);
        match op {
            "test" if target.pointer(path) != Some(&value) => {
                return Err(format!("the test of {path} failed"));
            }
            "test" => {}
            "add" | "replace" => set(&mut target, path, value, op == "add")?,
            "remove" => remove(&mut target, path)?,
            other => return Err(format!("unsupported JSON patch operation {other}")),
        }
    }
    Ok(target)
}

fn split(path: &str) -> Result<(&str, String), String> {
    let (parent, last) = path
        .rsplit_once('/')
        .ok_or_else(|| format!("bad path {path}"))?;
    Ok((parent, last.replace("~1", "/").replace("~0", "~")))
}

fn set(target: &mut Value, path: &str, value: Value, add: bool) -> Result<(), String> {
    let (parent, last) = split(path)?;
    let container = target
        .pointer_mut(parent)
        .ok_or_else(|| format!("no parent for {path}"))?;
    match container {
        Value::Object(map) => {
            map.insert(last, value);
        }
        Value::Array(items) if last == "-" => items.push(value),
        Value::Array(items) => {
            let index: usize = last.parse().map_err(|_| format!("bad index in {path}"))?;
            if add && index <= items.len() {
                items.insert(index, value);
            } else if index < items.len() {
                items[index] = value;
            } else {
                return Err(format!("index out of range in {path}"));
            }
        }
        _ => return Err(format!("{parent} is not a container")),
    }
    Ok(())
}

fn remove(target: &mut Value, path: &str) -> Result<(), String> {
    let (parent, last) = split(path)?;
    let gone = match target.pointer_mut(parent) {
        Some(Value::Object(map)) => map.remove(&last).is_some(),
        Some(Value::Array(items)) => match last.parse::<usize>() {
            Ok(i) if i < items.len() => {
                items.remove(i);
                true
            }
            _ => false,
        },
        _ => false,
    };
    if gone {
        Ok(())
    } else {
        Err(format!("nothing to remove at {path}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patches_replace_merge_and_delete() {
        let cases = [
            (
                json!({"a": 1, "b": {"c": 2}}),
                json!({"b": {"c": 3}}),
                json!({"a": 1, "b": {"c": 3}}),
            ),
            (json!({"a": 1, "b": 2}), json!({"a": null}), json!({"b": 2})),
            (json!({"l": [1, 2]}), json!({"l": [3]}), json!({"l": [3]})),
            (
                json!({}),
                json!({"m": {"f": ["x"]}}),
                json!({"m": {"f": ["x"]}}),
            ),
        ];
        for (target, patch, expected) in cases {
            assert_eq!(merge_patch(target, &patch), expected, "{patch}");
        }
    }

    #[test]
    fn json_patches_add_remove_and_test() {
        let target = json!({"metadata": {"finalizers": ["a"]}});
        let added = json_patch(
            target.clone(),
            &json!([
            {"op": "test", "path": "/metadata/finalizers", "value": ["a"]},
            {"op": "add", "path": "/metadata/finalizers/-", "value": "b"}]),
        )
        .unwrap();
        assert_eq!(added, json!({"metadata": {"finalizers": ["a", "b"]}}));
        let removed = json_patch(
            added,
            &json!([{"op": "remove", "path": "/metadata/finalizers/0"}]),
        )
        .unwrap();
        assert_eq!(removed, json!({"metadata": {"finalizers": ["b"]}}));
        let failed = json_patch(
            target,
            &json!([{"op": "test", "path": "/metadata/finalizers", "value": []}]),
        );
        assert!(
            failed
                .unwrap_err()
                .contains("test of /metadata/finalizers failed")
        );
    }
}
