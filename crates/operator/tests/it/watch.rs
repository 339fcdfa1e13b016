//! kube-runtime's watcher (what the controller runs on) against the in-process fake API server
//! (`codalab-wm-fake-k8s`; there is no real API server on these machines): it lists, watches,
//! and after the fake forgets its change log (as etcd compaction does) the resumed watch gets
//! `410 Gone` and the watcher lists again, seeing changes made meanwhile.

use codalab_wm_fake_k8s::FakeApiServer;
use codalab_wm_operator::crd::{CodaLabWorkerPool, crd_json};
use futures_util::StreamExt;
use kube::api::{Api, DynamicObject, PostParams};
use kube::runtime::watcher::{self, Event};
use serde_json::json;
use std::time::Duration;

fn pool(name: &str) -> CodaLabWorkerPool {
    let spec = json!({"server": "http://127.0.0.1:9", "credentialsSecret": "c"});
    CodaLabWorkerPool::new(name, serde_json::from_value(spec).unwrap())
}

#[tokio::test]
async fn a_watch_too_old_for_the_log_makes_the_watcher_list_again() {
    let fake = FakeApiServer::start().await;
    let client = kube::Client::try_from(kube::Config::new(fake.url().parse().unwrap())).unwrap();
    let crds = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
        "customresourcedefinitions",
    );
    let crd: DynamicObject = serde_json::from_value(crd_json()).unwrap();
    Api::<DynamicObject>::all_with(client.clone(), &crds)
        .create(&PostParams::default(), &crd)
        .await
        .unwrap();
    let pools: Api<CodaLabWorkerPool> = Api::namespaced(client, "team");
    pools
        .create(&PostParams::default(), &pool("a"))
        .await
        .unwrap();
    // Short watches without bookmarks: each resumes from the last pool event's version.
    let config = watcher::Config::default().timeout(1).disable_bookmarks();
    let mut events = watcher::watcher(pools.clone(), config).boxed();
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(30), events.next())
            .await
            .expect("a watcher event within 30 s")
            .expect("the watcher goes on")
    };
    assert!(matches!(next().await, Ok(Event::Init)));
    assert!(
        matches!(next().await, Ok(Event::InitApply(p)) if p.metadata.name.as_deref() == Some("a"))
    );
    assert!(matches!(next().await, Ok(Event::InitDone)));
    // Other objects move the version on; then the log is forgotten.
    fake.add_pod("team", "p1", [("app", "x")], "Running");
    fake.compact();
    pools
        .create(&PostParams::default(), &pool("b"))
        .await
        .unwrap();
    // The resumed watch is too old: the watcher reports the 410, lists again, and the new
    // list holds both pools.
    let mut relisted = Vec::new();
    let mut expired = 0;
    loop {
        match next().await {
            Err(watcher::Error::WatchError(s)) if s.code == 410 => expired += 1,
            Err(e) => panic!("unexpected watcher error {e}"),
            Ok(Event::Init) => {}
            Ok(Event::InitApply(p)) => relisted.push(p.metadata.name.unwrap()),
            Ok(Event::InitDone) => break,
            Ok(Event::Apply(_) | Event::Delete(_)) => panic!("the stale watch must not resume"),
        }
    }
    assert_eq!(expired, 1);
    relisted.sort();
    assert_eq!(relisted, ["a", "b"]);
    let lists = fake
        .requests()
        .iter()
        .filter(|r| {
            r.starts_with("GET /apis/codalab.org/v1alpha1/namespaces/team/codalabworkerpools?")
                && !r.contains("watch=true")
        })
        .count();
    assert_eq!(lists, 2, "{:?}", fake.requests());
}
