//! Kubernetes name and label syntax: checks for configured names and sanitising for the ones
//! the backend makes up.

/// The label every worker pod carries (upstream's, used by the anti-affinity rule too).
pub const APP_LABEL: (&str, &str) = ("app", "cl-worker");
/// The label marking objects this program manages.
pub const MANAGED_BY_LABEL: (&str, &str) = ("app.kubernetes.io/managed-by", "codalab-wm");
/// The label key holding the manager id.
pub const MANAGER_ID_LABEL: &str = "codalab-wm/manager-id";
/// The label key holding the deployment's origin ([`codalab_wm_core::backend::origin`]: the
/// workers' server and CodaLab user): a pod of another origin is another deployment's.
pub const ORIGIN_LABEL: &str = "codalab-wm/origin";
/// The node label the one-worker-per-node rule spreads over.
pub const HOSTNAME_TOPOLOGY_KEY: &str = "kubernetes.io/hostname";

const MAX_LABEL: usize = 63;
const MAX_SUBDOMAIN: usize = 253;

/// Whether `name` is an RFC 1123 DNS label: 1-63 lowercase letters, digits and `-`, starting
/// and ending with a letter or digit (namespaces, container and volume names).
pub fn is_dns_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_LABEL
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

/// Whether `name` is an RFC 1123 DNS subdomain: dot-separated DNS labels, at most 253
/// characters (pod and Secret names).
pub fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= MAX_SUBDOMAIN && name.split('.').all(is_dns_label)
}

/// Whether `value` is a valid label value: empty, or 1-63 letters, digits, `-`, `_` and `.`,
/// starting and ending with a letter or digit.
pub fn is_label_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    if bytes.is_empty() {
        return true;
    }
    bytes.len() <= MAX_LABEL
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
}

/// `raw` made into a DNS label: lowercased, every other character replaced by `-`, runs of
/// `-` collapsed, trimmed, and cut to 63 characters. An empty result becomes `x`.
pub fn dns_label(raw: &str) -> String {
    let mut label = String::with_capacity(raw.len().min(MAX_LABEL));
    for c in raw.chars().map(|c| c.to_ascii_lowercase()) {
        let c = if c.is_ascii_lowercase() || c.is_ascii_digit() {
            c
        } else {
            '-'
        };
        if c == '-' && (label.is_empty() || label.ends_with('-')) {
            continue;
        }
        label.push(c);
    }
    label.truncate(MAX_LABEL);
    while label.ends_with('-') {
        label.pop();
    }
    if label.is_empty() {
        label.push('x');
    }
    label
}

/// The name of the worker pod for launch `unique` (`cl-worker-<unique>`, as upstream).
pub fn pod_name(unique: &str) -> String {
    dns_label(&format!("cl-worker-{unique}"))
}

/// The label selector matching exactly this manager's worker pods.
pub fn worker_selector(manager_id: &str) -> String {
    format!(
        "{}={},{}={},{}={}",
        APP_LABEL.0,
        APP_LABEL.1,
        MANAGED_BY_LABEL.0,
        MANAGED_BY_LABEL.1,
        MANAGER_ID_LABEL,
        manager_id
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_labels() {
        for good in ["a", "cl-worker-0123", "x1", &"a".repeat(63)] {
            assert!(is_dns_label(good), "{good}");
        }
        for bad in ["", "-a", "a-", "A", "a_b", "a.b", &"a".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad}");
        }
        assert!(is_dns_subdomain("my-secret.v1"));
        assert!(!is_dns_subdomain("my..secret"));
    }

    #[test]
    fn label_values() {
        for good in ["", "a", "Team_A.1", "codalab-wm"] {
            assert!(is_label_value(good), "{good}");
        }
        for bad in ["-a", "a/b", "a b", "a.", &"a".repeat(64)] {
            assert!(!is_label_value(bad), "{bad}");
        }
    }

    #[test]
    fn sanitising_gives_valid_labels() {
        let cases = [
            ("cl-worker-0123abcd", "cl-worker-0123abcd"),
            ("Team_A..1", "team-a-1"),
            ("--x--", "x"),
            ("***", "x"),
            ("ü", "x"),
        ];
        for (raw, expected) in cases {
            assert_eq!(dns_label(raw), expected);
        }
        let long = dns_label(&format!("cl-worker-{}", "ab-".repeat(40)));
        assert!(is_dns_label(&long), "{long}");
        assert_eq!(pod_name("0123456789abcdef0123456789abcdef").len(), 42);
    }

    #[test]
    fn selector_names_all_three_labels() {
        assert_eq!(
            worker_selector("m1"),
            "app=cl-worker,app.kubernetes.io/managed-by=codalab-wm,codalab-wm/manager-id=m1"
        );
    }
}
