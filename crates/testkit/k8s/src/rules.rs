//! The API server rules the fake enforces, written from the Kubernetes API conventions and
//! validation messages (independently of the backend's own name checks): label syntax,
//! quantities and a subset of Pod and Secret validation. Selectors are in
//! [`selectors`](super::selectors).

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, Secret};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::collections::{BTreeMap, BTreeSet};

/// One field error of a 422 Invalid answer.
#[derive(Debug, Clone)]
pub struct Cause {
    /// The field path (`spec.containers[0].image`).
    pub field: String,
    /// `FieldValueRequired`, `FieldValueInvalid`, `FieldValueNotSupported`, `FieldValueNotFound`.
    pub reason: &'static str,
    /// The message.
    pub message: String,
}

fn cause(field: impl Into<String>, reason: &'static str, message: impl Into<String>) -> Cause {
    Cause {
        field: field.into(),
        reason,
        message: message.into(),
    }
}

fn required(field: impl Into<String>) -> Cause {
    cause(field, "FieldValueRequired", "Required value")
}

fn invalid(field: impl Into<String>, value: &str, why: &str) -> Cause {
    cause(
        field,
        "FieldValueInvalid",
        format!("Invalid value: \"{value}\": {why}"),
    )
}

// ---- names and labels ----

const DNS_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or \
                             '-', and must start and end with an alphanumeric character";
const DNS_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric \
                                 characters, '-' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, \
                               '-', '_' or '.', and must start and end with an alphanumeric character";

fn dns_label_ok(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=63).contains(&b.len())
        && b.iter()
            .all(|c| matches!(c, b'a'..=b'z' | b'0'..=b'9' | b'-'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

fn dns_subdomain_ok(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(dns_label_ok)
}

fn qualified_name_ok(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=63).contains(&b.len())
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

/// A label key: an optional DNS subdomain prefix and `/`, then a qualified name.
pub fn label_key_ok(key: &str) -> bool {
    match key.split_once('/') {
        Some((prefix, name)) => {
            !prefix.is_empty() && dns_subdomain_ok(prefix) && qualified_name_ok(name)
        }
        None => qualified_name_ok(key),
    }
}

/// A label value: empty or a qualified name (no prefix).
pub fn label_value_ok(value: &str) -> bool {
    value.is_empty() || qualified_name_ok(value)
}

fn check_labels(field: &str, labels: Option<&BTreeMap<String, String>>, causes: &mut Vec<Cause>) {
    for (key, value) in labels.into_iter().flatten() {
        if !label_key_ok(key) {
            causes.push(invalid(
                field,
                key,
                "name part must consist of alphanumeric characters",
            ));
        }
        if !label_value_ok(value) {
            causes.push(invalid(field, value, LABEL_VALUE_MSG));
        }
    }
}

// ---- quantities ----

/// The value of a quantity (`500m`, `2Gi`, `1e3`), or `None` when it does not parse.
pub fn quantity_value(quantity: &Quantity) -> Option<f64> {
    let text = quantity.0.trim();
    let suffixes: &[(&str, f64)] = &[
        ("Ki", 1024f64),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("Pi", 1024f64.powi(5)),
        ("Ei", 1024f64.powi(6)),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
    ];
    let (number, multiplier) = suffixes
        .iter()
        .find_map(|(suffix, m)| text.strip_suffix(suffix).map(|n| (n, *m)))
        .unwrap_or((text, 1.0));
    let plain = number.trim_start_matches(['+', '-']);
    let mantissa = plain.split(['e', 'E']).next().unwrap_or_default();
    let digits_ok = !mantissa.is_empty()
        && mantissa.chars().all(|c| c.is_ascii_digit() || c == '.')
        && mantissa.matches('.').count() <= 1
        && mantissa != ".";
    if !digits_ok {
        return None;
    }
    number.parse::<f64>().ok().map(|n| n * multiplier)
}

// ---- pods ----

const RESTART_POLICIES: &[&str] = &["Always", "OnFailure", "Never"];
const HOST_PATH_TYPES: &[&str] = &[
    "",
    "DirectoryOrCreate",
    "Directory",
    "FileOrCreate",
    "File",
    "Socket",
    "CharDevice",
    "BlockDevice",
];
const FIELD_REF_PATHS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
];

/// A subset of the API server's Pod validation, with its field paths and messages.
pub fn validate_pod(pod: &Pod) -> Vec<Cause> {
    let mut causes = Vec::new();
    match pod.metadata.name.as_deref() {
        Some(name) if !dns_subdomain_ok(name) => {
            causes.push(invalid("metadata.name", name, DNS_SUBDOMAIN_MSG))
        }
        _ => {}
    }
    check_labels("metadata.labels", pod.metadata.labels.as_ref(), &mut causes);
    let Some(spec) = &pod.spec else {
        causes.push(required("spec"));
        return causes;
    };
    if let Some(policy) = spec
        .restart_policy
        .as_deref()
        .filter(|p| !RESTART_POLICIES.contains(p))
    {
        causes.push(cause(
            "spec.restartPolicy",
            "FieldValueNotSupported",
            format!("Unsupported value: \"{policy}\": supported values: \"Always\", \"OnFailure\", \"Never\""),
        ));
    }
    let volumes = validate_volumes(spec, &mut causes);
    if spec.containers.is_empty() {
        causes.push(required("spec.containers"));
    }
    let mut names = BTreeSet::new();
    for (i, container) in spec.containers.iter().enumerate() {
        let field = format!("spec.containers[{i}]");
        if !names.insert(container.name.clone()) {
            causes.push(cause(
                format!("{field}.name"),
                "FieldValueDuplicate",
                "Duplicate value",
            ));
        }
        validate_container(&field, container, &volumes, &mut causes);
    }
    validate_affinity(spec, &mut causes);
    causes
}

fn validate_volumes(spec: &PodSpec, causes: &mut Vec<Cause>) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (i, volume) in spec.volumes.iter().flatten().enumerate() {
        let field = format!("spec.volumes[{i}]");
        if !dns_label_ok(&volume.name) {
            causes.push(invalid(
                format!("{field}.name"),
                &volume.name,
                DNS_LABEL_MSG,
            ));
        }
        if !names.insert(volume.name.clone()) {
            causes.push(cause(
                format!("{field}.name"),
                "FieldValueDuplicate",
                "Duplicate value",
            ));
        }
        let sources = [
            volume.host_path.is_some(),
            volume.persistent_volume_claim.is_some(),
            volume.secret.is_some(),
        ];
        if sources.iter().filter(|s| **s).count() != 1 {
            causes.push(required(format!(
                "{field}: must specify exactly one volume type"
            )));
        }
        if let Some(host_path) = &volume.host_path {
            if host_path.path.is_empty() {
                causes.push(required(format!("{field}.hostPath.path")));
            }
            if let Some(t) = host_path
                .type_
                .as_deref()
                .filter(|t| !HOST_PATH_TYPES.contains(t))
            {
                causes.push(cause(
                    format!("{field}.hostPath.type"),
                    "FieldValueNotSupported",
                    format!("Unsupported value: \"{t}\""),
                ));
            }
        }
        if volume
            .persistent_volume_claim
            .as_ref()
            .is_some_and(|c| c.claim_name.is_empty())
        {
            causes.push(required(format!("{field}.persistentVolumeClaim.claimName")));
        }
    }
    names
}

fn validate_container(
    field: &str,
    container: &Container,
    volumes: &BTreeSet<String>,
    causes: &mut Vec<Cause>,
) {
    if !dns_label_ok(&container.name) {
        causes.push(invalid(
            format!("{field}.name"),
            &container.name,
            DNS_LABEL_MSG,
        ));
    }
    if container
        .image
        .as_deref()
        .is_none_or(|i| i.trim().is_empty())
    {
        causes.push(required(format!("{field}.image")));
    }
    for (j, mount) in container.volume_mounts.iter().flatten().enumerate() {
        if !volumes.contains(&mount.name) {
            causes.push(cause(
                format!("{field}.volumeMounts[{j}].name"),
                "FieldValueNotFound",
                format!("Not found: \"{}\"", mount.name),
            ));
        }
        if mount.mount_path.is_empty() {
            causes.push(required(format!("{field}.volumeMounts[{j}].mountPath")));
        }
    }
    for (j, env) in container.env.iter().flatten().enumerate() {
        validate_env(&format!("{field}.env[{j}]"), env, causes);
    }
    validate_resources(field, container, causes);
}

fn validate_env(field: &str, env: &k8s_openapi::api::core::v1::EnvVar, causes: &mut Vec<Cause>) {
    if env.name.is_empty() {
        causes.push(required(format!("{field}.name")));
    }
    let Some(source) = &env.value_from else {
        return;
    };
    if env.value.as_deref().is_some_and(|v| !v.is_empty()) {
        causes.push(invalid(
            format!("{field}.valueFrom"),
            "",
            "may not be specified when `value` is not empty",
        ));
    }
    let kinds = [
        source.field_ref.is_some(),
        source.secret_key_ref.is_some(),
        source.config_map_key_ref.is_some(),
    ];
    if kinds.iter().filter(|k| **k).count() != 1 {
        causes.push(invalid(
            format!("{field}.valueFrom"),
            "",
            "may not have more than one field specified at a time",
        ));
    }
    if let Some(secret) = &source.secret_key_ref {
        if secret.name.is_empty() {
            causes.push(required(format!("{field}.valueFrom.secretKeyRef.name")));
        }
        if secret.key.is_empty()
            || !secret
                .key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
        {
            causes.push(invalid(
                format!("{field}.valueFrom.secretKeyRef.key"),
                &secret.key,
                "a valid config key",
            ));
        }
    }
    if let Some(field_ref) = &source.field_ref {
        let path = field_ref.field_path.as_str();
        let labelled =
            path.starts_with("metadata.labels['") || path.starts_with("metadata.annotations['");
        if !FIELD_REF_PATHS.contains(&path) && !labelled {
            causes.push(cause(
                format!("{field}.valueFrom.fieldRef.fieldPath"),
                "FieldValueNotSupported",
                format!("Unsupported value: \"{path}\""),
            ));
        }
    }
}

/// Whether a resource name is an extended resource (`vendor.example/thing`), which cannot be
/// overcommitted.
fn is_extended(name: &str) -> bool {
    name.contains('/') && !name.starts_with("kubernetes.io/") && !name.starts_with("requests.")
}

fn validate_resources(field: &str, container: &Container, causes: &mut Vec<Cause>) {
    let Some(resources) = &container.resources else {
        return;
    };
    let empty = BTreeMap::new();
    let limits = resources.limits.as_ref().unwrap_or(&empty);
    let requests = resources.requests.as_ref().unwrap_or(&empty);
    for (kind, map) in [("limits", limits), ("requests", requests)] {
        for (name, quantity) in map {
            let at = format!("{field}.resources.{kind}[{name}]");
            match quantity_value(quantity) {
                None => causes.push(invalid(
                    at,
                    &quantity.0,
                    "must match the regular expression for quantities",
                )),
                Some(v) if v < 0.0 => causes.push(invalid(
                    at,
                    &quantity.0,
                    "must be greater than or equal to 0",
                )),
                Some(v) if is_extended(name) && v.fract() != 0.0 => {
                    causes.push(invalid(at, &quantity.0, "must be an integer"))
                }
                Some(_) => {}
            }
        }
    }
    for (name, request) in requests {
        let at = format!("{field}.resources.requests[{name}]");
        let limit = limits.get(name);
        if is_extended(name) {
            match limit {
                None => causes.push(cause(
                    format!("{field}.resources.limits[{name}]"),
                    "FieldValueRequired",
                    "Required value: Limit must be set for non overcommitable resources",
                )),
                Some(limit) if quantity_value(limit) != quantity_value(request) => {
                    causes.push(invalid(
                        at,
                        &request.0,
                        &format!("must be equal to {name} limit of {}", limit.0),
                    ))
                }
                Some(_) => {}
            }
        } else if let (Some(limit), Some(r)) = (limit, quantity_value(request))
            && quantity_value(limit).is_some_and(|l| r > l)
        {
            causes.push(invalid(
                at,
                &request.0,
                &format!("must be less than or equal to {name} limit of {}", limit.0),
            ));
        }
    }
}

fn validate_affinity(spec: &PodSpec, causes: &mut Vec<Cause>) {
    let terms = spec
        .affinity
        .as_ref()
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    for (i, term) in terms.into_iter().flatten().enumerate() {
        let field = format!(
            "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[{i}]"
        );
        if term.topology_key.is_empty() {
            causes.push(required(format!("{field}.topologyKey")));
        } else if !label_key_ok(&term.topology_key) {
            causes.push(invalid(
                format!("{field}.topologyKey"),
                &term.topology_key,
                "a qualified name",
            ));
        }
        let expressions = term
            .label_selector
            .as_ref()
            .and_then(|s| s.match_expressions.as_ref());
        for (j, expression) in expressions.into_iter().flatten().enumerate() {
            let at = format!("{field}.labelSelector.matchExpressions[{j}]");
            let values = expression.values.as_ref().map_or(0, Vec::len);
            let ok = match expression.operator.as_str() {
                "In" | "NotIn" => values > 0,
                "Exists" | "DoesNotExist" => values == 0,
                _ => false,
            };
            if !ok {
                causes.push(invalid(
                    format!("{at}.operator"),
                    &expression.operator,
                    "bad operator or values",
                ));
            }
        }
    }
}

// ---- secrets ----

/// A subset of the API server's Secret validation.
pub fn validate_secret(secret: &Secret) -> Vec<Cause> {
    let mut causes = Vec::new();
    match secret.metadata.name.as_deref() {
        None | Some("") => causes.push(required("metadata.name")),
        Some(name) if !dns_subdomain_ok(name) => {
            causes.push(invalid("metadata.name", name, DNS_SUBDOMAIN_MSG))
        }
        Some(_) => {}
    }
    check_labels(
        "metadata.labels",
        secret.metadata.labels.as_ref(),
        &mut causes,
    );
    let keys = secret
        .data
        .iter()
        .flat_map(|d| d.keys())
        .chain(secret.string_data.iter().flat_map(|d| d.keys()));
    for key in keys {
        if key.is_empty()
            || !key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
        {
            causes.push(invalid(
                format!("data[{key}]"),
                key,
                "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
            ));
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        let q = |s: &str| quantity_value(&Quantity(s.into()));
        assert_eq!(q("500m"), Some(0.5));
        assert_eq!(q("2Gi"), Some(2.0 * 1024f64.powi(3)));
        assert_eq!(q("1e3"), Some(1000.0));
        assert_eq!(q("one"), None);
        assert_eq!(q("1.5.2"), None);
    }
}
