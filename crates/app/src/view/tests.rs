use super::*;

/// The view of a `/status` document, read as `status` reads it.
fn view(document: serde_json::Value) -> String {
    render(&read(document).unwrap())
}

#[test]
fn an_empty_document_renders_a_manager_without_ticks() {
    assert_eq!(
        view(serde_json::json!({"uptime_seconds": 5})),
        "cl-worker-manager: Up 5s · 0 ticks · no successful tick yet · 0 staged bundles seen \
         (0 assigned and 0 unserved among those read)\n\
         \nPools\n  No pool yet (no tick has run).\n\
         \nWaiting: staged bundles with no worker coming\n  \
         Every staged bundle has a worker coming (or none is staged).\n\
         \nBudgets (rolling 24 hours)\n  \
         No budget set (max_worker_hours_per_day, max_cost_per_day).\n\
         \nRecent events (newest first)\n  No events yet.\n\
         \nLast decisions (newest first)\n  None yet.\n"
    );
}

#[test]
fn budgets_and_events_are_shown_with_what_is_used_up_and_warnings_marked() {
    let text = view(serde_json::json!({
        "uptime_seconds": 3600,
        "started_unix_seconds": 1_800_000_000u64,
        "budgets": [
            {"scope": "all pools", "worker_hours": 30.25, "max_worker_hours_per_day": null},
            {"scope": "gpu", "worker_hours": 24.0, "cost": 48.0, "max_worker_hours_per_day": 24.0,
             "max_cost_per_day": 50.0, "reached": "24.0 of 24 worker-hours", "resumes_at_seconds": 7260},
        ],
        "events": [
            {"at_seconds": 61, "unix_seconds": 1_800_000_061u64, "severity": "info",
             "message": "pool cpu: worker launched (job 7)", "event": "worker_launched",
             "pool": "cpu", "job_id": "7"},
            {"at_seconds": 3599, "unix_seconds": 1_800_003_599u64, "severity": "warning",
             "message": "budget of gpu reached", "event": "budget_reached", "scope": "gpu",
             "detail": "24.0 of 24 worker-hours"},
        ]
    }));
    for lines in [
        "Budgets (rolling 24 hours)\n\
         \x20 Scope      Worker-hours         Cost  State\n\
         \x20 all pools         30.25            –  no limit\n\
         \x20 gpu         24.00 of 24  48.00 of 50  reached: 24.0 of 24 worker-hours; launches resume in 1h 01m\n",
        "Recent events (newest first)\n\
         \x20 When                                   Event            What\n\
         ! 2027-01-15 08:59:59 UTC (1s ago)       budget_reached   budget of gpu reached\n\
         \x20 2027-01-15 08:01:01 UTC (58m 59s ago)  worker_launched  pool cpu: worker launched (job 7)\n",
    ] {
        assert!(text.contains(lines), "{lines}\nnot in\n{text}");
    }
}
