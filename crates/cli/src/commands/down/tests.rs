//! `down`'s command line.

#[test]
fn parses_a_backend_with_its_flags_and_the_global_ones() {
    let cli = crate::cli::parse_args([
        "cl-worker-manager",
        "down",
        "--dry-run",
        "--wait-seconds",
        "5",
        "local",
        "--cpus",
        "2",
    ])
    .unwrap();
    assert!(cli.global.process.dry_run);
    let Some(crate::cli::Command::Down(args)) = cli.command else {
        panic!("not down");
    };
    assert_eq!(args.wait_seconds, 5);
    assert_eq!(args.backend.map(|b| b.kind.name()), Some("local"));
    let cli = crate::cli::parse_args(["cl-worker-manager", "down", "--config", "wm.toml"]).unwrap();
    assert!(cli.global.process.config.is_some());
}
