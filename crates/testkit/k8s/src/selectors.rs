//! Label and field selectors as the API server parses and applies them (the common subset).

use super::rules::{label_key_ok, label_value_ok};
use k8s_openapi::api::core::v1::Pod;
use std::collections::{BTreeMap, BTreeSet};

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq)]
pub enum Requirement {
    /// `k=v`, `k==v`
    Equals(String, String),
    /// `k!=v`
    NotEquals(String, String),
    /// `k in (a,b)`
    In(String, BTreeSet<String>),
    /// `k notin (a,b)`
    NotIn(String, BTreeSet<String>),
    /// `k`
    Exists(String),
    /// `!k`
    NotExists(String),
}

impl Requirement {
    /// Whether `labels` satisfy the requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, set) => labels.get(k).is_some_and(|v| set.contains(v)),
            Requirement::NotIn(k, set) => labels.get(k).is_none_or(|v| !set.contains(v)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::NotExists(k) => !labels.contains_key(k),
        }
    }
}

/// Splits at commas outside parentheses.
fn split_top_level(selector: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in selector.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&selector[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&selector[start..]);
    parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

fn parse_set(text: &str) -> Result<BTreeSet<String>, String> {
    let inner = text
        .trim()
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .ok_or("expected a set in ( )")?;
    let values: BTreeSet<String> = inner.split(',').map(|v| v.trim().to_owned()).collect();
    match values.iter().find(|v| !label_value_ok(v)) {
        Some(bad) => Err(format!("invalid label value: \"{bad}\"")),
        None => Ok(values),
    }
}

/// Parses a label selector as the API server's `labels.Parse` does (the common subset).
pub fn parse_label_selector(selector: &str) -> Result<Vec<Requirement>, String> {
    let mut requirements = Vec::new();
    for part in split_top_level(selector) {
        let requirement = if let Some(key) = part.strip_prefix('!') {
            Requirement::NotExists(key.trim().to_owned())
        } else if let Some((key, set)) = part.split_once(" notin ") {
            Requirement::NotIn(key.trim().to_owned(), parse_set(set)?)
        } else if let Some((key, set)) = part.split_once(" in ") {
            Requirement::In(key.trim().to_owned(), parse_set(set)?)
        } else if let Some((key, value)) = part.split_once("!=") {
            Requirement::NotEquals(key.trim().to_owned(), value.trim().to_owned())
        } else if let Some((key, value)) = part.split_once("==").or_else(|| part.split_once('=')) {
            Requirement::Equals(key.trim().to_owned(), value.trim().to_owned())
        } else {
            Requirement::Exists(part.to_owned())
        };
        let (key, value) = match &requirement {
            Requirement::Equals(k, v) | Requirement::NotEquals(k, v) => (k, Some(v)),
            Requirement::In(k, _)
            | Requirement::NotIn(k, _)
            | Requirement::Exists(k)
            | Requirement::NotExists(k) => (k, None),
        };
        if !label_key_ok(key) {
            return Err(format!(
                "unable to parse requirement: invalid label key \"{key}\""
            ));
        }
        if let Some(value) = value.filter(|v| !label_value_ok(v)) {
            return Err(format!(
                "unable to parse requirement: invalid label value: \"{value}\""
            ));
        }
        requirements.push(requirement);
    }
    Ok(requirements)
}

/// The pod fields the real API server lets a field selector use.
const POD_FIELDS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
];

/// The value of a selectable pod field.
fn pod_field(pod: &Pod, field: &str) -> String {
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let value = match field {
        "metadata.name" => pod.metadata.name.clone(),
        "metadata.namespace" => pod.metadata.namespace.clone(),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()),
        "spec.restartPolicy" => spec.and_then(|s| s.restart_policy.clone()),
        "spec.schedulerName" => spec.and_then(|s| s.scheduler_name.clone()),
        "spec.serviceAccountName" => spec.and_then(|s| s.service_account_name.clone()),
        "spec.hostNetwork" => Some(
            spec.and_then(|s| s.host_network)
                .unwrap_or(false)
                .to_string(),
        ),
        "status.phase" => status.and_then(|s| s.phase.clone()),
        "status.podIP" => status.and_then(|s| s.pod_ip.clone()),
        "status.nominatedNodeName" => status.and_then(|s| s.nominated_node_name.clone()),
        _ => None,
    };
    value.unwrap_or_default()
}

/// A parsed pod field selector: `(field, wanted value, equal?)`.
pub type FieldSelector = Vec<(String, String, bool)>;

/// Parses a pod field selector (`=`, `==`, `!=`); unknown fields are refused as upstream.
pub fn parse_field_selector(selector: &str) -> Result<FieldSelector, String> {
    let mut terms = Vec::new();
    for part in split_top_level(selector) {
        let (field, value, equal) = if let Some((f, v)) = part.split_once("!=") {
            (f, v, false)
        } else if let Some((f, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
            (f, v, true)
        } else {
            return Err(format!(
                "invalid selector: '{part}'; can't understand '{part}'"
            ));
        };
        let field = field.trim();
        if !POD_FIELDS.contains(&field) {
            return Err(format!("field label not supported: {field}"));
        }
        terms.push((field.to_owned(), value.trim().to_owned(), equal));
    }
    Ok(terms)
}

/// Whether `pod` matches a parsed field selector.
pub fn field_selector_matches(terms: &FieldSelector, pod: &Pod) -> bool {
    terms
        .iter()
        .all(|(field, value, equal)| (pod_field(pod, field) == *value) == *equal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_parse_and_match() {
        let labels: BTreeMap<String, String> = [("app", "cl-worker"), ("tier", "gpu")]
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        let matches = |s: &str| {
            parse_label_selector(s)
                .unwrap()
                .iter()
                .all(|r| r.matches(&labels))
        };
        assert!(matches("app=cl-worker,tier in (gpu, cpu)"));
        assert!(matches("app==cl-worker,!missing,tier"));
        assert!(!matches("app!=cl-worker"));
        assert!(!matches("tier notin (gpu)"));
        assert!(parse_label_selector("a=b/c").is_err());
        assert!(
            parse_field_selector("spec.containers.image=x")
                .unwrap_err()
                .contains("not supported")
        );
    }
}
