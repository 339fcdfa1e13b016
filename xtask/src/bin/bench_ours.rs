//! `bench-ours`: our manager's side of `cargo xtask bench` (ticks, first tick, reaction; see
//! `bench_harness/ours.rs`; ticks against the real CodaLab server, `bench_harness/server_ticks.rs`), in a binary of its own that links the manager core and nothing of
//! the backends, like the default `cl-worker-manager` build, so that the harness's AWS, Azure
//! and Kubernetes code does not inflate the peak RSS and start-up time it measures.

#[path = "bench_harness/args.rs"]
mod args;
#[path = "bench_harness/ours.rs"]
mod ours;
#[path = "bench_harness/server_cpu.rs"]
#[allow(dead_code, reason = "shared with bench-harness, which uses the rest")]
mod server_cpu;
#[path = "bench_harness/server_ticks.rs"]
mod server_ticks;
#[path = "bench_harness/stats.rs"]
#[allow(dead_code, reason = "shared with bench-harness, which uses the rest")]
mod stats;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    ours::run(&args)
}
