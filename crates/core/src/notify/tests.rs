use super::*;
use crate::events::{Event, EventKind};

fn hook(url: &str, events: &[&str]) -> NotifySettings {
    NotifySettings {
        url: Secret::new(url),
        events: events.iter().map(|e| e.to_string()).collect(),
        format: NotifyFormat::Slack,
        digest_seconds: 0,
    }
}

fn event(kind: EventKind) -> Event {
    Event::new(kind, 5, 1_800_000_000)
}

#[test]
fn validate_names_the_entry_and_the_key() {
    let cases = [
        (hook("https://hooks.example.org/T0/B0/token", &[]), None),
        (
            hook("http://127.0.0.1:9/x", &["launch_failed", "server_back"]),
            None,
        ),
        (hook("not a url", &[]), Some("notify[3].url is not a URL")),
        (hook("", &[]), Some("notify[3].url is required")),
        (
            hook("ftp://example.org/x", &[]),
            Some("notify[3].url must be an http"),
        ),
        (
            hook("https://example.org/x", &["launch_faild"]),
            Some("unknown event \"launch_faild\""),
        ),
        (
            NotifySettings {
                digest_seconds: 86_400,
                ..hook("https://example.org/x", &[])
            },
            Some("notify[3].digest_seconds is 86400; at most 3600"),
        ),
    ];
    for (settings, want) in cases {
        match (settings.validate(3), want) {
            (Ok(()), None) => {}
            (Err(error), Some(want)) => assert!(error.contains(want), "{error}"),
            (got, want) => panic!("{}: got {got:?}, want {want:?}", settings.url.expose()),
        }
    }
}

#[test]
fn the_url_never_shows_in_labels_debug_or_serialisation() {
    let settings = hook("https://hooks.example.org/services/T0/B0/s3cr3t-token", &[]);
    let label = settings.label(1);
    assert_eq!(label, "notify[1] (hooks.example.org)");
    let debug = format!("{settings:?}");
    let json = serde_json::to_string(&settings).unwrap();
    for shown in [label, debug, json] {
        assert!(!shown.contains("s3cr3t-token"), "{shown}");
    }
}

#[test]
fn an_entry_gets_the_events_it_lists_or_all() {
    let launched = event(EventKind::WorkerLaunched {
        pool: "cpu".into(),
        job_id: "7".into(),
    });
    assert!(hook("http://127.0.0.1/", &[]).wants(&launched));
    assert!(hook("http://127.0.0.1/", &["worker_launched"]).wants(&launched));
    assert!(!hook("http://127.0.0.1/", &["launch_failed"]).wants(&launched));
}

#[test]
fn bodies_are_slack_text_or_the_raw_event() {
    let failed = event(EventKind::LaunchFailed {
        pool: "gpu".into(),
        error: "sbatch: invalid partition".into(),
    });
    let slack = body(NotifyFormat::Slack, &failed);
    assert_eq!(
        slack,
        serde_json::json!({"text": ":warning: codalab-wm: pool gpu: launch failed: sbatch: invalid partition"})
    );
    let raw = body(NotifyFormat::Raw, &failed);
    assert_eq!(raw["event"], "launch_failed");
    assert_eq!(raw["pool"], "gpu");
    assert_eq!(raw["at_seconds"], 5);
    assert_eq!(raw["unix_seconds"], 1_800_000_005_u64);
    assert_eq!(raw["severity"], "warning");
    assert_eq!(
        raw["message"],
        "pool gpu: launch failed: sbatch: invalid partition"
    );
}

#[test]
fn a_folded_message_says_how_many_of_which_kind_and_the_first_and_last() {
    let lost = |job: &str| {
        event(EventKind::WorkerLost {
            pool: "cpu".into(),
            job_id: job.into(),
        })
    };
    let folded = digest::Message::Folded(digest::Folded {
        count: 12,
        first: lost("7"),
        last: lost("<!channel>"),
        window: Duration::from_secs(60),
    });
    let slack = message_body(NotifyFormat::Slack, &folded);
    let text = ":warning: codalab-wm: 12 × worker_lost in pool cpu within 60 s; \
                first: pool cpu: worker lost (job 7), stopped; \
                last: pool cpu: worker lost (job &lt;!channel&gt;), stopped";
    assert_eq!(slack, serde_json::json!({ "text": text }));
    let raw = message_body(NotifyFormat::Raw, &folded);
    assert_eq!(raw["event"], "digest");
    assert_eq!(raw["count"], 12);
    assert_eq!(raw["window_seconds"], 60);
    assert_eq!(raw["first"]["job_id"], "7");
    let one = digest::Message::One(lost("7"));
    assert_eq!(message_body(NotifyFormat::Raw, &one)["job_id"], "7");
}

#[test]
fn every_event_code_is_listed_once() {
    let mut codes = EventKind::CODES.to_vec();
    codes.sort_unstable();
    codes.dedup();
    assert_eq!(codes.len(), EventKind::CODES.len());
    let samples = [
        EventKind::ServerBack { after_seconds: 1 },
        EventKind::ConfigReloaded { changes: vec![] },
        EventKind::BudgetRestored {
            scope: "all pools".into(),
        },
    ];
    for kind in samples {
        assert!(EventKind::CODES.contains(&kind.code()), "{}", kind.code());
    }
}

/// Pure: the body the webhook task would POST (no receiver needed), for the one event that
/// quotes outside text, a server's error line.
#[test]
fn slack_text_escapes_what_slack_would_read_as_a_ping_or_a_link() {
    let cases = [
        (
            "Error <!channel> re-login",
            "Error &lt;!channel&gt; re-login",
        ),
        (
            "re-login at <https://evil.example|https://worksheets.codalab.org>",
            "re-login at &lt;https://evil.example|https://worksheets.codalab.org&gt;",
        ),
        (
            "<@U024BE7LH> and <#C024BE7LR>",
            "&lt;@U024BE7LH&gt; and &lt;#C024BE7LR&gt;",
        ),
        ("a && b; 1 < 2 > 0", "a &amp;&amp; b; 1 &lt; 2 &gt; 0"),
        ("already &lt; escaped", "already &amp;lt; escaped"),
        ("plain text", "plain text"),
    ];
    for (error, want) in cases {
        let unreachable = event(EventKind::ServerUnreachable {
            error: error.into(),
        });
        let text = body(NotifyFormat::Slack, &unreachable)["text"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(text.ends_with(want), "{error:?} became {text:?}");
        assert!(!text.contains('<') && !text.contains('>'), "{text:?}");
        // The raw format is JSON for programs, not Slack mrkdwn: the message as it is.
        let raw = body(NotifyFormat::Raw, &unreachable);
        assert!(raw["message"].as_str().unwrap().contains(error), "{raw}");
    }
}
