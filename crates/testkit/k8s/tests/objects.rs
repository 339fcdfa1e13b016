//! The fake API server's custom resources, status subresource, conflicts, finalizers, watches,
//! Leases and Events, driven by the real `kube::Client` (the fake is what these tests run
//! against; there is no real API server on these machines).

use codalab_wm_fake_k8s::FakeApiServer;
use futures_util::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::events::v1::Event;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams,
    PostParams, WatchEvent, WatchParams,
};
use serde_json::json;

const CRD: &str = "apiextensions.k8s.io/customresourcedefinitions";

fn crd() -> serde_json::Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.org"},
        "spec": {"group": "example.org", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "subresources": {"status": {}},
                "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}]}]}})
}

async fn setup() -> (FakeApiServer, Api<DynamicObject>) {
    let fake = FakeApiServer::start().await;
    let client = kube::Client::try_from(kube::Config::new(fake.url().parse().unwrap())).unwrap();
    let crds = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
        "customresourcedefinitions",
    );
    let crd_api: Api<DynamicObject> = Api::all_with(client.clone(), &crds);
    let crd: DynamicObject = serde_json::from_value(crd()).unwrap();
    crd_api.create(&PostParams::default(), &crd).await.unwrap();
    assert!(fake.object(CRD, "", "widgets.example.org").is_some());
    let widgets = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.org", "v1", "Widget"),
        "widgets",
    );
    (fake, Api::namespaced_with(client, "team", &widgets))
}

fn widget(name: &str, spec: serde_json::Value) -> DynamicObject {
    serde_json::from_value(json!({"apiVersion": "example.org/v1", "kind": "Widget",
        "metadata": {"name": name}, "spec": spec, "status": {"ready": 9}}))
    .unwrap()
}

fn generation(object: &DynamicObject) -> i64 {
    object.metadata.generation.unwrap()
}

#[tokio::test]
async fn spec_writes_bump_the_generation_status_writes_do_not() {
    let (_fake, widgets) = setup().await;
    let created = widgets
        .create(&PostParams::default(), &widget("a", json!({"size": 1})))
        .await
        .unwrap();
    assert_eq!(generation(&created), 1);
    assert!(
        created.data.get("status").is_none(),
        "status is dropped on create"
    );
    let merge = |v| Patch::Merge(v);
    let cases = [
        // (status subresource?, patch, generation after, size after, ready after)
        (
            false,
            json!({"spec": {"size": 2}}),
            2,
            json!(2),
            json!(null),
        ),
        (true, json!({"status": {"ready": 1}}), 2, json!(2), json!(1)),
        (
            false,
            json!({"status": {"ready": 5}}),
            2,
            json!(2),
            json!(1),
        ),
        (
            true,
            json!({"spec": {"size": 7}, "status": {"ready": 2}}),
            2,
            json!(2),
            json!(2),
        ),
        (
            false,
            json!({"metadata": {"labels": {"x": "y"}}}),
            2,
            json!(2),
            json!(2),
        ),
        (false, json!({"spec": {"size": 3}}), 3, json!(3), json!(2)),
    ];
    for (to_status, patch, gen_after, size, ready) in cases {
        let params = PatchParams::default();
        let result = if to_status {
            widgets
                .patch_status("a", &params, &merge(patch.clone()))
                .await
        } else {
            widgets.patch("a", &params, &merge(patch.clone())).await
        }
        .unwrap();
        assert_eq!(generation(&result), gen_after, "{patch}");
        assert_eq!(result.data["spec"]["size"], size, "{patch}");
        assert_eq!(result.data["status"]["ready"], ready, "{patch}");
    }
}

#[tokio::test]
async fn a_stale_resource_version_is_a_conflict() {
    let (_fake, widgets) = setup().await;
    let created = widgets
        .create(&PostParams::default(), &widget("a", json!({"size": 1})))
        .await
        .unwrap();
    let mut first = created.clone();
    first.data["spec"]["size"] = json!(2);
    let updated = widgets
        .replace("a", &PostParams::default(), &first)
        .await
        .unwrap();
    assert_ne!(
        updated.metadata.resource_version,
        created.metadata.resource_version
    );
    let mut stale = created.clone();
    stale.data["spec"]["size"] = json!(3);
    match widgets.replace("a", &PostParams::default(), &stale).await {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (409, "Conflict")),
        other => panic!("expected a conflict, got {other:?}"),
    }
    let mut unconditional = created.clone();
    unconditional.metadata.resource_version = None;
    match widgets
        .replace("a", &PostParams::default(), &unconditional)
        .await
    {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (422, "Invalid")),
        other => panic!("a custom resource needs a resourceVersion to update, got {other:?}"),
    }
    let rv = created.metadata.resource_version.clone().unwrap();
    let patch = json!({"metadata": {"resourceVersion": rv}, "spec": {"size": 4}});
    let err = widgets
        .patch("a", &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap_err();
    assert!(matches!(err, kube::Error::Api(s) if s.code == 409));
    match widgets
        .create(&PostParams::default(), &widget("a", json!({})))
        .await
    {
        Err(kube::Error::Api(s)) => assert_eq!(s.reason, "AlreadyExists"),
        other => panic!("expected AlreadyExists, got {other:?}"),
    }
}

#[tokio::test]
async fn finalizers_hold_a_deleted_object_until_removed() {
    let (fake, widgets) = setup().await;
    let client = kube::Client::try_from(kube::Config::new(fake.url().parse().unwrap())).unwrap();
    let mut object = widget("a", json!({}));
    object.metadata.finalizers = Some(vec!["example.org/cleanup".into()]);
    widgets
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
    widgets.delete("a", &DeleteParams::default()).await.unwrap();
    let deleting = widgets.get("a").await.unwrap();
    assert!(deleting.metadata.deletion_timestamp.is_some());
    // A JSON patch, as kube-runtime's finalizer helper sends it.
    let remove = json!([
        {"op": "test", "path": "/metadata/finalizers", "value": ["example.org/cleanup"]},
        {"op": "remove", "path": "/metadata/finalizers/0"}]);
    let request = axum::http::Request::patch("/apis/example.org/v1/namespaces/team/widgets/a")
        .header("content-type", "application/json-patch+json")
        .body(serde_json::to_vec(&remove).unwrap())
        .unwrap();
    client.request_text(request).await.unwrap();
    assert!(widgets.get_opt("a").await.unwrap().is_none());
    assert!(fake.object("example.org/widgets", "team", "a").is_none());
    widgets
        .create(&PostParams::default(), &widget("b", json!({})))
        .await
        .unwrap();
    widgets.delete("b", &DeleteParams::default()).await.unwrap();
    assert!(
        widgets.get_opt("b").await.unwrap().is_none(),
        "no finalizer: gone at once"
    );
}

#[tokio::test]
async fn watches_stream_changes_bookmarks_and_410_after_compaction() {
    let (fake, widgets) = setup().await;
    let created = widgets
        .create(&PostParams::default(), &widget("a", json!({"size": 1})))
        .await
        .unwrap();
    let from = created.metadata.resource_version.clone().unwrap();
    let params = WatchParams::default().timeout(10).disable_bookmarks();
    let mut stream = widgets.watch(&params, "0").await.unwrap().boxed();
    widgets
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 2}})),
        )
        .await
        .unwrap();
    match stream.next().await.unwrap().unwrap() {
        WatchEvent::Modified(o) => assert_eq!(o.data["spec"]["size"], 2),
        other => panic!("expected MODIFIED, got {other:?}"),
    }
    widgets.delete("a", &DeleteParams::default()).await.unwrap();
    assert!(matches!(
        stream.next().await.unwrap().unwrap(),
        WatchEvent::Deleted(_)
    ));
    // From an older version, every change since is replayed.
    let mut replay = widgets.watch(&params, &from).await.unwrap().boxed();
    assert!(matches!(
        replay.next().await.unwrap().unwrap(),
        WatchEvent::Modified(_)
    ));
    // Bookmarks when idle, if asked for.
    let mut quiet = widgets
        .watch(&WatchParams::default().timeout(10), "0")
        .await
        .unwrap()
        .boxed();
    assert!(matches!(
        quiet.next().await.unwrap().unwrap(),
        WatchEvent::Bookmark(_)
    ));
    fake.compact();
    let mut gone = widgets.watch(&params, &from).await.unwrap().boxed();
    match gone.next().await.unwrap().unwrap() {
        WatchEvent::Error(e) => assert_eq!((e.code, e.reason.as_str()), (410, "Expired")),
        other => panic!("expected 410, got {other:?}"),
    }
}

#[tokio::test]
async fn pod_watches_see_creations() {
    let fake = FakeApiServer::start().await;
    let client = kube::Client::try_from(kube::Config::new(fake.url().parse().unwrap())).unwrap();
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client, "default");
    let params = WatchParams::default()
        .labels("app=cl-worker")
        .timeout(10)
        .disable_bookmarks();
    let mut stream = pods.watch(&params, "0").await.unwrap().boxed();
    fake.add_pod("default", "other", [("app", "other")], "Running");
    fake.add_pod("default", "cl-worker-1", [("app", "cl-worker")], "Pending");
    match stream.next().await.unwrap().unwrap() {
        WatchEvent::Added(pod) => assert_eq!(pod.metadata.name.as_deref(), Some("cl-worker-1")),
        other => panic!("expected ADDED, got {other:?}"),
    }
    fake.set_phase("default", "cl-worker-1", "Running");
    assert!(matches!(
        stream.next().await.unwrap().unwrap(),
        WatchEvent::Modified(_)
    ));
}

#[tokio::test]
async fn leases_and_events_are_stored() {
    let fake = FakeApiServer::start().await;
    let client = kube::Client::try_from(kube::Config::new(fake.url().parse().unwrap())).unwrap();
    let leases: Api<Lease> = Api::namespaced(client.clone(), "ops");
    let lease: Lease = serde_json::from_value(json!({"metadata": {"name": "leader"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}))
    .unwrap();
    let created = leases.create(&PostParams::default(), &lease).await.unwrap();
    let mut taken = created.clone();
    taken.spec.as_mut().unwrap().holder_identity = Some("b".into());
    leases
        .replace("leader", &PostParams::default(), &taken)
        .await
        .unwrap();
    let mut late = created.clone();
    late.spec.as_mut().unwrap().holder_identity = Some("c".into());
    let err = leases
        .replace("leader", &PostParams::default(), &late)
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(s) if s.code == 409),
        "a second writer loses"
    );
    let stored = fake
        .object("coordination.k8s.io/leases", "ops", "leader")
        .unwrap();
    assert_eq!(stored["spec"]["holderIdentity"], "b");

    let events: Api<Event> = Api::namespaced(client.clone(), "ops");
    let event: Event = serde_json::from_value(json!({"metadata": {"generateName": "pool-"},
        "eventTime": "2026-11-23T10:00:00.000000Z", "reason": "WorkersLaunched", "note": "2 pods",
        "regarding": {"kind": "Widget", "name": "w", "namespace": "ops"},
        "action": "Launch", "reportingController": "x", "reportingInstance": "y", "type": "Normal"}))
    .unwrap();
    events.create(&PostParams::default(), &event).await.unwrap();
    let stored = fake.objects("events.k8s.io/events");
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0]["reason"], "WorkersLaunched");
    // The same Event through core v1, selected by its object as `kubectl describe` does.
    let core: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client, "ops");
    let by_object = |name: &str| {
        kube::api::ListParams::default().fields(&format!(
            "involvedObject.name={name},involvedObject.kind=Widget"
        ))
    };
    let listed = core.list(&by_object("w")).await.unwrap().items;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].message.as_deref(), Some("2 pods"));
    assert_eq!(listed[0].involved_object.name.as_deref(), Some("w"));
    assert!(
        core.list(&by_object("other"))
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let bad = core
        .list(&kube::api::ListParams::default().fields("spec.nodeName=x"))
        .await;
    assert!(matches!(bad, Err(kube::Error::Api(s)) if s.code == 400));
}
