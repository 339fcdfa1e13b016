//! The one place that decides what the outcome of a tick means for the loop (kube-runtime's
//! `reconcile` + `error_policy`): after a success the next tick comes after `sleep_time`; a
//! fatal error (or any error with `--once`) stops the loop; any other error is retried after
//! an exponential backoff (at least what the server asked with `Retry-After`), logged at WARN
//! once per streak ([`streak`]) and at ERROR when it is not temporary.

use super::streak::{self, Streak};
use crate::error::Error;
use crate::retry::Backoff;
use std::time::Duration;
use tokio::time::Instant;

/// What the loop does next.
#[derive(Debug)]
pub(super) enum Action {
    /// Tick again after this long.
    Requeue(Duration),
    /// Stop the loop with this error.
    Stop(Error),
}

/// The retry state of the loop: the backoff and the current streak of failed ticks.
#[derive(Debug)]
pub(super) struct ErrorPolicy {
    backoff: Backoff,
    streak: Streak,
    /// `--once`: every error stops the loop.
    once: bool,
}

impl ErrorPolicy {
    /// Backoff from `sleep_time` (at least 100 ms) up to `max_backoff`; the manager started at
    /// `started`.
    pub fn new(sleep_time: Duration, max_backoff: Duration, started: Instant, once: bool) -> Self {
        Self {
            backoff: Backoff::new(sleep_time.max(Duration::from_millis(100)), max_backoff),
            streak: Streak::new(started),
            once,
        }
    }

    /// What to do after a tick that ended with `outcome`; `sleep_time` is the current one.
    pub fn next(&mut self, outcome: Result<(), Error>, sleep_time: Duration) -> Action {
        match outcome {
            Ok(()) => {
                if let Some((after, kind)) = self.streak.success(Instant::now()) {
                    tracing::info!(after, "recovered from: {kind}");
                }
                self.backoff.success();
                Action::Requeue(sleep_time)
            }
            Err(error) if error.is_fatal() || self.once => Action::Stop(error),
            Err(error) => Action::Requeue(self.retry(&error)),
        }
    }

    /// The wait before retrying after `error`, logged.
    fn retry(&mut self, error: &Error) -> Duration {
        let wait = error
            .retry_after()
            .unwrap_or_default()
            .max(self.backoff.failure());
        let report = self.streak.failure(error_kind(error), Instant::now());
        let retry_in_seconds = wait.as_secs();
        match report {
            _ if !error.is_temporary() => {
                tracing::error!(%error, retry_in_seconds, "tick failed");
            }
            Some(streak::Report { failures, since }) => {
                tracing::warn!(%error, failures, retry_in_seconds, "tick skipped ({failures} failed in a row, {since})");
            }
            None => tracing::debug!(%error, retry_in_seconds, "tick skipped again"),
        }
        wait
    }
}

/// How long the manager goes on while the server keeps refusing credentials it accepted
/// before ([`Error::RefusedAgain`]: each re-login refused, retried with the backoff above)
/// before it exits as for a wrong password (status 1). Long enough to ride out a proxy's
/// maintenance page or an auth backend's restart; short enough that a password really
/// changed on the server is noticed within the hour.
pub const REFUSED_AGAIN_FOR: Duration = Duration::from_secs(30 * 60);

/// A spell of refused re-logins: since when (manager clock) every tick that logged in was
/// refused, reset by a successful tick.
#[derive(Debug)]
pub(super) struct RefusalSpell {
    since: Option<Duration>,
    bound: Duration,
}

impl RefusalSpell {
    /// A spell that ends the manager after `bound`.
    pub fn new(bound: Duration) -> Self {
        Self { since: None, bound }
    }

    /// Takes in a tick's `outcome` at `now`: a refusal within the bound stays a retried error
    /// (logged at ERROR by [`ErrorPolicy`]), one past it becomes [`Error::Unauthenticated`]
    /// (fatal).
    pub fn judge<T>(&mut self, outcome: Result<T, Error>, now: Duration) -> Result<T, Error> {
        match outcome {
            Ok(value) => {
                self.since = None;
                Ok(value)
            }
            Err(Error::RefusedAgain {
                server,
                username,
                message,
            }) => {
                let since = *self.since.get_or_insert(now);
                let spell = now.saturating_sub(since);
                if spell < self.bound {
                    return Err(Error::RefusedAgain {
                        server,
                        username,
                        message,
                    });
                }
                Err(Error::Unauthenticated {
                    server,
                    username,
                    message: format!(
                        "{message}; refused for {} s, though accepted before (the manager waits {} s)",
                        spell.as_secs(),
                        self.bound.as_secs()
                    ),
                })
            }
            Err(error) => Err(error),
        }
    }
}

/// Every `kind` `tick_error_kind` gives: the metrics start each at 0, so that a rate over
/// them has a series before the first error.
pub const TICK_ERROR_KINDS: [&str; 8] = [
    "unreachable",
    "rate_limited",
    "server_error",
    "client_error",
    "unauthenticated",
    "invalid_reply",
    "backend",
    "other",
];

/// The `kind` label of a failed tick in the `server_errors` counter (few, stable values).
pub(super) fn tick_error_kind(error: &Error) -> &'static str {
    match error {
        Error::Unreachable { .. } => "unreachable",
        Error::Server { status: 429, .. } | Error::RateLimited { .. } => "rate_limited",
        Error::Server { status, .. } if *status >= 500 => "server_error",
        Error::Server { .. } => "client_error",
        Error::Unauthenticated { .. } | Error::RefusedAgain { .. } => "unauthenticated",
        Error::InvalidReply { .. } => "invalid_reply",
        Error::Backend { .. } | Error::Unsupported { .. } | Error::NoCapacity { .. } => "backend",
        _ => "other",
    }
}

/// A short key for "the same kind of error" so that a streak is logged once.
fn error_kind(error: &Error) -> String {
    match error {
        Error::Server { what, status, .. } => format!("{what}:{status}"),
        Error::Unreachable { what, .. } => format!("unreachable:{what}"),
        Error::InvalidReply { from, what, .. } => format!("invalid:{from}:{what}"),
        Error::RateLimited { backend, .. } => format!("throttled:{backend}"),
        Error::Backend {
            backend, operation, ..
        } => format!("{backend}:{operation}"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(status: u16) -> Error {
        Error::Server {
            what: "staged bundle search",
            status,
            message: "boom".into(),
        }
    }

    fn throttled(seconds: u64) -> Error {
        Error::RateLimited {
            backend: "aws-batch".into(),
            message: "slow down".into(),
            retry_after: Some(Duration::from_secs(seconds)),
        }
    }

    fn delay(action: Action) -> Option<u64> {
        match action {
            Action::Requeue(delay) => Some(delay.as_secs()),
            Action::Stop(_) => None,
        }
    }

    #[test]
    fn fatal_errors_stop_others_back_off_and_a_success_resets() {
        let sleep = Duration::from_secs(5);
        let mut policy = ErrorPolicy::new(sleep, Duration::from_secs(60), Instant::now(), false);
        let mut next = |outcome| delay(policy.next(outcome, sleep));
        #[rustfmt::skip]
        let steps: Vec<(Result<(), Error>, Option<u64>)> = vec![
            (Err(server(503)), Some(5)),
            (Err(server(500)), Some(10)),
            (Err(server(404)), Some(20)),
            (Err(throttled(90)), Some(90)),
            (Err(server(502)), Some(60)),
            (Ok(()), Some(5)),
            (Err(server(503)), Some(5)),
            (Err(Error::InvalidConfig("no pools".into())), None),
        ];
        for (step, (outcome, expected)) in steps.into_iter().enumerate() {
            assert_eq!(next(outcome), expected, "step {step}");
        }
    }

    #[test]
    fn with_once_every_error_stops_the_loop() {
        let sleep = Duration::from_secs(5);
        let mut policy = ErrorPolicy::new(sleep, Duration::from_secs(60), Instant::now(), true);
        assert!(matches!(
            policy.next(Err(server(503)), sleep),
            Action::Stop(Error::Server { status: 503, .. })
        ));
        assert_eq!(delay(policy.next(Ok(()), sleep)), Some(5));
    }

    #[test]
    fn a_zero_sleep_time_still_backs_off() {
        let mut policy = ErrorPolicy::new(
            Duration::ZERO,
            Duration::from_secs(1),
            Instant::now(),
            false,
        );
        let Action::Requeue(wait) = policy.next(Err(server(503)), Duration::ZERO) else {
            panic!("a temporary error is retried");
        };
        assert_eq!(wait, Duration::from_millis(100));
    }

    fn refused() -> Error {
        Error::RefusedAgain {
            server: "https://cl.example".into(),
            username: "alice".into(),
            message: "invalid_grant".into(),
        }
    }

    /// A refused re-login is retried (never fatal) until the spell passes the bound; a
    /// successful tick ends the spell; other errors do not.
    #[test]
    fn a_refusal_spell_ends_the_manager_only_past_its_bound() {
        let min = |m: u64| Duration::from_secs(60 * m);
        let mut spell = RefusalSpell::new(REFUSED_AGAIN_FOR);
        let fatal = |r: Result<(), Error>| r.unwrap_err().is_fatal();
        assert!(!fatal(spell.judge(Err(refused()), min(0))));
        assert!(!fatal(spell.judge(Err(server(502)), min(10))));
        assert!(!fatal(spell.judge(Err(refused()), min(29))));
        assert!(spell.judge(Ok(()), min(31)).is_ok(), "a success ends it");
        assert!(!fatal(spell.judge(Err(refused()), min(40))));
        let stop = spell.judge::<()>(Err(refused()), min(70)).unwrap_err();
        assert!(stop.is_fatal(), "{stop}");
        assert!(stop.to_string().contains("refused for 1800 s"), "{stop}");
        let mut policy = ErrorPolicy::new(min(0), Duration::from_secs(60), Instant::now(), false);
        assert!(matches!(
            policy.next(Err(refused()), min(0)),
            Action::Requeue(_)
        ));
    }

    #[test]
    fn error_kinds_are_few_and_stable() {
        assert_eq!(tick_error_kind(&server(503)), "server_error");
        assert_eq!(tick_error_kind(&server(429)), "rate_limited");
        assert_eq!(tick_error_kind(&server(404)), "client_error");
        assert_eq!(tick_error_kind(&throttled(1)), "rate_limited");
        for error in [server(503), server(429), server(404), throttled(1)] {
            assert!(TICK_ERROR_KINDS.contains(&tick_error_kind(&error)));
        }
        assert_eq!(error_kind(&server(503)), "staged bundle search:503");
    }
}
