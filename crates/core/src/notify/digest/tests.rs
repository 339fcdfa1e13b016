use super::*;
use crate::events::EventKind;

const MINUTE: Duration = Duration::from_secs(60);

fn at(kind: EventKind, seconds: u64) -> Event {
    Event::new(kind, seconds, 1_800_000_000)
}

fn lost(pool: &str, job: u64, seconds: u64) -> Event {
    let kind = EventKind::WorkerLost {
        pool: pool.into(),
        job_id: job.to_string(),
    };
    at(kind, seconds)
}

fn launched(pool: &str, job: u64, seconds: u64) -> Event {
    let kind = EventKind::WorkerLaunched {
        pool: pool.into(),
        job_id: job.to_string(),
    };
    at(kind, seconds)
}

fn secs(seconds: u64) -> Duration {
    Duration::from_secs(seconds)
}

#[test]
fn a_warning_goes_out_at_once_and_the_rest_of_its_window_is_folded() {
    let mut digest = Digest::new(MINUTE);
    let first = digest.push(lost("cpu", 1, 0), secs(0));
    assert_eq!(first, Some(Message::One(lost("cpu", 1, 0))));
    assert_eq!(digest.push(lost("cpu", 2, 10), secs(10)), None);
    assert_eq!(digest.push(lost("cpu", 3, 20), secs(20)), None);
    let other_pool = digest.push(lost("gpu", 4, 25), secs(25));
    assert!(other_pool.is_some(), "another pool is another window");
    assert_eq!(digest.next_due(), Some(secs(60)));
    assert!(digest.due(secs(59)).is_empty());
    let due = digest.due(secs(60));
    assert_eq!(due.len(), 1);
    let Message::Folded(folded) = &due[0] else {
        panic!("{due:?}")
    };
    assert_eq!(folded.count, 2);
    assert!(folded.first.message.contains("job 2"));
    assert!(folded.last.message.contains("job 3"));
    // gpu's window folded nothing: it closes; cpu's goes on (it folded events) and closes
    // empty at 120.
    assert!(digest.due(secs(85)).is_empty());
    assert_eq!(digest.next_due(), Some(secs(120)));
    assert!(digest.due(secs(120)).is_empty());
    assert_eq!(digest.next_due(), None, "every window closed");
    assert!(
        digest.push(lost("cpu", 5, 130), secs(130)).is_some(),
        "after a quiet window a warning goes out at once again"
    );
}

#[test]
fn an_info_event_waits_for_its_window_and_goes_as_it_is() {
    let mut digest = Digest::new(MINUTE);
    assert_eq!(digest.push(launched("cpu", 1, 0), secs(0)), None);
    let due = digest.due(secs(60));
    assert_eq!(due, vec![Message::One(launched("cpu", 1, 0))]);
}

#[test]
fn a_zero_window_sends_every_event_at_once() {
    let mut digest = Digest::new(Duration::ZERO);
    for n in 0..3 {
        assert!(digest.push(launched("cpu", n, n), secs(n)).is_some());
    }
    assert_eq!(digest.next_due(), None);
}

#[test]
fn the_end_of_the_stream_flushes_what_is_folded() {
    let mut digest = Digest::new(MINUTE);
    digest.push(lost("cpu", 1, 0), secs(0));
    digest.push(lost("cpu", 2, 1), secs(1));
    digest.push(lost("cpu", 3, 2), secs(2));
    digest.push(launched("gpu", 4, 3), secs(3));
    let flushed = digest.flush();
    assert_eq!(flushed.len(), 2, "{flushed:?}");
    assert_eq!(flushed.iter().map(Message::events).sum::<usize>(), 3);
}

/// A troubled hour: a Slurm partition goes down at 10:00 and 40 workers are lost over two
/// minutes; the pool's launches then fail every 5 minutes for an hour, each failure backing it
/// off; the server is unreachable once; another pool launches a worker every 30 s. Every event
/// is in some message; the lost workers are 3 messages, not 40.
#[test]
fn a_troubled_hour_is_a_few_messages_and_no_event_is_lost() {
    let mut events: Vec<Event> = (0..40).map(|n| lost("cpu", n, 600 + 3 * n)).collect();
    for n in 0..12 {
        let error = "sbatch: error: Batch job submission failed: partition down".to_owned();
        let pool = "cpu".to_owned();
        events.push(at(EventKind::LaunchFailed { pool, error }, 720 + 300 * n));
    }
    let unreachable = EventKind::ServerUnreachable {
        error: "connection refused".into(),
    };
    events.push(at(unreachable, 1800));
    events.push(at(EventKind::ServerBack { after_seconds: 100 }, 1900));
    events.extend((0..120).map(|n| launched("gpu", 1000 + n, 30 * n)));
    events.sort_by_key(|e| e.at_seconds);

    let mut digest = Digest::new(MINUTE);
    let mut sent: Vec<Message> = Vec::new();
    for event in events.iter().cloned() {
        let now = secs(event.at_seconds);
        sent.extend(digest.due(now));
        sent.extend(digest.push(event, now));
    }
    sent.extend(digest.due(secs(4000)));
    sent.extend(digest.flush());

    let total: usize = sent.iter().map(Message::events).sum();
    assert_eq!(total, events.len(), "every event is in a message");
    let messages = |code: &str| sent.iter().filter(|m| m.code() == code).count();
    assert_eq!(
        messages("worker_lost"),
        3,
        "one at once, then a minute of 19, then 20"
    );
    assert_eq!(
        messages("launch_failed"),
        12,
        "5 minutes apart: each goes out at once"
    );
    assert_eq!(messages("server_unreachable"), 1);
    assert_eq!(messages("server_back"), 1);
    assert_eq!(
        messages("worker_launched"),
        60,
        "two launches a minute, one message"
    );
    assert_eq!(sent.len(), 77, "{} events", events.len());
}
