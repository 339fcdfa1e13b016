//! The logged-in CodaLab clients the operator keeps, one per pool server and credentials: a
//! cache of the shared context ([`crate::context::Context`]) that the pool resources
//! ([`crate::resources`]) fill.

use codalab_wm_core::codalab::CodaLabClient;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use tokio::sync::{Mutex, OnceCell};

/// The logged-in CodaLab clients by key (server, Secret, user, password hash). A login runs
/// outside the map's lock, in the key's own cell: a server that does not answer stalls only
/// the pools that use it (and them once at a time), never the other pools.
#[derive(Debug)]
pub(crate) struct Clients<T = Arc<CodaLabClient>> {
    cells: Mutex<HashMap<String, Arc<OnceCell<T>>>>,
}

impl<T> Default for Clients<T> {
    fn default() -> Self {
        Self {
            cells: Mutex::default(),
        }
    }
}

impl<T: Clone> Clients<T> {
    /// The client of `key`, made by `login` when there is none yet (a failed login is
    /// retried at the next call).
    pub(crate) async fn get_or_login(
        &self,
        key: String,
        login: impl Future<Output = Result<T, String>>,
    ) -> Result<T, String> {
        let cell = self.cells.lock().await.entry(key).or_default().clone();
        cell.get_or_try_init(|| login).await.cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A login that never answers (an unreachable server) does not keep another pool's
    /// login from going through. No server: the logins are futures standing in for them.
    #[tokio::test]
    async fn a_login_that_hangs_stalls_only_its_own_key() {
        let clients: Arc<Clients<u32>> = Arc::default();
        let (started, hanging) = tokio::sync::oneshot::channel();
        let slow = clients.clone();
        let stuck = tokio::spawn(async move {
            slow.get_or_login("unreachable".into(), async move {
                let _ = started.send(());
                std::future::pending::<Result<u32, String>>().await
            })
            .await
        });
        hanging.await.unwrap();
        // The bound only turns a stall into a failure; it is not what the test measures.
        let other = tokio::time::timeout(
            Duration::from_secs(30),
            clients.get_or_login("reachable".into(), async { Ok(7) }),
        )
        .await
        .expect("the other pool's login is not stalled by the hanging one");
        assert_eq!(other, Ok(7));
        // Kept: the next call does not log in again.
        let again = clients
            .get_or_login("reachable".into(), async { Err("logged in again".into()) })
            .await;
        assert_eq!(again, Ok(7));
        // A failed login is not kept.
        let failed = clients
            .get_or_login("refused".into(), async { Err("wrong password".into()) })
            .await;
        assert_eq!(failed, Err("wrong password".into()));
        let retried = clients
            .get_or_login("refused".into(), async { Ok(8) })
            .await;
        assert_eq!(retried, Ok(8));
        stuck.abort();
    }
}
