//! `services up slurm` refuses a Slurm it did not set up (issue 23, item 2).
//!
//! Everything runs against temporary directories: `SERVICES_DIR` and `SYS_ETC` (where up.sh
//! writes slurm.conf; `/etc/slurm` by default) point into a temp dir, and up.sh itself runs with
//! a PATH whose first entry shadows every command that could change the machine (apt-get,
//! install, the daemons, munge, scontrol …) with one that records the call and fails. A Slurm
//! cluster that already runs on this machine is only read, never touched.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn slurm_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("services/slurm")
}

/// Runs `snippet` in bash after sourcing common.sh and owner.sh for these directories.
fn owner(services: &Path, sys_etc: &Path, snippet: &str) -> Output {
    owner_with_path(services, sys_etc, snippet, &std::env::var("PATH").unwrap())
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn dirs() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let services = tmp.path().join("services");
    let sys_etc = tmp.path().join("etc-slurm");
    fs::create_dir_all(&sys_etc).unwrap();
    (tmp, services, sys_etc)
}

const HOST_CONF: &str = "ClusterName=hostcluster\nSlurmctldHost=head(10.0.0.1)\n";

#[test]
fn a_host_slurm_conf_is_named_as_not_ours() {
    let (_tmp, services, sys_etc) = dirs();
    fs::write(sys_etc.join("slurm.conf"), HOST_CONF).unwrap();
    fs::write(
        sys_etc.join("gres.conf"),
        "NodeName=head Name=gpu File=/dev/nvidia0\n",
    )
    .unwrap();
    let out = owner(&services, &sys_etc, "foreign_slurm_conf; foreign_gres_conf");
    let said = text(&out);
    assert!(said.contains("slurm.conf is not ours"), "{said}");
    assert!(said.contains("ClusterName=hostcluster"), "{said}");
    assert!(said.contains("gres.conf is not ours"), "{said}");
}

#[test]
fn our_own_conf_even_from_before_the_gres_marker_is_ours() {
    let (_tmp, services, sys_etc) = dirs();
    let state = services.join("slurm/state/ctld");
    let conf = format!(
        "# written by xtask/services/slurm/up.sh: one node\nStateSaveLocation={}\n",
        state.display()
    );
    fs::write(sys_etc.join("slurm.conf"), conf).unwrap();
    fs::write(
        sys_etc.join("gres.conf"),
        "NodeName=vm Name=gpu File=/x/nvidia[0-1]\n",
    )
    .unwrap();
    let out = owner(&services, &sys_etc, "foreign_slurm_conf; foreign_gres_conf");
    assert_eq!(text(&out), "");
}

/// A PATH entry whose `pgrep` prints `pids` (the daemons it "finds").
fn pgrep_finding(tmp: &Path, pids: &str) -> String {
    let bin = tmp.join("pgrep-bin");
    fs::create_dir_all(&bin).unwrap();
    let path = bin.join("pgrep");
    fs::write(&path, format!("#!/bin/sh\nprintf '%s' '{pids}'\n")).unwrap();
    Command::new("chmod")
        .arg("755")
        .arg(&path)
        .status()
        .unwrap();
    format!("{}:{}", bin.display(), std::env::var("PATH").unwrap())
}

const OTHER_CLONE_CONF: &str =
    "# written by xtask/services/slurm/up.sh\nStateSaveLocation=/elsewhere/slurm/state/ctld\n";

#[test]
fn a_conf_of_another_services_dir_whose_cluster_runs_is_not_ours() {
    let (tmp, services, sys_etc) = dirs();
    fs::write(sys_etc.join("slurm.conf"), OTHER_CLONE_CONF).unwrap();
    // a live process stands for that cluster's slurmctld
    let path = pgrep_finding(tmp.path(), &format!("{}\n", std::process::id()));
    let said = text(&owner_with_path(
        &services,
        &sys_etc,
        "foreign_slurm_conf",
        &path,
    ));
    assert!(said.contains("for another services directory"), "{said}");
    assert!(said.contains("/elsewhere/slurm/state/ctld"), "{said}");
}

#[test]
fn a_stale_conf_of_another_services_dir_is_taken_over() {
    let (tmp, services, sys_etc) = dirs();
    fs::write(sys_etc.join("slurm.conf"), OTHER_CLONE_CONF).unwrap();
    let path = pgrep_finding(tmp.path(), "");
    let said = text(&owner_with_path(
        &services,
        &sys_etc,
        "foreign_slurm_conf",
        &path,
    ));
    assert_eq!(said, "");
}

/// [`owner`] with another PATH.
fn owner_with_path(services: &Path, sys_etc: &Path, snippet: &str, path: &str) -> Output {
    let dir = slurm_dir();
    let script = format!(
        "source {}/common.sh; source {}/owner.sh; {snippet}",
        dir.display(),
        dir.display()
    );
    Command::new("bash")
        .args(["-c", &script])
        .env("SERVICES_DIR", services)
        .env("SYS_ETC", sys_etc)
        .env("PATH", path)
        .output()
        .expect("bash runs")
}

#[test]
fn a_slurmctld_without_our_pid_file_is_named_with_its_pid() {
    let (tmp, services, sys_etc) = dirs();
    // a process whose name is slurmctld: sleep run through a link of that name (its name is
    // the path's, as for a copy; a copy was a file just written, which a child another test
    // forked meanwhile could hold open for writing: "Text file busy" at its spawn)
    let fake = tmp.path().join("slurmctld");
    std::os::unix::fs::symlink("/bin/sleep", &fake).unwrap();
    let mut child = Command::new(&fake).arg("60").spawn().unwrap();
    let out = owner(&services, &sys_etc, "foreign_daemons slurmctld");
    child.kill().unwrap();
    child.wait().unwrap();
    let said = text(&out);
    let expected = format!("slurmctld pid {} (user ", child.id());
    assert!(said.contains(&expected), "{said}");
    assert!(said.contains("is not ours"), "{said}");
}

#[test]
fn without_our_pid_files_our_daemons_do_not_answer() {
    // even when some controller (the machine's running cluster, if any) answers scontrol ping
    let (_tmp, services, sys_etc) = dirs();
    let out = owner(&services, &sys_etc, "own_daemons_answer");
    assert!(!out.status.success());
    assert!(
        text(&out).contains("our slurmctld is not running"),
        "{}",
        text(&out)
    );
}

/// PATH entry that shadows every command of up.sh that changes the machine: each records its
/// call and fails, except dpkg-query, which says every package is installed (so that an up.sh
/// that went ahead would not even write /usr/sbin/policy-rc.d).
fn shadowing_path(tmp: &Path, calls: &Path) -> String {
    let bin = tmp.join("shadow");
    fs::create_dir_all(&bin).unwrap();
    for cmd in [
        "apt-get",
        "dpkg-query",
        "install",
        "mknod",
        "mungekey",
        "munge",
        "unmunge",
        "runuser",
        "chown",
        "slurmctld",
        "slurmd",
        "scontrol",
        "sinfo",
        "kill",
    ] {
        let answer = if cmd == "dpkg-query" {
            "printf 'install ok installed'\nexit 0"
        } else {
            "exit 1"
        };
        let body = format!("#!/bin/sh\necho {cmd} >> '{}'\n{answer}\n", calls.display());
        let path = bin.join(cmd);
        fs::write(&path, body).unwrap();
        Command::new("chmod")
            .arg("755")
            .arg(&path)
            .status()
            .unwrap();
    }
    format!("{}:{}", bin.display(), std::env::var("PATH").unwrap())
}

#[test]
fn up_refuses_a_host_slurm_before_changing_anything() {
    let (tmp, services, sys_etc) = dirs();
    fs::write(sys_etc.join("slurm.conf"), HOST_CONF).unwrap();
    let calls = tmp.path().join("calls");
    let out = Command::new("bash")
        .arg(slurm_dir().join("up.sh"))
        .env("SERVICES_DIR", &services)
        .env("SYS_ETC", &sys_etc)
        .env("PATH", shadowing_path(tmp.path(), &calls))
        .output()
        .unwrap();
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("slurm.conf is not ours"), "{said}");
    assert!(said.contains("refusing to touch a Slurm"), "{said}");
    assert_eq!(
        fs::read_to_string(sys_etc.join("slurm.conf")).unwrap(),
        HOST_CONF
    );
    let called = fs::read_to_string(&calls).unwrap_or_default();
    assert_eq!(called, "", "up.sh ran commands before refusing");
}
