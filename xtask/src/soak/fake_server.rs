//! `soak-fake`: the in-process fake CodaLab server (`codalab_wm_fake_codalab`)
//! as a process of its own, for `cargo xtask soak`. Prints its URL on stdout, then churns the
//! staged bundles (a new set every 2 s, 0 to 6 bundles of alice, new uuids each time) until
//! stdin closes or `SECONDS` (argument 1) have passed.

use codalab_wm_fake_codalab::{FakeBundle, FakeCodaLab};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let seconds: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3600);
    let fake = FakeCodaLab::start().await?;
    println!("{}", fake.url());
    std::io::stdout().flush()?;
    let (closed_tx, mut closed_rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        let _ = closed_tx.send(());
    });
    let start = Instant::now();
    let mut next_uuid = 1u64;
    let mut round = 0u64;
    while start.elapsed() < Duration::from_secs(seconds) {
        let count = [0, 3, 6, 2, 5, 1][(round % 6) as usize];
        let bundles = (0..count)
            .map(|i| FakeBundle::new("alice", next_uuid + i))
            .collect();
        next_uuid += count;
        round += 1;
        fake.set_bundles(bundles);
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
            _ = &mut closed_rx => break,
        }
    }
    Ok(())
}
