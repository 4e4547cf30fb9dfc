//! Gang, gang-of-gangs and topology scenarios through the real router,
//! driven the way kube-scheduler drives an extender: for each pod in turn,
//! filter (node names only), prioritize the nodes that passed, pick the best,
//! then bind asynchronously (binds run concurrently with later cycles);
//! pods whose bind answered `Error`, or that no node passed, are retried.
//! Time is paused, so `--gang-wait` expiries take no real time.

use crate::apiserver;
use crate::common;

use axum::body::Body;
use axum::http::Request;
use common::{SchedulerCache, app, cpu_of, get, post};
use kruntimes_scheduler::extender::bind::permit::Gangs;
use kruntimes_scheduler::http::router;
use kruntimes_scheduler::serve::Standalone;
use kruntimes_scheduler::testkit::{self, Obj};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

const RACK: &str = "topology.kubernetes.io/rack";
const ZONE: &str = "topology.kubernetes.io/zone";

// === fixtures ===

/// `racks` racks of `per_rack` nodes with `cpu` cores each; rack `r<i>` in
/// zone `z<i % zones>`.
fn nodes(racks: usize, per_rack: usize, cpu: u32, zones: usize) -> Vec<Value> {
    let mut v = Vec::new();
    for r in 0..racks {
        for n in 0..per_rack {
            v.push(
                testkit::node(&format!("r{r}-n{n}"))
                    .label(RACK, &format!("r{r}"))
                    .label(ZONE, &format!("z{}", r % zones.max(1)))
                    .allocatable(&cpu.to_string(), "64Gi")
                    .value(),
            );
        }
    }
    v
}

/// Pending pod `ml/name` requesting `cpu` cores and 1Gi, in `group`.
fn pod_obj(name: &str, group: Option<&str>, cpu: u32) -> Obj {
    let p = testkit::pod(name).requests(&[("cpu", &cpu.to_string()), ("memory", "1Gi")]);
    match group {
        Some(g) => p.group(g),
        None => p,
    }
}

fn pod(name: &str, group: Option<&str>, cpu: u32) -> Value {
    pod_obj(name, group, cpu).value()
}

fn gang(name: &str, min: u32, key: Option<&str>, parent: Option<&str>) -> Value {
    let mut g = testkit::pod_group(name).gang(min);
    if let Some(k) = key {
        g = g.topology(k);
    }
    if let Some(p) = parent {
        g = g.parent(p);
    }
    g.value()
}

fn basic(name: &str, key: Option<&str>) -> Value {
    let g = testkit::pod_group(name);
    match key {
        Some(k) => g.topology(k),
        None => g,
    }
    .value()
}

fn composite(name: &str, min_groups: u32, key: Option<&str>) -> Value {
    let g = testkit::composite(name).gang(min_groups);
    match key {
        Some(k) => g.topology(k),
        None => g,
    }
    .value()
}

fn members(prefix: &str, group: &str, n: usize, cpu: u32) -> Vec<Value> {
    (0..n)
        .map(|i| pod(&format!("{prefix}-{i}"), Some(group), cpu))
        .collect()
}

/// The service, and kube-scheduler's own cache of the pods it assumed.
struct Cluster {
    app: Standalone,
    ks: SchedulerCache,
}

impl From<Standalone> for Cluster {
    fn from(app: Standalone) -> Self {
        Cluster {
            app,
            ks: SchedulerCache::default(),
        }
    }
}

impl std::ops::Deref for Cluster {
    type Target = Standalone;
    fn deref(&self) -> &Standalone {
        &self.app
    }
}

/// A standalone service holding `objects`, with the given gang wait.
async fn cluster(objects: Vec<Value>, wait: Duration) -> Cluster {
    let mut a = app("");
    a.state.set_gangs(Arc::new(Gangs::new(wait)));
    upsert(&a, objects).await;
    a.into()
}

async fn upsert(a: &Standalone, objects: Vec<Value>) {
    let r = post(
        a,
        "/v1/objects",
        &json!({"kind": "List", "apiVersion": "v1", "items": objects}).to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
}

async fn delete(a: &Standalone, kind: &str, name: &str) {
    let r = common::call(
        a,
        axum::http::Method::DELETE,
        &format!("/v1/objects?kind={kind}&namespace=ml&name={name}"),
        None,
    )
    .await;
    assert_eq!(r.status, 204, "{}", r.text);
}

// === the kube-scheduler side ===

struct Filtered {
    passed: Vec<String>,
    failed: BTreeMap<String, String>,
    unresolvable: BTreeMap<String, String>,
    error: String,
}

async fn filter(a: &Standalone, pod: &Value, nodes: &[String]) -> Filtered {
    let r = post(
        a,
        "/scheduler/filter",
        &json!({"Pod": pod, "Nodes": null, "NodeNames": nodes}).to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let map = |k: &str| -> BTreeMap<String, String> {
        serde_json::from_value(r.body[k].clone()).unwrap_or_default()
    };
    Filtered {
        passed: serde_json::from_value(r.body["NodeNames"].clone()).expect("NodeNames is a list"),
        failed: map("FailedNodes"),
        unresolvable: map("FailedAndUnresolvableNodes"),
        error: r.body["Error"].as_str().unwrap_or_default().to_owned(),
    }
}

async fn prioritize(a: &Standalone, pod: &Value, nodes: &[String]) -> Vec<(String, i64)> {
    let r = post(
        a,
        "/scheduler/prioritize",
        &json!({"Pod": pod, "Nodes": null, "NodeNames": nodes}).to_string(),
    )
    .await;
    r.body
        .as_array()
        .expect("HostPriorityList")
        .iter()
        .map(|h| {
            let s = h["Score"].as_i64().expect("score");
            assert!((0..=10).contains(&s));
            (h["Host"].as_str().expect("host").to_owned(), s)
        })
        .collect()
}

/// A bind as kube-scheduler's binding goroutine sends it, the pod assumed
/// on its node in kube-scheduler's cache until the bind answers.
fn spawn_bind(a: &Cluster, pod: &Value, node: &str) -> tokio::task::JoinHandle<String> {
    let app = router(a.state.clone());
    let body = json!({"PodName": pod["metadata"]["name"], "PodNamespace": "ml",
        "PodUID": pod["metadata"]["uid"], "Node": node})
    .to_string();
    let (ks, me) = (a.ks.clone(), name(pod));
    ks.assume(&me, node, cpu_of(pod));
    tokio::spawn(async move {
        let req = Request::post("/scheduler/bind")
            .header("content-type", "application/json")
            .body(Body::from(body))
            .expect("request");
        let resp = app.oneshot(req).await.expect("response");
        let b = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .expect("body");
        let v: Value = serde_json::from_slice(&b).expect("json");
        ks.forget(&me);
        v["Error"].as_str().unwrap_or_default().to_owned()
    })
}

/// One pod's scheduling cycle: filter, prioritize, pick; the bind is spawned.
async fn cycle(
    a: &Cluster,
    pod: &Value,
    all: &[String],
) -> Result<tokio::task::JoinHandle<String>, Filtered> {
    // kube-scheduler's own fit first: only the nodes it passes go to the
    // extender.
    let offered = a.ks.fitting(&a.store, all, &name(pod), cpu_of(pod));
    if offered.is_empty() {
        return Err(Filtered {
            passed: Vec::new(),
            failed: all
                .iter()
                .map(|n| (n.clone(), "Insufficient cpu".to_owned()))
                .collect(),
            unresolvable: BTreeMap::new(),
            error: String::new(),
        });
    }
    let f = filter(a, pod, &offered).await;
    assert_eq!(f.error, "");
    let best = match f.passed.len() {
        0 => return Err(f),
        1 => f.passed[0].clone(),
        _ => {
            let scores = prioritize(a, pod, &f.passed).await;
            let max = scores.iter().map(|s| s.1).max().unwrap_or(0);
            scores
                .into_iter()
                .find(|s| s.1 == max)
                .map(|s| s.0)
                .expect("a node")
        }
    };
    Ok(spawn_bind(a, pod, &best))
}

/// Schedules `pods` like kube-scheduler: one cycle per pod, binds
/// concurrent, failed pods retried, for `rounds` rounds. Returns the
/// unscheduled pods with the last reason.
async fn schedule(a: &Cluster, pods: &[Value], rounds: usize) -> BTreeMap<String, String> {
    let all = node_names(a).await;
    let mut queue: Vec<Value> = pods.to_vec();
    let mut left = BTreeMap::new();
    for _ in 0..rounds {
        left.clear();
        let mut binds = Vec::new();
        for p in &queue {
            match cycle(a, p, &all).await {
                Ok(b) => binds.push((p.clone(), b)),
                Err(f) => {
                    let why = f
                        .failed
                        .values()
                        .chain(f.unresolvable.values())
                        .next()
                        .cloned()
                        .unwrap_or_default();
                    left.insert(name(p), why);
                }
            }
        }
        let mut retry: Vec<Value> = queue
            .iter()
            .filter(|p| left.contains_key(&name(p)))
            .cloned()
            .collect();
        for (p, b) in binds {
            let err = b.await.expect("bind task");
            if !err.is_empty() {
                left.insert(name(&p), err);
                retry.push(p);
            }
        }
        if retry.is_empty() {
            break;
        }
        queue = retry;
    }
    left
}

fn name(p: &Value) -> String {
    p["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

async fn node_names(a: &Standalone) -> Vec<String> {
    let r = get(a, "/v1/objects?kind=Node").await;
    r.body["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|n| n["metadata"]["name"].as_str().expect("name").to_owned())
        .collect()
}

/// Pod name → node, for the pods of `ml` that are bound.
async fn bound(a: &Standalone) -> BTreeMap<String, String> {
    let r = get(a, "/v1/objects?kind=Pod&namespace=ml").await;
    r.body["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|p| {
            Some((
                p["metadata"]["name"].as_str()?.to_owned(),
                p["spec"]["nodeName"].as_str()?.to_owned(),
            ))
        })
        .collect()
}

fn rack_of(node: &str) -> &str {
    node.split('-').next().unwrap_or_default()
}

fn zone_of(node: &str, zones: usize) -> String {
    let r: usize = rack_of(node)[1..].parse().expect("rack number");
    format!("z{}", r % zones)
}

/// The group's condition of `type_` (`status`, `reason`, `message`).
async fn condition(a: &Standalone, kind: &str, name: &str) -> Option<(String, String, String)> {
    let r = get(
        a,
        &format!("/v1/objects?kind={kind}&namespace=ml&name={name}"),
    )
    .await;
    let want = if kind == "PodGroup" {
        "PodGroupInitiallyScheduled"
    } else {
        "CompositePodGroupInitiallyScheduled"
    };
    r.body["items"][0]["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == want)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_owned(),
                c["reason"].as_str().unwrap_or_default().to_owned(),
                c["message"].as_str().unwrap_or_default().to_owned(),
            )
        })
}

/// Lets background status writes run.
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

/// Does a plain pod of `cpu` cores fit on `node` now?
async fn fits(a: &Standalone, node: &str, cpu: u32) -> bool {
    let p = pod("probe", None, cpu);
    filter(a, &p, &[node.to_owned()]).await.passed.len() == 1
}

// === scenarios ===

#[tokio::test(start_paused = true)]
async fn a_gang_that_fits_is_bound_entirely_in_one_rack() {
    // 4 racks of 2 nodes x 4 cpu. r2 is partly used and no longer holds a
    // gang of 4 x 2 cpu; the empty racks are equally tight, so the gang
    // goes to the smallest label value.
    let mut objs = nodes(4, 2, 4, 1);
    objs.push(gang("train", 4, Some(RACK), None));
    let mut blocker = pod("other", None, 2);
    blocker["spec"]["nodeName"] = json!("r2-n0");
    objs.push(blocker);
    let pods = members("train", "train", 4, 2);
    objs.extend(pods.clone());
    let a = cluster(objs, Duration::from_secs(20)).await;
    let left = schedule(&a, &pods, 3).await;
    assert!(left.is_empty(), "{left:?}");
    let b = bound(&a).await;
    let racks: std::collections::BTreeSet<&str> =
        pods.iter().map(|p| rack_of(&b[&name(p)])).collect();
    assert_eq!(racks.len(), 1, "{b:?}");
    assert_eq!(
        racks.into_iter().next(),
        Some("r0"),
        "smallest of the equally tight racks"
    );
    settle().await;
    let c = condition(&a, "PodGroup", "train").await.expect("condition");
    assert_eq!((c.0.as_str(), c.1.as_str()), ("True", "Scheduled"), "{c:?}");
    assert_eq!(a.state.extender.gangs.held(), 0);
}

#[tokio::test(start_paused = true)]
async fn the_tightest_rack_that_holds_the_gang_is_chosen() {
    // r1 has 4 of 8 cpu used: a gang of 2 x 2 cpu fills it exactly, leaving
    // the empty racks whole.
    let mut objs = nodes(3, 2, 4, 1);
    objs.push(gang("small", 2, Some(RACK), None));
    let mut used = pod("used", None, 4);
    used["spec"]["nodeName"] = json!("r1-n1");
    objs.push(used);
    let pods = members("small", "small", 2, 2);
    objs.extend(pods.clone());
    let a = cluster(objs, Duration::from_secs(20)).await;
    assert!(schedule(&a, &pods, 3).await.is_empty());
    let b = bound(&a).await;
    assert_eq!(b["small-0"], "r1-n0");
    assert_eq!(b["small-1"], "r1-n0");
}

#[tokio::test(start_paused = true)]
async fn a_gang_that_cannot_fit_binds_nobody_and_holds_nothing() {
    // Racks hold 4 pods of 2 cpu; a gang of 5 fits in no rack.
    let mut objs = nodes(3, 2, 4, 1);
    objs.push(gang("big", 5, Some(RACK), None));
    let pods = members("big", "big", 5, 2);
    objs.extend(pods.clone());
    let a = cluster(objs, Duration::from_secs(20)).await;
    let left = schedule(&a, &pods, 2).await;
    assert_eq!(left.len(), 5);
    assert!(
        left["big-0"].contains("no topology.kubernetes.io/rack domain can hold the 5 pods"),
        "{left:?}"
    );
    assert!(bound(&a).await.is_empty());
    assert_eq!(a.state.extender.gangs.held(), 0);
    for n in node_names(&a).await {
        assert!(fits(&a, &n, 4).await, "{n} keeps its whole capacity");
    }
    // Would fit on no empty rack either: preemption cannot help.
    let f = filter(&a, &pods[0], &node_names(&a).await).await;
    assert_eq!(f.unresolvable.len(), 6, "{:?}", f.failed);
    settle().await;
    let c = condition(&a, "PodGroup", "big").await.expect("condition");
    assert_eq!((c.0.as_str(), c.1.as_str()), ("False", "Unschedulable"));
    assert!(
        c.2.len() <= 256 && c.2.contains("pod group ml/big"),
        "{c:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn filter_waits_for_enough_members_to_exist() {
    let mut objs = nodes(1, 2, 8, 1);
    objs.push(gang("g", 3, None, None));
    let pods = members("g", "g", 2, 1);
    objs.extend(pods.clone());
    let a = cluster(objs, Duration::from_secs(20)).await;
    let all = node_names(&a).await;
    let f = filter(&a, &pods[0], &all).await;
    assert!(f.passed.is_empty());
    assert_eq!(
        f.unresolvable["r0-n0"],
        "pod group ml/g: 2 of the 3 pods it needs exist"
    );
    // The third member arrives: the gang is placed.
    let third = pod("g-2", Some("g"), 1);
    upsert(&a, vec![third.clone()]).await;
    let mut all_pods = pods.clone();
    all_pods.push(third);
    assert!(schedule(&a, &all_pods, 2).await.is_empty());
    assert_eq!(bound(&a).await.len(), 3);
}

#[tokio::test(start_paused = true)]
async fn filter_for_a_pod_the_cache_does_not_know_makes_no_plan_and_writes_no_condition() {
    // g: a gang of 2 in a rack, both members cached. h: a gang of 3 with one.
    let mut objs = nodes(2, 2, 4, 1);
    objs.push(gang("g", 2, Some(RACK), None));
    objs.push(gang("h", 3, None, None));
    let g = members("g", "g", 2, 1);
    let h = members("h", "h", 1, 1);
    objs.extend(g.clone());
    objs.extend(h.clone());
    let a = cluster(objs, Duration::from_secs(20)).await;
    let all = node_names(&a).await;
    let planner = Arc::clone(a.state.extender.gangs.planner());

    // A caller makes up a member of g the cache has never seen.
    let ghost = pod("ghost", Some("g"), 1);
    let f = filter(&a, &ghost, &all).await;
    assert!(f.passed.is_empty());
    assert_eq!(
        f.unresolvable["r0-n0"],
        "pod ml/ghost is not in the extender's cache yet"
    );
    // A real member's name with another uid.
    let mut forged = g[0].clone();
    forged["metadata"]["uid"] = json!("forged-uid");
    let f = filter(&a, &forged, &all).await;
    assert!(
        f.unresolvable["r1-n1"].contains("has another uid in the extender's cache"),
        "{:?}",
        f.unresolvable
    );
    // A made-up member of h, short of pods: no Unschedulable note for it.
    let f = filter(&a, &pod("ghost-h", Some("h"), 1), &all).await;
    assert!(f.unresolvable["r0-n0"].contains("not in the extender's cache"));
    settle().await;
    assert!(planner.is_empty(), "a plan was made for a made-up pod");
    assert_eq!(condition(&a, "PodGroup", "h").await, None);
    assert_eq!(condition(&a, "PodGroup", "g").await, None);

    // The real pods: g is planned, h gets its condition.
    let f = filter(&a, &g[0], &all).await;
    assert_eq!(f.passed.len(), 2, "{:?}", f.unresolvable);
    assert!(!planner.is_empty());
    let f = filter(&a, &h[0], &all).await;
    assert_eq!(
        f.unresolvable["r0-n0"],
        "pod group ml/h: 1 of the 3 pods it needs exist"
    );
    settle().await;
    let c = condition(&a, "PodGroup", "h").await.expect("condition");
    assert_eq!((c.0.as_str(), c.1.as_str()), ("False", "Unschedulable"));
}

#[tokio::test(start_paused = true)]
async fn a_pod_group_created_again_under_its_name_gets_its_conditions_again() {
    let mut objs = nodes(1, 2, 4, 1);
    objs.push(testkit::pod_group("g").gang(1).uid("g-first").value());
    let first = pod("first", Some("g"), 1);
    objs.push(first.clone());
    let a = cluster(objs, Duration::from_secs(20)).await;
    assert!(schedule(&a, &[first], 2).await.is_empty());
    settle().await;
    let c = condition(&a, "PodGroup", "g").await.expect("condition");
    assert_eq!((c.0.as_str(), c.1.as_str()), ("True", "Scheduled"));
    assert_eq!(a.state.extender.gangs.written(), 1);

    // The group and its pod are deleted, and a group of the same name is
    // created again: a new object, with no conditions yet.
    delete(&a, "Pod", "first").await;
    delete(&a, "PodGroup", "g").await;
    upsert(
        &a,
        vec![testkit::pod_group("g").gang(2).uid("g-second").value()],
    )
    .await;
    assert_eq!(condition(&a, "PodGroup", "g").await, None);
    // Short of pods: Unschedulable is written to the new group...
    let second = members("second", "g", 2, 1);
    upsert(&a, vec![second[0].clone()]).await;
    let all = node_names(&a).await;
    assert!(filter(&a, &second[0], &all).await.passed.is_empty());
    settle().await;
    let c = condition(&a, "PodGroup", "g").await.expect("condition");
    assert_eq!((c.0.as_str(), c.1.as_str()), ("False", "Unschedulable"));
    // ...and Scheduled once its quorum is bound.
    upsert(&a, vec![second[1].clone()]).await;
    assert!(schedule(&a, &second, 2).await.is_empty());
    settle().await;
    let c = condition(&a, "PodGroup", "g").await.expect("condition");
    assert_eq!((c.0.as_str(), c.1.as_str()), ("True", "Scheduled"));
    // One entry: the old group's was replaced.
    assert_eq!(a.state.extender.gangs.written(), 1);
}

#[tokio::test(start_paused = true)]
async fn held_members_are_released_when_the_wait_expires() {
    let mut objs = nodes(2, 2, 4, 1);
    objs.push(gang("g", 3, Some(RACK), None));
    let pods = members("g", "g", 3, 2);
    objs.extend(pods.clone());
    let a = cluster(objs, Duration::from_secs(5)).await;
    let all = node_names(&a).await;
    // kube-scheduler gets to two members; the third is stuck elsewhere.
    let b0 = cycle(&a, &pods[0], &all).await.ok().expect("placed");
    let b1 = cycle(&a, &pods[1], &all).await.ok().expect("placed");
    settle().await;
    assert_eq!(a.state.extender.gangs.held(), 2);
    let start = tokio::time::Instant::now();
    let (e0, e1) = (b0.await.expect("task"), b1.await.expect("task"));
    assert!(start.elapsed() >= Duration::from_secs(5));
    for e in [&e0, &e1] {
        assert!(
            e.contains("quorum not reached within 5s (2 of 3 placed)"),
            "{e}"
        );
    }
    assert!(
        bound(&a).await.is_empty(),
        "no member below quorum is bound"
    );
    assert_eq!(a.state.extender.gangs.held(), 0);
    // Released capacity is visible at once.
    for n in &all {
        assert!(fits(&a, n, 4).await, "{n}");
    }
    settle().await;
    let c = condition(&a, "PodGroup", "g").await.expect("condition");
    assert_eq!(c.1, "Unschedulable");
    assert!(c.2.contains("quorum not reached"), "{c:?}");
    // The retry places the whole gang.
    assert!(schedule(&a, &pods, 3).await.is_empty());
    assert_eq!(bound(&a).await.len(), 3);
    settle().await;
    assert_eq!(condition(&a, "PodGroup", "g").await.expect("c").0, "True");
    // Two expired waits, then two members released by the third, which
    // completed the quorum on arrival.
    let m = common::get(&a, "/metrics").await.text;
    for line in [
        "kruntimes_gang_waits_total{outcome=\"Expired\"} 2",
        "kruntimes_gang_waits_total{outcome=\"Released\"} 2",
        "kruntimes_gang_waits_total{outcome=\"Quorum\"} 1",
    ] {
        assert!(m.contains(line), "{line} in\n{m}");
    }
}

#[tokio::test(start_paused = true)]
async fn two_gangs_competing_for_one_rack_never_deadlock() {
    // One rack fits 4 pods of 2 cpu; gangs a and b need 3 each.
    let mut objs = nodes(1, 2, 4, 1);
    objs.push(gang("a", 3, Some(RACK), None));
    objs.push(gang("b", 3, Some(RACK), None));
    let pa = members("a", "a", 3, 2);
    let pb = members("b", "b", 3, 2);
    objs.extend(pa.clone());
    objs.extend(pb.clone());
    let a = cluster(objs, Duration::from_secs(10)).await;
    // Interleaved, as kube-scheduler's queue may order them.
    let interleaved: Vec<Value> = pa
        .iter()
        .zip(&pb)
        .flat_map(|(x, y)| [x.clone(), y.clone()])
        .collect();
    let left = schedule(&a, &interleaved, 3).await;
    let b = bound(&a).await;
    assert_eq!(b.len(), 3, "one gang wins entirely: {b:?}");
    assert!(pa.iter().all(|p| b.contains_key(&name(p))), "{b:?}");
    assert_eq!(left.len(), 3);
    assert!(pb.iter().all(|p| left.contains_key(&name(p))));
    assert!(left["b-0"].contains("pod group ml/b"), "{left:?}");
    assert_eq!(a.state.extender.gangs.held(), 0, "the loser holds nothing");
    // a finishes; b then fits.
    for p in &pa {
        delete(&a, "Pod", &name(p)).await;
    }
    assert!(schedule(&a, &pb, 3).await.is_empty());
    assert_eq!(bound(&a).await.len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_recreated_member_returns_to_its_rack_or_stays_pending() {
    let mut objs = nodes(3, 2, 4, 1);
    objs.push(gang("g", 3, Some(RACK), None));
    let pods = members("g", "g", 3, 2);
    objs.extend(pods.clone());
    let a = cluster(objs, Duration::from_secs(20)).await;
    assert!(schedule(&a, &pods, 2).await.is_empty());
    let rack = rack_of(&bound(&a).await["g-0"]).to_owned();
    // g-1 is deleted and recreated (new uid, unbound): back to its rack,
    // placed on its own (the gang already has quorum).
    delete(&a, "Pod", "g-1").await;
    let mut again = pod("g-1", Some("g"), 2);
    again["metadata"]["uid"] = json!("g-1-second");
    upsert(&a, vec![again.clone()]).await;
    let all = node_names(&a).await;
    let f = filter(&a, &again, &all).await;
    assert!(
        f.passed.iter().all(|n| rack_of(n) == rack),
        "{:?}",
        f.passed
    );
    assert!(
        f.unresolvable
            .values()
            .any(|m| m.contains("outside the pod group's topology domain"))
    );
    assert!(
        schedule(&a, std::slice::from_ref(&again), 1)
            .await
            .is_empty()
    );
    assert_eq!(rack_of(&bound(&a).await["g-1"]), rack);
    // The rack fills up; the next recreated member stays pending instead
    // of leaving it, although other racks are empty.
    delete(&a, "Pod", "g-2").await;
    let mut filler = pod("filler", None, 2);
    // Whatever is left in the rack is taken by unrelated pods.
    for n in all.iter().filter(|n| rack_of(n) == rack) {
        for i in 0..2 {
            if fits(&a, n, 2).await {
                filler["metadata"]["name"] = json!(format!("filler-{n}-{i}"));
                filler["metadata"]["uid"] = json!(format!("filler-{n}-{i}"));
                filler["spec"]["nodeName"] = json!(n);
                upsert(&a, vec![filler.clone()]).await;
            }
        }
    }
    let mut third = pod("g-2", Some("g"), 2);
    third["metadata"]["uid"] = json!("g-2-second");
    upsert(&a, vec![third.clone()]).await;
    let left = schedule(&a, std::slice::from_ref(&third), 2).await;
    assert!(left.contains_key("g-2"), "stays pending");
    assert!(!bound(&a).await.contains_key("g-2"));
}

/// A gang whose placed member fixes its rack, short of room there: the
/// rack's nodes fail resolvable (preemption there may free the room), every
/// other node unresolvable (outside the domain no preemption helps), so
/// kube-scheduler's preemption looks for victims only in the rack, and with
/// none there clears the member's nomination instead of keeping it for a
/// preemption that can never come (simulation seed 103560).
#[tokio::test(start_paused = true)]
async fn a_gang_short_in_its_fixed_rack_fails_other_racks_unresolvable() {
    let mut objs = nodes(2, 2, 4, 1);
    objs.push(gang("g", 3, Some(RACK), None));
    let mut first = pod("g-0", Some("g"), 2);
    first["spec"]["nodeName"] = json!("r0-n0");
    objs.push(first);
    let rest = [pod("g-1", Some("g"), 2), pod("g-2", Some("g"), 2)];
    objs.extend(rest.iter().cloned());
    // r0's other node is taken: the two members left fit in r0 only
    // once it is freed.
    let mut hog = pod("hog", None, 4);
    hog["spec"]["nodeName"] = json!("r0-n1");
    objs.push(hog);
    let a = cluster(objs, Duration::from_secs(20)).await;
    let all = node_names(&a).await;
    let f = filter(&a, &rest[0], &all).await;
    assert!(f.passed.is_empty(), "{:?}", f.passed);
    let short =
        "pod group ml/g: 1 of the 2 pods it still needs fit in topology.kubernetes.io/rack=r0";
    let outside = "node is outside the pod group's topology domain topology.kubernetes.io/rack=r0";
    assert_eq!(
        f.failed,
        BTreeMap::from([
            ("r0-n0".to_owned(), short.to_owned()),
            ("r0-n1".to_owned(), short.to_owned()),
        ])
    );
    assert_eq!(
        f.unresolvable,
        BTreeMap::from([
            ("r1-n0".to_owned(), outside.to_owned()),
            ("r1-n1".to_owned(), outside.to_owned()),
        ])
    );
    assert!(f.error.is_empty(), "{}", f.error);
}

#[tokio::test(start_paused = true)]
async fn members_beyond_quorum_are_placed_individually() {
    let mut objs = nodes(1, 2, 8, 1);
    objs.push(gang("g", 2, None, None));
    let pods = members("g", "g", 3, 1);
    objs.extend(pods.clone());
    let a = cluster(objs, Duration::from_secs(20)).await;
    assert!(schedule(&a, &pods[..2], 2).await.is_empty());
    let all = node_names(&a).await;
    let b = cycle(&a, &pods[2], &all).await.ok().expect("placed");
    settle().await;
    assert_eq!(a.state.extender.gangs.held(), 0, "no wait beyond minCount");
    assert_eq!(b.await.expect("task"), "");
}

#[tokio::test(start_paused = true)]
async fn basic_groups_never_wait_but_keep_their_domain() {
    let mut objs = nodes(3, 2, 4, 1);
    objs.push(basic("web", Some(RACK)));
    let pods = members("web", "web", 3, 2);
    objs.extend(pods.clone());
    let a = cluster(objs, Duration::from_secs(20)).await;
    let all = node_names(&a).await;
    let b = cycle(&a, &pods[0], &all).await.ok().expect("placed");
    assert_eq!(b.await.expect("task"), "", "bound alone, without waiting");
    assert!(schedule(&a, &pods[1..], 2).await.is_empty());
    let b = bound(&a).await;
    let racks: std::collections::BTreeSet<&str> = b.values().map(|n| rack_of(n)).collect();
    assert_eq!(racks.len(), 1, "{b:?}");
}

#[tokio::test(start_paused = true)]
async fn prioritize_packs_members_inside_the_domain() {
    let mut objs = nodes(2, 3, 4, 1);
    objs.push(gang("g", 2, Some(RACK), None));
    let pods = members("g", "g", 2, 2);
    objs.extend(pods.clone());
    let a = cluster(objs, Duration::from_secs(20)).await;
    let all = node_names(&a).await;
    let f = filter(&a, &pods[0], &all).await;
    assert_eq!(f.passed.len(), 3, "one rack: {:?}", f.passed);
    let scores = prioritize(&a, &pods[0], &f.passed).await;
    // Both members fit on the first node: it scores 10, the others 5.
    assert_eq!(scores[0].1, 10, "{scores:?}");
    assert!(scores[1..].iter().all(|s| s.1 == 5), "{scores:?}");
    let outside: Vec<String> = all
        .iter()
        .filter(|n| !f.passed.contains(n))
        .cloned()
        .collect();
    assert!(
        prioritize(&a, &pods[0], &outside)
            .await
            .iter()
            .all(|s| s.1 == 0)
    );
}

#[tokio::test(start_paused = true)]
async fn zone_rack_example_places_workers_and_driver_in_racks_of_one_zone() {
    // 2 zones; racks of 4 nodes x 4 cpu (8 workers of 2 cpu fill one rack).
    // z0's racks are partly used, so the root's zone choice matters.
    let mut objs = nodes(6, 4, 4, 2);
    objs.push(composite("root", 2, Some(ZONE)));
    objs.push(gang("workers", 8, Some(RACK), Some("root")));
    objs.push(gang("driver", 1, Some(RACK), Some("root")));
    for r in [0, 2, 4] {
        let mut used = pod(&format!("used-{r}"), None, 1);
        used["spec"]["nodeName"] = json!(format!("r{r}-n0"));
        objs.push(used);
    }
    let workers = members("worker", "workers", 8, 2);
    let driver = members("driver", "driver", 1, 2);
    objs.extend(workers.clone());
    objs.extend(driver.clone());
    let a = cluster(objs, Duration::from_secs(20)).await;
    let mut all_pods = driver.clone();
    all_pods.extend(workers.clone());
    let left = schedule(&a, &all_pods, 3).await;
    assert!(left.is_empty(), "{left:?}");
    let b = bound(&a).await;
    let worker_racks: std::collections::BTreeSet<&str> =
        workers.iter().map(|p| rack_of(&b[&name(p)])).collect();
    assert_eq!(worker_racks.len(), 1, "{b:?}");
    let wr = *worker_racks.iter().next().expect("rack");
    let dr = rack_of(&b["driver-0"]);
    // Each bound member carries the composite its group names, through the
    // Binding (standalone copies its annotations as the API server does).
    let stored = get(&a, "/v1/objects?kind=Pod&namespace=ml").await;
    let parents: BTreeMap<&str, &str> = stored.body["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|p| {
            Some((
                p["metadata"]["name"].as_str()?,
                p["metadata"]["annotations"]["kruntimes.io/parent-composite-pod-group"].as_str()?,
            ))
        })
        .collect();
    assert_eq!(parents.len(), 9, "{parents:?}");
    assert!(parents.values().all(|p| *p == "root"), "{parents:?}");
    assert_eq!(zone_of(wr, 2), zone_of(dr, 2), "{b:?}");
    assert_eq!(
        zone_of(wr, 2),
        "z1",
        "the zone without used racks holds both"
    );
    settle().await;
    for (kind, n) in [
        ("PodGroup", "workers"),
        ("PodGroup", "driver"),
        ("CompositePodGroup", "root"),
    ] {
        let c = condition(&a, kind, n)
            .await
            .unwrap_or_else(|| panic!("{n} has a condition"));
        assert_eq!(c.0, "True", "{n}: {c:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_gang_of_gangs_waits_for_all_its_groups_and_releases_them_together() {
    let mut objs = nodes(2, 4, 4, 1);
    objs.push(composite("root", 2, None));
    objs.push(gang("workers", 2, Some(RACK), Some("root")));
    objs.push(gang("driver", 1, Some(RACK), Some("root")));
    let workers = members("worker", "workers", 2, 2);
    let driver = members("driver", "driver", 1, 2);
    objs.extend(workers.clone());
    objs.extend(driver.clone());
    let a = cluster(objs, Duration::from_secs(8)).await;
    let all = node_names(&a).await;
    // Both workers are placed (their own quorum), the driver is not:
    // the composite's quorum (2 groups) is not reached.
    let b0 = cycle(&a, &workers[0], &all).await.ok().expect("placed");
    let b1 = cycle(&a, &workers[1], &all).await.ok().expect("placed");
    settle().await;
    assert_eq!(a.state.extender.gangs.held(), 2);
    for b in [b0, b1] {
        let e = b.await.expect("task");
        assert!(
            e.contains("composite pod group ml/root: quorum not reached"),
            "{e}"
        );
    }
    assert!(bound(&a).await.is_empty());
    // Together they go.
    let mut all_pods = workers.clone();
    all_pods.extend(driver.clone());
    assert!(schedule(&a, &all_pods, 3).await.is_empty());
    assert_eq!(bound(&a).await.len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_composite_waits_for_enough_child_groups_to_exist() {
    let mut objs = nodes(1, 2, 8, 1);
    objs.push(composite("root", 2, None));
    objs.push(gang("workers", 1, None, Some("root")));
    objs.push(gang("driver", 1, None, Some("root")));
    let w = pod("worker-0", Some("workers"), 1);
    objs.push(w.clone());
    let a = cluster(objs, Duration::from_secs(8)).await;
    let f = filter(&a, &w, &node_names(&a).await).await;
    assert_eq!(
        f.unresolvable["r0-n0"],
        "composite pod group ml/root: 1 of the 2 child groups it needs have all their pods"
    );
}

#[tokio::test(start_paused = true)]
async fn a_missing_pod_group_keeps_its_pods_pending() {
    let mut objs = nodes(1, 1, 8, 1);
    let p = pod("x", Some("nope"), 1);
    objs.push(p.clone());
    let a = cluster(objs, Duration::from_secs(8)).await;
    let f = filter(&a, &p, &node_names(&a).await).await;
    assert_eq!(
        f.unresolvable["r0-n0"],
        "waiting for pod group ml/nope to exist"
    );
}

/// A CompositePodGroup under `parent`; `min_groups` 0 makes it `basic`.
fn sub_composite(name: &str, min_groups: u32, parent: &str) -> Value {
    let c = testkit::composite(name).parent(parent);
    match min_groups {
        0 => c,
        n => c.gang(n),
    }
    .value()
}

#[tokio::test(start_paused = true)]
async fn a_gang_root_over_basic_middles_holds_gang_leaves_until_its_quorum() {
    // root (gang of 2 groups) → mid-a, mid-b (basic) → a, b (gang of 1):
    // neither member binds alone; the second releases the first.
    let mut objs = nodes(1, 2, 8, 1);
    objs.push(composite("root", 2, None));
    objs.push(sub_composite("mid-a", 0, "root"));
    objs.push(sub_composite("mid-b", 0, "root"));
    objs.push(gang("a", 1, None, Some("mid-a")));
    objs.push(gang("b", 1, None, Some("mid-b")));
    let pa = pod("a-0", Some("a"), 1);
    let pb = pod("b-0", Some("b"), 1);
    objs.extend([pa.clone(), pb.clone()]);
    let a = cluster(objs, Duration::from_secs(3)).await;
    let all = node_names(&a).await;
    let ba = cycle(&a, &pa, &all).await.ok().expect("a-0 passes filter");
    settle().await;
    assert_eq!(a.state.extender.gangs.held(), 1, "a-0 waits for the root");
    assert!(bound(&a).await.is_empty());
    let bb = cycle(&a, &pb, &all).await.ok().expect("b-0 passes filter");
    assert_eq!(bb.await.expect("task"), "");
    assert_eq!(ba.await.expect("task"), "", "released together");
    assert_eq!(bound(&a).await.len(), 2);
    assert_eq!(a.state.extender.gangs.held(), 0);
    settle().await;
    let c = condition(&a, "CompositePodGroup", "root")
        .await
        .expect("condition");
    assert_eq!((c.0.as_str(), c.1.as_str()), ("True", "Scheduled"), "{c:?}");
}

#[tokio::test(start_paused = true)]
async fn a_parent_cycle_is_refused_by_filter_and_bind() {
    let mut objs = nodes(1, 1, 8, 1);
    objs.push(sub_composite("ca", 1, "cb"));
    objs.push(sub_composite("cb", 0, "ca"));
    objs.push(gang("g", 1, None, Some("ca")));
    let p = pod("g-0", Some("g"), 1);
    objs.push(p.clone());
    let a = cluster(objs, Duration::from_secs(3)).await;
    let f = filter(&a, &p, &node_names(&a).await).await;
    assert_eq!(
        f.unresolvable["r0-n0"],
        "parent cycle: composite pod group ml/ca → composite pod group ml/cb → composite pod group ml/ca"
    );
    // A bind sent anyway is refused and leaves nothing assumed.
    let e = spawn_bind(&a, &p, "r0-n0").await.expect("task");
    assert!(e.starts_with("parent cycle: "), "{e}");
    assert!(bound(&a).await.is_empty());
    assert!(fits(&a, "r0-n0", 8).await);
}

#[tokio::test(start_paused = true)]
async fn a_composite_of_two_gangs_is_placed_in_a_rack_that_fits_it_exactly() {
    // Racks of two 2-cpu nodes; the composite's two gangs of one 2-cpu pod
    // each need exactly one rack. The filtered pod is counted once, in its
    // own group, not once per child.
    let mut objs = nodes(3, 2, 2, 1);
    objs.push(composite("job", 2, Some(RACK)));
    objs.push(gang("a", 1, None, Some("job")));
    objs.push(gang("b", 1, None, Some("job")));
    let pods = vec![pod("a-0", Some("a"), 2), pod("b-0", Some("b"), 2)];
    objs.extend(pods.clone());
    let a = cluster(objs, Duration::from_secs(8)).await;
    let f = filter(&a, &pods[0], &node_names(&a).await).await;
    assert_eq!(f.passed, ["r0-n0", "r0-n1"], "{:?}", f.unresolvable);
    let left = schedule(&a, &pods, 3).await;
    assert!(left.is_empty(), "{left:?}");
    let b = bound(&a).await;
    assert_eq!(rack_of(&b["a-0"]), rack_of(&b["b-0"]), "{b:?}");
    // Three 2-cpu gangs do not fit a rack: the message counts the 3 pods
    // that exist, not more.
    let mut objs = nodes(3, 2, 2, 1);
    objs.push(composite("job", 3, Some(RACK)));
    for g in ["a", "b", "c"] {
        objs.push(gang(g, 1, None, Some("job")));
        objs.push(pod(&format!("{g}-0"), Some(g), 2));
    }
    let a = cluster(objs, Duration::from_secs(8)).await;
    let f = filter(&a, &pod("a-0", Some("a"), 2), &node_names(&a).await).await;
    assert_eq!(
        f.unresolvable["r0-n0"],
        "composite pod group ml/job: no topology.kubernetes.io/rack domain can hold the 3 pods it still needs"
    );
}

/// A Node with 4 cpu and 64Gi, labelled `labels`.
fn labelled_node(name: &str, labels: &[(&str, &str)]) -> Value {
    testkit::node(name)
        .allocatable("4", "64Gi")
        .labels(labels)
        .value()
}

/// Member `name` of `group` requesting 1 cpu, bound to `node`.
fn placed(name: &str, group: &str, node: &str) -> Value {
    pod_obj(name, Some(group), 1).node_name(node).value()
}

#[tokio::test(start_paused = true)]
async fn placed_members_in_an_unknown_or_conflicting_domain_admit_nothing() {
    // Racks r0 and r1, one node without the label, one with an empty value.
    let base = || {
        let mut objs = nodes(2, 2, 4, 1);
        objs.push(labelled_node("bare", &[]));
        objs.push(labelled_node("blank", &[(RACK, "")]));
        objs.push(gang("g", 3, Some(RACK), None));
        objs.push(pod("g-2", Some("g"), 1));
        objs
    };
    let cases = [
        (
            ("r0-n0", "ghost"),
            "pod group ml/g: a member is on node ghost, which the extender does not know, so its topology.kubernetes.io/rack domain is unknown",
        ),
        (
            ("r0-n0", "bare"),
            "pod group ml/g: a member is on node bare, which has no topology.kubernetes.io/rack label, so its domain is unknown",
        ),
        (
            ("r0-n0", "blank"),
            "pod group ml/g: members are in different topology.kubernetes.io/rack domains (\"\" and \"r0\")",
        ),
        (
            ("r0-n0", "r1-n0"),
            "pod group ml/g: members are in different topology.kubernetes.io/rack domains (\"r0\" and \"r1\")",
        ),
    ];
    for ((n0, n1), want) in cases {
        let mut objs = base();
        objs.push(placed("g-0", "g", n0));
        objs.push(placed("g-1", "g", n1));
        let a = cluster(objs, Duration::from_secs(8)).await;
        let all = node_names(&a).await;
        let f = filter(&a, &pod("g-2", Some("g"), 1), &all).await;
        assert!(f.passed.is_empty(), "{n0}+{n1}: {:?}", f.passed);
        assert_eq!(f.unresolvable.len(), all.len(), "{n0}+{n1}");
        assert_eq!(f.unresolvable["r0-n1"], want, "{n0}+{n1}");
    }
}

#[tokio::test(start_paused = true)]
async fn the_same_rack_name_in_two_zones_is_two_domains() {
    // rack-1 exists in zone-1 and in zone-2; the workers' composite is
    // zone-scoped and their gang rack-scoped.
    let mut objs = Vec::new();
    for (z, n) in [
        ("zone-1", "a"),
        ("zone-1", "b"),
        ("zone-2", "c"),
        ("zone-2", "d"),
    ] {
        objs.push(labelled_node(n, &[(ZONE, z), (RACK, "rack-1")]));
    }
    objs.push(composite("job", 1, Some(ZONE)));
    objs.push(gang("w", 3, Some(RACK), Some("job")));
    objs.push(placed("w-0", "w", "a"));
    objs.push(placed("w-1", "w", "c"));
    let p = pod("w-2", Some("w"), 1);
    objs.push(p.clone());
    let a = cluster(objs, Duration::from_secs(8)).await;
    let f = filter(&a, &p, &node_names(&a).await).await;
    assert!(f.passed.is_empty(), "{:?}", f.passed);
    assert_eq!(
        f.unresolvable["a"],
        "composite pod group ml/job: members are in different topology.kubernetes.io/zone domains (\"zone-1\" and \"zone-2\")"
    );
    // With both placed members in zone-1, the third joins them there only.
    delete(&a, "Pod", "w-1").await;
    upsert(&a, vec![placed("w-1", "w", "b")]).await;
    let f = filter(&a, &p, &node_names(&a).await).await;
    assert_eq!(f.passed, ["a", "b"], "{:?}", f.unresolvable);
}

/// `p` restricted to the nodes labelled `gpu=true` (`nodeSelector`).
fn on_gpu(p: Obj) -> Value {
    p.set(&["spec", "nodeSelector", "gpu"], "true").value()
}

#[tokio::test(start_paused = true)]
async fn a_member_with_a_narrower_node_selector_is_judged_on_its_own_nodes() {
    // One gpu node and two plain ones, 4 cpu each; a gang of two 4-cpu
    // pods, one of which needs the gpu node. kube-scheduler offers that
    // member the gpu node only; the other member still fits elsewhere.
    let mut objs = vec![
        labelled_node("gpu-0", &[("gpu", "true")]),
        labelled_node("cpu-0", &[]),
        labelled_node("cpu-1", &[]),
    ];
    objs.push(gang("g", 2, None, None));
    let narrow = on_gpu(pod_obj("g-0", Some("g"), 4));
    let wide = pod("g-1", Some("g"), 4);
    objs.extend([narrow.clone(), wide.clone()]);
    let a = cluster(objs, Duration::from_secs(8)).await;
    let f = filter(&a, &narrow, &["gpu-0".to_owned()]).await;
    assert_eq!(f.passed, ["gpu-0"], "{:?}", f.unresolvable);
    // The wide member is offered everything, but the gpu node is the
    // narrow member's only room: the wide one must leave it.
    let all = node_names(&a).await;
    let f = filter(&a, &wide, &all).await;
    assert_eq!(f.passed.len(), 3, "{:?}", f.unresolvable);
    let bn = spawn_bind(&a, &narrow, "gpu-0");
    let bw = spawn_bind(&a, &wide, "cpu-0");
    assert_eq!(bn.await.expect("task"), "");
    assert_eq!(bw.await.expect("task"), "");
    assert_eq!(bound(&a).await.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn no_domain_is_chosen_for_nodes_no_member_can_use() {
    // Rack a-rack (plain) and b-rack (gpu), two 4-cpu nodes each; a gang of
    // two 4-cpu gpu pods fits exactly in either by room, but only b-rack
    // has nodes its members may use.
    let mut objs = Vec::new();
    for (rack, n, gpu) in [
        ("a-rack", "a0", false),
        ("a-rack", "a1", false),
        ("b-rack", "b0", true),
        ("b-rack", "b1", true),
    ] {
        let mut l = vec![(RACK, rack)];
        if gpu {
            l.push(("gpu", "true"));
        }
        objs.push(labelled_node(n, &l));
    }
    objs.push(gang("g", 2, Some(RACK), None));
    let pods = vec![
        on_gpu(pod_obj("g-0", Some("g"), 4)),
        on_gpu(pod_obj("g-1", Some("g"), 4)),
    ];
    objs.extend(pods.clone());
    let a = cluster(objs, Duration::from_secs(8)).await;
    let gpu_nodes = vec!["b0".to_owned(), "b1".to_owned()];
    let f = filter(&a, &pods[0], &gpu_nodes).await;
    assert_eq!(f.passed, gpu_nodes, "{:?}", f.unresolvable);
    let b0 = spawn_bind(&a, &pods[0], "b0");
    settle().await;
    assert_eq!(a.state.extender.gangs.held(), 1);
    let f = filter(&a, &pods[1], &gpu_nodes).await;
    assert_eq!(f.passed, ["b1"], "{:?} {:?}", f.failed, f.unresolvable);
    let b1 = spawn_bind(&a, &pods[1], "b1");
    assert_eq!(b0.await.expect("task"), "");
    assert_eq!(b1.await.expect("task"), "");
}

// === cluster mode ===

/// POSTs JSON to the router of a cluster-mode service; the JSON answer.
async fn post_json(app: axum::Router, path: &str, body: Value) -> Value {
    let req = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .expect("request");
    let resp = app.oneshot(req).await.expect("response");
    let b = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .expect("body");
    serde_json::from_slice::<Value>(&b).expect("json")
}

/// The first status condition of a group in the test API server, once one
/// has been written (polled; the write happens after the binds answer).
async fn first_condition(
    api: &apiserver::FakeApi,
    res: apiserver::Res,
    ns: &str,
    name: &str,
) -> Option<Value> {
    for _ in 0..200 {
        let c = api
            .get(res, ns, name)
            .and_then(|g| g.pointer("/status/conditions/0").cloned());
        if c.is_some() {
            return c;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_mode_binds_a_gang_and_patches_the_pod_group_condition() {
    use apiserver::{FakeApi, Res};
    use kruntimes_scheduler::cache::CacheConfig;
    let api = FakeApi::start().await;
    for n in 0..2 {
        api.put(
            Res::Nodes,
            testkit::node(&format!("n{n}"))
                .pod_slots("10")
                .label(RACK, "r0")
                .value(),
        );
    }
    api.put(Res::PodGroups, gang("g", 2, Some(RACK), None));
    for i in 0..2 {
        api.put(
            Res::Pods,
            testkit::pod(&format!("g-{i}"))
                .requests(&[("cpu", "3")])
                .group("g")
                .value(),
        );
    }
    let mut c =
        kruntimes_scheduler::serve::cluster(CacheConfig::default(), api.client(), "test").await;
    c.state
        .set_gangs(Arc::new(Gangs::new(Duration::from_secs(10))));
    for _ in 0..400 {
        // The objects are in, and the extender's caches say they have
        // synced (until then every verb answers 503).
        let ready = (c.state.extender.synced)() && {
            let s = c.state.extender.nodes.read();
            s.has_node("n1")
                && s.group("ml", "g").is_some()
                && s.members("ml", "g").map(|m| m.len()) == Some(2)
        };
        if ready {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let app = router(c.state.clone());
    let call = |path: &'static str, body: Value| post_json(app.clone(), path, body);
    let pod_json = |i: usize| {
        testkit::pod(&format!("g-{i}"))
            .uid(&format!("uid-Pod-ml-g-{i}"))
            .requests(&[("cpu", "3")])
            .group("g")
    };
    let f = call(
        "/scheduler/filter",
        json!({"Pod": pod_json(0), "NodeNames": ["n0", "n1"]}),
    )
    .await;
    assert_eq!(f["NodeNames"], json!(["n0", "n1"]), "{f}");
    // The first bind is held until the second arrives; then both bind.
    let first = tokio::spawn(call(
        "/scheduler/bind",
        json!({"PodName": "g-0", "PodNamespace": "ml", "PodUID": "uid-Pod-ml-g-0", "Node": "n0"}),
    ));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(api.inner.lock().bindings.is_empty(), "held below quorum");
    let second = call(
        "/scheduler/bind",
        json!({"PodName": "g-1", "PodNamespace": "ml", "PodUID": "uid-Pod-ml-g-1", "Node": "n1"}),
    )
    .await;
    assert_eq!(second["Error"], "");
    assert_eq!(first.await.expect("task")["Error"], "");
    assert_eq!(api.inner.lock().bindings.len(), 2);
    let cond = first_condition(&api, Res::PodGroups, "ml", "g")
        .await
        .expect("condition patched");
    assert_eq!(cond["type"], "PodGroupInitiallyScheduled");
    assert_eq!(cond["status"], "True");
    for w in c.watchers {
        w.abort();
    }
}

/// A standby taking over after a child group was deleted, through the real
/// client: the leader binds `a-0` (child `a` of composite `root`, over
/// zones) in zone-2, and the Binding's annotation lands on the pod. `a` is
/// deleted before the standby's first list, so the standby never sees it;
/// `a-0`'s annotation still ties it to `root`, and `b`'s pod is offered
/// zone-2 alone (the rest fail as outside the composite's domain).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_that_never_saw_a_deleted_child_group_keeps_its_composite_in_one_zone() {
    use apiserver::{FakeApi, Res};
    use kruntimes_scheduler::cache::CacheConfig;
    let api = FakeApi::start().await;
    // zone-1 is the tighter fit: a plan of its own would choose it.
    for (n, zone, cpu) in [("z1-n", "zone-1", "4"), ("z2-n", "zone-2", "64")] {
        api.put(
            Res::Nodes,
            testkit::node(n)
                .allocatable(cpu, "64Gi")
                .label(ZONE, zone)
                .value(),
        );
    }
    api.put(Res::CompositePodGroups, composite("root", 1, Some(ZONE)));
    api.put(Res::PodGroups, gang("a", 1, None, Some("root")));
    api.put(Res::PodGroups, gang("b", 1, None, Some("root")));
    for p in ["a-0", "b-0"] {
        let g = &p[..1];
        api.put(
            Res::Pods,
            testkit::pod(p).requests(&[("cpu", "1")]).group(g).value(),
        );
    }
    let ready = |c: &kruntimes_scheduler::serve::Cluster, groups: &[&str]| {
        (c.state.extender.synced)() && {
            let s = c.state.extender.nodes.read();
            s.has_node("z2-n")
                && groups.iter().all(|g| s.group("ml", g).is_some())
                && s.pod("ml", "b-0").is_some()
        }
    };
    let leader =
        kruntimes_scheduler::serve::cluster(CacheConfig::default(), api.client(), "leader").await;
    for _ in 0..400 {
        if ready(&leader, &["a", "b"]) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let bind = post_json(
        router(leader.state.clone()),
        "/scheduler/bind",
        json!({"PodName": "a-0", "PodNamespace": "ml", "PodUID": "uid-Pod-ml-a-0", "Node": "z2-n"}),
    )
    .await;
    assert_eq!(bind["Error"], "", "{bind}");
    let a0 = api.get(Res::Pods, "ml", "a-0").expect("a-0");
    assert_eq!(a0["spec"]["nodeName"], "z2-n");
    assert_eq!(
        a0["metadata"]["annotations"]["kruntimes.io/parent-composite-pod-group"], "root",
        "{a0}"
    );
    for w in leader.watchers {
        w.abort();
    }

    api.delete(Res::PodGroups, "ml", "a");
    let standby =
        kruntimes_scheduler::serve::cluster(CacheConfig::default(), api.client(), "standby").await;
    for _ in 0..400 {
        if ready(&standby, &["b"])
            && standby
                .state
                .extender
                .nodes
                .read()
                .pod("ml", "a-0")
                .is_some()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(
        standby
            .state
            .extender
            .nodes
            .read()
            .group("ml", "a")
            .is_none()
    );
    let f = post_json(
        router(standby.state.clone()),
        "/scheduler/filter",
        json!({
            "Pod": testkit::pod("b-0").uid("uid-Pod-ml-b-0").requests(&[("cpu", "1")]).group("b"),
            "NodeNames": ["z1-n", "z2-n"],
        }),
    )
    .await;
    assert_eq!(f["NodeNames"], json!(["z2-n"]), "{f}");
    assert!(
        f["FailedAndUnresolvableNodes"]["z1-n"]
            .as_str()
            .is_some_and(|m| m.contains("outside")),
        "{f}"
    );
    for w in standby.watchers {
        w.abort();
    }
}

#[tokio::test(start_paused = true)]
async fn the_readme_example_places_the_gang_in_the_rack_it_fills_exactly() {
    let objects = kruntimes_scheduler::cluster::load::load_path(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/gang/cluster.yaml"),
    )
    .expect("example loads");
    let mut a = kruntimes_scheduler::serve::standalone(Default::default(), objects).expect("valid");
    a.state
        .set_gangs(Arc::new(Gangs::new(Duration::from_secs(20))));
    let pods: Vec<Value> = (0..3)
        .map(|i| pod(&format!("train-{i}"), Some("train"), 2))
        .collect();
    let f = filter(&a, &pods[0], &node_names(&a).await).await;
    assert_eq!(f.passed, ["r1-n0", "r1-n1"]);
    let a = Cluster::from(a);
    assert!(schedule(&a, &pods, 2).await.is_empty());
    let b = bound(&a).await;
    assert!(pods.iter().all(|p| rack_of(&b[&name(p)]) == "r1"), "{b:?}");
}

#[tokio::test]
async fn cluster_mode_binds_a_gang_of_gangs_and_patches_the_composite_condition() {
    use apiserver::{FakeApi, Res};
    use kruntimes_scheduler::cache::CacheConfig;
    let api = FakeApi::start().await;
    for n in 0..2 {
        api.put(
            Res::Nodes,
            testkit::node(&format!("n{n}")).pod_slots("10").value(),
        );
    }
    let mut root = composite("root", 2, None);
    root.as_object_mut().map(|o| o.remove("kind"));
    api.put(Res::CompositePodGroups, root);
    for g in ["workers", "driver"] {
        let mut pg = gang(g, 1, None, Some("root"));
        pg.as_object_mut().map(|o| o.remove("kind"));
        api.put(Res::PodGroups, pg);
        api.put(
            Res::Pods,
            testkit::pod(&format!("{g}-0"))
                .requests(&[("cpu", "3")])
                .group(g)
                .value(),
        );
    }
    let mut c =
        kruntimes_scheduler::serve::cluster(CacheConfig::default(), api.client(), "test").await;
    c.state
        .set_gangs(Arc::new(Gangs::new(Duration::from_secs(10))));
    for _ in 0..400 {
        let ready = (c.state.extender.synced)() && {
            let s = c.state.extender.nodes.read();
            s.has_node("n1")
                && s.composite("ml", "root").is_some()
                && ["workers", "driver"]
                    .iter()
                    .all(|g| s.members("ml", g).map(|m| m.len()) == Some(1))
        };
        if ready {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let app = router(c.state.clone());
    let bind = |pod: &'static str, node: &'static str| {
        post_json(
            app.clone(),
            "/scheduler/bind",
            json!({"PodName": pod, "PodNamespace": "ml",
                "PodUID": format!("uid-Pod-ml-{pod}"), "Node": node}),
        )
    };
    // Each child is at its own quorum with one pod, but the composite
    // needs both children: the first bind is held until the second.
    let first = tokio::spawn(bind("workers-0", "n0"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(api.inner.lock().bindings.is_empty(), "held below quorum");
    assert_eq!(bind("driver-0", "n1").await["Error"], "");
    assert_eq!(first.await.expect("task")["Error"], "");
    assert_eq!(api.inner.lock().bindings.len(), 2);
    let cond = first_condition(&api, Res::CompositePodGroups, "ml", "root")
        .await
        .expect("composite condition patched through the API");
    assert_eq!(cond["type"], "CompositePodGroupInitiallyScheduled");
    assert_eq!(cond["status"], "True");
    for w in c.watchers {
        w.abort();
    }
}
