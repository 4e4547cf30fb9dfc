//! List paging through the test API server, as the API server pages:
//! kube's own list paging and the watcher's paged initial list run
//! against it (see `tests/it/apiserver/paging.rs`).

use crate::apiserver::{self, FakeApi, Res};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Node;
use kruntimes_scheduler::testkit;
use kube::api::{Api, ListParams};
use kube::runtime::watcher;
use std::collections::BTreeSet;

#[test]
fn tokens_round_trip_and_garbage_is_refused() {
    let t = apiserver::paging::encode(42, "", "n-1");
    assert_eq!(
        apiserver::paging::decode(&t),
        Some((42, (String::new(), "n-1".to_owned())))
    );
    assert_eq!(apiserver::paging::decode("n-1"), None);
    assert_eq!(apiserver::paging::decode(""), None);
}

#[tokio::test]
async fn a_paged_list_returns_every_object_once_with_the_remaining_count() {
    let api = FakeApi::start().await;
    for i in 0..7 {
        api.put(
            Res::Nodes,
            testkit::node(&format!("n{i}")).label("tier", "x").value(),
        );
    }
    let nodes: Api<Node> = Api::all(api.client());
    let first = nodes
        .list(&ListParams::default().limit(3))
        .await
        .expect("page 1");
    assert_eq!(first.items.len(), 3);
    assert_eq!(first.metadata.remaining_item_count, Some(4));
    let rv = first.metadata.resource_version.clone();
    let mut seen: Vec<String> = first
        .items
        .iter()
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    let mut token = first.metadata.continue_.clone().expect("a continue token");
    // A write between pages: the continued pages keep the first page's
    // resourceVersion.
    api.put(Res::Nodes, testkit::node("n9").label("tier", "x").value());
    loop {
        let page = nodes
            .list(&ListParams::default().limit(3).continue_token(&token))
            .await
            .expect("next page");
        assert_eq!(page.metadata.resource_version, rv);
        seen.extend(page.items.iter().filter_map(|n| n.metadata.name.clone()));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(t) => token = t,
            None => {
                assert_eq!(page.metadata.remaining_item_count, None);
                break;
            }
        }
    }
    let unique: BTreeSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "no object twice: {seen:?}");
    assert!(seen.len() >= 7, "{seen:?}");
    // A label selector filters: no remaining count, as the API server.
    let sel = nodes
        .list(&ListParams::default().limit(1).labels("tier=x"))
        .await
        .expect("selected");
    assert_eq!(sel.items.len(), 1);
    assert!(sel.metadata.continue_.is_some());
    assert_eq!(sel.metadata.remaining_item_count, None);
}

#[tokio::test]
async fn a_token_older_than_the_compacted_history_is_gone() {
    let api = FakeApi::start().await;
    for i in 0..4 {
        api.put(
            Res::Nodes,
            testkit::node(&format!("n{i}")).label("tier", "x").value(),
        );
    }
    let nodes: Api<Node> = Api::all(api.client());
    let first = nodes
        .list(&ListParams::default().limit(2))
        .await
        .expect("page 1");
    let token = first.metadata.continue_.expect("token");
    api.put(Res::Nodes, testkit::node("n5").label("tier", "x").value());
    api.drop_watches_and_compact();
    let err = nodes
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .expect_err("expired");
    match err {
        kube::Error::Api(s) => assert_eq!((s.code, s.reason.as_str()), (410, "Expired")),
        e => panic!("{e}"),
    }
    let bad = nodes
        .list(&ListParams::default().limit(2).continue_token("garbage"))
        .await
        .expect_err("bad token");
    assert!(matches!(bad, kube::Error::Api(s) if s.code == 400));
}

/// kube's watcher lists in pages (`page_size`), following `continue`
/// until the last page, before it watches.
#[tokio::test]
async fn the_watcher_lists_every_page() {
    let api = FakeApi::start().await;
    for i in 0..11 {
        api.put(
            Res::Nodes,
            testkit::node(&format!("n{i:02}"))
                .label("tier", "x")
                .value(),
        );
    }
    let nodes: Api<Node> = Api::all(api.client());
    let mut stream = std::pin::pin!(watcher(nodes, watcher::Config::default().page_size(4)));
    let mut names = BTreeSet::new();
    while let Some(ev) = stream.next().await {
        match ev.expect("watch event") {
            watcher::Event::InitApply(n) => {
                names.insert(n.metadata.name.unwrap_or_default());
            }
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(names.len(), 11, "{names:?}");
    let lists = api
        .inner
        .lock()
        .requests
        .iter()
        .filter(|r| r.resource == "nodes" && r.verb == "list")
        .count();
    assert_eq!(lists, 3, "11 nodes in pages of 4");
}
