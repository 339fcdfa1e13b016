//! What a reconcile builds for a pool from its spec: the Kubernetes backend that renders and
//! runs its pods, the CodaLab credentials from its Secret (when [`crate::access`] allows), a
//! logged-in CodaLab client.

use crate::access;
use crate::context::{Context, ReconcileError, err};
use crate::crd::CodaLabWorkerPool;
use crate::crd::POOL_LABEL;
use crate::fence::Fenced;
use crate::spec::{ResolvedPool, pool_label};
use crate::status::Problem;
use codalab_wm_core::codalab::{ClientOptions, CodaLabClient};
use codalab_wm_core::command::WorkerOptions;
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_k8s::{KubernetesBackend, PodOverrides, WorkerTemplate};
use k8s_openapi::api::core::v1::Secret as SecretObject;
use kube::api::Api;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use std::sync::Arc;

/// The pool's pods as the Kubernetes backend runs them: its template plus the pod template
/// overrides, the owner reference and the pool label; it creates and deletes pods only while
/// this replica is the leader ([`Fenced`]), and lists only the pods the pool controls (its
/// owner reference, by uid), so even a pod of another pool under the same labels is never
/// counted or stopped.
pub(crate) fn backend(
    pool: &CodaLabWorkerPool,
    resolved: &ResolvedPool,
    credentials: &Credentials,
    ctx: &Context,
) -> Result<Fenced<KubernetesBackend>, ReconcileError> {
    let worker = resolved_worker(pool, resolved);
    let overrides = PodOverrides {
        node_selector: pool.spec.pod_template.node_selector.clone(),
        tolerations: pool.spec.pod_template.tolerations.clone(),
        priority_class_name: pool.spec.pod_template.priority_class_name.clone(),
        owner_references: pool.controller_owner_ref(&()).into_iter().collect(),
        labels: [(POOL_LABEL.to_owned(), pool_label(&pool.name_any()))].into(),
    };
    let template = WorkerTemplate::new(&resolved.kubernetes, credentials, &worker)
        .map_err(|e| err("render the worker pods", e))?
        .with_overrides(overrides);
    let backend =
        KubernetesBackend::from_template(ctx.client.clone(), template, &resolved.kubernetes);
    Ok(Fenced::new(backend, ctx.leader.clone()))
}

/// The CodaLab credentials in the pool's Secret, when the operator and the Secret allow the
/// pool to send them to its server ([`crate::access`]); a refusal is also an Event.
pub(crate) async fn credentials(
    ctx: &Context,
    pool: &CodaLabWorkerPool,
    namespace: &str,
) -> Result<Credentials, Problem> {
    let server = &pool.spec.server;
    let name = &pool.spec.credentials_secret;
    if let Err(why) = ctx.allowed_servers.check(server) {
        return Err(refuse(ctx, pool, "ServerNotAllowed", why).await);
    }
    let unavailable = |message: String| Problem {
        reason: "CredentialsUnavailable",
        message,
    };
    let secrets: Api<SecretObject> = Api::namespaced(ctx.client.clone(), namespace);
    let secret = secrets
        .get(name)
        .await
        .map_err(|e| unavailable(format!("credentials Secret `{name}`: {e}")))?;
    if let Err(why) = access::secret_allows(&secret, name, server) {
        return Err(refuse(ctx, pool, "CredentialsNotAllowed", why).await);
    }
    let data = secret.data.unwrap_or_default();
    let value = |key: &str| {
        data.get(key)
            .and_then(|v| String::from_utf8(v.0.clone()).ok())
            .ok_or_else(|| unavailable(format!("credentials Secret `{name}` has no key `{key}`")))
    };
    Ok(Credentials {
        username: value(codalab_wm_k8s::manifest::keys::CODALAB_USERNAME)?,
        password: Secret::new(value(codalab_wm_k8s::manifest::keys::CODALAB_PASSWORD)?),
    })
}

/// A refusal to use the pool's credentials: a Warning Event on the pool, and the problem its
/// Degraded condition shows.
async fn refuse(
    ctx: &Context,
    pool: &CodaLabWorkerPool,
    reason: &'static str,
    message: String,
) -> Problem {
    ctx.metrics.event(reason);
    let event = Event {
        type_: EventType::Warning,
        reason: reason.to_owned(),
        note: Some(message.clone()),
        action: "Reconcile".to_owned(),
        secondary: None,
    };
    if let Err(error) = ctx.recorder.publish(&event, &pool.object_ref(&())).await {
        tracing::warn!(pool = %pool.name_any(), %error, "cannot record an event");
    }
    Problem { reason, message }
}

/// A logged-in client per server and credentials (kept while they stay the same).
pub(crate) async fn codalab_client(
    ctx: &Context,
    pool: &CodaLabWorkerPool,
    namespace: &str,
    credentials: Credentials,
) -> Result<Arc<CodaLabClient>, String> {
    // A changed password (same user) makes a new client: the key holds a hash of it (in
    // memory only, never logged).
    let password = {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        credentials.password.expose().hash(&mut hasher);
        hasher.finish()
    };
    let key = format!(
        "{}|{namespace}/{}|{}|{password:x}",
        pool.spec.server, pool.spec.credentials_secret, credentials.username
    );
    let server = pool.spec.server.clone();
    ctx.codalab
        .get_or_login(key, async move {
            let client =
                CodaLabClient::with_options(&server, credentials, &ClientOptions::default())
                    .map_err(|e| e.to_string())?;
            client.login().await.map_err(|e| e.to_string())?;
            Ok(Arc::new(client))
        })
        .await
}

/// The `cl-worker` settings of the pool's workers: the defaults of `[worker]`, its server, its
/// tag.
pub(crate) fn resolved_worker(pool: &CodaLabWorkerPool, resolved: &ResolvedPool) -> WorkerOptions {
    let mut worker = WorkerOptions::default().for_server(&pool.spec.server);
    worker.tag = resolved.policy.tag.clone();
    worker.tag_exclusive = resolved.policy.tag_exclusive;
    worker
}
