//! What the fake keeps: instances, operations, tokens, faults and the requests it answered.

use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

/// An instance the fake keeps.
#[derive(Debug, Clone, PartialEq)]
pub struct FakeInstance {
    /// Its zone (`us-central1-a`).
    pub zone: String,
    /// Its name.
    pub name: String,
    /// Its numeric id (as text, as the API writes it).
    pub id: String,
    /// PROVISIONING, RUNNING, STOPPING, TERMINATED …
    pub status: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// The body it was inserted with (`Null` for one added by the test).
    pub body: Value,
    /// When it was created (RFC 3339).
    pub created: String,
}

impl FakeInstance {
    fn termination_action(&self) -> Option<&str> {
        self.body["scheduling"]["instanceTerminationAction"].as_str()
    }
}

/// A canned error answer, given to the next authenticated API request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// The HTTP status (429, 503 …).
    pub status: u16,
    /// The error reason (`rateLimitExceeded`, `backendError` …).
    pub reason: String,
    /// Only for this method (`compute.instances.insert`); any method when `None`.
    pub method: Option<String>,
}

impl Fault {
    /// A fault with `status` and `reason`, for the next API request.
    pub fn new(status: u16, reason: &str) -> Self {
        Self {
            status,
            reason: reason.to_owned(),
            method: None,
        }
    }

    /// The same fault, for the next request of method `id` only.
    pub fn on(mut self, id: &str) -> Self {
        self.method = Some(id.to_owned());
        self
    }
}

/// One request the fake answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRequest {
    /// The method.
    pub method: String,
    /// The path.
    pub path: String,
    /// The raw query.
    pub query: String,
    /// The discovery method id (`compute.instances.insert`), when it was one.
    pub method_id: Option<String>,
    /// The status answered.
    pub status: u16,
    /// Why it was rejected (400/404), when it was.
    pub rejection: Option<String>,
}

/// What happens when an operation is done.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Effect {
    /// The instance runs (unless held).
    Run(String),
    /// The instance is removed.
    Remove(String),
    /// Nothing more.
    None,
}

/// An operation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FakeOperation {
    pub name: String,
    pub zone: String,
    pub operation_type: String,
    pub target: String,
    pub status: String,
    pub steps_left: u32,
    pub error: Option<(String, String)>,
    pub effect: Effect,
}

#[derive(Debug)]
pub(crate) struct FakeState {
    pub project: String,
    pub url: String,
    pub instances: BTreeMap<(String, String), FakeInstance>,
    pub operations: BTreeMap<String, FakeOperation>,
    pub hold: bool,
    pub exhausted: BTreeSet<String>,
    pub operation_steps: u32,
    pub page_size: usize,
    pub faults: VecDeque<Fault>,
    pub requests: Vec<RecordedRequest>,
    pub service_accounts: HashMap<String, Vec<u8>>,
    pub tokens: BTreeSet<String>,
    next_id: u64,
}

impl FakeState {
    pub fn new(project: &str, url: &str) -> Self {
        Self {
            project: project.to_owned(),
            url: url.to_owned(),
            instances: BTreeMap::new(),
            operations: BTreeMap::new(),
            hold: false,
            exhausted: BTreeSet::new(),
            operation_steps: 1,
            page_size: 500,
            faults: VecDeque::new(),
            requests: Vec::new(),
            service_accounts: HashMap::new(),
            tokens: BTreeSet::new(),
            next_id: 1_000_000,
        }
    }

    /// The first queued fault for method `id`, taken from the queue.
    pub fn take_fault(&mut self, id: &str) -> Option<Fault> {
        let at = self
            .faults
            .iter()
            .position(|f| f.method.as_deref().is_none_or(|m| m == id))?;
        self.faults.remove(at)
    }

    pub fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// `<url>/compute/v1/projects/<project>/zones/<zone>/instances/<name>`.
    pub fn instance_link(&self, zone: &str, name: &str) -> String {
        format!(
            "{}/compute/v1/projects/{}/zones/{zone}/instances/{name}",
            self.url, self.project
        )
    }

    pub fn find(&self, name: &str) -> Option<(String, String)> {
        self.instances.keys().find(|(_, n)| n == name).cloned()
    }

    pub fn release(&mut self) {
        self.hold = false;
        for instance in self.instances.values_mut() {
            if instance.status == "PROVISIONING" || instance.status == "STAGING" {
                instance.status = "RUNNING".into();
            }
        }
    }

    /// A new operation on `target` in `zone`.
    pub fn operation(
        &mut self,
        zone: &str,
        operation_type: &str,
        target: String,
        effect: Effect,
    ) -> FakeOperation {
        let name = format!("operation-{}", self.next_id());
        let operation = FakeOperation {
            name: name.clone(),
            zone: zone.to_owned(),
            operation_type: operation_type.to_owned(),
            target,
            status: "RUNNING".into(),
            steps_left: self.operation_steps,
            error: None,
            effect,
        };
        self.operations.insert(name, operation.clone());
        operation
    }

    /// One step of every running operation (each request to the fake is one).
    pub fn advance(&mut self) {
        let due: Vec<String> = self
            .operations
            .values_mut()
            .filter(|o| o.status != "DONE")
            .filter_map(|o| {
                o.steps_left = o.steps_left.saturating_sub(1);
                (o.steps_left == 0).then(|| o.name.clone())
            })
            .collect();
        for name in due {
            self.finish(&name);
        }
    }

    fn finish(&mut self, name: &str) {
        let Some(operation) = self.operations.get_mut(name) else {
            return;
        };
        operation.status = "DONE".into();
        let (zone, effect) = (operation.zone.clone(), operation.effect.clone());
        match effect {
            Effect::Run(instance) if !self.hold => {
                if let Some(i) = self.instances.get_mut(&(zone, instance))
                    && i.status == "PROVISIONING"
                {
                    i.status = "RUNNING".into();
                }
            }
            Effect::Remove(instance) => {
                self.instances.remove(&(zone, instance));
            }
            _ => {}
        }
    }

    pub fn preempt(&mut self, name: &str, stop: bool) {
        let Some(key) = self.find(name) else {
            return;
        };
        let link = self.instance_link(&key.0, &key.1);
        let delete = !stop && self.instances[&key].termination_action() == Some("DELETE");
        let effect = if delete {
            Effect::Remove(key.1.clone())
        } else {
            Effect::None
        };
        if let Some(instance) = self.instances.get_mut(&key) {
            instance.status = if delete { "STOPPING" } else { "TERMINATED" }.into();
        }
        let op = self.operation(&key.0, "compute.instances.preempted", link, effect);
        if !delete {
            self.finish(&op.name);
        }
    }

    pub fn set_status(&mut self, name: &str, status: &str) {
        if let Some(key) = self.find(name)
            && let Some(instance) = self.instances.get_mut(&key)
        {
            instance.status = status.to_owned();
        }
    }

    pub fn insert_foreign(
        &mut self,
        zone: &str,
        name: &str,
        labels: &[(&str, &str)],
        status: &str,
    ) {
        let id = self.next_id().to_string();
        let instance = FakeInstance {
            zone: zone.to_owned(),
            name: name.to_owned(),
            id,
            status: status.to_owned(),
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            body: Value::Null,
            created: "2026-01-01T00:00:00.000-08:00".into(),
        };
        self.instances
            .insert((zone.to_owned(), name.to_owned()), instance);
    }

    /// The instance as the API answers it.
    pub fn instance_json(&self, instance: &FakeInstance) -> Value {
        let mut value = json!({
            "kind": "compute#instance",
            "id": instance.id,
            "name": instance.name,
            "status": instance.status,
            "labels": instance.labels,
            "creationTimestamp": instance.created,
            "zone": format!("{}/compute/v1/projects/{}/zones/{}", self.url, self.project, instance.zone),
            "selfLink": self.instance_link(&instance.zone, &instance.name),
        });
        for field in ["machineType", "scheduling"] {
            if let Some(v) = instance.body.get(field) {
                value[field] = v.clone();
            }
        }
        value
    }

    /// The operation as the API answers it.
    pub fn operation_json(&self, operation: &FakeOperation) -> Value {
        let mut value = json!({
            "kind": "compute#operation",
            "id": operation.name.trim_start_matches("operation-"),
            "name": operation.name,
            "operationType": operation.operation_type,
            "status": operation.status,
            "targetLink": operation.target,
            "zone": format!("{}/compute/v1/projects/{}/zones/{}", self.url, self.project, operation.zone),
            "selfLink": format!(
                "{}/compute/v1/projects/{}/zones/{}/operations/{}",
                self.url, self.project, operation.zone, operation.name
            ),
        });
        if let Some((code, message)) = &operation.error {
            value["error"] = json!({"errors": [{"code": code, "message": message}]});
            value["httpErrorStatusCode"] = json!(503);
        }
        value
    }
}
