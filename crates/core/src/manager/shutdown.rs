//! Stopping promptly: a shutdown request (SIGINT/SIGTERM) cancels the tick in flight — a
//! search, a listing, a stop — at once; a worker job being submitted is given
//! [`SUBMIT_GRACE`] to finish so that a submit already sent is logged as started, and no
//! further launch begins.

use super::{Manager, TickReport};
use crate::error::Result;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::watch;

/// How long a submit in flight may still take after a shutdown request.
pub const SUBMIT_GRACE: Duration = Duration::from_secs(5);

/// What the loop and the launches share about stopping.
#[derive(Debug, Default, Clone)]
pub(super) struct StopFlags {
    /// A worker job is being submitted.
    pub submitting: Arc<AtomicBool>,
    /// A shutdown was requested: launch nothing more.
    pub stopping: Arc<AtomicBool>,
}

impl StopFlags {
    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }
}

/// Marks a submit in flight for as long as it lives.
pub(super) struct Submitting<'a>(&'a AtomicBool);

impl<'a> Submitting<'a> {
    pub fn new(flag: &'a AtomicBool) -> Self {
        flag.store(true, Ordering::SeqCst);
        Self(flag)
    }
}

impl Drop for Submitting<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// Resolves when a shutdown is requested; never when no one can request one any more.
async fn requested(shutdown: &mut watch::Receiver<bool>) {
    if shutdown.wait_for(|stop| *stop).await.is_err() {
        std::future::pending::<()>().await;
    }
}

impl Manager {
    /// One tick, unless a shutdown is requested first: then `None` once the tick is cancelled
    /// (or a submit in flight has finished, within [`SUBMIT_GRACE`]).
    pub(super) async fn tick_or_shutdown(
        &mut self,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Option<Result<TickReport>> {
        let flags = self.stop_flags.clone();
        let tick = self.tick();
        tokio::pin!(tick);
        tokio::select! {
            result = &mut tick => return Some(result),
            () = requested(shutdown) => {}
        }
        flags.stopping.store(true, Ordering::SeqCst);
        if !flags.submitting.load(Ordering::SeqCst) {
            tracing::info!("shutdown requested; cancelling the current step");
            return None;
        }
        tracing::info!(
            "shutdown requested; waiting up to {} s for the worker job being submitted",
            SUBMIT_GRACE.as_secs()
        );
        if tokio::time::timeout(SUBMIT_GRACE, &mut tick).await.is_err() {
            tracing::warn!(
                "the worker job being submitted did not finish within {} s; it may have been \
                 submitted (a later manager finds it by its name, `down` stops it)",
                SUBMIT_GRACE.as_secs()
            );
        }
        None
    }
}
