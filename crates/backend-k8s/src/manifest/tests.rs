//! Unit tests of the Pod and Secret builders: upstream's pod with its fixes.

use super::*;
use serde_json::{Value, json};

const UNIQUE: &str = "0123456789abcdef0123456789abcdef";

fn credentials() -> Credentials {
    Credentials {
        username: "alice".into(),
        password: Secret::new("hunter2-password"),
    }
}

fn template(config: serde_json::Value) -> WorkerTemplate {
    let config: KubernetesConfig = serde_json::from_value(config).unwrap();
    let worker = WorkerOptions {
        server: "https://cl.example".into(),
        ..WorkerOptions::default()
    };
    WorkerTemplate::new(&config, &credentials(), &worker).unwrap()
}

fn kubernetes_runtime() -> Value {
    json!({
        "bundle_runtime": "kubernetes", "cluster_host": "https://k8s.example:6443",
        "auth_token": "tok-secret-123", "cert": r"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"
    })
}

fn pod_json(template: &WorkerTemplate) -> Value {
    serde_json::to_value(template.pod(UNIQUE)).unwrap()
}

#[test]
fn the_default_pod_is_upstreams_with_the_fixes() {
    let pod = pod_json(&template(json!({})));
    assert_eq!(pod["apiVersion"], "v1");
    assert_eq!(pod["kind"], "Pod");
    assert_eq!(pod["metadata"]["name"], format!("cl-worker-{UNIQUE}"));
    assert_eq!(pod["metadata"]["namespace"], "default");
    assert_eq!(
        pod["metadata"]["labels"],
        json!({"app": "cl-worker", "app.kubernetes.io/managed-by": "codalab-wm", "codalab-wm/manager-id": "default",
               "codalab-wm/origin": codalab_wm_backend::backend::origin("https://cl.example", "alice")})
    );
    let spec = &pod["spec"];
    assert_eq!(spec["restartPolicy"], "Never");
    assert_eq!(spec["automountServiceAccountToken"], false);
    let term =
        &spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0];
    assert_eq!(term["topologyKey"], "kubernetes.io/hostname");
    assert_eq!(
        term["labelSelector"]["matchExpressions"][0],
        json!({"key": "app", "operator": "In", "values": ["cl-worker"]})
    );
    let container = &spec["containers"][0];
    assert!(
        container["image"]
            .as_str()
            .unwrap()
            .starts_with("codalab/worker:")
    );
    assert_eq!(
        container["resources"],
        json!({"limits": {"cpu": "1", "memory": "2048Mi"}, "requests": {"cpu": "500m", "memory": "2048Mi"}})
    );
    assert_eq!(
        container["volumeMounts"],
        json!([{"name": "workdir", "mountPath": "/tmp/codalab-worker-scratch/default/default"}])
    );
    assert_eq!(
        spec["volumes"],
        json!([{"name": "workdir", "hostPath": {"path": "/tmp/codalab-worker-scratch/default/default", "type": "DirectoryOrCreate"}}])
    );
}

#[test]
fn the_command_is_the_worker_command_plus_the_runtime() {
    let argv = template(json!({})).command(UNIQUE);
    let base = WorkerOptions {
        server: "https://cl.example".into(),
        ..WorkerOptions::default()
    }
    .build_command(UNIQUE, "/tmp/codalab-worker-scratch/default/default");
    assert_eq!(argv[..base.len()], base[..]);
    assert_eq!(argv[base.len()..], ["--bundle-runtime", "docker"]);
}

#[test]
fn the_kubernetes_runtime_gets_its_flags_by_reference() {
    let argv = template(kubernetes_runtime()).command(UNIQUE);
    let tail = argv
        .iter()
        .skip_while(|a| *a != "--bundle-runtime")
        .cloned()
        .collect::<Vec<_>>();
    assert_eq!(
        tail,
        [
            "--bundle-runtime",
            "kubernetes",
            "--kubernetes-cluster-host",
            "https://k8s.example:6443",
            "--kubernetes-auth-token",
            "$(CODALAB_KUBERNETES_AUTH_TOKEN)",
            "--kubernetes-cert-path",
            "/dev/null",
            "--kubernetes-cert",
            "$(CODALAB_KUBERNETES_CERT)",
        ]
    );
}

#[test]
fn a_cert_path_is_passed_and_mounted_read_only() {
    let mut config = kubernetes_runtime();
    config["cert_path"] = json!("/etc/k8s/ca.pem");
    let template = template(config);
    let argv = template.command(UNIQUE);
    assert!(
        argv.join(" ")
            .ends_with("--kubernetes-cert-path /etc/k8s/ca.pem"),
        "{argv:?}"
    );
    let pod = pod_json(&template);
    let container = &pod["spec"]["containers"][0];
    assert_eq!(
        container["volumeMounts"][1],
        json!({"name": "certpath", "mountPath": "/etc/k8s/ca.pem", "readOnly": true})
    );
    assert_eq!(
        pod["spec"]["volumes"][1],
        json!({"name": "certpath", "hostPath": {"path": "/etc/k8s/ca.pem", "type": "File"}})
    );
    let env_names: Vec<_> = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].clone())
        .collect();
    assert!(
        !env_names.contains(&json!("CODALAB_KUBERNETES_CERT")),
        "{env_names:?}"
    );
    assert!(
        !template
            .secret()
            .unwrap()
            .data
            .unwrap()
            .contains_key(keys::KUBERNETES_CERT)
    );
}

#[test]
fn credentials_come_from_the_secret_never_from_the_pod() {
    let template = template(kubernetes_runtime());
    let pod = pod_json(&template);
    let text = pod.to_string();
    for secret in ["hunter2-password", "tok-secret-123", "MIIB"] {
        assert!(!text.contains(secret), "{secret} leaked into the pod");
    }
    let env = &pod["spec"]["containers"][0]["env"];
    assert_eq!(
        env[0],
        json!({"name": "CODALAB_USERNAME", "valueFrom": {"secretKeyRef": {"name": "codalab-wm-default-credentials", "key": "codalab-username"}}})
    );
    assert_eq!(
        env[1]["valueFrom"]["secretKeyRef"]["key"],
        "codalab-password"
    );
    assert_eq!(
        env[2],
        json!({"name": "CODALAB_KUBERNETES_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}})
    );
    assert_eq!(
        env[3]["valueFrom"]["secretKeyRef"]["key"],
        "kubernetes-auth-token"
    );
    assert_eq!(
        env[4]["valueFrom"]["secretKeyRef"]["key"],
        "kubernetes-cert"
    );

    let secret = template.secret().unwrap();
    let data = secret.data.unwrap();
    let value = |k: &str| String::from_utf8(data[k].0.clone()).unwrap();
    assert_eq!(value(keys::CODALAB_USERNAME), "alice");
    assert_eq!(value(keys::CODALAB_PASSWORD), "hunter2-password");
    assert_eq!(value(keys::KUBERNETES_AUTH_TOKEN), "tok-secret-123");
    assert_eq!(
        value(keys::KUBERNETES_CERT),
        "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"
    );
    assert!(!format!("{template:?}").contains("hunter2"));
}

#[test]
fn the_docker_runtime_secret_holds_only_codalab_credentials() {
    let mut config = kubernetes_runtime();
    config["bundle_runtime"] = json!("docker");
    let data = template(config).secret().unwrap().data.unwrap();
    assert_eq!(
        data.keys().collect::<Vec<_>>(),
        [keys::CODALAB_PASSWORD, keys::CODALAB_USERNAME]
    );
}

#[test]
fn a_given_secret_is_referenced_and_not_created() {
    let template = template(
        json!({"credentials_secret": "team-creds", "bundle_runtime": "kubernetes", "cluster_host": "https://h"}),
    );
    assert!(template.secret().is_none());
    let pod = pod_json(&template);
    let env = pod["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .clone();
    let refs: Vec<_> = env
        .iter()
        .filter_map(|e| e["valueFrom"]["secretKeyRef"]["name"].as_str())
        .collect();
    assert_eq!(refs, ["team-creds"; 4]);
}

#[test]
fn gpus_go_into_limits_and_requests_alike() {
    let pod = pod_json(&template(json!({"cpus": 4, "gpus": 2, "memory_mb": 16384})));
    assert_eq!(
        pod["spec"]["containers"][0]["resources"],
        json!({
            "limits": {"cpu": "4", "memory": "16384Mi", "nvidia.com/gpu": "2"},
            "requests": {"cpu": "4", "memory": "16384Mi", "nvidia.com/gpu": "2"}
        })
    );
}

#[test]
fn nfs_mounts_the_claim_as_work_dir() {
    let pod = pod_json(&template(json!({"nfs_volume_name": "nfs-share"})));
    assert_eq!(
        pod["spec"]["volumes"],
        json!([{"name": "nfs-share", "persistentVolumeClaim": {"claimName": "nfs-share-claim"}}])
    );
    assert_eq!(
        pod["spec"]["containers"][0]["volumeMounts"][0]["name"],
        "nfs-share"
    );
}

#[test]
fn the_work_dir_prefix_is_honoured() {
    let config: KubernetesConfig = serde_json::from_value(json!({})).unwrap();
    let worker = WorkerOptions {
        work_dir_prefix: Some("/scratch/".into()),
        ..WorkerOptions::default()
    };
    let template = WorkerTemplate::new(&config, &credentials(), &worker).unwrap();
    assert_eq!(
        template.work_dir(),
        "/scratch/codalab-worker-scratch/default/default"
    );
    assert!(
        template
            .command(UNIQUE)
            .join(" ")
            .contains("--work-dir /scratch/codalab-worker-scratch/default/default")
    );
}

#[test]
fn each_namespace_and_manager_has_its_own_scratch_dir_on_the_node() {
    let host_path = |config: Value| {
        let pod = pod_json(&template(config));
        let path = &pod["spec"]["volumes"][0]["hostPath"]["path"];
        assert_eq!(
            pod["spec"]["containers"][0]["volumeMounts"][0]["mountPath"], *path,
            "the same path inside, for the bundle containers"
        );
        path.as_str().unwrap().to_owned()
    };
    let a = host_path(json!({"namespace": "team-a", "manager_id": "gpu"}));
    assert_eq!(a, "/tmp/codalab-worker-scratch/team-a/gpu");
    let others = [
        host_path(json!({"namespace": "team-b", "manager_id": "gpu"})),
        host_path(json!({"namespace": "team-a", "manager_id": "cpu"})),
    ];
    assert!(!others.contains(&a), "{a} {others:?}");
}

#[test]
fn user_values_cannot_smuggle_in_variable_references() {
    let config: KubernetesConfig = serde_json::from_value(json!({})).unwrap();
    let worker = WorkerOptions {
        tag: Some("x$(CODALAB_PASSWORD)".into()),
        ..WorkerOptions::default()
    };
    let argv = WorkerTemplate::new(&config, &credentials(), &worker)
        .unwrap()
        .command(UNIQUE);
    assert!(
        argv.contains(&"x$$(CODALAB_PASSWORD)".to_owned()),
        "{argv:?}"
    );
}

#[test]
fn the_selector_matches_the_pod_labels() {
    let template = template(json!({"manager_id": "m-7"}));
    let labels = template.labels();
    for pair in template.selector().split(',') {
        let (k, v) = pair.split_once('=').unwrap();
        assert_eq!(labels.get(k).map(String::as_str), Some(v), "{pair}");
    }
}
