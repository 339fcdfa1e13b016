//! [`KubernetesBackend`]: the [`WorkerBackend`] that runs each worker as a pod.

use crate::client;
use crate::config::KubernetesConfig;
use crate::error::{BACKEND, from_kube};
use crate::manifest::{WorkerTemplate, keys};
use crate::names::{MANAGED_BY_LABEL, MANAGER_ID_LABEL, ORIGIN_LABEL};
use crate::pods::{finished_beyond_limit, is_finished, job_from_pod};
use codalab_wm_backend::backend::{
    self, CleanupItem, JobState, LaunchRequest, PendingKind, WorkerAccount, WorkerBackend,
    WorkerJob,
};
use codalab_wm_backend::bundle::WorkerShape;
use codalab_wm_backend::command::WorkerOptions;
use codalab_wm_backend::error::{Error, Result};
use codalab_wm_backend::secret::Credentials;
use k8s_openapi::api::core::v1::{Event, Pod, Secret as SecretObject};
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions};
use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;

/// Runs `cl-worker`s as pods on a Kubernetes cluster.
///
/// Its pods are the ones carrying its labels (`app=cl-worker`,
/// `app.kubernetes.io/managed-by=codalab-wm`, `codalab-wm/manager-id=<id>`), so a restarted
/// manager with the same id finds them again, but for those whose `codalab-wm/origin` label
/// names another deployment (another server or CodaLab user): those are neither counted,
/// stopped nor cleaned up. Pods rendered with a controller owner reference (an operator
/// pool's) are its pods only if that controller (by uid) controls them. The workers'
/// credentials live in a Secret.
pub struct KubernetesBackend {
    pods: Api<Pod>,
    /// The namespace's Events: the cluster-autoscaler's word on pending pods
    /// ([`crate::scale_up`]).
    events: Api<Event>,
    /// Whether the Events could not be read last time (said once, not every tick).
    events_unreadable: std::sync::atomic::AtomicBool,
    secrets: Api<SecretObject>,
    template: WorkerTemplate,
    shape: WorkerShape,
    keep_finished_pods: usize,
    /// A dry run: finished pods past the limit are listed, not deleted.
    read_only: bool,
    /// Pod uid by name, from the last list and the creates since: the precondition of a
    /// delete. Rebuilt on every list, so it holds only pods that still exist.
    uids: Mutex<HashMap<String, String>>,
    /// Whether the credentials Secret was created (or the given one found) by this process.
    secret_ready: tokio::sync::Mutex<bool>,
}

impl fmt::Debug for KubernetesBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubernetesBackend")
            .field("namespace", &self.template.namespace())
            .field("selector", &self.template.selector())
            .field("shape", &self.shape)
            .field("keep_finished_pods", &self.keep_finished_pods)
            .finish_non_exhaustive()
    }
}

impl KubernetesBackend {
    /// A backend for `config` whose workers log in with `credentials` and run with `worker`.
    /// Validates the configuration and builds the client; it does not call the cluster yet.
    pub async fn new(
        config: &KubernetesConfig,
        credentials: &Credentials,
        worker: &WorkerOptions,
    ) -> Result<Self> {
        let template = WorkerTemplate::new(config, credentials, worker)?;
        let client = client::connect(config).await?;
        Ok(Self::with_parts(client, template, config))
    }

    /// A backend talking through `client` (tests, or callers with their own client setup).
    pub fn with_client(
        client: kube::Client,
        config: &KubernetesConfig,
        credentials: &Credentials,
        worker: &WorkerOptions,
    ) -> Result<Self> {
        let template = WorkerTemplate::new(config, credentials, worker)?;
        Ok(Self::with_parts(client, template, config))
    }

    /// A backend talking through `client` that renders its Pods from `template` (made from
    /// `config`, perhaps with overrides: the operator's pools).
    pub fn from_template(
        client: kube::Client,
        template: WorkerTemplate,
        config: &KubernetesConfig,
    ) -> Self {
        Self::with_parts(client, template, config)
    }

    fn with_parts(
        client: kube::Client,
        template: WorkerTemplate,
        config: &KubernetesConfig,
    ) -> Self {
        Self {
            pods: Api::namespaced(client.clone(), template.namespace()),
            events: Api::namespaced(client.clone(), template.namespace()),
            events_unreadable: Default::default(),
            secrets: Api::namespaced(client, template.namespace()),
            template,
            shape: config.worker_shape(),
            keep_finished_pods: config.keep_finished_pods,
            read_only: false,
            uids: Mutex::default(),
            secret_ready: tokio::sync::Mutex::new(false),
        }
    }

    /// A backend that deletes nothing while listing (a dry run): it logs the finished pods
    /// it would delete instead.
    pub fn read_only(self, read_only: bool) -> Self {
        Self { read_only, ..self }
    }

    /// This backend for the deployment of `origin` (its pods' label; no pod of another origin
    /// is listed); `None`: pods get no origin and every origin is listed (`down` without the
    /// workers' user).
    pub fn with_origin(self, origin: Option<String>) -> Self {
        let template = self.template.clone().with_origin(origin);
        Self { template, ..self }
    }

    /// The manifests this backend renders.
    pub fn template(&self) -> &WorkerTemplate {
        &self.template
    }

    fn uids(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.uids
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn remember(&self, pod: &Pod) {
        if let (Some(name), Some(uid)) = (&pod.metadata.name, &pod.metadata.uid) {
            self.uids().insert(name.clone(), uid.clone());
        }
    }

    /// Creates (or updates) the credentials Secret once per process; checks that a Secret
    /// given by name exists, so pods do not wait forever on a missing one.
    async fn ensure_secret(&self) -> Result<()> {
        let mut ready = self.secret_ready.lock().await;
        if *ready {
            return Ok(());
        }
        let name = self.template.secret_name();
        match self.template.secret() {
            None => {
                self.secrets.get(name).await.map_err(|e| match e {
                    kube::Error::Api(s) if s.code == 404 => self.missing_secret(),
                    e => from_kube("read the credentials secret", e),
                })?;
            }
            Some(secret) => match self.secrets.create(&PostParams::default(), &secret).await {
                Ok(_) => tracing::info!(secret = name, "created the worker credentials secret"),
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    let existing = (self.secrets.get(name).await)
                        .map_err(|e| from_kube("read the credentials secret", e))?;
                    self.refuse_anothers(&existing, &secret)?;
                    self.secrets
                        .replace(name, &PostParams::default(), &secret)
                        .await
                        .map_err(|e| from_kube("update the credentials secret", e))?;
                    tracing::info!(secret = name, "updated the worker credentials secret");
                }
                Err(e) => return Err(from_kube("create the credentials secret", e)),
            },
        }
        *ready = true;
        Ok(())
    }

    /// The Secret this manager would write already holds another CodaLab user: another
    /// deployment uses the same `manager_id` in this namespace (its pods, Secret and scratch
    /// dir), and replacing the Secret would make its workers log in as this manager's user.
    fn refuse_anothers(&self, existing: &SecretObject, ours: &SecretObject) -> Result<()> {
        let user = |s: &SecretObject| {
            let value = s.data.as_ref()?.get(keys::CODALAB_USERNAME)?;
            Some(String::from_utf8_lossy(&value.0).into_owned())
        };
        match (user(existing), user(ours)) {
            (Some(theirs), Some(ours)) if theirs != ours => Err(Error::InvalidConfig(format!(
                "kubernetes: the credentials Secret `{}` in namespace `{}` holds CodaLab user \
                 `{theirs}`, not `{ours}`: another deployment uses this manager_id here; give \
                 this one a manager_id of its own",
                self.template.secret_name(),
                self.template.namespace()
            ))),
            _ => Ok(()),
        }
    }

    /// At start: the Secret this manager would create may already be another deployment's.
    async fn created_secret_account(&self, ours: &SecretObject) -> Result<WorkerAccount> {
        if let Ok(existing) = self.secrets.get(self.template.secret_name()).await {
            self.refuse_anothers(&existing, ours)?;
        }
        Ok(WorkerAccount::Manager)
    }

    fn missing_secret(&self) -> Error {
        Error::InvalidConfig(format!(
            "kubernetes: credentials_secret `{}` does not exist in namespace `{}`",
            self.template.secret_name(),
            self.template.namespace()
        ))
    }

    /// The user name (`codalab-username`) of the Secret given by name, which the workers log
    /// in as. Without the right to read it the manager cannot tell, and says so.
    async fn given_secret_account(&self) -> Result<WorkerAccount> {
        let name = self.template.secret_name();
        let secret = match self.secrets.get(name).await {
            Ok(secret) => secret,
            Err(kube::Error::Api(s)) if s.code == 404 => return Err(self.missing_secret()),
            Err(e) => {
                let why = format!("cannot read credentials_secret `{name}`: {e}");
                return Ok(WorkerAccount::Unknown(why));
            }
        };
        match secret
            .data
            .as_ref()
            .and_then(|d| d.get(keys::CODALAB_USERNAME))
        {
            Some(user) => Ok(WorkerAccount::Named(
                String::from_utf8_lossy(&user.0).into_owned(),
            )),
            None => Err(Error::InvalidConfig(format!(
                "kubernetes: credentials_secret `{name}` has no key `{}`",
                keys::CODALAB_USERNAME
            ))),
        }
    }

    /// The pods of the selector, but for those of another origin and, when the pods have a
    /// controller, those it does not control.
    async fn list_pods(&self) -> Result<Vec<Pod>> {
        let params = ListParams::default().labels(&self.template.selector());
        let pods = self
            .pods
            .list(&params)
            .await
            .map_err(|e| from_kube("list worker pods", e))?
            .items;
        let own = self.template.origin();
        let marked = |p: &Pod| p.metadata.labels.as_ref()?.get(ORIGIN_LABEL).cloned();
        let listed = |p: &Pod| backend::is_listed(own, marked(p).as_deref());
        let controller = self.template.controller_uid();
        let controlled = |p: &Pod| controller.is_none_or(|uid| crate::pods::controlled_by(p, uid));
        Ok(pods
            .into_iter()
            .filter(|p| listed(p) && controlled(p))
            .collect())
    }

    /// `jobs`, the unschedulable ones with the cluster-autoscaler's refusal as their reason
    /// when it refused them ([`crate::scale_up`]). The Events are advice: when they cannot be
    /// read (the Role has no `list` on `events`), the pods keep their own reasons, and that
    /// is said once.
    async fn with_scale_up_refusals(&self, mut jobs: Vec<WorkerJob>) -> Vec<WorkerJob> {
        use std::sync::atomic::Ordering;
        if !jobs.iter().any(crate::scale_up::unschedulable) {
            return jobs;
        }
        match crate::scale_up::list(&self.events).await {
            Ok(events) => {
                let by_uid = (self.uids().iter())
                    .map(|(name, uid)| (uid.clone(), name.clone()))
                    .collect();
                let now = std::time::SystemTime::now();
                let refusals = crate::scale_up::refusals(&events, &by_uid, now);
                crate::scale_up::apply(&mut jobs, &refusals);
                self.events_unreadable.store(false, Ordering::Relaxed);
            }
            Err(error) => {
                if !self.events_unreadable.swap(true, Ordering::Relaxed) {
                    tracing::warn!(%error, "cannot read the namespace's Events: unschedulable pods are not told apart from pods no node will come for (give the Role `list` on `events`)");
                }
            }
        }
        jobs
    }

    /// Deletes pod `name` if it is still the pod with `uid`. A pod already gone, or replaced
    /// by another pod of the same name, counts as deleted.
    async fn delete_pod(
        &self,
        name: &str,
        uid: Option<String>,
        operation: &'static str,
    ) -> Result<()> {
        let params = DeleteParams {
            preconditions: uid.map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match self.pods.delete(name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {
                tracing::debug!(pod = name, reason = %s.reason, "worker pod already gone");
            }
            Err(e) => return Err(from_kube(operation, e)),
        }
        self.uids().remove(name);
        Ok(())
    }

    /// Deletes the finished pods past `keep_finished_pods`, oldest first. Failures are logged,
    /// not returned: the next tick tries again.
    async fn delete_old_finished(&self, pods: &[Pod]) -> Vec<String> {
        let mut deleted = Vec::new();
        for pod in finished_beyond_limit(pods, self.keep_finished_pods) {
            let name = pod.metadata.name.clone().unwrap_or_default();
            if self.read_only {
                tracing::info!(pod = %name, keep = self.keep_finished_pods, "dry run: would delete finished worker pod");
                continue;
            }
            let phase = pod
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default();
            match self
                .delete_pod(
                    &name,
                    pod.metadata.uid.clone(),
                    "delete a finished worker pod",
                )
                .await
            {
                Ok(()) => {
                    tracing::info!(pod = %name, %phase, keep = self.keep_finished_pods, "deleted finished worker pod");
                    deleted.push(name);
                }
                Err(error) => {
                    tracing::warn!(pod = %name, %error, "could not delete finished worker pod")
                }
            }
        }
        deleted
    }

    /// The credentials Secret, if this manager created it (not one given by name) and it still
    /// exists with this manager's labels.
    async fn own_secret(&self) -> Result<Option<String>> {
        if self.template.secret().is_none() {
            return Ok(None);
        }
        let name = self.template.secret_name();
        let Some(secret) = self
            .secrets
            .get_opt(name)
            .await
            .map_err(|e| from_kube("read the credentials secret", e))?
        else {
            return Ok(None);
        };
        let labels = secret.metadata.labels.unwrap_or_default();
        let ours = self.template.labels();
        let owned = [MANAGED_BY_LABEL.0, MANAGER_ID_LABEL]
            .iter()
            .all(|key| labels.get(*key).is_some_and(|v| ours.get(*key) == Some(v)));
        if !owned {
            tracing::warn!(
                secret = name,
                "the credentials secret does not carry this manager's labels; leaving it"
            );
        }
        Ok(owned.then(|| name.to_owned()))
    }

    fn dry_run(&self, request: &LaunchRequest<'_>) -> Result<WorkerJob> {
        let pod = self.template.pod(request.unique);
        let manifest = serde_json::to_string(&pod)
            .map_err(|e| Error::backend(BACKEND, "render a worker pod", e.to_string()))?;
        let name = pod.metadata.name.unwrap_or_default();
        tracing::info!(pod = %name, %manifest, "dry run: would create this worker pod");
        let mut job = WorkerJob::new(format!("dry-run-{}", request.unique), JobState::Ended);
        job.name = name;
        job.shape = Some(self.shape);
        Ok(job)
    }
}

#[async_trait::async_trait]
impl WorkerBackend for KubernetesBackend {
    fn name(&self) -> &str {
        BACKEND
    }

    fn worker_shape(&self) -> WorkerShape {
        self.shape
    }

    async fn worker_account(&self) -> Result<WorkerAccount> {
        match self.template.secret() {
            Some(ours) => self.created_secret_account(&ours).await,
            None => self.given_secret_account().await,
        }
    }

    #[tracing::instrument(skip(self), fields(backend = BACKEND))]
    async fn get_worker_jobs(&self) -> Result<Vec<WorkerJob>> {
        let pods = self.list_pods().await?;
        let uids = pods
            .iter()
            .filter_map(|p| Some((p.metadata.name.clone()?, p.metadata.uid.clone()?)));
        *self.uids() = uids.collect();
        let deleted = self.delete_old_finished(&pods).await;
        let jobs = pods
            .iter()
            .filter(|p| {
                !p.metadata
                    .name
                    .as_ref()
                    .is_some_and(|n| deleted.contains(n))
            })
            .map(job_from_pod)
            .collect::<Vec<_>>();
        Ok(self.with_scale_up_refusals(jobs).await)
    }

    /// What a pending pod's reason says ([`crate::pods::pending_kind`]): its image or
    /// settings are wrong, or the cluster-autoscaler will add no node for it.
    fn pending_kind(&self, job: &WorkerJob) -> PendingKind {
        crate::pods::pending_kind(job.reason.as_deref())
    }

    #[tracing::instrument(skip(self, request), fields(backend = BACKEND, unique = request.unique))]
    async fn start_worker_job(&self, request: &LaunchRequest<'_>) -> Result<WorkerJob> {
        if request.dry_run {
            return self.dry_run(request);
        }
        self.ensure_secret().await?;
        let pod = self.template.pod(request.unique);
        let name = pod.metadata.name.clone().unwrap_or_default();
        let created = match self.pods.create(&PostParams::default(), &pod).await {
            Ok(created) => created,
            Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => {
                tracing::info!(pod = %name, "worker pod already exists: taking it as created");
                self.pods
                    .get(&name)
                    .await
                    .map_err(|e| from_kube("read an existing worker pod", e))?
            }
            Err(e) => return Err(from_kube("create a worker pod", e)),
        };
        self.remember(&created);
        let image = self.template.image();
        tracing::info!(pod = %name, %image, "started worker pod");
        Ok(job_from_pod(&created))
    }

    #[tracing::instrument(skip(self, job), fields(backend = BACKEND, pod = %job.id))]
    async fn stop_worker_job(&self, job: &WorkerJob) -> Result<()> {
        let known = self.uids().get(&job.id).cloned();
        let uid = match known {
            Some(uid) => Some(uid),
            None => match self
                .pods
                .get_opt(&job.id)
                .await
                .map_err(|e| from_kube("read a worker pod", e))?
            {
                Some(pod) => pod.metadata.uid,
                None => return Ok(()),
            },
        };
        self.delete_pod(&job.id, uid, "delete a worker pod").await?;
        tracing::info!(pod = %job.id, "stopped worker pod");
        Ok(())
    }

    /// Deletes this manager's finished pods (kept as history) and the credentials Secret it
    /// created; a Secret given by name (`credentials_secret`) is never touched.
    #[tracing::instrument(skip(self), fields(backend = BACKEND))]
    async fn cleanup(&self, dry_run: bool) -> Result<Vec<CleanupItem>> {
        let pods = self.list_pods().await?;
        let mut items = Vec::new();
        for pod in pods.iter().filter(|p| is_finished(p)) {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let item = CleanupItem::found("finished pod", &name);
            if dry_run {
                items.push(item);
                continue;
            }
            let result = self
                .delete_pod(
                    &name,
                    pod.metadata.uid.clone(),
                    "delete a finished worker pod",
                )
                .await;
            items.push(item.outcome(result));
        }
        if let Some(name) = self.own_secret().await? {
            let item = CleanupItem::found("secret", &name);
            if dry_run {
                items.push(item);
            } else {
                let result = match self.secrets.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                    Err(e) => Err(from_kube("delete the credentials secret", e)),
                };
                *self.secret_ready.lock().await = false;
                tracing::info!(secret = %name, ok = result.is_ok(), "deleted the worker credentials secret");
                items.push(item.outcome(result));
            }
        }
        Ok(items)
    }
}
