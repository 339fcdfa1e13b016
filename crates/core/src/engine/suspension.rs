//! A pool suspended for misconfiguration ([`crate::pools::PoolHealth::record_failure`]): what
//! the engine says and keeps when a failure suspends it, how it is resumed, and what a restart
//! finds in its record.
//!
//! A suspension is written to the pool's launch record, so that a restart, a crash or
//! `--restart-after-seconds` does not launch again into the same error. It is lifted by:
//! - a reload (the admin's act: fixed settings, or the same ones to try again);
//! - a restart whose settings of the pool differ from those it was suspended with (the hash
//!   the manager's caller gives, [`crate::Manager::keep_records`]);
//! - a check-in of one of the pool's workers (the settings work after all).

use super::record::Suspension;
use super::runtime::PoolRuntime;
use crate::pools::PoolHealth;
use crate::status::TickEvent;

impl PoolRuntime {
    /// The pool was just suspended (its health says so): logs it, writes it to the record and
    /// returns its event. `detail` is the last failure's error.
    pub(super) fn suspend(&mut self, detail: &str) -> TickEvent {
        let failures = self.health.misconfigured;
        tracing::error!(
            pool = self.name(),
            failures,
            error = detail,
            "pool {} suspended: {failures} misconfiguration failures in a row with the same \
             error ({detail}); it launches nothing (its jobs are kept) until its settings are \
             fixed and the configuration reloaded (SIGHUP; a reload of the same settings tries \
             again)",
            self.name()
        );
        let since = super::record::unix_now().as_secs();
        self.record.set_suspension(Some(Suspension {
            since,
            failures,
            detail: detail.to_owned(),
            settings: self.settings,
        }));
        TickEvent::PoolSuspended {
            pool: self.name().to_owned(),
            failures,
            detail: detail.to_owned(),
        }
    }

    /// Lifts the pool's suspension, if it is suspended, for `why`; returns its event.
    pub(crate) fn resume(&mut self, why: &'static str) -> Option<TickEvent> {
        if !self.health.suspended {
            return None;
        }
        tracing::warn!(
            pool = self.name(),
            "pool {} resumed ({why}): it launches again",
            self.name()
        );
        self.health.resume();
        self.record.set_suspension(None);
        Some(TickEvent::PoolResumed {
            pool: self.name().to_owned(),
            why,
        })
    }

    /// Takes the suspension a restart finds in the pool's record: kept when the pool's
    /// settings are those it was suspended with (or either is unknown), lifted otherwise.
    pub(crate) fn restore_suspension(&mut self) {
        let Some(suspension) = self.record.suspension().cloned() else {
            return;
        };
        let changed = matches!(
            (suspension.settings, self.settings),
            (Some(then), Some(now)) if then != now
        );
        if changed {
            tracing::warn!(
                pool = self.name(),
                "pool {} was suspended for misconfiguration ({}); its settings changed since: \
                 resumed",
                self.name(),
                suspension.detail
            );
            self.record.set_suspension(None);
            return;
        }
        tracing::error!(
            pool = self.name(),
            since_unix = suspension.since,
            error = %suspension.detail,
            "pool {} stays suspended for misconfiguration: {} failures in a row with the same \
             error ({}); fix its settings and restart, or reload (SIGHUP) to try again",
            self.name(),
            suspension.failures,
            suspension.detail
        );
        self.health = PoolHealth::suspended_after(suspension.failures);
    }

    /// The pool's suspension as its record keeps it (for the status), if it is suspended.
    pub(crate) fn suspension(&self) -> Option<&Suspension> {
        self.record.suspension().filter(|_| self.health.suspended)
    }
}
