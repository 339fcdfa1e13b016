//! The long help of the simulator's commands (`simulate --help`, `advise --help`): what they
//! answer, the model, and examples (the binary's flags carry their own one-line help).

const SIMULATE_ABOUT: &str = "\
Answers \"what would these min/max/burst/timeout settings have done to last week's workload?\":
the pools come from the usual configuration ([[pools]] in --config, or the single-backend
settings such as --min-workers/--max-workers before `simulate`), bundles from a trace or a
Poisson generator, and the backend is simulated: jobs pend for --start-latency, some fail
(--failure-rate) or never start (--stuck-rate), workers exit after --worker-idle-seconds without
a bundle. The output gives per pool the queue-wait percentiles, worker-hours (cost), launches,
failures and peak workers; --svg plots staged bundles and workers over time. The same input and
--seed give byte-identical output.

A trace is CSV with a header (time,cpus,gpus,memory,queue,owner,duration; only time and duration
are required), a JSON array of such objects, or JSON lines. time is in seconds (relative or since
the epoch), memory in bytes or like 4g, duration in seconds. The manager's history directory
(record_dir/history) is such a trace: its runs are the bundles. The server is simulated as CodaLab's
dispatches: a worker runs several bundles while its CPUs, GPUs and memory allow, owners within
their --quota; the manager plans on that model and estimates each bundle's start.";

/// `simulate`'s one-line pointer to its long help.
pub const SIMULATE_SHORT: &str = "Answers \"what would these min/max/burst/timeout settings have done to last week's workload?\" (--help: the model and examples)";

const SIMULATE_EXAMPLES: &str = "\
Examples:
  # Last week's bundles against the pools of the production config, with max raised to 40:
  cl-worker-manager --config wm.toml simulate --trace last-week.csv --set cpu.max=40 --svg week.svg

  # Upstream's rules versus bursts, on 2 bundles per minute of 20-minute runs:
  cl-worker-manager --max-workers 20 simulate --arrivals poisson:2 --bundles 5000 \\
      --mix cpus=1,memory=2g,duration=1200
  cl-worker-manager --max-workers 20 --launch-mode target --max-launches-per-tick 5 \\
      simulate --arrivals poisson:2 --bundles 5000 --mix cpus=1,memory=2g,duration=1200

  # Stuck jobs, and a pending timeout that moves their demand to the next pool:
  cl-worker-manager --config wm.toml simulate --trace t.json --stuck-rate 0.2 \\
      --set gpu.pending_timeout=600";

/// `simulate --help`: the model, then examples.
pub fn simulate_long() -> String {
    format!("{SIMULATE_ABOUT}\n\n{SIMULATE_EXAMPLES}")
}

const ADVISE_ABOUT: &str = "\
Tells the admin what to change from the manager's own history (record_dir/history, kept
history_days days): it replays the history's bundles on the simulator under the settings in
force (the config as given, [[pools]] or the single-backend flags before `advise`), each pool's
workers starting as fast as the history says they did, and prints how close the replay comes to
what happened (wait p50/p90, worker-hours, cost, launches): how far to trust the rest. Then it
sweeps the settings that trade wait against money (worker.idle_seconds, the overall budget, each
pool's max, min, spill_after, burst and fallback), prints the frontier (wait and cost a day of
each point no other beats on both, with the change that gets there) and recommends the cheapest
point that meets --p90, the one that waits least within --max-cost-per-day, or both; without
either, the cheapest that waits no longer than today. Cost is each pool's cost_per_hour times
its worker-hours (worker-hours when no pool has a price). What the history could not model is
listed last. Read from the manager's history directory, the answer is also left there
(advice.json) for the manager's page (its `listen`).";

/// `advise`'s one-line pointer to its long help.
pub const ADVISE_SHORT: &str = "Replays the manager's history under other settings and says what to change (--help: how, and examples)";

const ADVISE_EXAMPLES: &str = "\
Examples:
  # What to change so that 9 in 10 bundles start within 15 minutes, at the least cost:
  cl-worker-manager --config /etc/codalab-wm/wm.toml advise --p90 15m

  # The shortest waits for at most 50 a day, with the frontier drawn:
  cl-worker-manager --config wm.toml advise --max-cost-per-day 50 --svg frontier.svg

  # A history copied from the production machine, as JSON:
  cl-worker-manager --config wm.toml advise --history ./history --json";

/// `advise --help`: what it does, then examples.
pub fn advise_long() -> String {
    format!("{ADVISE_ABOUT}\n\n{ADVISE_EXAMPLES}")
}
