//! The Slurm backend's integration tests, one binary: the parsers' property tests, the
//! backend against the real cluster (local and SSH transports) and preemption with the real
//! parser. Each module says what it runs against. `worker_env.rs` stays a binary of its own:
//! it sets variables in its process environment.

#[path = "../common/mod.rs"]
mod common;
mod fuzz_props;
mod local;
mod preemption;
mod ssh;
