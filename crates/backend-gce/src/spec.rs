//! What one worker instance is, as plain data: the `instances.insert` body built from the
//! config, and its startup script, which runs the `cl-worker` command core builds in the
//! worker image with docker (as the AWS and Azure backends run it) and powers the instance
//! off when the worker exits. The CodaLab password is not in the body: the script reads it
//! from Secret Manager with the instance's service account, into the container's environment,
//! then closes the metadata server to every container but the host-network worker
//! ([`BLOCK_METADATA`]), so bundle code cannot take the instance's token and read the secret.

use crate::config::{GceConfig, Provisioning};
use crate::models::{
    AcceleratorConfig, AccessConfig, AttachedDisk, AttachedDiskInitializeParams, InstanceResource,
    Metadata, MetadataItem, NetworkInterface, Scheduling, ServiceAccount,
};
use codalab_wm_backend::WorkerOptions;
use std::collections::BTreeMap;

/// The label holding the manager id.
pub const MANAGER_LABEL: &str = "codalab-wm-manager";
/// The label holding the pool.
pub const POOL_LABEL: &str = "codalab-wm-pool";
/// The label holding the deployment's origin ([`codalab_wm_backend::backend::origin`]): which
/// deployment lists and reaps an instance.
pub const ORIGIN_LABEL: &str = "codalab-wm-origin";
/// The name prefix of worker instances.
pub const NAME_PREFIX: &str = "cl-worker-";
/// The metadata key of the startup script.
pub const STARTUP_SCRIPT_KEY: &str = "startup-script";
/// The scope of the instances' service account (Secret Manager access is granted by IAM).
pub const INSTANCE_SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// The work directory on the host when no prefix is set (on the stateful partition of
/// Container-Optimized OS; `/tmp` there is a small tmpfs).
pub const DEFAULT_WORK_DIR: &str = "/var/lib/codalab-worker/";

/// The instance name of launch `unique`.
pub fn instance_name(unique: &str) -> String {
    format!("{NAME_PREFIX}{unique}")
}

/// The `instances.list` filter of this manager's and pool's instances.
pub fn ownership_filter(config: &GceConfig) -> String {
    format!(
        "(labels.{MANAGER_LABEL} = \"{}\") AND (labels.{POOL_LABEL} = \"{}\")",
        config.manager_id, config.pool
    )
}

/// The insert body of worker `unique` in `zone`, with `startup_script`.
pub fn instance_resource(
    config: &GceConfig,
    zone: &str,
    unique: &str,
    startup_script: String,
) -> InstanceResource {
    let labels = BTreeMap::from([
        (MANAGER_LABEL.to_owned(), config.manager_id.clone()),
        (POOL_LABEL.to_owned(), config.pool.clone()),
    ]);
    let access_configs = if config.no_external_ip {
        Vec::new()
    } else {
        vec![AccessConfig {
            name: "External NAT".into(),
            kind: "ONE_TO_ONE_NAT".into(),
        }]
    };
    let guest_accelerators = match (&config.accelerator_type, config.gpus) {
        (Some(kind), count) if count > 0 => vec![AcceleratorConfig {
            accelerator_type: format!("zones/{zone}/acceleratorTypes/{kind}"),
            accelerator_count: count,
        }],
        _ => Vec::new(),
    };
    InstanceResource {
        name: instance_name(unique),
        machine_type: format!("zones/{zone}/machineTypes/{}", config.machine_type),
        labels,
        disks: vec![AttachedDisk {
            boot: true,
            auto_delete: true,
            initialize_params: AttachedDiskInitializeParams {
                source_image: config.image.clone(),
                disk_size_gb: config.boot_disk_size_gb.to_string(),
            },
        }],
        network_interfaces: vec![NetworkInterface {
            network: config.network.clone(),
            subnetwork: config.subnetwork.clone(),
            access_configs,
        }],
        scheduling: scheduling(config.provisioning, !guest_accelerators.is_empty()),
        guest_accelerators,
        service_accounts: vec![ServiceAccount {
            email: config.service_account.clone(),
            scopes: vec![INSTANCE_SCOPE.into()],
        }],
        metadata: Metadata {
            items: vec![MetadataItem {
                key: STARTUP_SCRIPT_KEY.into(),
                value: startup_script,
            }],
        },
    }
}

/// Spot VMs are deleted when preempted and cannot restart or migrate; GPUs cannot migrate.
fn scheduling(provisioning: Provisioning, gpus: bool) -> Scheduling {
    match provisioning {
        Provisioning::Spot => Scheduling {
            provisioning_model: "SPOT".into(),
            instance_termination_action: Some("DELETE".into()),
            automatic_restart: Some(false),
            on_host_maintenance: Some("TERMINATE".into()),
        },
        Provisioning::Standard => Scheduling {
            provisioning_model: "STANDARD".into(),
            instance_termination_action: None,
            automatic_restart: gpus.then_some(false),
            on_host_maintenance: gpus.then(|| "TERMINATE".into()),
        },
    }
}

/// The startup script of worker `unique`: read the password from Secret Manager with the
/// instance's token, run `cl-worker` in the worker image, power off when it exits.
pub fn startup_script(
    config: &GceConfig,
    username: &str,
    worker: &WorkerOptions,
    unique: &str,
) -> String {
    let work_dir = worker
        .work_dir_prefix
        .clone()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| DEFAULT_WORK_DIR.to_owned());
    let argv = worker.build_command(unique, &work_dir);
    let q = |s: &str| shell_words::quote(s).into_owned();
    let mut run = vec![
        "docker run --rm --network host".to_owned(),
        "--env CODALAB_USERNAME --env CODALAB_PASSWORD".to_owned(),
        "--volume /var/run/docker.sock:/var/run/docker.sock".to_owned(),
        format!("--volume {}", q(&format!("{work_dir}:{work_dir}"))),
        format!("--user {}", q(&config.user)),
    ];
    let mut gpu_setup = String::new();
    if config.gpus > 0 {
        gpu_setup = GPU_SETUP.to_owned();
        run.push(GPU_RUN_OPTIONS.to_owned());
    }
    run.push(q(&config.worker_image()));
    run.push(shell_words::join(&argv));
    format!(
        "{HEADER}\
         {BLOCK_METADATA}\
         secret={secret}\n\
         export CODALAB_USERNAME={username}\n\
         {READ_PASSWORD}\
         mkdir -p {work_dir}\n\
         {gpu_setup}\
         block_metadata\n\
         {run}\n",
        secret = q(&config.password_secret_version()),
        username = q(username),
        work_dir = q(&work_dir),
        run = run.join(" \\\n    "),
    )
}

const HEADER: &str = "#!/bin/bash
# codalab-wm: one CodaLab worker on this instance; the instance powers off when it exits (or
# when anything here fails) and the manager deletes it.
set -euo pipefail
trap poweroff EXIT
md=http://metadata.google.internal/computeMetadata/v1
";

/// A shell function, called after the password is read and the GPU driver installed and
/// before the worker starts: containers on Docker bridges (every bundle `cl-worker` starts,
/// `--request-network` or not) can no longer reach the metadata server, whose token reads the
/// CodaLab password from Secret Manager (169.254.169.254 is `metadata.google.internal`, the
/// address containers resolve it to as well). The worker runs with `--network host`: its packets
/// leave through OUTPUT, not FORWARD, and it needs nothing from the metadata server anyway.
/// The rule goes first in `DOCKER-USER`, which dockerd keeps across its restarts and jumps to
/// before its own ACCEPT rules, and in `FORWARD`, in case dockerd had not made `DOCKER-USER`
/// yet. REJECT, not DROP: a bundle that tries gets "connection refused" at once instead of
/// hanging. A failing `iptables` fails the script, and the instance powers off.
pub const BLOCK_METADATA: &str = "block_metadata() {
  iptables -w -N DOCKER-USER 2>/dev/null || true
  local chain
  for chain in DOCKER-USER FORWARD; do
    iptables -w -I \"$chain\" 1 -d 169.254.169.254/32 -j REJECT
  done
}
";

/// The password never appears in the metadata, the command line or the script's output.
const READ_PASSWORD: &str = r#"token=$(curl -sSf -H 'Metadata-Flavor: Google' "$md/instance/service-accounts/default/token" \
    | tr -d '\n' | sed -n 's/.*"access_token" *: *"\([^"]*\)".*/\1/p')
data=$(curl -sSf -H "Authorization: Bearer $token" "https://secretmanager.googleapis.com/v1/$secret:access" \
    | tr -d '\n' | sed -n 's/.*"data" *: *"\([^"]*\)".*/\1/p')
CODALAB_PASSWORD=$(printf %s "$data" | base64 -d)
export CODALAB_PASSWORD
unset token data
"#;

/// Container-Optimized OS: install the NVIDIA driver and make it executable.
const GPU_SETUP: &str = "cos-extensions install gpu
mount --bind /var/lib/nvidia /var/lib/nvidia
mount -o remount,exec /var/lib/nvidia
";

const GPU_RUN_OPTIONS: &str = "--volume /var/lib/nvidia/lib64:/usr/local/nvidia/lib64 \
    --volume /var/lib/nvidia/bin:/usr/local/nvidia/bin --privileged";

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> GceConfig {
        let mut config = GceConfig::new("p", &["us-central1-a"], "codalab-password");
        config.worker_image = Some("codalab/worker:1.7.5".into());
        config
    }

    #[test]
    fn the_script_runs_the_core_command_and_reads_the_password_from_secret_manager() {
        let options = WorkerOptions {
            server: "https://cl.example".into(),
            tag: Some("gce".into()),
            ..WorkerOptions::default()
        };
        let script = startup_script(&config(), "alice", &options, "u1");
        let argv = shell_words::join(options.build_command("u1", DEFAULT_WORK_DIR));
        assert!(script.contains(&argv), "{script}");
        assert!(script.contains("secret=projects/p/secrets/codalab-password/versions/latest\n"));
        assert!(script.contains("https://secretmanager.googleapis.com/v1/$secret:access"));
        assert!(script.contains("export CODALAB_USERNAME=alice\n"));
        assert!(script.contains("--env CODALAB_USERNAME --env CODALAB_PASSWORD"));
        assert!(script.contains("trap poweroff EXIT\n"));
        assert!(
            script.contains(" codalab/worker:1.7.5 \\\n    cl-worker --server"),
            "{script}"
        );
        assert!(!script.contains("cos-extensions"), "no GPU");
        let order = ["CODALAB_PASSWORD=$(", "\nblock_metadata\n", "docker run"];
        let at: Vec<usize> = order.iter().map(|s| script.find(s).unwrap()).collect();
        assert!(
            at.is_sorted(),
            "metadata closed after the read, before the worker: {script}"
        );
        let mut gpu = config();
        gpu.accelerator_type = Some("nvidia-tesla-t4".into());
        gpu.gpus = 1;
        let script = startup_script(&gpu, "alice", &options, "u1");
        assert!(script.contains("cos-extensions install gpu\n"), "{script}");
    }

    #[test]
    fn odd_values_are_quoted_in_the_script() {
        let mut config = config();
        config.user = "1000:1000".into();
        let options = WorkerOptions {
            work_dir_prefix: Some("/mnt/work dir".into()),
            ..WorkerOptions::default()
        };
        let script = startup_script(&config, "o'brien", &options, "u1");
        assert!(
            script.contains("--volume '/mnt/work dir:/mnt/work dir'"),
            "{script}"
        );
        assert!(
            script.contains("export CODALAB_USERNAME='o'\\''brien'\n"),
            "{script}"
        );
    }

    #[test]
    fn ownership_filter_and_labels_agree() {
        let mut config = config();
        config.pool = "gpu".into();
        assert_eq!(
            ownership_filter(&config),
            r#"(labels.codalab-wm-manager = "codalab-wm") AND (labels.codalab-wm-pool = "gpu")"#
        );
        let body = instance_resource(&config, "z", "u1", String::new());
        assert_eq!(body.labels[MANAGER_LABEL], "codalab-wm");
        assert_eq!(body.labels[POOL_LABEL], "gpu");
        assert_eq!(body.name, "cl-worker-u1");
    }
}
