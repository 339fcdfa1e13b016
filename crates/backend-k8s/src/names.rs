//! Kubernetes name and label syntax: checks for configured names and sanitising for the ones
//! the backend makes up.

/// The label every worker pod carries (upstream's, used by the anti-affinity rule too).
pub const APP_LABEL: (&str, &str) = ("app", "cl-worker");
/// The label marking objects this program manages.
pub const MANAGED_BY_LABEL: (&str, &str) = ("app.kubernetes.io/managed-by", "codalab-wm");
/// The label key holding the manager id.
pub const MANAGER_ID_LABEL: &str = "codalab-wm/manager-id";
/// The label key holding the deployment's origin ([`codalab_wm_backend::backend::origin`]: the
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

/// Hex digits of the hash in [`hashed_label`] (64 bits: two names meet by chance about once
/// in 2^32 pairs, and no one finds a name meeting a given one).
const HASH_HEX: usize = 16;

/// A label value standing for `raw` when `raw` cannot be one as it is (too long, or a name
/// [`dns_label`] would change): the start of `dns_label(raw)` (readable), `_`, and the first
/// 16 hex digits of the SHA-256 of `raw` (exact), 63 characters at most. Two different `raw`
/// give different values, and the `_`, which no DNS name or [`dns_label`] contains, keeps
/// them apart from every value that is a name kept as it is.
pub fn hashed_label(raw: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(raw.as_bytes());
    let hash: String = digest
        .iter()
        .take(HASH_HEX / 2)
        .map(|b| format!("{b:02x}"))
        .collect();
    let mut readable = dns_label(raw);
    readable.truncate(MAX_LABEL - HASH_HEX - 1);
    while readable.ends_with('-') {
        readable.pop();
    }
    format!("{readable}_{hash}")
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
    fn hashed_labels_are_valid_distinct_and_apart_from_names() {
        let long = "x".repeat(70);
        let raws = [
            "gpu-a.b",
            "gpu-a-b",
            "gpu--a",
            "gpu-a",
            &long,
            &format!("{long}y"),
        ];
        let hashed: Vec<String> = raws.iter().map(|r| hashed_label(r)).collect();
        for (raw, value) in raws.iter().zip(&hashed) {
            assert!(is_label_value(value) && value.len() <= 63, "{raw}: {value}");
            assert!(value.contains('_') && !is_dns_subdomain(value), "{value}");
            assert_eq!(value, &hashed_label(raw), "stable");
        }
        let distinct: std::collections::BTreeSet<&String> = hashed.iter().collect();
        assert_eq!(distinct.len(), raws.len(), "{hashed:?}");
        assert!(hashed[0].starts_with("gpu-a-b_"), "readable: {}", hashed[0]);
        // A fixed value: the hash must never change between releases (pods carry it).
        assert_eq!(hashed_label("gpu-a.b"), "gpu-a-b_fb9910caeadb1430");
    }

    #[test]
    fn selector_names_all_three_labels() {
        assert_eq!(
            worker_selector("m1"),
            "app=cl-worker,app.kubernetes.io/managed-by=codalab-wm,codalab-wm/manager-id=m1"
        );
    }
}
