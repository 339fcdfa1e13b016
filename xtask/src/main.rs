//! Project tasks: `cargo xtask <task>`.
//!
//! - `services up|down|status <name>…`: start, stop or check the real services the tests use
//!   (`codalab`, `slurm`, `sshd`, `moto`, `azure-mock`, `k8s-validate`, `grafana-schema`;
//!   `all`).
//! - `ci`: what `.ci/run` runs: fmt check, clippy, every test against the real services.
//! - `docs`: the book (mdBook) built, every link of the documents checked.
//! - `architecture`: the shape ARCHITECTURE.md promises (thin binary, no cycle, sizes).
//! - `e2e`: the whole manager against a real CodaLab server.
//! - `bench`: speed and memory figures.
//! - `image`: the container image, from a Debian base made by debootstrap.

mod architecture;
mod bench;
mod chaos;
mod ci;
mod demo;
mod dist;
mod docs;
mod fuzz;
mod image;
mod prereqs;
mod proxy;
mod services;
mod soak;

use anyhow::{Result, bail};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (task, rest) = args
        .split_first()
        .map(|(t, r)| (t.as_str(), r))
        .unwrap_or(("help", &[]));
    match task {
        "services" => services::run(rest),
        "demo" => demo::run(rest),
        "docs" => docs::run(rest),
        "ci" => ci::run(rest),
        "architecture" => architecture::run(rest),
        "e2e" => ci::e2e(rest),
        "bench" => bench::run(rest),
        "dist" => dist::run(rest),
        "chaos" => chaos::run(rest),
        "soak" => soak::run(rest),
        "fuzz" => fuzz::run(rest),
        "image" => image::run(rest),
        "help" | "--help" | "-h" => {
            println!("{}", HELP);
            Ok(())
        }
        other => bail!("unknown task `{other}`\n{HELP}"),
    }
}

const HELP: &str = "usage: cargo xtask <task>
  demo [--exit-when-done]             the whole chain: real CodaLab, the manager, real cl-workers in Docker
  services up|down|status <name>...   start/stop/check test services (slurm sshd codalab docker moto azure-mock k8s-validate grafana-schema all)
  ci                                  fmt check, clippy, all tests against real services (what .ci/run runs)
  docs [--check-only]                 the book (docs/, mdBook) built into target/book; every document link checked
  architecture                        the thin binary (lines, no import cycle) and file/function sizes
  e2e                                 the manager end to end against a real CodaLab server
  bench [--quick|--build-only]        speed, memory and backend cost, side by side with the Python manager
  chaos                               fault scenarios against real services through a fault-injecting proxy
  soak [--minutes N]                  long run against the fake server; RSS and open files over time
  fuzz [--seconds N|--build-only]     every cargo-fuzz target for N seconds each (RUSTC_BOOTSTRAP=1 on stable)
  image [--binary PATH] [--tag TAG]   the container image, from a debootstrap base (no registry needed)";
