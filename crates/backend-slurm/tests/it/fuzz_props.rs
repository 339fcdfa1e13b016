//! Property tests for the parsers of Slurm's output (`squeue` listings, `sbatch --parsable`):
//! thousands of generated inputs (a fixed-seed generator, so failures reproduce) made of
//! squeue-like fields, separators and arbitrary bytes, plus the seed inputs of the cargo-fuzz
//! targets in `fuzz/seeds/`. Parsing never panics, and what it returns keeps its invariants.
//! (cargo-fuzz runs the same parsers much longer: `cargo xtask fuzz`.)

use codalab_wm_slurm::backend::parse_submitted;
use codalab_wm_slurm::squeue::{job_state, parse, parse_time};
use std::path::Path;

const PREFIX: &str = "root-codalab-slurm-worker-";

/// xorshift64*: small, deterministic.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

const PIECES: &[&str] = &[
    "|",
    "||",
    "\n",
    "\r\n",
    " ",
    "",
    "123",
    "42_7",
    "9[1-3]",
    "abc",
    "-1",
    "PENDING",
    "RUNNING",
    "COMPLETED",
    "FAILED",
    "NODE_FAIL",
    "CANCELLED by 0",
    "None",
    "Priority",
    "N/A",
    "Unknown",
    "2026-11-21T20:44:46",
    "2026-02-30T25:61:61",
    "9999999-99-99T99:99:99",
    "-5-1-1T0:0:0",
    PREFIX,
    "root-codalab-slurm-worker-0123456789abcdef",
    "é",
    "\u{0}",
    "😀",
    "T",
    ":",
    "-",
    ";",
    "12345;cluster",
    "Submitted batch job 7",
];

fn random_text(rng: &mut Rng) -> String {
    let mut text = String::new();
    for _ in 0..rng.below(24) {
        if rng.below(8) == 0 {
            let byte = (rng.next() & 0x7f) as u8;
            text.push(char::from(byte));
        } else {
            text.push_str(rng.pick(PIECES));
        }
    }
    text
}

/// A squeue line whose six fields are each drawn from the pieces.
fn random_line(rng: &mut Rng) -> String {
    let fields: Vec<String> = (0..7)
        .map(|_| {
            (0..rng.below(3))
                .map(|_| rng.pick(PIECES))
                .collect::<String>()
        })
        .collect();
    fields.join("|")
}

fn check_squeue(text: &str) {
    if let Ok(jobs) = parse(text, PREFIX) {
        for job in &jobs {
            assert!(job.name.starts_with(PREFIX), "{job:?} from {text:?}");
            assert!(
                !job.id.is_empty()
                    && job
                        .id
                        .bytes()
                        .all(|b| b.is_ascii_digit() || b"_[]".contains(&b)),
                "{job:?} from {text:?}"
            );
        }
    }
    for line in text.lines() {
        let _ = job_state(line);
        let _ = parse_time(line);
    }
}

fn check_sbatch(text: &str) {
    if let Ok(id) = parse_submitted(text) {
        assert!(
            !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()),
            "{id:?} from {text:?}"
        );
    }
}

#[test]
fn generated_squeue_output_never_panics_and_keeps_only_owned_jobs() {
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    for _ in 0..20_000 {
        let lines: Vec<String> = (0..rng.below(5)).map(|_| random_line(&mut rng)).collect();
        check_squeue(&lines.join("\n"));
        check_squeue(&random_text(&mut rng));
    }
}

#[test]
fn well_formed_owned_lines_are_all_kept() {
    let mut rng = Rng(0x5eed_1234_abcd_0002);
    for _ in 0..2_000 {
        let count = rng.below(6);
        let lines: Vec<String> = (0..count)
            .map(|i| {
                let state = rng.pick(&["PENDING", "RUNNING", "COMPLETED", "FAILED", "WHATEVER"]);
                let reason = rng.pick(&["None", "Priority", "", "a|b"]);
                let start = rng.pick(&["N/A", "2026-11-21T20:54:46", "Unknown"]);
                format!(
                    "{}|{PREFIX}{i}|{state}|{reason}|2026-11-21T20:44:46|{start}|(null)",
                    100 + i
                )
            })
            .collect();
        let jobs = parse(&lines.join("\n"), PREFIX).expect("well-formed lines");
        assert_eq!(jobs.len(), count, "{lines:?}");
        assert!(jobs.iter().all(|j| j.submitted_at.is_some()));
        // A start time is a forecast of a pending job only.
        assert!(
            (jobs.iter())
                .all(|j| j.expected_start.is_none()
                    || j.state == codalab_wm_backend::JobState::Pending),
            "{lines:?}"
        );
    }
}

#[test]
fn generated_sbatch_output_never_panics_and_ids_are_digits() {
    let mut rng = Rng(0x5eed_1234_abcd_0003);
    for _ in 0..20_000 {
        check_sbatch(&random_text(&mut rng));
    }
    assert_eq!(parse_submitted("12345;codalabwm\n").unwrap(), "12345");
    assert!(parse_submitted("sbatch: error: x").is_err());
}

#[test]
fn parse_time_is_total_on_generated_dates() {
    let mut rng = Rng(0x5eed_1234_abcd_0004);
    for _ in 0..20_000 {
        let text = format!(
            "{}-{}-{}T{}:{}:{}",
            rng.next() as i64 % 100_000,
            rng.next() as i64 % 20,
            rng.next() as i64 % 40,
            rng.next() % 30,
            rng.next() % 70,
            rng.next() % 70
        );
        let _ = parse_time(&text);
    }
}

/// The cargo-fuzz seeds replayed (they are the regression corpus too).
#[test]
fn fuzz_seeds_replay_cleanly() {
    let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds");
    for (target, check) in [
        ("squeue", check_squeue as fn(&str)),
        ("sbatch", check_sbatch as fn(&str)),
    ] {
        let dir = seeds.join(target);
        let entries: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .flatten()
            .collect();
        assert!(!entries.is_empty(), "no seeds in {}", dir.display());
        for entry in entries {
            let bytes = std::fs::read(entry.path()).unwrap();
            check(&String::from_utf8_lossy(&bytes));
        }
    }
}
