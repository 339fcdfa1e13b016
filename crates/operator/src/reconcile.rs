//! One reconcile of one pool: the finalizer, then observe (its pods through the Kubernetes
//! backend, the staged bundles and the checked-in workers on its CodaLab server), plan (core's
//! `plan_pools` for that one pool), act (launch and delete pods through the backend, an Event
//! for each kind of change), and write the status. Only the lease holder reconciles
//! ([`crate::lease`]).
//!
//! The plan is the CLI's pool policy without what needs a manager's other pools or its view
//! of the server: no dispatch model (`server: None`: one bundle a worker, no packing, and no
//! quota holds, so an operator logged in as the root user `codalab` launches pods for the
//! bundles of owners with no `parallel_run_quota` left, which the server gives no shared
//! worker), no start-time estimates, no budgets or prices, no spill, hedge or fallback.

pub use crate::context::{Context, ReconcileError};
use crate::context::{err, publish};
pub use crate::crd::POOL_LABEL;
use crate::crd::{CodaLabWorkerPool, CodaLabWorkerPoolStatus, FINALIZER};
use crate::finalizer::{finalize, report_legacy_pods};
use crate::memory::Remembered;
use crate::observe::{Checkins, clock, pool_observation};
use crate::resources::{backend, codalab_client, credentials, resolved_worker};
use crate::spec::{ResolvedPool, resolve};
use crate::status::{Outcome, Problem, next_status, turned_on};
use codalab_wm_core::backend::{LaunchRequest, WorkerBackend, WorkerJob, new_unique};
use codalab_wm_core::checkin::CheckinView;
use codalab_wm_core::codalab::{CodaLabClient, staged_keywords};
use codalab_wm_core::policy::Reason;
use codalab_wm_core::pools::{Need, PoolsObservation, plan_pools};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use serde_json::json;
use std::sync::Arc;
use std::time::SystemTime;

/// Reconciles `pool`.
pub async fn reconcile(
    pool: Arc<CodaLabWorkerPool>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let leader = ctx.leader.is_leader();
    ctx.metrics.set_leader(leader);
    if !leader {
        ctx.metrics.reconciled("standby");
        return Ok(Action::requeue(ctx.sync));
    }
    let namespace = pool.namespace().unwrap_or_default();
    let api: Api<CodaLabWorkerPool> = Api::namespaced(ctx.client.clone(), &namespace);
    if pool.meta().deletion_timestamp.is_some() {
        return finalize(&pool, &api, &ctx).await;
    }
    if !pool.finalizers().iter().any(|f| f == FINALIZER) {
        let mut finalizers = pool.finalizers().to_vec();
        finalizers.push(FINALIZER.to_owned());
        let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": pool.resource_version()}});
        api.patch(
            &pool.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
        .map_err(|e| err("add the finalizer", e))?;
    }
    report_legacy_pods(&pool, &namespace, &ctx).await;
    let status = run_policy(&pool, &namespace, &ctx).await;
    if !ctx.leader.is_leader() {
        // Lost the lease meanwhile: the new leader writes the status.
        ctx.metrics.set_leader(false);
        return Ok(Action::requeue(ctx.sync));
    }
    let spec = (pool.spec.min, pool.spec.max);
    ctx.metrics
        .pool(&namespace, &pool.name_any(), spec, &status);
    write_status(&pool, &api, status).await?;
    ctx.metrics.reconciled("ok");
    Ok(Action::requeue(ctx.sync))
}

/// Observes, plans and acts; returns the new status.
async fn run_policy(
    pool: &CodaLabWorkerPool,
    namespace: &str,
    ctx: &Context,
) -> CodaLabWorkerPoolStatus {
    let old = pool.status.clone().unwrap_or_default();
    let mut outcome = Outcome {
        generation: pool.meta().generation,
        min: pool.spec.min,
        suspended: pool.spec.suspend,
        ..Outcome::default()
    };
    let now = SystemTime::now();
    let prepared = match prepare(pool, namespace, ctx).await {
        Ok(prepared) => prepared,
        Err(problem) => {
            tracing::warn!(pool = %pool.name_any(), reason = problem.reason, message = %problem.message, "cannot reconcile the pool");
            outcome.problem = Some(problem);
            return next_status(&old, &outcome, &Time(k8s_openapi::jiff::Timestamp::now()));
        }
    };
    let (observed, remembered) = match observe(pool, &prepared, ctx, now).await {
        Ok(observed) => observed,
        Err(problem) => {
            outcome.problem = Some(problem);
            return next_status(&old, &outcome, &Time(k8s_openapi::jiff::Timestamp::now()));
        }
    };
    let Prepared {
        resolved,
        backend,
        jobs,
        ..
    } = prepared;
    let policies = [resolved.policy.clone()];
    let decision = plan_pools(&observed, &policies, clock(now));
    let pool_decision = &decision.pools[0];
    if !pool.spec.suspend {
        act(
            pool,
            ctx,
            backend.as_ref(),
            &resolved,
            pool_decision,
            &jobs,
            &mut outcome,
        )
        .await;
    }
    // Like core's manager: a refused launch, or pods deleted for pending too long or lost
    // workers, back the pool off.
    let mut health = observed.pools[0].health;
    if !outcome.launch_errors.is_empty() || outcome.stopped > 0 {
        health.record_failure(clock(now), codalab_wm_core::pools::Failure::TRANSIENT);
    }
    outcome.health = Some(health);
    outcome.remembered = Some(remembered);
    outcome.observation = Some(&observed.pools[0]);
    outcome.decision = Some(pool_decision);
    outcome.unmet = &decision.unmet;
    let status = next_status(&old, &outcome, &Time(k8s_openapi::jiff::Timestamp::now()));
    if turned_on(&old, &status, "BackingOff") {
        publish(
            ctx,
            pool,
            EventType::Warning,
            "BackoffStarted",
            condition_message(&status, "BackingOff"),
        )
        .await;
    }
    status
}

/// The pool's pods, the server's checked-in workers and the staged bundles it can take, and
/// what is remembered of check-ins after this reconcile.
async fn observe(
    pool: &CodaLabWorkerPool,
    prepared: &Prepared,
    ctx: &Context,
    now: SystemTime,
) -> Result<(PoolsObservation, Remembered), Problem> {
    let client = &prepared.client;
    let checkins = match client.workers_info().await {
        Ok(workers) => Some(CheckinView::new(workers)),
        Err(error) => {
            tracing::warn!(pool = %pool.name_any(), %error, "cannot read the server's workers");
            None
        }
    };
    let status = pool.status.clone().unwrap_or_default();
    let (fresh_since, running_since, seen) =
        ctx.tick_clocks(pool, checkins.is_some(), &prepared.jobs, clock(now));
    // The status' list and this process's own memory, merged (review 2026-11-27 §15).
    let remembered = Remembered {
        checked_in: status.checked_in.iter().cloned().chain(seen).collect(),
        workers_seen: status.workers_seen,
    };
    let memory = Checkins {
        view: checkins.as_ref().zip(fresh_since),
        remembered: Some(&remembered),
        running_since: Some(&running_since),
    };
    let observation = pool_observation(&prepared.jobs, status.failures.as_ref(), memory, now);
    let remembered = remembered.after(&prepared.jobs, &observation);
    ctx.remember_checkins(pool, &remembered);
    let policy = &prepared.resolved.policy;
    let need = Need::new(
        std::slice::from_ref(policy),
        std::slice::from_ref(&observation),
        clock(now),
    );
    // One pool per reconcile: narrowed by its tag as upstream's single-backend mode is.
    let keywords = staged_keywords(
        &[],
        client.username(),
        policy.tag.as_deref(),
        policy.tag_exclusive,
    );
    let search = client
        .staged_for(&keywords, &need)
        .await
        .map_err(|e| Problem {
            reason: "CodaLabUnavailable",
            message: e.to_string(),
        })?;
    let observed = PoolsObservation {
        server: None,
        bundles: search.bundles,
        pools: vec![observation],
        // One pool: nothing to spill to (`spill_after` is a manager's pools' setting).
        times: Vec::new(),
    };
    Ok((observed, remembered))
}

fn condition_message(status: &CodaLabWorkerPoolStatus, kind: &str) -> String {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == kind)
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

/// What the policy needs, or why the pool cannot be reconciled.
struct Prepared {
    resolved: ResolvedPool,
    backend: Box<dyn WorkerBackend>,
    jobs: Vec<WorkerJob>,
    client: Arc<CodaLabClient>,
}

async fn prepare(
    pool: &CodaLabWorkerPool,
    namespace: &str,
    ctx: &Context,
) -> Result<Prepared, Problem> {
    let problem = |reason: &'static str| move |e: String| Problem { reason, message: e };
    let resolved = resolve(pool, &pool.name_any(), namespace).map_err(problem("InvalidSpec"))?;
    let credentials = credentials(ctx, pool, namespace).await?;
    let backend =
        backend(pool, &resolved, &credentials, ctx).map_err(|e| problem("InvalidSpec")(e.0))?;
    let jobs = backend
        .get_worker_jobs()
        .await
        .map_err(|e| problem("PodsUnavailable")(e.to_string()))?;
    let client = codalab_client(ctx, pool, namespace, credentials)
        .await
        .map_err(problem("CodaLabUnavailable"))?;
    Ok(Prepared {
        resolved,
        backend: Box::new(backend),
        jobs,
        client,
    })
}

/// Stops and launches as decided; Events for each.
async fn act(
    pool: &CodaLabWorkerPool,
    ctx: &Context,
    backend: &dyn WorkerBackend,
    resolved: &ResolvedPool,
    decision: &codalab_wm_core::pools::PoolDecision,
    jobs: &[WorkerJob],
    outcome: &mut Outcome<'_>,
) {
    for id in &decision.stops {
        let Some(job) = jobs.iter().find(|j| j.id == *id) else {
            continue;
        };
        let pending = job.state == codalab_wm_core::backend::JobState::Pending;
        let blocked = (decision.reasons.iter())
            .any(|r| matches!(r, Reason::Blocked { job_id, .. } if job_id == id));
        let (reason, why) = match (blocked, pending) {
            (true, _) => (
                "PodBlocked",
                format!(
                    "the cluster says it will not start: {}",
                    job.reason.as_deref().unwrap_or("no reason given")
                ),
            ),
            (false, true) => ("PendingTimeout", "pending too long".to_owned()),
            (false, false) => ("WorkerReaped", "its worker never checked in".to_owned()),
        };
        match backend.stop_worker_job(job).await {
            Ok(()) => {
                outcome.stopped += 1;
                publish(
                    ctx,
                    pool,
                    EventType::Warning,
                    reason,
                    format!("deleted pod {id}: {why}"),
                )
                .await;
            }
            Err(e) => {
                tracing::warn!(pool = %pool.name_any(), pod = %id, error = %e, "cannot delete a worker pod")
            }
        }
    }
    let worker = resolved_worker(pool, resolved);
    let mut launched = Vec::new();
    for _ in 0..decision.launches {
        let unique = new_unique();
        let request = LaunchRequest {
            unique: &unique,
            worker: &worker,
            dry_run: false,
        };
        match backend.start_worker_job(&request).await {
            Ok(job) => launched.push(job.id),
            Err(e) => {
                outcome.launch_errors.push(e.to_string());
                publish(ctx, pool, EventType::Warning, "LaunchFailed", e.to_string()).await;
                break;
            }
        }
    }
    outcome.launched = launched.len() as u32;
    if !launched.is_empty() {
        let reasons = decision.reason_codes();
        publish(
            ctx,
            pool,
            EventType::Normal,
            "WorkersLaunched",
            format!(
                "created {} worker pods ({reasons}): {}",
                launched.len(),
                launched.join(", ")
            ),
        )
        .await;
    }
}

async fn write_status(
    pool: &CodaLabWorkerPool,
    api: &Api<CodaLabWorkerPool>,
    status: CodaLabWorkerPoolStatus,
) -> Result<(), ReconcileError> {
    if pool.status.as_ref() == Some(&status) {
        return Ok(());
    }
    // A merge patch: every field present (null removes one), so nothing stale stays.
    let mut value = serde_json::to_value(&status).map_err(|e| err("render the status", e))?;
    for field in [
        "observedGeneration",
        "lastScaleTime",
        "conditions",
        "unmet",
        "failures",
        "checkedIn",
        "workersSeen",
    ] {
        value
            .as_object_mut()
            .map(|o| o.entry(field).or_insert(serde_json::Value::Null));
    }
    let patch = json!({"status": value});
    api.patch_status(
        &pool.name_any(),
        &PatchParams::default(),
        &Patch::Merge(patch),
    )
    .await
    .map_err(|e| err("write the status", e))?;
    Ok(())
}

/// What the controller does with a failed reconcile: log, retry after the sync period.
pub fn error_policy(
    pool: Arc<CodaLabWorkerPool>,
    error: &ReconcileError,
    ctx: Arc<Context>,
) -> Action {
    tracing::warn!(pool = %pool.name_any(), %error, "reconcile failed");
    ctx.metrics.reconciled("error");
    Action::requeue(ctx.sync)
}
