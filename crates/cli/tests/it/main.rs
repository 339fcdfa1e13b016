//! The integration tests of `cl-worker-manager`, one binary (each file of this directory is a
//! module). Tests run the real binary (`CARGO_BIN_EXE_cl-worker-manager`), the real services
//! of `cargo xtask services up` or the in-repo fakes; each file's doc says which.
//!
//! The files that use the shared services (the real CodaLab server and its users, Docker, the
//! Slurm cluster, moto) were written to run alone, as separate binaries did: their tests take
//! [`support::turn`], so that tests of two such files never run at once (one file's untagged
//! workers would run the other's bundles; `real_worker` stops dockerd). The tests of one file
//! still run together, and the other files' tests run beside them.

mod support;

mod account_slurm;
mod checkin_real;
mod cli;
mod compose;
mod config;
mod connection;
mod dashboard_slurm;
mod deploy;
mod dispatch_differential;
mod dispatch_real;
mod docs_claims;
mod down;
mod down_gce;
mod e2e;
mod grafana_schema;
mod hardening;
mod hostile;
mod identity_slurm;
mod image;
mod listen;
mod metrics;
mod metrics_slurm;
mod operator;
mod partition;
mod pools;
mod pools_slurm;
mod prometheus;
mod real_worker;
mod reference;
mod reload_slurm;
mod secrets_audit;
mod simulate;
mod status;
mod systemd;
mod templates;
mod upstream_slurm;
mod usage;
