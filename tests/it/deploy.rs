//! The deployment contract: `manifests/` as an operator applies it.
//!
//! The manifests are rendered with `kubectl kustomize` (the same renderer
//! `kubectl apply -k` uses). Then, for what kube-scheduler and the API
//! server will call:
//!
//! - (a) every extender of the rendered KubeSchedulerConfiguration is
//!   resolved to a container and listener (a loopback host to a container
//!   of the same pod; a Service name to the Service, its targetPort and a
//!   containerPort), the binary is started with that container's exact
//!   args (adding only `--state` or `--kubeconfig` and test files), and
//!   filter and bind are called over the scheme the configuration declares;
//! - (b) every webhook the service registers is called over TLS, through
//!   the Service it names, with the CA bundle it registered;
//! - (c) an extender reachable through a Service with more than one ready
//!   backend, or listening beyond loopback, is refused;
//! - (d) each component runs in cluster mode against the test API server,
//!   which records every request; each request must be allowed by the
//!   rendered RBAC of the component's ServiceAccount, and every granted
//!   rule must be used by some scenario or be listed with its reason.
//!
//! Without kubectl the tests say so and pass, except under CI (`CI` set),
//! where `.ci/run` installs kubectl and its absence is a failure.

use crate::apiserver;

use apiserver::{FakeApi, Request, Res};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

// === rendering ===

/// `kubectl kustomize DIR`, parsed; `None` when kubectl is missing outside CI.
fn kustomize(dir: &Path) -> Option<Vec<Value>> {
    let out = match Command::new(std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into()))
        .arg("kustomize")
        .arg(dir)
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "kubectl is required under CI to render manifests/: {e}"
            );
            eprintln!(
                "SKIPPED: kubectl not found ({e}); install kubectl to run the deployment contract tests"
            );
            return None;
        }
    };
    assert!(
        out.status.success(),
        "kubectl kustomize {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("rendered manifests are UTF-8");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("rendered manifests parse");
    Some(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// The rendered default install.
fn rendered() -> Option<&'static [Value]> {
    static RENDERED: OnceLock<Option<Vec<Value>>> = OnceLock::new();
    RENDERED
        .get_or_init(|| kustomize(&Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests")))
        .as_deref()
}

fn kind_is<'a>(objs: &'a [Value], kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    objs.iter().filter(move |o| o["kind"] == kind)
}

fn name_of(o: &Value) -> &str {
    o["metadata"]["name"].as_str().unwrap_or_default()
}

fn ns_of(o: &Value) -> &str {
    o["metadata"]["namespace"].as_str().unwrap_or("default")
}

/// Workloads with a pod template: (workload, replicas, pod template).
fn workloads(objs: &[Value]) -> Vec<(&Value, u64, &Value)> {
    objs.iter()
        .filter(|o| matches!(o["kind"].as_str(), Some("Deployment" | "StatefulSet")))
        .map(|o| {
            (
                o,
                o["spec"]["replicas"].as_u64().unwrap_or(1),
                &o["spec"]["template"],
            )
        })
        .collect()
}

/// The rendered KubeSchedulerConfiguration (the one ConfigMap holding one).
fn scheduler_configuration(objs: &[Value]) -> Value {
    kind_is(objs, "ConfigMap")
        .filter_map(|cm| cm["data"]["scheduler-config.yaml"].as_str())
        .map(|t| serde_saphyr::from_str::<Value>(t).expect("configuration parses"))
        .next()
        .expect("a KubeSchedulerConfiguration ConfigMap")
}

/// The containers that run for the pod's life: native sidecars (init
/// containers with `restartPolicy: Always`), then the regular containers.
fn running(spec: &Value) -> impl Iterator<Item = &Value> + '_ {
    let sidecars = spec["initContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["restartPolicy"] == "Always");
    sidecars.chain(spec["containers"].as_array().into_iter().flatten())
}

// === the extender's reachability (a, c) ===

/// An extender as kube-scheduler's configuration declares it.
#[derive(Debug, Clone)]
struct Extender {
    url_prefix: String,
    filter: String,
    bind: Option<String>,
    node_cache_capable: bool,
}

/// Every extender of every KubeSchedulerConfiguration held in a ConfigMap,
/// with the name of that ConfigMap.
fn extenders(objs: &[Value]) -> Vec<(String, Extender)> {
    let mut out = Vec::new();
    for cm in kind_is(objs, "ConfigMap") {
        let Some(data) = cm["data"].as_object() else {
            continue;
        };
        for text in data.values().filter_map(Value::as_str) {
            let Ok(cfg) = serde_saphyr::from_str::<Value>(text) else {
                continue;
            };
            if cfg["kind"] != "KubeSchedulerConfiguration" {
                continue;
            }
            for e in cfg["extenders"].as_array().into_iter().flatten() {
                out.push((
                    name_of(cm).to_owned(),
                    Extender {
                        url_prefix: e["urlPrefix"].as_str().unwrap_or_default().to_owned(),
                        filter: e["filterVerb"].as_str().unwrap_or_default().to_owned(),
                        bind: e["bindVerb"].as_str().map(str::to_owned),
                        node_cache_capable: e["nodeCacheCapable"].as_bool().unwrap_or(false),
                    },
                ));
            }
        }
    }
    out
}

/// A URL split into what resolution needs.
struct Url {
    scheme: String,
    host: String,
    port: u16,
    path: String,
}

fn parse_url(url: &str) -> Result<Url, String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("{url}: no scheme"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => (
            h.trim_matches(|c| c == '[' || c == ']').to_owned(),
            p.parse().map_err(|_| format!("{url}: bad port"))?,
        ),
        _ => (
            authority.to_owned(),
            if scheme == "https" { 443 } else { 80 },
        ),
    };
    Ok(Url {
        scheme: scheme.to_owned(),
        host,
        port,
        path: path.trim_end_matches('/').to_owned(),
    })
}

fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The listen flags of `serve` and the address each one binds.
fn listeners(container: &Value) -> Vec<(String, SocketAddr)> {
    let args: Vec<&str> = container["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = args[i];
        for flag in ["--listen", "--extender-listen", "--health-listen"] {
            let value = if let Some(v) = a.strip_prefix(&format!("{flag}=")) {
                Some(v)
            } else if a == flag {
                args.get(i + 1).copied()
            } else {
                None
            };
            if let Some(v) = value {
                out.push((
                    flag.to_owned(),
                    v.parse().expect("listen flag is an address"),
                ));
            }
        }
        i += 1;
    }
    out
}

/// Where an extender URL lands.
#[derive(Debug)]
struct Target {
    /// The container serving the URL.
    container: Value,
    /// The listen flag that binds the port.
    flag: String,
}

/// Resolves an extender URL to the container and listener that serve it,
/// as the network would: a loopback host reaches a container of the pod
/// whose kube-scheduler reads the configuration; any other host must be a
/// Service, whose targetPort names a containerPort of the pods it selects.
/// Errors name what cannot work: nothing listening, a listener beyond
/// loopback (other pods could call bind), or a Service with more than one
/// ready backend (one gang's binds would be split across replicas).
fn resolve_extender(objs: &[Value], config_map: &str, e: &Extender) -> Result<Target, String> {
    let url = parse_url(&e.url_prefix)?;
    if is_loopback(&url.host) {
        let (workload, _, template) = workloads(objs)
            .into_iter()
            .find(|(_, _, t)| {
                t["spec"]["volumes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|v| v["configMap"]["name"] == config_map)
            })
            .ok_or_else(|| format!("no pod mounts the scheduler configuration {config_map}"))?;
        let mut found = Vec::new();
        for c in running(&template["spec"]) {
            for (flag, addr) in listeners(c) {
                if addr.port() == url.port {
                    found.push((c.clone(), flag, addr));
                }
            }
        }
        let [(container, flag, addr)] = <[_; 1]>::try_from(found).map_err(|f| {
            format!(
                "{}: {} listeners on port {} in pod of {}",
                e.url_prefix,
                f.len(),
                url.port,
                name_of(workload)
            )
        })?;
        if !addr.ip().is_loopback() {
            return Err(format!(
                "{}: container {} listens on {addr} ({flag}): other pods could call the extender's bind; bind it to loopback",
                e.url_prefix, container["name"]
            ));
        }
        if flag != "--extender-listen" {
            return Err(format!(
                "{}: served by {flag}, which also serves the API; use --extender-listen",
                e.url_prefix
            ));
        }
        return Ok(Target { container, flag });
    }
    // A Service DNS name: NAME.NAMESPACE[.svc[.cluster.local]].
    let mut parts = url.host.split('.');
    let svc_name = parts.next().unwrap_or_default();
    let svc_ns = parts.next().unwrap_or("default");
    let svc = kind_is(objs, "Service")
        .find(|s| name_of(s) == svc_name && ns_of(s) == svc_ns)
        .ok_or_else(|| format!("{}: no Service {svc_ns}/{svc_name}", e.url_prefix))?;
    let port = svc["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["port"].as_u64() == Some(u64::from(url.port)))
        .ok_or_else(|| {
            format!(
                "{}: Service {svc_name} has no port {}",
                e.url_prefix, url.port
            )
        })?;
    let target_port = port["targetPort"].clone();
    let selector = svc["spec"]["selector"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let backends: Vec<_> = workloads(objs)
        .into_iter()
        .filter(|(w, _, t)| {
            ns_of(w) == svc_ns
                && selector
                    .iter()
                    .all(|(k, v)| &t["metadata"]["labels"][k] == v)
        })
        .collect();
    let ready: u64 = backends.iter().map(|(_, r, _)| r).sum();
    if ready > 1 {
        return Err(format!(
            "{}: Service {svc_name} has more than one ready backend ({ready} replicas): one gang's binds would be split across extenders that each hold only their own assumptions",
            e.url_prefix
        ));
    }
    for (_, _, t) in backends {
        for c in running(&t["spec"]) {
            let port_no = c["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|p| match &target_port {
                    Value::String(name) => p["name"] == *name,
                    Value::Number(n) => p["containerPort"].as_u64() == n.as_u64(),
                    _ => p["containerPort"].as_u64() == Some(u64::from(url.port)),
                })
                .and_then(|p| p["containerPort"].as_u64());
            if let Some(port_no) = port_no {
                let (flag, _) = listeners(c)
                    .into_iter()
                    .find(|(_, a)| u64::from(a.port()) == port_no)
                    .ok_or_else(|| {
                        format!(
                            "{}: containerPort {port_no} of {} has no listener",
                            e.url_prefix, c["name"]
                        )
                    })?;
                return Ok(Target {
                    container: c.clone(),
                    flag,
                });
            }
        }
    }
    Err(format!(
        "{}: Service {svc_name} port {} reaches no container",
        e.url_prefix, url.port
    ))
}

/// Every extender of the install resolves, or the problems found.
fn check_extenders(objs: &[Value]) -> Result<Vec<(Extender, Target)>, Vec<String>> {
    let mut ok = Vec::new();
    let mut problems = Vec::new();
    let all = extenders(objs);
    if all.is_empty() {
        problems.push("no KubeSchedulerConfiguration with an extender is rendered".to_owned());
    }
    for (cm, e) in all {
        match resolve_extender(objs, &cm, &e) {
            Ok(t) => ok.push((e, t)),
            Err(p) => problems.push(p),
        }
    }
    if problems.is_empty() {
        Ok(ok)
    } else {
        Err(problems)
    }
}

/// The entries on one URL as one extender: its filter (and the filter
/// entry's `nodeCacheCapable`) from the entry that has it, its bind from
/// the one that binds (the shipped configuration splits them, for their
/// timeouts).
fn merged(resolved: Vec<(Extender, Target)>) -> Vec<(Extender, Target)> {
    let mut out: Vec<(Extender, Target)> = Vec::new();
    for (e, t) in resolved {
        match out.iter_mut().find(|(m, _)| m.url_prefix == e.url_prefix) {
            Some((m, _)) => {
                if m.filter.is_empty() && !e.filter.is_empty() {
                    m.filter = e.filter.clone();
                    m.node_cache_capable = e.node_cache_capable;
                }
                if m.bind.is_none() {
                    m.bind = e.bind.clone();
                }
            }
            None => out.push((e, t)),
        }
    }
    out
}

// === running the binary ===

/// The binary, killed when dropped; its stderr is kept for failures.
struct Proc {
    child: Child,
    log: PathBuf,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// The file a container reads at `path` from a mounted ConfigMap of the
/// rendered install (volumeMount → pod volume → ConfigMap data), written
/// under `dir`; `None` when no ConfigMap volume is mounted there.
fn mounted_file(container: &Value, path: &str, dir: &Path) -> Option<PathBuf> {
    let objs = rendered()?;
    let (mount_dir, key) = path.rsplit_once('/')?;
    let mount = container["volumeMounts"]
        .as_array()?
        .iter()
        .find(|m| m["mountPath"].as_str().map(|p| p.trim_end_matches('/')) == Some(mount_dir))?;
    let template = workloads(objs)
        .into_iter()
        .map(|(_, _, t)| t)
        .find(|t| running(&t["spec"]).any(|c| c == container))?;
    let volume = template["spec"]["volumes"]
        .as_array()?
        .iter()
        .find(|v| v["name"] == mount["name"])?;
    let cm_name = volume["configMap"]["name"].as_str()?;
    let cm = kind_is(objs, "ConfigMap").find(|c| name_of(c) == cm_name)?;
    let text = cm["data"][key].as_str()?;
    let file = dir.join(format!("{key}.{}", std::process::id()));
    std::fs::write(&file, text).ok()?;
    Some(file)
}

/// Starts the binary with `container`'s exact args plus `extra`; an arg
/// naming a file of a mounted ConfigMap (`--scheduler-config=...`) reads
/// the rendered ConfigMap's copy of it.
fn start(container: &Value, extra: &[String], dir: &Path) -> Proc {
    let args: Vec<String> = container["args"]
        .as_array()
        .expect("container has args")
        .iter()
        .map(|a| a.as_str().expect("arg is a string").to_owned())
        .map(|a| match a.split_once('=') {
            Some((flag, path)) if flag == "--scheduler-config" => {
                let file = mounted_file(container, path, dir)
                    .unwrap_or_else(|| panic!("{a}: no mounted ConfigMap holds it"));
                format!("{flag}={}", file.display())
            }
            _ => a,
        })
        .collect();
    assert!(
        container["command"].is_null(),
        "the image's entrypoint is the binary; a command would replace it"
    );
    let log = dir.join(format!(
        "{}-{}.log",
        container["name"].as_str().unwrap_or("c"),
        std::process::id()
    ));
    let child = Command::new(env!("CARGO_BIN_EXE_kruntimes-scheduler"))
        .args(&args)
        .args(extra)
        .env("RUST_LOG", "info")
        .env(
            "POD_NAME",
            format!("{}-0", container["name"].as_str().unwrap_or("c")),
        )
        .env("POD_NAMESPACE", "kruntimes-system")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("the binary starts");
    Proc { child, log }
}

/// A minimal HTTP/1.1 call over a plain TCP connection.
async fn http(method: &str, url: &str, body: &str) -> Result<(u16, String), String> {
    http_with(method, url, body, &[]).await
}

/// [`http`] with extra headers.
async fn http_with(
    method: &str,
    url: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> Result<(u16, String), String> {
    let u = parse_url(url)?;
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    let mut s = tokio::net::TcpStream::connect((u.host.as_str(), u.port))
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    let req = format!(
        "{method} {} HTTP/1.1\r\nHost: {}\r\n{extra}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        if u.path.is_empty() { "/" } else { &u.path },
        u.host,
        body.len()
    );
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.map_err(|e| e.to_string())?;
    parse_response(&buf)
}

fn parse_response(buf: &[u8]) -> Result<(u16, String), String> {
    let text = String::from_utf8_lossy(buf);
    let (head, body) = text.split_once("\r\n\r\n").ok_or("no header end")?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or("no status")?;
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        let mut out = String::new();
        let mut rest = body;
        while let Some((size, tail)) = rest.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).map_err(|e| e.to_string())?;
            if n == 0 {
                break;
            }
            out.push_str(&tail[..n]);
            rest = &tail[n + 2..];
        }
        out
    } else {
        body.to_owned()
    };
    Ok((status, body))
}

/// Polls `url` until it answers 200 or `timeout` passes.
async fn wait_ok(url: &str, proc: &Proc, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok((200, _)) = http("GET", url, "").await {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{url} not ready after {timeout:?}; log:\n{}",
            proc.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The health URL of a container (its `--health-listen`).
fn health_url(container: &Value) -> String {
    let (_, addr) = listeners(container)
        .into_iter()
        .find(|(f, _)| f == "--health-listen")
        .expect("the container has a health listener the kubelet can reach");
    format!("http://127.0.0.1:{}/readyz", addr.port())
}

/// Tests that bind the manifests' fixed ports run one at a time.
static PORTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("krs-deploy-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A small cluster: two nodes and one pending pod of the second scheduler.
fn extender_state() -> Vec<Value> {
    vec![
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}),
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n2", "labels": {"kubernetes.io/hostname": "n2"}},
            "status": {"allocatable": {"cpu": "1", "memory": "1Gi", "pods": "110"}}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml", "uid": "p-uid"},
            "spec": {"schedulerName": "kruntimes-scheduler",
                "containers": [{"name": "c", "image": "app", "resources": {"requests": {"cpu": "2"}}}]},
            "status": {"phase": "Pending"}}),
    ]
}

/// kube-scheduler's filter and bind calls for pod ml/p, as the extender
/// config says to make them; returns the node bound.
async fn filter_and_bind(e: &Extender, proc: &Proc, uid: &str) -> String {
    let pod = json!({"metadata": {"name": "p", "namespace": "ml", "uid": uid},
        "spec": {"schedulerName": "kruntimes-scheduler",
            "containers": [{"name": "c", "image": "app", "resources": {"requests": {"cpu": "2"}}}]}});
    let args = if e.node_cache_capable {
        json!({"Pod": pod, "NodeNames": ["n1", "n2"]})
    } else {
        json!({"Pod": pod, "Nodes": {"items": [
            {"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}},
            {"metadata": {"name": "n2"}, "status": {"allocatable": {"cpu": "1", "memory": "1Gi", "pods": "110"}}}]}})
    };
    let url = format!("{}/{}", e.url_prefix, e.filter);
    let (status, body) = http("POST", &url, &args.to_string())
        .await
        .unwrap_or_else(|err| panic!("filter: {err}; log:\n{}", proc.log()));
    assert_eq!(status, 200, "{url}: {body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    let passed: Vec<String> = if e.node_cache_capable {
        serde_json::from_value(v["NodeNames"].clone()).unwrap()
    } else {
        v["Nodes"]["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| name_of(n).to_owned())
            .collect()
    };
    assert_eq!(passed, ["n1"], "filter: {body}");
    let reason = v["FailedNodes"]["n2"]
        .as_str()
        .or(v["FailedAndUnresolvableNodes"]["n2"].as_str());
    assert!(reason.is_some_and(|r| r.contains("cpu")), "{body}");
    let bind = e.bind.as_deref().expect("the extender binds");
    let url = format!("{}/{bind}", e.url_prefix);
    let args = json!({"PodName": "p", "PodNamespace": "ml", "PodUID": uid, "Node": "n1"});
    let (status, body) = http("POST", &url, &args.to_string())
        .await
        .unwrap_or_else(|err| panic!("bind: {err}; log:\n{}", proc.log()));
    assert_eq!(status, 200, "{url}: {body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert!(
        v["Error"].as_str().unwrap_or_default().is_empty(),
        "bind: {body}"
    );
    "n1".into()
}

// === (a) extenders ===

#[tokio::test]
async fn every_extender_resolves_to_a_loopback_listener_that_filters_and_binds() {
    let Some(objs) = rendered() else { return };
    let resolved = check_extenders(objs).unwrap_or_else(|p| panic!("{}", p.join("\n")));
    let _ports = PORTS.lock().await;
    for (e, target) in merged(resolved) {
        assert_eq!(target.flag, "--extender-listen");
        let url = parse_url(&e.url_prefix).unwrap();
        assert_eq!(
            url.scheme, "http",
            "the extender is called over loopback HTTP"
        );
        let dir = scratch("extender");
        let state = dir.join("state.json");
        std::fs::write(
            &state,
            json!({"apiVersion": "v1", "kind": "List", "items": extender_state()}).to_string(),
        )
        .unwrap();
        let proc = start(
            &target.container,
            &["--state".into(), state.display().to_string()],
            &dir,
        );
        wait_ok(
            &health_url(&target.container),
            &proc,
            Duration::from_secs(20),
        )
        .await;
        assert_eq!(filter_and_bind(&e, &proc, "p-uid").await, "n1");
        // The store shows the binding the extender made.
        let (_, api) = listeners(&target.container)
            .into_iter()
            .find(|(f, _)| f == "--listen")
            .expect("main listener");
        let (status, body) = http(
            "GET",
            &format!(
                "http://127.0.0.1:{}/v1/objects?kind=Pod&namespace=ml&name=p",
                api.port()
            ),
            "",
        )
        .await
        .unwrap();
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["items"][0]["spec"]["nodeName"], "n1", "{body}");
        // The extender verbs are served on the extender's listener only.
        let (status, _) = http(
            "POST",
            &format!("http://127.0.0.1:{}/scheduler/bind", api.port()),
            "{}",
        )
        .await
        .unwrap();
        assert_eq!(status, 404, "bind must not be served on --listen");
    }
}

// === kube-scheduler's node sampling ===

/// kube-scheduler's `numFeasibleNodesToFind` (pkg/scheduler/schedule_one.go):
/// below 100 nodes every node; else the profile's percentage, or unset
/// `max(50 - nodes/125, 5)` percent; at least 100 nodes.
fn num_feasible_nodes_to_find(percentage: Option<i64>, all: usize) -> usize {
    let all = all as i64;
    if all < 100 {
        return all as usize;
    }
    let mut p = percentage.unwrap_or(0);
    if p == 0 {
        p = (50 - all / 125).max(5);
    }
    (all * p / 100).max(100) as usize
}

/// What kube-scheduler knows while it drives the extender: its node list,
/// its own view of free cpu (its NodeResourcesFit), and the rotating start
/// index of `findNodesThatPassFilters`.
struct SamplingScheduler {
    nodes: Vec<String>,
    free: std::collections::HashMap<String, i64>,
    next_start: usize,
    percentage: Option<i64>,
}

impl SamplingScheduler {
    /// The nodes one cycle sends to the extender: from `next_start`, the
    /// first `numFeasibleNodesToFind` nodes its own filters pass; the start
    /// index then moves past every node it processed, as upstream's
    /// `findNodesThatFitPod` advances `nextStartNodeIndex` by
    /// `len(feasibleNodes) + diagnosis.NodeToStatus.Len()` (the nodes that
    /// passed and those that failed, before the extender is called).
    /// Upstream filters in parallel chunks, so it may process a few nodes
    /// past the last one it keeps and send them in the order found; this
    /// driver is sequential and sends them in rotation order.
    fn sample(&mut self, cpu: i64) -> Vec<String> {
        let n = self.nodes.len();
        let want = num_feasible_nodes_to_find(self.percentage, n);
        let mut out = Vec::new();
        let mut processed = 0;
        for i in 0..n {
            let node = &self.nodes[(self.next_start + i) % n];
            processed += 1;
            if self.free[node] >= cpu {
                out.push(node.clone());
                if out.len() == want {
                    break;
                }
            }
        }
        self.next_start = (self.next_start + processed) % n;
        out
    }
}

const SAMPLED_NODES: usize = 300;
const RACK_SIZE: usize = 10;
const GANGS: usize = 40;
const GANG_SIZE: usize = 4;

/// 300 nodes (cpu 4) in racks of 10, and 40 gangs of 4 one-cpu pods, each
/// gang in one rack.
fn sampling_state() -> Vec<Value> {
    use kruntimes_scheduler::testkit::{node, pod, pod_group};
    let mut out = Vec::new();
    for i in 0..SAMPLED_NODES {
        out.push(
            node(&format!("n{i:03}"))
                .label(
                    "topology.kubernetes.io/rack",
                    &format!("r{:02}", i / RACK_SIZE),
                )
                .value(),
        );
    }
    for g in 0..GANGS {
        out.push(
            pod_group(&format!("g{g:02}"))
                .gang(GANG_SIZE as u32)
                .topology("topology.kubernetes.io/rack")
                .value(),
        );
        for m in 0..GANG_SIZE {
            out.push(
                pod(&format!("g{g:02}-{m}"))
                    .group(&format!("g{g:02}"))
                    .scheduler("kruntimes-scheduler")
                    .value(),
            );
        }
    }
    out
}

/// Drives the extender as kube-scheduler does: one pod per scheduling
/// cycle from a FIFO queue, its node sample sent to filter, prioritize when
/// more than one node passed, the best node assumed and bound in the
/// background (the binding cycle); a pod no node passed for, or whose bind
/// failed, goes back to the queue. Returns the scheduling cycles until
/// every pod was bound, and where each pod went.
async fn drive_with_sampling(
    e: &Extender,
    proc: &Proc,
    percentage: Option<i64>,
) -> (usize, std::collections::BTreeMap<String, String>) {
    let mut ks = SamplingScheduler {
        nodes: (0..SAMPLED_NODES).map(|i| format!("n{i:03}")).collect(),
        free: (0..SAMPLED_NODES)
            .map(|i| (format!("n{i:03}"), 4))
            .collect(),
        next_start: 0,
        percentage,
    };
    let mut queue: std::collections::VecDeque<String> = (0..GANGS)
        .flat_map(|g| (0..GANG_SIZE).map(move |m| format!("g{g:02}-{m}")))
        .collect();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, String, bool)>();
    let bind_url = format!("{}/{}", e.url_prefix, e.bind.as_deref().expect("binds"));
    let filter_url = format!("{}/{}", e.url_prefix, e.filter);
    let prioritize_url = format!("{}/prioritize", e.url_prefix);
    let mut bound = std::collections::BTreeMap::new();
    let mut in_flight = 0usize;
    let mut cycles = 0usize;
    let total = GANGS * GANG_SIZE;
    while bound.len() < total {
        assert!(
            cycles < 40 * total,
            "no convergence after {cycles} cycles ({} bound); log:\n{}",
            bound.len(),
            proc.log()
        );
        while let Ok((pod, node, ok)) = rx.try_recv() {
            in_flight -= 1;
            if ok {
                bound.insert(pod, node);
            } else {
                *ks.free.get_mut(&node).unwrap() += 1;
                queue.push_back(pod);
            }
        }
        let Some(name) = queue.pop_front() else {
            if in_flight == 0 {
                break;
            }
            let (pod, node, ok) = tokio::time::timeout(Duration::from_secs(60), rx.recv())
                .await
                .expect("a bind answers")
                .expect("binds report");
            in_flight -= 1;
            if ok {
                bound.insert(pod, node);
            } else {
                *ks.free.get_mut(&node).unwrap() += 1;
                queue.push_back(pod);
            }
            continue;
        };
        cycles += 1;
        let sample = ks.sample(1);
        let group = name.rsplit_once('-').unwrap().0.to_owned();
        let pod = json!({"metadata": {"name": name, "namespace": "ml", "uid": format!("{name}-uid")},
            "spec": {"schedulerName": "kruntimes-scheduler", "schedulingGroup": {"podGroupName": group},
                "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "1"}}}]}});
        let (status, body) = http(
            "POST",
            &filter_url,
            &json!({"Pod": pod, "NodeNames": sample}).to_string(),
        )
        .await
        .unwrap_or_else(|err| panic!("filter: {err}; log:\n{}", proc.log()));
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        let passed: Vec<String> =
            serde_json::from_value(v["NodeNames"].clone()).unwrap_or_default();
        if passed.is_empty() || !v["Error"].as_str().unwrap_or_default().is_empty() {
            queue.push_back(name);
            continue;
        }
        let node = if passed.len() == 1 {
            passed[0].clone()
        } else {
            let (status, body) = http(
                "POST",
                &prioritize_url,
                &json!({"Pod": pod, "NodeNames": passed}).to_string(),
            )
            .await
            .unwrap();
            assert_eq!(status, 200, "{body}");
            let scores: Vec<Value> = serde_json::from_str(&body).unwrap();
            let best = scores
                .iter()
                .map(|s| s["Score"].as_i64().unwrap_or(0))
                .max()
                .unwrap_or(0);
            // Ties: the first of the sample (kube-scheduler picks one at random).
            passed
                .iter()
                .find(|n| {
                    scores
                        .iter()
                        .any(|s| s["Host"] == n.as_str() && s["Score"].as_i64() == Some(best))
                })
                .cloned()
                .unwrap_or_else(|| passed[0].clone())
        };
        *ks.free.get_mut(&node).unwrap() -= 1;
        in_flight += 1;
        let (tx, url) = (tx.clone(), bind_url.clone());
        tokio::spawn(async move {
            let args = json!({"PodName": name, "PodNamespace": "ml",
                "PodUID": format!("{name}-uid"), "Node": node});
            let ok = match http("POST", &url, &args.to_string()).await {
                Ok((200, body)) => serde_json::from_str::<Value>(&body)
                    .is_ok_and(|v| v["Error"].as_str().unwrap_or_default().is_empty()),
                _ => false,
            };
            let _ = tx.send((name, node, ok));
        });
    }
    (cycles, bound)
}

/// Every gang was placed in one rack.
fn assert_gangs_in_one_rack(bound: &std::collections::BTreeMap<String, String>) {
    assert_eq!(bound.len(), GANGS * GANG_SIZE);
    for g in 0..GANGS {
        let racks: BTreeSet<usize> = (0..GANG_SIZE)
            .map(|m| {
                let node = &bound[&format!("g{g:02}-{m}")];
                node[1..].parse::<usize>().unwrap() / RACK_SIZE
            })
            .collect();
        assert_eq!(racks.len(), 1, "gang g{g:02} spans racks {racks:?}");
    }
}

/// The shipped profile filters every node; an operator's profile that
/// leaves `percentageOfNodesToScore` unset makes kube-scheduler send a
/// rotating sample (at 300 nodes: 48 percent, 144 nodes). Driven both ways
/// through the shipped extender container, 40 gangs of 4 converge within
/// 1.5 times the scheduling cycles: a group with no member placed yet
/// chooses its domain among the nodes it was offered, the one the sample
/// ends inside, which the next cycle's sample starts in.
#[tokio::test]
async fn gangs_converge_under_kube_schedulers_node_sampling() {
    let Some(objs) = rendered() else { return };
    assert_eq!(
        num_feasible_nodes_to_find(None, SAMPLED_NODES),
        144,
        "kube-scheduler's sample at 300 nodes"
    );
    assert_eq!(num_feasible_nodes_to_find(None, 5000), 500);
    assert_eq!(num_feasible_nodes_to_find(None, 150), 100);
    assert_eq!(num_feasible_nodes_to_find(Some(100), 1000), 1000);
    let shipped = scheduler_configuration(objs)["profiles"][0]["percentageOfNodesToScore"].as_i64();
    assert_eq!(shipped, Some(100));
    let resolved = check_extenders(objs).unwrap_or_else(|p| panic!("{}", p.join("\n")));
    let (e, target) = merged(resolved).into_iter().next().expect("an extender");
    let _ports = PORTS.lock().await;
    let mut cycles = Vec::new();
    for percentage in [shipped, None] {
        let dir = scratch("sampling");
        let state = dir.join("state.json");
        std::fs::write(
            &state,
            json!({"apiVersion": "v1", "kind": "List", "items": sampling_state()}).to_string(),
        )
        .unwrap();
        let proc = start(
            &target.container,
            &["--state".into(), state.display().to_string()],
            &dir,
        );
        wait_ok(
            &health_url(&target.container),
            &proc,
            Duration::from_secs(20),
        )
        .await;
        let (n, bound) = drive_with_sampling(&e, &proc, percentage).await;
        assert_gangs_in_one_rack(&bound);
        cycles.push(n);
    }
    let (every, sampled) = (cycles[0], cycles[1]);
    eprintln!(
        "scheduling cycles for {GANGS} gangs of {GANG_SIZE} at {SAMPLED_NODES} nodes: every node {every}, sampled {sampled}"
    );
    // Every node: one cycle per pod. Sampled: kube-scheduler starts each
    // cycle's sample where the last one stopped, so (nodes in name order,
    // racks contiguous) a gang's members in three consecutive cycles are
    // offered [s, s+144), [s+144, s+288) and [s+288, s+432) mod 300, that
    // is [s-12, s+132). A rack of 10 meeting the second and third windows
    // spans s+288 (where it misses the first) or s+131..s+144 (14 nodes):
    // none meets all three, so at least one member per gang fails once, a
    // floor of 200 cycles; a retry passes only if its cycle's window meets
    // the rack (12 or 13 of the 25 windows of the rotation). A gang's first
    // member plans the rack its sample ends inside, where the second
    // member's sample starts: 229 cycles (the second member fails 16
    // times, the third 43, the fourth 10). By best fit alone (the fullest
    // rack offered, which the next window misses) it was 285 (the second
    // member failed 82 times, the fourth 43); dropping the plan when a
    // member's sample missed it, 3,478.
    assert!(
        2 * sampled <= 3 * every,
        "sampling must not multiply the cycles: every node {every}, sampled {sampled}"
    );
}

// === (c) what would break the extender ===

/// Replaces `from` with `to` in every string of the rendered objects.
fn edit(objs: &[Value], from: &str, to: &str) -> Vec<Value> {
    fn walk(v: &mut Value, from: &str, to: &str) {
        match v {
            Value::String(s) => *s = s.replace(from, to),
            Value::Array(a) => a.iter_mut().for_each(|v| walk(v, from, to)),
            Value::Object(o) => o.values_mut().for_each(|v| walk(v, from, to)),
            _ => {}
        }
    }
    let mut out = objs.to_vec();
    out.iter_mut().for_each(|v| walk(v, from, to));
    out
}

#[test]
fn an_extender_behind_a_service_with_several_backends_is_refused() {
    let Some(objs) = rendered() else { return };
    check_extenders(objs).unwrap_or_else(|p| panic!("{}", p.join("\n")));
    // The old install: kube-scheduler called a Service in front of two
    // replicas that each keep their own gang holds.
    let mut broken = edit(
        objs,
        "http://127.0.0.1:8888/scheduler",
        "http://kruntimes-scheduler.kruntimes-system.svc:443/scheduler",
    );
    // Even with the Service pointing at a container port that exists.
    let err = check_extenders(&broken).expect_err("a Service with two backends must be refused");
    assert!(
        err.iter()
            .any(|e| e.contains("more than one ready backend")),
        "{err:?}"
    );
    // A Service that does not expose the port is refused too.
    broken = edit(
        objs,
        "http://127.0.0.1:8888/scheduler",
        "http://kruntimes-scheduler.kruntimes-system.svc:8080/scheduler",
    );
    let err = check_extenders(&broken).expect_err("no such Service port");
    assert!(
        err.iter().any(|e| e.contains("has no port 8080")),
        "{err:?}"
    );
}

#[test]
fn an_extender_listening_beyond_loopback_is_refused() {
    let Some(objs) = rendered() else { return };
    let broken = edit(
        objs,
        "--extender-listen=127.0.0.1:8888",
        "--extender-listen=0.0.0.0:8888",
    );
    let err = check_extenders(&broken).expect_err("a non-loopback extender must be refused");
    assert!(
        err.iter().any(|e| e.contains("other pods could call")),
        "{err:?}"
    );
    let broken = edit(
        objs,
        "--extender-listen=127.0.0.1:8888",
        "--extender-listen=127.0.0.1:9999",
    );
    let err = check_extenders(&broken).expect_err("nothing listens on the URL's port");
    assert!(err.iter().any(|e| e.contains("0 listeners")), "{err:?}");
}

#[test]
fn the_install_has_the_promised_shape() {
    let Some(objs) = rendered() else { return };
    let kinds: BTreeSet<String> = objs
        .iter()
        .map(|o| format!("{}/{}", o["kind"].as_str().unwrap(), name_of(o)))
        .collect();
    // No CRDs in the default install: kruntimes owns Run and Runtime.
    assert!(
        !objs.iter().any(|o| o["kind"] == "CustomResourceDefinition"),
        "{kinds:?}"
    );
    // The webhook configurations ship, each webhook Ignore and without a
    // caBundle until the service patches in its CA (no window in which a
    // write fails because the CA is not there yet).
    let shipped: Vec<&Value> = objs
        .iter()
        .filter(|o| {
            matches!(
                o["kind"].as_str(),
                Some("ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration")
            )
        })
        .collect();
    assert_eq!(shipped.len(), 2, "{kinds:?}");
    for cfg in &shipped {
        for w in cfg["webhooks"].as_array().unwrap() {
            assert_eq!(w["failurePolicy"], "Ignore", "{}", w["name"]);
            assert!(w["clientConfig"].get("caBundle").is_none(), "{}", w["name"]);
        }
    }
    // No role of the install may create webhook configurations, nor
    // anything else that registers admission (a mutating webhook owns the
    // cluster); the service's grants on them name them.
    for role in objs
        .iter()
        .filter(|o| matches!(o["kind"].as_str(), Some("ClusterRole" | "Role")))
    {
        for r in role["rules"].as_array().into_iter().flatten() {
            let on_webhooks = strings(&r["resources"]).iter().any(|res| {
                res == "*"
                    || res == "validatingwebhookconfigurations"
                    || res == "mutatingwebhookconfigurations"
            }) && strings(&r["apiGroups"])
                .iter()
                .any(|g| g == "*" || g == "admissionregistration.k8s.io");
            if !on_webhooks {
                continue;
            }
            let verbs = strings(&r["verbs"]);
            assert!(
                !verbs.iter().any(|v| v == "create" || v == "*"),
                "{}: may create webhook configurations",
                name_of(role)
            );
            assert_eq!(
                strings(&r["resourceNames"]),
                ["kruntimes-scheduler"],
                "{}: grants on webhook configurations name them",
                name_of(role)
            );
        }
    }
    // The second scheduler: two replicas, each with its own extender,
    // spread, protected, system-critical, and rolled by config changes.
    let sched = kind_is(objs, "Deployment")
        .find(|d| name_of(d) == "kruntimes-kube-scheduler")
        .expect("second scheduler");
    assert_eq!(sched["spec"]["replicas"], 2);
    let spec = &sched["spec"]["template"]["spec"];
    assert_eq!(spec["priorityClassName"], "system-cluster-critical");
    assert!(spec["affinity"]["podAntiAffinity"].is_object());
    let names: Vec<&str> = running(spec).filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(names, ["extender", "kube-scheduler"]);
    // The extender is a native sidecar: kube-scheduler starts only after
    // its startup probe (readiness: caches synced) passes, and it stops
    // after kube-scheduler.
    let ext = &spec["initContainers"][0];
    assert_eq!(ext["name"], "extender");
    assert_eq!(ext["restartPolicy"], "Always");
    assert_eq!(ext["startupProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(ext["startupProbe"]["httpGet"]["port"], "health");
    // The shipped profile: every node filtered (no sampling), one gang
    // authority, and two extender entries on one URL: the serial verbs
    // with a short timeout, bind alone with the long one.
    let cfg = scheduler_configuration(objs);
    let profile = &cfg["profiles"][0];
    assert_eq!(profile["schedulerName"], "kruntimes-scheduler");
    assert_eq!(profile["percentageOfNodesToScore"], 100);
    assert!(
        profile["plugins"]["multiPoint"]["disabled"]
            .as_array()
            .is_some_and(|d| d.iter().any(|p| p["name"] == "GangScheduling")),
        "{profile}"
    );
    let entries = cfg["extenders"].as_array().expect("extenders");
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0]["urlPrefix"], entries[1]["urlPrefix"]);
    assert!(entries[0]["bindVerb"].is_null() && entries[0]["filterVerb"] == "filter");
    assert_eq!(entries[0]["httpTimeout"], "5s");
    assert_eq!(entries[1]["bindVerb"], "bind");
    assert!(
        entries[1]["filterVerb"].is_null()
            && entries[1]["prioritizeVerb"].is_null()
            && entries[1]["preemptVerb"].is_null()
    );
    assert_eq!(entries[1]["httpTimeout"], "30s");
    let cm = spec["volumes"][0]["configMap"]["name"].as_str().unwrap();
    assert!(
        cm.starts_with("kruntimes-kube-scheduler-config-")
            && cm.len() > "kruntimes-kube-scheduler-config-".len(),
        "the configuration ConfigMap carries a content hash: {cm}"
    );
    assert!(kind_is(objs, "PodDisruptionBudget").any(|p| name_of(p) == "kruntimes-kube-scheduler"));
    // The image is set in one place.
    for c in workloads(objs)
        .iter()
        .flat_map(|(_, _, t)| running(&t["spec"]))
        .filter(|c| c["name"] != "kube-scheduler")
    {
        assert_eq!(c["image"], "kruntimes/kruntimes-scheduler:0.1.0", "{c}");
    }
    // The containers' args go to the image's entrypoint, the binary, run
    // as the user the pods' securityContext names.
    let dockerfile =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Dockerfile")).unwrap();
    assert!(
        dockerfile
            .lines()
            .any(|l| l.starts_with("ENTRYPOINT") && l.contains("/kruntimes-scheduler\"")),
        "the image's entrypoint is the binary"
    );
    assert!(dockerfile.lines().any(|l| l.trim() == "USER 65532:65532"));
    // The image build: a dependency layer before the sources, the revision
    // argument after it (a new revision does not rebuild dependencies),
    // and the release profile with LTO and stripped symbols.
    let at = |needle: &str| {
        dockerfile
            .find(needle)
            .unwrap_or_else(|| panic!("Dockerfile has no {needle:?}"))
    };
    assert!(at("COPY Cargo.toml Cargo.lock") < at("COPY src ./src"));
    assert!(at("COPY src ./src") < at("ARG KRUNTIMES_REVISION"));
    let cargo =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    let release = cargo
        .split("[profile.release]")
        .nth(1)
        .and_then(|r| r.split("\n[").next())
        .expect("[profile.release]");
    assert!(
        release.contains("lto = \"fat\"") && release.contains("strip = true"),
        "{release}"
    );
    assert_eq!(spec["securityContext"]["runAsUser"], 65532);
    // The webhook Deployment: every replica serves the webhooks.
    let web = kind_is(objs, "Deployment")
        .find(|d| name_of(d) == "kruntimes-scheduler")
        .expect("webhook deployment");
    assert_eq!(web["spec"]["replicas"], 2);
}

// === (d) RBAC ===

/// One RBAC rule of a rendered Role or ClusterRole.
#[derive(Debug, Clone)]
struct Rule {
    /// `Kind/name` of the role.
    role: String,
    /// Namespace the rule applies in (`None`: every namespace).
    namespace: Option<String>,
    groups: Vec<String>,
    resources: Vec<String>,
    verbs: Vec<String>,
    names: Vec<String>,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_owned))
        .collect()
}

/// The rules granted to a ServiceAccount by rendered bindings to rendered
/// roles (bindings to built-in roles such as `system:kube-scheduler` are
/// the other container's and are ignored).
fn rules_of(objs: &[Value], ns: &str, sa: &str) -> Vec<Rule> {
    let mut out = Vec::new();
    for b in objs.iter().filter(|o| {
        matches!(
            o["kind"].as_str(),
            Some("ClusterRoleBinding" | "RoleBinding")
        )
    }) {
        let bound = b["subjects"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|s| s["kind"] == "ServiceAccount" && s["name"] == sa && s["namespace"] == ns);
        if !bound {
            continue;
        }
        let role_kind = b["roleRef"]["kind"].as_str().unwrap();
        let role_name = b["roleRef"]["name"].as_str().unwrap();
        let binding_ns = (b["kind"] == "RoleBinding").then(|| ns_of(b).to_owned());
        let Some(role) = objs.iter().find(|o| {
            o["kind"] == role_kind
                && name_of(o) == role_name
                && (role_kind == "ClusterRole" || Some(ns_of(o).to_owned()) == binding_ns)
        }) else {
            continue;
        };
        for r in role["rules"].as_array().into_iter().flatten() {
            out.push(Rule {
                role: format!("{role_kind}/{role_name}"),
                namespace: binding_ns.clone(),
                groups: strings(&r["apiGroups"]),
                resources: strings(&r["resources"]),
                verbs: strings(&r["verbs"]),
                names: strings(&r["resourceNames"]),
            });
        }
    }
    out
}

fn full_resource(r: &Request) -> String {
    if r.subresource.is_empty() {
        r.resource.clone()
    } else {
        format!("{}/{}", r.resource, r.subresource)
    }
}

fn allows(rule: &Rule, r: &Request) -> bool {
    let any = |list: &[String], v: &str| list.iter().any(|x| x == "*" || x == v);
    rule.namespace.as_deref().is_none_or(|ns| ns == r.namespace)
        && any(&rule.groups, &r.group)
        && any(&rule.resources, &full_resource(r))
        && any(&rule.verbs, &r.verb)
        && (rule.names.is_empty() || rule.names.contains(&r.name))
}

/// Checks recorded requests against the rules: every request must be
/// allowed, and every granted (role, group, resource, verb) must be used by
/// a request or explained in [`UNUSED_BUT_NEEDED`].
fn check_rbac(rules: &[Rule], requests: &[Request], who: &str) {
    let denied: BTreeSet<String> = requests
        .iter()
        .filter(|r| !rules.iter().any(|rule| allows(rule, r)))
        .map(|r| format!("{r:?}"))
        .collect();
    assert!(
        denied.is_empty(),
        "{who}: requests the rendered RBAC does not allow:\n{}",
        denied.into_iter().collect::<Vec<_>>().join("\n")
    );
    let mut unused = BTreeSet::new();
    for rule in rules {
        for g in &rule.groups {
            for res in &rule.resources {
                for v in &rule.verbs {
                    let used = requests.iter().any(|r| {
                        &r.group == g && &full_resource(r) == res && &r.verb == v && allows(rule, r)
                    });
                    if !used {
                        unused.insert(format!("{} {g}/{res} {v}", rule.role));
                    }
                }
            }
        }
    }
    let unexplained: Vec<&String> = unused
        .iter()
        .filter(|u| !UNUSED_BUT_NEEDED.iter().any(|(g, _)| g == u))
        .collect();
    assert!(
        unexplained.is_empty(),
        "{who}: grants no scenario used and none explains (remove them or list why in UNUSED_BUT_NEEDED):\n{unexplained:#?}"
    );
}

fn kubeconfig(api: &FakeApi, dir: &Path) -> PathBuf {
    let path = dir.join("kubeconfig");
    let mut f = std::fs::File::create(&path).unwrap();
    write!(
        f,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {}\nusers:\n- name: test\n  user: {{}}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    user: test\ncurrent-context: test\n",
        api.url
    )
    .unwrap();
    path
}

fn container_of<'a>(objs: &'a [Value], deployment: &str, container: &str) -> (&'a Value, String) {
    let d = kind_is(objs, "Deployment")
        .find(|d| name_of(d) == deployment)
        .unwrap_or_else(|| panic!("Deployment {deployment}"));
    let spec = &d["spec"]["template"]["spec"];
    let c = running(spec)
        .find(|c| c["name"] == container)
        .unwrap_or_else(|| panic!("container {container}"));
    (c, spec["serviceAccountName"].as_str().unwrap().to_owned())
}

/// Grants no scenario exercises, each with why it is granted.
const UNUSED_BUT_NEEDED: &[(&str, &str)] = &[
    (
        "Role/kruntimes-scheduler-webhook-certs /secrets update",
        "renewal before expiry (tests/it/webhook_certs.rs renews on short-lived certificates)",
    ),
    (
        "Role/kruntimes-kube-scheduler-lease coordination.k8s.io/leases create",
        "kube-scheduler's own leader election: the other container of the pod, same ServiceAccount",
    ),
    (
        "Role/kruntimes-kube-scheduler-lease coordination.k8s.io/leases get",
        "kube-scheduler's own leader election",
    ),
    (
        "Role/kruntimes-kube-scheduler-lease coordination.k8s.io/leases update",
        "kube-scheduler's own leader election",
    ),
    (
        "ClusterRole/kruntimes-scheduler-extender events.k8s.io/events create",
        "a gang whose --gang-wait expires records GangWaitExpired (tests/it/gang.rs drives it on paused time)",
    ),
    (
        "ClusterRole/kruntimes-scheduler-extender events.k8s.io/events patch",
        "a repeated event is patched (series) rather than created again",
    ),
    (
        "ClusterRole/kruntimes-scheduler-extender /pods/eviction create",
        "an All group preempted across nodes has its members elsewhere evicted (tests/it/disruption.rs, cluster mode)",
    ),
    (
        "ClusterRole/kruntimes-scheduler-extender resource.k8s.io/resourceclaims/status patch",
        "a claim whose devices failed to bind, or not within --binding-timeout, is cleared (tests/it/binding.rs)",
    ),
    (
        "ClusterRole/kruntimes-scheduler-extender resource.k8s.io/resourceclaims get",
        "a bind passes the device gate only once a read of each gated claim shows the cache current (tests/it/cluster.rs)",
    ),
    (
        "ClusterRole/kruntimes-scheduler-extender scheduling.k8s.io/compositepodgroups/status patch",
        "a gang of gangs reaching quorum sets CompositePodGroupInitiallyScheduled (tests/it/gang.rs, cluster mode)",
    ),
    (
        "ClusterRole/kruntimes-scheduler events.k8s.io/events patch",
        "a repeated Pending event is patched (series) rather than created again",
    ),
];

#[tokio::test]
async fn the_extender_uses_only_what_its_rbac_grants() {
    let Some(objs) = rendered() else { return };
    let (container, sa) = container_of(objs, "kruntimes-kube-scheduler", "extender");
    let _ports = PORTS.lock().await;
    let api = FakeApi::start().await;
    let mut uids = std::collections::BTreeMap::new();
    for o in extender_state() {
        let res = match o["kind"].as_str().unwrap() {
            "Node" => Res::Nodes,
            "Pod" => Res::Pods,
            k => panic!("{k}"),
        };
        let stored = api.put(res, o);
        uids.insert(
            name_of(&stored).to_owned(),
            stored["metadata"]["uid"].as_str().unwrap().to_owned(),
        );
    }
    api.put(
        Res::PodGroups,
        json!({"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "ml"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 1}}}}),
    );
    let grouped = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "q", "namespace": "ml", "uid": "q-uid"},
        "spec": {"schedulerName": "kruntimes-scheduler", "schedulingGroup": {"podGroupName": "g"},
            "containers": [{"name": "c", "image": "app", "resources": {"requests": {"cpu": "1"}}}]},
        "status": {"phase": "Pending"}});
    let q_uid = api.put(Res::Pods, grouped)["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    let dir = scratch("rbac-extender");
    let kc = kubeconfig(&api, &dir);
    let proc = start(
        container,
        &["--kubeconfig".into(), kc.display().to_string()],
        &dir,
    );
    wait_ok(&health_url(container), &proc, Duration::from_secs(20)).await;
    let (e, _) = merged(check_extenders(objs).unwrap_or_else(|p| panic!("{}", p.join("\n"))))
        .into_iter()
        .next()
        .unwrap();
    filter_and_bind(&e, &proc, &uids["p"]).await;
    // A gang member: bind sets its group's condition through the API.
    let url = format!("{}/{}", e.url_prefix, e.bind.as_deref().unwrap());
    let (status, body) = http(
        "POST",
        &url,
        &json!({"PodName": "q", "PodNamespace": "ml", "PodUID": q_uid, "Node": "n1"}).to_string(),
    )
    .await
    .unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("\"Error\":\"\""),
        "{body}; log:\n{}",
        proc.log()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !api
        .inner
        .lock()
        .requests
        .iter()
        .any(|r| r.resource == "podgroups" && r.subresource == "status")
    {
        assert!(
            Instant::now() < deadline,
            "no PodGroup status write; log:\n{}",
            proc.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A scrape of the health listener's /metrics is authenticated and
    // authorized through the API.
    {
        let mut g = api.inner.lock();
        g.tokens.insert("prom".into(), "prometheus".into());
        g.grants.push(("prometheus".into(), "get /metrics".into()));
    }
    let metrics = health_url(container).replace("/readyz", "/metrics");
    let (status, _) = http("GET", &metrics, "").await.unwrap();
    assert_eq!(status, 401, "an anonymous scrape is refused");
    let (status, body) = http_with("GET", &metrics, "", &[("Authorization", "Bearer prom")])
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    // An operator asks the extender why a pod is pending, on its main
    // listener (kubectl port-forward in a cluster): the pod is read from
    // the API, the caller checked for `get pods`.
    {
        let mut g = api.inner.lock();
        g.tokens.insert("ops".into(), "ops".into());
        g.grants.push(("ops".into(), "get pods.".into()));
    }
    let (_, main) = listeners(container)
        .into_iter()
        .find(|(f, _)| f == "--listen")
        .expect("main listener");
    let explain = format!(
        "http://127.0.0.1:{}/v1/explain/pod?namespace=ml&name=q",
        main.port()
    );
    let (status, body) = http_with("GET", &explain, "", &[("Authorization", "Bearer ops")])
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}; log:\n{}", proc.log());
    assert!(body.contains("\"name\":\"q\""), "{body}");
    drop(proc);
    let requests = api.inner.lock().requests.clone();
    assert!(
        requests
            .iter()
            .any(|r| r.resource == "pods" && r.subresource == "binding"),
        "the extender bound through the API: {requests:?}"
    );
    check_rbac(
        &rules_of(objs, "kruntimes-system", &sa),
        &requests,
        "extender",
    );
}

// === (b) webhooks, and (d) for the Run scheduler and webhook Deployment ===

/// The admission fixture kube-apiserver would send to a webhook path.
fn review_for(path: &str) -> String {
    let file = match path {
        "/admission/mutate/runs" | "/admission/validate/runs" => "run-create.json",
        "/admission/validate/podgroups" => "podgroup-create.json",
        "/admission/validate/compositepodgroups" => "compositepodgroup-create.json",
        "/admission/validate/workloads" => "workload-create.json",
        "/admission/mutate/pods" => "pod-create.json",
        other => panic!("no fixture for webhook path {other}"),
    };
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/admission")
            .join(file),
    )
    .unwrap()
}

/// Resolves a webhook's `clientConfig.service` as the API server's network
/// would: the Service, its port, the targetPort, the containerPort of a pod
/// it selects, and the container listener bound there. Returns the
/// container and the local port to connect to.
fn resolve_webhook_service(objs: &[Value], service: &Value) -> (Value, u16) {
    let name = service["name"].as_str().unwrap();
    let ns = service["namespace"].as_str().unwrap();
    let port = service["port"].as_u64().unwrap_or(443);
    let svc = kind_is(objs, "Service")
        .find(|s| name_of(s) == name && ns_of(s) == ns)
        .unwrap_or_else(|| panic!("webhook names Service {ns}/{name}, which the install lacks"));
    let sp = svc["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["port"].as_u64() == Some(port))
        .unwrap_or_else(|| panic!("Service {name} has no port {port}"));
    let selector = svc["spec"]["selector"].as_object().unwrap();
    for (w, _, t) in workloads(objs) {
        if ns_of(w) != ns
            || !selector
                .iter()
                .all(|(k, v)| &t["metadata"]["labels"][k] == v)
        {
            continue;
        }
        for c in running(&t["spec"]) {
            let Some(cp) =
                c["ports"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|p| match &sp["targetPort"] {
                        Value::String(n) => p["name"] == *n,
                        Value::Number(n) => p["containerPort"].as_u64() == n.as_u64(),
                        _ => p["containerPort"].as_u64() == Some(port),
                    })
            else {
                continue;
            };
            let cport = cp["containerPort"].as_u64().unwrap();
            let (flag, addr) = listeners(c)
                .into_iter()
                .find(|(_, a)| u64::from(a.port()) == cport)
                .unwrap_or_else(|| {
                    panic!("containerPort {cport} of {} has no listener", c["name"])
                });
            assert_eq!(
                flag, "--listen",
                "the webhooks are served on the main listener"
            );
            assert!(
                !addr.ip().is_loopback(),
                "the API server reaches the webhook listener from outside the pod: {addr}"
            );
            return (c.clone(), addr.port());
        }
    }
    panic!("Service {ns}/{name} port {port} reaches no container")
}

/// POSTs `body` over TLS to 127.0.0.1:`port`, verifying the server as the
/// API server does: `caBundle` as the only root, the Service DNS name.
async fn https_post(
    port: u16,
    ca_bundle: &[u8],
    server_name: &str,
    path: &str,
    body: &str,
) -> (u16, String) {
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(ca_bundle) {
        roots.add(c.expect("caBundle is PEM")).expect("CA added");
    }
    assert!(
        !roots.is_empty(),
        "the registered caBundle holds no certificate"
    );
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect to the webhook listener");
    let name = rustls::pki_types::ServerName::try_from(server_name.to_owned()).unwrap();
    let mut tls = connector
        .connect(name, tcp)
        .await
        .expect("TLS handshake with the registered CA and the Service name");
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: {server_name}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    tls.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    // A TLS peer may close without close_notify; what was read counts.
    let _ = tls.read_to_end(&mut buf).await;
    parse_response(&buf).expect("an HTTP answer")
}

async fn wait_until(what: &str, proc: &Proc, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; log:\n{}",
            proc.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn webhooks_are_registered_served_over_tls_and_the_run_scheduler_uses_only_its_rbac() {
    let Some(objs) = rendered() else { return };
    let (container, sa) = container_of(objs, "kruntimes-scheduler", "scheduler");
    let _ports = PORTS.lock().await;
    let api = FakeApi::start().await;
    // `kubectl apply -k` created the shipped webhook configurations.
    for cfg in objs.iter().filter(|o| {
        matches!(
            o["kind"].as_str(),
            Some("ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration")
        )
    }) {
        let res = if cfg["kind"] == "ValidatingWebhookConfiguration" {
            Res::ValidatingWebhookConfigurations
        } else {
            Res::MutatingWebhookConfigurations
        };
        api.put_cluster(res, cfg.clone());
    }
    // A Runtime Pod with room for one Run, and two Runs: one is scheduled,
    // the other stays Pending (status and an Event are written).
    let now =
        kruntimes_scheduler::cluster::standalone::kube_time(k8s_openapi::jiff::Timestamp::now());
    api.put(
        Res::Pods,
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "rp", "namespace": "ns", "labels": {"runtime": "py"},
                "annotations": {"kruntimes.io/capacity.runs": "1"}},
            "spec": {"containers": [{"name": "runtimed", "image": "runtimed"}]},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "kruntimes.io/RuntimedReady", "status": "True", "lastProbeTime": now}]}}),
    );
    for name in ["r1", "r2"] {
        api.put(
            Res::Runs,
            json!({"apiVersion": "kruntimes.io/v1alpha1", "kind": "Run",
                "metadata": {"name": name, "namespace": "ns"}, "spec": {"runtime": "py"}}),
        );
    }
    let dir = scratch("webhooks");
    let kc = kubeconfig(&api, &dir);
    let proc = start(
        container,
        &["--kubeconfig".into(), kc.display().to_string()],
        &dir,
    );
    wait_ok(&health_url(container), &proc, Duration::from_secs(30)).await;

    // (b) Both configurations are patched with a CA bundle; every webhook
    // answers over TLS through its Service with that CA.
    let mut configs = Vec::new();
    for res in [
        Res::ValidatingWebhookConfigurations,
        Res::MutatingWebhookConfigurations,
    ] {
        wait_until("webhook configurations", &proc, || {
            api.get_cluster(res, "kruntimes-scheduler")
                .is_some_and(|c| c["webhooks"][0]["clientConfig"].get("caBundle").is_some())
        })
        .await;
        configs.push(api.get_cluster(res, "kruntimes-scheduler").unwrap());
    }
    let mut called = 0;
    for cfg in &configs {
        assert!(
            cfg["metadata"].get("ownerReferences").is_none(),
            "the kustomization owns them; no garbage-collector owner"
        );
        for wh in cfg["webhooks"].as_array().unwrap() {
            let cc = &wh["clientConfig"];
            let bundle = base64::Engine::decode(
                &base64::engine::general_purpose::STANDARD,
                cc["caBundle"].as_str().expect("caBundle set"),
            )
            .expect("caBundle is base64");
            let svc = &cc["service"];
            let (target, port) = resolve_webhook_service(objs, svc);
            assert_eq!(target["name"], container["name"]);
            let path = svc["path"].as_str().unwrap();
            let host = format!(
                "{}.{}.svc",
                svc["name"].as_str().unwrap(),
                svc["namespace"].as_str().unwrap()
            );
            let (status, body) = https_post(port, &bundle, &host, path, &review_for(path)).await;
            assert_eq!(status, 200, "{path}: {body}");
            let v: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(v["kind"], "AdmissionReview", "{path}: {body}");
            assert!(v["response"]["allowed"].is_boolean(), "{path}: {body}");
            // Kubernetes' own namespaces are never sent to a webhook that fails closed.
            if wh["failurePolicy"] == "Fail" {
                let excluded: Vec<&str> = wh["namespaceSelector"]["matchExpressions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|e| {
                        e["key"] == "kubernetes.io/metadata.name" && e["operator"] == "NotIn"
                    })
                    .flat_map(|e| {
                        e["values"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .filter_map(Value::as_str)
                    })
                    .collect();
                assert!(
                    excluded.contains(&"kube-system") && excluded.contains(&"kruntimes-system"),
                    "{}: {excluded:?}",
                    wh["name"]
                );
            }
            called += 1;
        }
    }
    assert!(called >= 5, "every webhook was called: {called}");

    // The Run loop (leader-elected) schedules one Run and leaves the other Pending.
    wait_until("Run statuses", &proc, || {
        let phases: Vec<String> = ["r1", "r2"]
            .iter()
            .filter_map(|n| api.get(Res::Runs, "ns", n))
            .filter_map(|r| r["status"]["phase"].as_str().map(str::to_owned))
            .collect();
        phases.len() == 2
            && phases.contains(&"Scheduled".to_owned())
            && phases.contains(&"Pending".to_owned())
    })
    .await;
    wait_until("a Pending event", &proc, || {
        api.inner
            .lock()
            .requests
            .iter()
            .any(|r| r.resource == "events" && r.verb == "create")
    })
    .await;
    // The Run API and /metrics with a bearer token.
    {
        let mut g = api.inner.lock();
        g.tokens.insert("prom".into(), "prometheus".into());
        g.grants.push(("prometheus".into(), "get /metrics".into()));
    }
    let metrics = health_url(container).replace("/readyz", "/metrics");
    let (status, body) = http_with("GET", &metrics, "", &[("Authorization", "Bearer prom")])
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("kruntimes_certificate_expiry_timestamp_seconds"),
        "{body}"
    );
    drop(proc);

    // (d) Every request is allowed by the rendered RBAC of its ServiceAccount.
    let requests = api.inner.lock().requests.clone();
    check_rbac(
        &rules_of(objs, "kruntimes-system", &sa),
        &requests,
        "run scheduler and webhooks",
    );
}
