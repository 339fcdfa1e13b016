//! A pool's pods by the pool itself: the finalizer deletes the pods the pool controls before
//! the pool goes, and a reconcile reports those an earlier release made under the pool's old
//! manager id. Both go by the pods' controller owner reference (the pool's uid), never by a
//! label selector alone (review 2026-11-27 §1: two pools once shared a lossy id).

use crate::context::{Context, ReconcileError, err, publish};
use crate::crd::{CodaLabWorkerPool, FINALIZER};
use crate::spec::{legacy_manager_id, manager_id};
use codalab_wm_k8s::names::worker_selector;
use codalab_wm_k8s::pods::controlled_by;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use serde_json::json;

/// Deletes the pool's pods; removes the finalizer once none is left.
pub(crate) async fn finalize(
    pool: &CodaLabWorkerPool,
    api: &Api<CodaLabWorkerPool>,
    ctx: &Context,
) -> Result<Action, ReconcileError> {
    if !pool.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    // The pods the pool controls (owner reference, by uid), whatever their manager id: an
    // earlier release's (review 2026-11-27 §1: its ids were lossy, so two pools could share
    // one) as well as today's, and never another pool's. By the pods alone, so an invalid
    // spec never blocks the deletion.
    let namespace = pool.namespace().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let listed = controlled_pods(&pods, pool, &managed_selector()).await?;
    for pod in &listed {
        if !ctx.leader.is_leader() {
            return Err(err(
                "delete a worker pod",
                "this replica no longer holds the lease",
            ));
        }
        // Only this pod: not one that took its name since.
        let params = DeleteParams {
            preconditions: pod.uid().map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match pods.delete(&pod.name_any(), &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => return Err(err("delete a worker pod", e)),
        }
    }
    if !listed.is_empty() {
        let note = format!("deleted {} worker pods: the pool is deleted", listed.len());
        publish(ctx, pool, EventType::Normal, "WorkerReaped", note).await;
    }
    let left: Vec<String> = pool
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    let patch =
        json!({"metadata": {"finalizers": left, "resourceVersion": pool.resource_version()}});
    api.patch(
        &pool.name_any(),
        &PatchParams::default(),
        &Patch::Merge(patch),
    )
    .await
    .map_err(|e| err("remove the finalizer", e))?;
    ctx.metrics.forget_pool(&namespace, &pool.name_any());
    ctx.forget_clocks(pool);
    Ok(Action::await_change())
}

/// The selector of every worker pod this program manages, of any manager.
fn managed_selector() -> String {
    use codalab_wm_k8s::names::{APP_LABEL, MANAGED_BY_LABEL};
    format!(
        "{}={},{}={}",
        APP_LABEL.0, APP_LABEL.1, MANAGED_BY_LABEL.0, MANAGED_BY_LABEL.1
    )
}

/// The pods of `selector` that `pool` controls (their controller owner reference is the
/// pool, by uid); none when the pool has no uid.
async fn controlled_pods(
    pods: &Api<Pod>,
    pool: &CodaLabWorkerPool,
    selector: &str,
) -> Result<Vec<Pod>, ReconcileError> {
    let Some(uid) = pool.uid() else {
        return Ok(Vec::new());
    };
    let listed = pods
        .list(&ListParams::default().labels(selector))
        .await
        .map_err(|e| err("list the pool's pods", e))?;
    Ok(listed
        .items
        .into_iter()
        .filter(|p| controlled_by(p, &uid))
        .collect())
}

/// Reports the pods an earlier release made for the pool under its old, lossy manager id
/// (review 2026-11-27 §1): a Warning Event and a log line. They are not this release's pods
/// (neither counted toward `max` nor stopped: they run until their worker exits) and are
/// deleted with the pool. Nothing to do for a pool whose id did not change.
pub(crate) async fn report_legacy_pods(pool: &CodaLabWorkerPool, namespace: &str, ctx: &Context) {
    let name = pool.name_any();
    let legacy = legacy_manager_id(&name);
    if legacy == manager_id(&name) {
        return;
    }
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    match controlled_pods(&pods, pool, &worker_selector(&legacy)).await {
        Ok(old) if !old.is_empty() => {
            let names: Vec<String> = old.iter().map(|p| p.name_any()).collect();
            let note = format!(
                "{} worker pods carry this pool's manager id of an earlier release ({legacy}, \
                 now {}): left running, not counted toward max nor stopped; deleted with the \
                 pool: {}",
                names.len(),
                manager_id(&name),
                names.join(", ")
            );
            tracing::warn!(pool = %name, %note, "pods of an earlier release");
            publish(ctx, pool, EventType::Warning, "LegacyPods", note).await;
        }
        Ok(_) => {}
        Err(error) => {
            tracing::warn!(pool = %name, %error, "cannot look for an earlier release's pods")
        }
    }
}
