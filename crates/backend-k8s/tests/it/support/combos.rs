//! Every kind of manifest the backend can produce: GPUs 0/1, NFS claim or host path, bundle
//! runtime docker or kubernetes (CA cert from the Secret or from a node path), and a Secret
//! the manager creates or one given by name.

use codalab_wm_k8s::KubernetesConfig;
use serde_json::json;

/// A named configuration for each combination.
pub fn all() -> Vec<(String, KubernetesConfig)> {
    let mut combos = Vec::new();
    for gpus in [0, 1] {
        for nfs in [false, true] {
            for runtime in ["docker", "kubernetes-cert", "kubernetes-cert-path"] {
                for given_secret in [false, true] {
                    let mut config = json!({
                        "gpus": gpus, "cpus": if gpus == 0 { 1 } else { 4 }, "memory_mb": 4096,
                        "auth_token": "tok-never-in-a-pod",
                        "cluster_host": "https://k8s.example:6443",
                        "manager_id": "combo",
                    });
                    if nfs {
                        config["nfs_volume_name"] = json!("nfs-share");
                    }
                    if runtime != "docker" {
                        config["bundle_runtime"] = json!("kubernetes");
                        config["cert"] = json!(
                            "-----BEGIN CERTIFICATE-----\\nTUlJQg==\\n-----END CERTIFICATE-----"
                        );
                    }
                    if runtime == "kubernetes-cert-path" {
                        config["cert_path"] = json!("/etc/kubernetes/pki/ca.crt");
                    }
                    if given_secret {
                        config["credentials_secret"] = json!("team-worker-credentials");
                    }
                    let name = format!(
                        "gpus{gpus}-{}-{runtime}-{}",
                        if nfs { "nfs" } else { "hostpath" },
                        if given_secret {
                            "given-secret"
                        } else {
                            "created-secret"
                        }
                    );
                    combos.push((
                        name,
                        serde_json::from_value(config).expect("a valid combination"),
                    ));
                }
            }
        }
    }
    combos
}
