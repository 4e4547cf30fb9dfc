//! Gangs of thousands (#33), driven as kube-scheduler drives the extender
//! (`testkit::loopback`): the serial verbs one after another on one
//! keep-alive connection, every bind on a connection of its own, against
//! the real server (`tls::serve_with` on a loopback listener) with the
//! limits and gang settings of `serve`'s default flags.

use crate::common;

use clap::Parser as _;
use common::{SchedulerCache, app, cpu_of, get, post};
use kruntimes_scheduler::cluster::standalone::StandaloneStore;
use kruntimes_scheduler::extender::bind::permit::Gangs;
use kruntimes_scheduler::serve::{ServeArgs, Standalone, raise_open_files};
use kruntimes_scheduler::testkit::loopback::{
    Conn, bind_alone, bind_body, filter_body, filter_outcome,
};
use kruntimes_scheduler::testkit::{self, wait_until};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// A bound the server must meet, far below any gang wait: not a speed
/// measurement.
const PATIENCE: Duration = Duration::from_secs(5);

#[derive(clap::Parser)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
}

/// `serve`'s flags: the defaults, plus `extra`.
fn flags(extra: &[&str]) -> ServeArgs {
    let mut argv = vec!["serve"];
    argv.extend_from_slice(extra);
    Cli::parse_from(argv).serve
}

struct Served {
    app: Standalone,
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// The standalone service holding `objects`, served on a loopback port
/// with the connection limits and gang settings `flags` give.
async fn serve(objects: Vec<Value>, flags: &ServeArgs) -> Served {
    raise_open_files(kruntimes_scheduler::serve::open_files_needed(flags));
    let mut a = app("");
    a.state.set_gangs(Arc::new(Gangs::with_config(
        flags.gang_config().expect("gang flags"),
    )));
    for chunk in objects.chunks(2000) {
        let r = post(
            &a,
            "/v1/objects",
            &json!({"kind": "List", "apiVersion": "v1", "items": chunk}).to_string(),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(kruntimes_scheduler::tls::serve_with(
        listener,
        kruntimes_scheduler::http::router(a.state.clone()),
        None,
        flags.conn_limits(),
        async move {
            let _ = stopped.await;
        },
    ));
    Served {
        app: a,
        addr,
        stop: Some(stop),
    }
}

/// `nodes` nodes of 64 cpu and 1000 pods, a gang `g` of `min` with `pods`
/// members of 1 cpu, and a pod `plain` in no group.
fn gang_cluster(nodes: usize, min: u32, pods: usize) -> (Vec<Value>, Vec<String>) {
    let names: Vec<String> = (0..nodes).map(|i| format!("n{i}")).collect();
    let mut objects: Vec<Value> = names
        .iter()
        .map(|n| {
            testkit::node(n)
                .allocatable("64", "512Gi")
                .set(&["status", "allocatable", "pods"], "1000")
                .value()
        })
        .collect();
    objects.push(testkit::pod_group("g").gang(min).value());
    objects.extend((0..pods).map(|i| testkit::pod(&format!("m{i}")).group("g").value()));
    objects.push(testkit::pod("plain").value());
    (objects, names)
}

fn member(i: usize) -> Value {
    testkit::pod(&format!("m{i}")).group("g").value()
}

/// The serial loop's filter on its keep-alive connection: the nodes let
/// through.
async fn filter(c: &mut Conn, pod: &Value, nodes: &[String]) -> Vec<String> {
    let (status, bytes) = c
        .post("/scheduler/filter", &filter_body(pod, nodes))
        .await
        .expect("filter answers");
    assert_eq!(status, 200);
    let (fit, failed) = filter_outcome(&bytes);
    assert!(
        !fit.is_empty(),
        "no node for {}: {failed:?}",
        pod["metadata"]["name"]
    );
    fit
}

type Serial = Arc<tokio::sync::Mutex<Conn>>;

/// One member's bind as its binding goroutine issues it, on its own
/// connection; a bind answering that the member stays reserved (its own
/// wait ran out while the gang gathered) or that its node no longer has
/// room is requeued by kube-scheduler ([`Loop::requeue`]): filtered again
/// in the serial loop and bound again. The attempts.
async fn bind_member(s: Loop, nodes: Vec<String>, i: usize, node: String) -> usize {
    let mut node = node;
    let me = format!("m{i}");
    for attempt in 1..=20 {
        let error = bind_alone(s.addr, bind_body("ml", &me, &node))
            .await
            .expect("bind answered");
        s.ks.forget(&me);
        if error.is_empty() {
            return attempt;
        }
        // Requeued as kube-scheduler requeues any failed bind: a member
        // kept while its gang gathers, or one that lost its node's last
        // room to binds neither side counted at its filter (a kept
        // member's room, binds still on their way to the extender).
        assert!(
            error.contains("stays reserved") || error.contains("no longer has room"),
            "m{i} attempt {attempt} on {node}: {error}"
        );
        s.requeue(attempt).await;
        node = s.cycle(&nodes, i).await;
    }
    panic!("m{i} never bound");
}

/// kube-scheduler's side: the serial loop's connection and its own cache
/// of assumed pods.
#[derive(Clone)]
struct Loop {
    addr: SocketAddr,
    serial: Serial,
    ks: SchedulerCache,
    store: Arc<StandaloneStore>,
    /// Whether every member has had its first cycle.
    first_pass: Arc<tokio::sync::watch::Sender<bool>>,
}

impl Loop {
    async fn new(s: &Served) -> Loop {
        Loop {
            addr: s.addr,
            serial: Arc::new(tokio::sync::Mutex::new(
                Conn::connect(s.addr).await.expect("connect"),
            )),
            ks: SchedulerCache::default(),
            store: Arc::clone(&s.app.store),
            first_pass: Arc::new(tokio::sync::watch::channel(false).0),
        }
    }

    /// Every member has had its first cycle: requeued ones may go now.
    fn first_pass_done(&self) {
        self.first_pass.send_replace(true);
    }

    /// A failed bind's requeue as kube-scheduler's queue does it: the pod
    /// waits out its backoff (`podInitialBackoffSeconds` 1s, doubled per
    /// attempt, at most `podMaxBackoffSeconds` 10s), then goes back to the
    /// active queue behind every pod queued before it (PrioritySort: equal
    /// priority, earlier timestamp first). The members were all created
    /// before, so each one's first cycle comes before any retry.
    async fn requeue(&self, attempt: usize) {
        let backoff = Duration::from_secs(1 << (attempt - 1).min(4)).min(Duration::from_secs(10));
        tokio::time::sleep(backoff).await;
        let mut done = self.first_pass.subscribe();
        let _ = done.wait_for(|d| *d).await;
    }

    /// One scheduling cycle of member `i`: kube-scheduler's own fit, the
    /// extender's filter on the serial connection, the first node passed,
    /// the member assumed there.
    async fn cycle(&self, nodes: &[String], i: usize) -> String {
        let me = format!("m{i}");
        let pod = member(i);
        let offered = self.ks.fitting(&self.store, nodes, &me, cpu_of(&pod));
        let node = filter(&mut *self.serial.lock().await, &pod, &offered).await[0].clone();
        self.ks.assume(&me, &node, cpu_of(&pod));
        node
    }
}

/// Schedules members `0..n` as kube-scheduler does: filter each in the
/// serial loop, then hand its bind to a task on its own connection.
async fn schedule(s: &Served, nodes: &[String], n: usize) -> Vec<tokio::task::JoinHandle<usize>> {
    let l = Loop::new(s).await;
    let mut binds = Vec::with_capacity(n);
    for i in 0..n {
        let node = l.cycle(nodes, i).await;
        binds.push(tokio::spawn(bind_member(
            l.clone(),
            nodes.to_vec(),
            i,
            node,
        )));
    }
    l.first_pass_done();
    binds
}

/// Every member bound; how many needed more than one bind.
async fn all_bound(binds: Vec<tokio::task::JoinHandle<usize>>) -> usize {
    let mut retried = 0;
    for b in binds {
        retried += usize::from(b.await.expect("member") > 1);
    }
    retried
}

fn bound_in_store(s: &Served) -> usize {
    let store = &s.app.store;
    store
        .list(
            kruntimes_scheduler::cluster::kinds::Kind::Pod,
            Some("ml"),
            None,
        )
        .iter()
        .filter(|p| p["spec"]["nodeName"].is_string())
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_larger_than_the_default_connection_limit_binds() {
    // The default connection limit, and a gang wait long enough that a
    // slow or busy machine delivering 1,100 members does not expire it:
    // the test is about connections, not the wait (20s by default).
    let defaults = flags(&["--gang-wait", "120s"]);
    assert_eq!(defaults.max_connections, 1024);
    let size = 1100;
    let (objects, nodes) = gang_cluster(20, size as u32, size);
    let s = serve(objects, &defaults).await;
    let binds = schedule(&s, &nodes, size).await;
    all_bound(binds).await;
    assert_eq!(bound_in_store(&s), size);
    assert_eq!(s.app.state.extender.gangs.held(), 0);
    assert_eq!(s.app.state.extender.gangs.units(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_filter_waits_behind_held_binds() {
    let defaults = flags(&[]);
    // More held binds than the default in-flight limit (256).
    let size = 400;
    let (objects, nodes) = gang_cluster(10, size as u32, size);
    let s = serve(objects, &defaults).await;
    let gangs = Arc::clone(&s.app.state.extender.gangs);
    let binds = schedule(&s, &nodes, size - 1).await;
    wait_until("399 binds held", Duration::from_secs(60), || {
        gangs.held() + gangs.kept() == size - 1
    })
    .await;
    // The serial loop goes on: a filter on a fresh connection and one on
    // a kept-alive connection answer at once, with every bind still held.
    for fresh in [true, false] {
        let mut c = Conn::connect(s.addr).await.expect("connect");
        if !fresh {
            filter(&mut c, &testkit::pod("plain").value(), &nodes).await;
        }
        tokio::time::timeout(
            PATIENCE,
            filter(&mut c, &testkit::pod("plain").value(), &nodes),
        )
        .await
        .expect("filter answered while binds are held");
        assert_eq!(
            gangs.held() + gangs.kept(),
            size - 1,
            "the held binds are still held"
        );
    }
    // The last member completes the gang: everything binds.
    let mut c = Conn::connect(s.addr).await.expect("connect");
    let fit = filter(&mut c, &member(size - 1), &nodes).await;
    let last = bind_alone(s.addr, bind_body("ml", &format!("m{}", size - 1), &fit[0]))
        .await
        .expect("bind");
    assert_eq!(last, "");
    all_bound(binds).await;
    assert_eq!(bound_in_store(&s), size);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_delivered_slower_than_the_wait_binds() {
    // The test is about timing: a short wait, members 0.5s apart, so the
    // gang takes 2.5s to reach the extender, more than twice --gang-wait.
    let short = flags(&["--gang-wait", "1s"]);
    let size = 6;
    let (objects, nodes) = gang_cluster(2, size as u32, size);
    let s = serve(objects, &short).await;
    let l = Loop::new(&s).await;
    let mut members = Vec::new();
    for i in 0..size {
        // One pod's scheduling cycle in the serial loop, its bind on its
        // own connection, the next pod half a second later.
        let node = l.cycle(&nodes, i).await;
        members.push(tokio::spawn(bind_member(l.clone(), nodes.clone(), i, node)));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    l.first_pass_done();
    let retried = all_bound(members).await;
    assert!(retried > 0, "the first members outlived their own wait");
    assert_eq!(bound_in_store(&s), size);
    assert_eq!(s.app.state.extender.gangs.kept(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_gang_is_refused_with_the_clear_reason() {
    let defaults = flags(&[]);
    let too_many = defaults.max_held_binds as u32 + 1;
    let (objects, nodes) = gang_cluster(3, too_many, 1);
    let s = serve(objects, &defaults).await;
    let mut c = Conn::connect(s.addr).await.expect("connect");
    let (status, bytes) = c
        .post("/scheduler/filter", &filter_body(&member(0), &nodes))
        .await
        .expect("filter");
    assert_eq!(status, 200);
    let (fit, failed) = filter_outcome(&bytes);
    assert!(fit.is_empty());
    assert_eq!(failed.len(), nodes.len());
    for (_, why, unresolvable) in &failed {
        assert!(unresolvable, "{why}");
        assert!(why.contains("pod group ml/g"), "{why}");
        assert!(why.contains(&format!("needs {too_many} pods")), "{why}");
        assert!(why.contains("--max-held-binds (10000)"), "{why}");
    }
    let m = get(&s.app, "/metrics").await.text;
    assert!(m.contains("kruntimes_gang_too_large_total 1"), "{m}");
    // Nothing was planned or held for it.
    assert_eq!(s.app.state.extender.gangs.units(), 0);
}
