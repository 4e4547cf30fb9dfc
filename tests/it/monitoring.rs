//! The monitoring component (`manifests/components/monitoring/`): every
//! PromQL expression of its PrometheusRule and Grafana dashboard parses
//! (`promql-parser`) and names only series a real scrape exports; every
//! alert has a summary and a runbook paragraph in `docs/runbooks.md`; and the
//! component, rendered with `kubectl kustomize` over the install, has the
//! shape the Prometheus Operator and Grafana's sidecar need (ServiceMonitor
//! and PrometheusRule are CRD kinds no schema validator checks).

use crate::metrics::{sample_names, scenario};

use promql_parser::parser::{self, Expr};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn component() -> PathBuf {
    root().join("manifests/components/monitoring")
}

fn rule() -> Value {
    let text = std::fs::read_to_string(component().join("prometheusrule.yaml")).unwrap();
    serde_saphyr::from_str(&text).expect("prometheusrule.yaml parses")
}

fn dashboard() -> Value {
    let text = std::fs::read_to_string(component().join("dashboard.json")).unwrap();
    serde_json::from_str(&text).expect("dashboard.json parses")
}

/// `(where, expr)` of every alert and every dashboard target.
fn expressions() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for g in rule()["spec"]["groups"].as_array().unwrap() {
        for r in g["rules"].as_array().unwrap() {
            let name = r["alert"].as_str().or(r["record"].as_str()).unwrap();
            out.push((
                format!("rule {name}"),
                r["expr"].as_str().unwrap().to_owned(),
            ));
        }
    }
    for p in dashboard()["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            // Grafana replaces its interval variable before querying.
            let expr = t["expr"]
                .as_str()
                .unwrap()
                .replace("$__rate_interval", "5m");
            out.push((format!("panel {:?}", p["title"]), expr));
        }
    }
    out
}

/// Every metric name a PromQL expression selects.
fn metric_names(e: &Expr, out: &mut BTreeSet<String>) {
    match e {
        Expr::Aggregate(a) => {
            metric_names(&a.expr, out);
            if let Some(p) = &a.param {
                metric_names(p, out);
            }
        }
        Expr::Unary(u) => metric_names(&u.expr, out),
        Expr::Binary(b) => {
            metric_names(&b.lhs, out);
            metric_names(&b.rhs, out);
        }
        Expr::Paren(p) => metric_names(&p.expr, out),
        Expr::Subquery(s) => metric_names(&s.expr, out),
        Expr::VectorSelector(v) => {
            out.insert(v.name.clone().expect("selectors name their metric"));
        }
        Expr::MatrixSelector(m) => {
            out.insert(m.vs.name.clone().expect("selectors name their metric"));
        }
        Expr::Call(c) => {
            for a in &c.args.args {
                metric_names(a, out);
            }
        }
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_expression_parses_and_names_scraped_series() {
    let scraped = sample_names(&scenario().await.text);
    let exprs = expressions();
    assert!(exprs.len() >= 7 + 5, "{exprs:?}");
    let mut used = BTreeSet::new();
    for (at, expr) in &exprs {
        let ast = parser::parse(expr).unwrap_or_else(|e| panic!("{at}: {e}\n{expr}"));
        let mut names = BTreeSet::new();
        metric_names(&ast, &mut names);
        assert!(!names.is_empty(), "{at} selects no series: {expr}");
        for n in names {
            assert!(
                scraped.contains(&n),
                "{at} uses {n}, which the scrape does not export:\n{expr}"
            );
            used.insert(n);
        }
    }
    // The test is not vacuous: the parser does see through to the selectors.
    assert!(used.contains("kruntimes_extender_request_duration_seconds_bucket"));
    assert!(used.contains("kruntimes_runs_pending"));
}

#[test]
fn a_misspelled_series_is_caught() {
    let ast = parser::parse("sum(rate(kruntimes_no_such_series_total[5m])) > 1").unwrap();
    let mut names = BTreeSet::new();
    metric_names(&ast, &mut names);
    assert_eq!(
        names,
        BTreeSet::from(["kruntimes_no_such_series_total".to_owned()])
    );
    assert!(parser::parse("sum(rate(x[5m]) > ").is_err());
}

#[test]
fn the_alerts_have_summaries_and_runbooks() {
    let runbooks = std::fs::read_to_string(root().join("docs/runbooks.md")).unwrap();
    let mut alerts = Vec::new();
    for g in rule()["spec"]["groups"].as_array().unwrap() {
        for r in g["rules"].as_array().unwrap() {
            let name = r["alert"].as_str().expect("alerting rules only");
            let summary = r["annotations"]["summary"].as_str().unwrap_or_default();
            assert!(!summary.is_empty(), "{name} has no summary");
            assert!(
                r["labels"]["severity"].is_string(),
                "{name} has no severity"
            );
            let runbook = r["annotations"]["runbook"].as_str().unwrap_or_default();
            assert!(runbook.ends_with(name), "{name}: runbook {runbook:?}");
            assert!(
                runbook.starts_with("docs/runbooks.md"),
                "{name}: runbook {runbook:?} names the page below"
            );
            // docs/runbooks.md has a runbook paragraph under a heading naming it.
            let heading = format!("\n## {name}\n");
            let at = runbooks
                .find(&heading)
                .unwrap_or_else(|| panic!("docs/runbooks.md has no runbook heading for {name}"));
            let body = &runbooks[at + heading.len()..];
            let para = body.split("\n#").next().unwrap_or_default();
            assert!(
                para.trim().len() > 200,
                "{name}: runbook paragraph too short"
            );
            alerts.push(name.to_owned());
        }
    }
    for wanted in [
        "KruntimesExtenderLatencyHigh",
        "KruntimesRunsPendingTooLong",
        "KruntimesWebhookRejecting",
        "KruntimesCertificateExpiringSoon",
        "KruntimesNoRunSchedulerLeader",
        "KruntimesWatchFailing",
        "KruntimesGangsTimingOut",
    ] {
        assert!(alerts.iter().any(|a| a == wanted), "no alert {wanted}");
    }
}

#[test]
fn the_dashboard_has_the_panels_operators_need() {
    let d = dashboard();
    let titles: Vec<&str> = d["panels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["title"].as_str().unwrap())
        .collect();
    for wanted in [
        "Extender latency p99 by verb",
        "Decision latency p99 by operation",
        "Pending Runs by reason",
        "Gang waits by outcome",
        "Gang members held, groups waiting for quorum",
        "Admission verdicts by webhook",
        "Cache sizes by kind",
    ] {
        assert!(titles.contains(&wanted), "no panel {wanted:?}: {titles:?}");
    }
    let ids: BTreeSet<u64> = d["panels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids.len(), titles.len(), "panel ids are unique");
}

/// `kubectl kustomize` of the install with the component; `None` when
/// kubectl is missing outside CI.
fn render_with_component() -> Option<Vec<Value>> {
    let dir = root().join("target/monitoring-render");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("kustomization.yaml"),
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- ../../manifests\ncomponents:\n- ../../manifests/components/monitoring\n",
    )
    .unwrap();
    let out = match Command::new(std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into()))
        .arg("kustomize")
        .arg(&dir)
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "kubectl is required under CI: {e}"
            );
            eprintln!("SKIPPED: kubectl not found ({e})");
            return None;
        }
    };
    assert!(
        out.status.success(),
        "kubectl kustomize failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(std::str::from_utf8(&out.stdout).unwrap()).unwrap();
    Some(docs.into_iter().filter(|d| !d.is_null()).collect())
}

fn labels_match(selector: &Value, labels: &Value) -> bool {
    selector
        .as_object()
        .is_some_and(|s| !s.is_empty() && s.iter().all(|(k, v)| labels[k] == *v))
}

#[test]
fn the_component_renders_with_the_shape_the_operator_needs() {
    let Some(objs) = render_with_component() else {
        return;
    };
    let of = |kind: &str| -> Vec<&Value> { objs.iter().filter(|o| o["kind"] == kind).collect() };

    // ServiceMonitor → Services → pods with a `health` port serving /metrics.
    let sms = of("ServiceMonitor");
    assert_eq!(sms.len(), 1);
    let sm = sms[0];
    assert_eq!(sm["apiVersion"], "monitoring.coreos.com/v1");
    let ep = &sm["spec"]["endpoints"][0];
    assert_eq!(ep["path"], "/metrics");
    assert!(ep["bearerTokenFile"].is_string(), "/metrics needs a token");
    let port = ep["port"].as_str().unwrap();
    let services: Vec<&Value> = of("Service")
        .into_iter()
        .filter(|s| {
            labels_match(
                &sm["spec"]["selector"]["matchLabels"],
                &s["metadata"]["labels"],
            )
        })
        .collect();
    assert_eq!(
        services.len(),
        2,
        "the Run scheduler and the extender are scraped"
    );
    let ns = sm["spec"]["namespaceSelector"]["matchNames"][0]
        .as_str()
        .unwrap();
    for svc in &services {
        assert_eq!(svc["metadata"]["namespace"], ns);
        assert_eq!(
            svc["spec"]["clusterIP"], "None",
            "every replica is a target"
        );
        let ports = svc["spec"]["ports"].as_array().unwrap();
        assert_eq!(ports.len(), 1, "only the health port is exposed");
        assert_eq!(ports[0]["name"], port);
        let target = ports[0]["targetPort"].as_str().unwrap();
        let deploys: Vec<&Value> = of("Deployment")
            .into_iter()
            .filter(|d| {
                labels_match(
                    &svc["spec"]["selector"],
                    &d["spec"]["template"]["metadata"]["labels"],
                )
            })
            .collect();
        assert_eq!(deploys.len(), 1, "{}", svc["metadata"]["name"]);
        // Regular containers and native sidecars (init containers with
        // restartPolicy Always, as the extender is).
        let spec = &deploys[0]["spec"]["template"]["spec"];
        let containers: Vec<&Value> = spec["containers"]
            .as_array()
            .unwrap()
            .iter()
            .chain(
                spec["initContainers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|c| c["restartPolicy"] == "Always"),
            )
            .collect();
        let serving: Vec<&Value> = containers
            .into_iter()
            .filter(|c| {
                c["ports"]
                    .as_array()
                    .is_some_and(|ps| ps.iter().any(|p| p["name"] == target))
            })
            .collect();
        assert_eq!(serving.len(), 1, "one container serves {target}");
        let args: Vec<&str> = serving[0]["args"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(
            args.iter()
                .any(|a| a.starts_with("--health-listen=0.0.0.0:")),
            "{args:?}"
        );
    }

    // PrometheusRule: what the operator loads.
    let rules = of("PrometheusRule");
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0]["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(rules[0]["spec"], rule()["spec"], "rendered unchanged");
    for g in rules[0]["spec"]["groups"].as_array().unwrap() {
        assert!(g["name"].is_string());
        for r in g["rules"].as_array().unwrap() {
            assert!(r["alert"].is_string() && r["expr"].is_string(), "{r}");
            if let Some(f) = r["for"].as_str() {
                assert!(
                    f.ends_with('m') || f.ends_with('h') || f.ends_with('s'),
                    "{f}"
                );
            }
        }
    }

    // The dashboard ConfigMap the Grafana sidecar picks up.
    let boards: Vec<&Value> = of("ConfigMap")
        .into_iter()
        .filter(|c| c["metadata"]["labels"]["grafana_dashboard"] == "1")
        .collect();
    assert_eq!(boards.len(), 1);
    let data = boards[0]["data"].as_object().unwrap();
    assert_eq!(data.len(), 1);
    let (key, text) = data.iter().next().unwrap();
    assert!(key.ends_with(".json"), "{key}");
    let rendered: Value = serde_json::from_str(text.as_str().unwrap()).unwrap();
    assert_eq!(rendered, dashboard());

    // Opt-in: the default install has none of it.
    let default = Command::new(std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into()))
        .arg("kustomize")
        .arg(root().join("manifests"))
        .output()
        .unwrap();
    let text = String::from_utf8(default.stdout).unwrap();
    assert!(!text.contains("kind: ServiceMonitor") && !text.contains("grafana_dashboard"));
}

/// The `httpTimeout` (seconds) of the extender entry that serves each
/// verb, from the shipped kube-scheduler configuration.
fn entry_timeouts() -> Vec<(&'static str, f64)> {
    let text =
        std::fs::read_to_string(root().join("manifests/kube-scheduler/scheduler-config.yaml"))
            .unwrap();
    let config: Value = serde_saphyr::from_str(&text).expect("scheduler-config.yaml parses");
    let mut out = Vec::new();
    for entry in config["extenders"].as_array().expect("extenders") {
        let timeout = entry["httpTimeout"].as_str().expect("httpTimeout is set");
        let seconds: f64 = timeout
            .strip_suffix('s')
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("httpTimeout {timeout:?}: whole seconds expected"));
        for (field, verb) in [
            ("filterVerb", "Filter"),
            ("prioritizeVerb", "Prioritize"),
            ("preemptVerb", "Preempt"),
            ("bindVerb", "Bind"),
        ] {
            if entry[field].is_string() {
                out.push((verb, seconds));
            }
        }
    }
    out
}

/// `(verbs its selectors admit, threshold)` of each `... > number` branch
/// of an alert expression joined by `or`.
fn verb_thresholds(e: &Expr, verbs: &[&'static str], out: &mut Vec<(Vec<&'static str>, f64)>) {
    fn selected(e: &Expr, verbs: &[&'static str], out: &mut BTreeSet<&'static str>) {
        match e {
            Expr::Aggregate(a) => selected(&a.expr, verbs, out),
            Expr::Paren(p) => selected(&p.expr, verbs, out),
            Expr::Call(c) => c.args.args.iter().for_each(|a| selected(a, verbs, out)),
            Expr::MatrixSelector(m) => {
                let matchers = m.vs.matchers.find_matchers("verb");
                out.extend(
                    verbs
                        .iter()
                        .filter(|v| matchers.iter().all(|m| m.is_match(v))),
                );
            }
            _ => {}
        }
    }
    match e {
        Expr::Paren(p) => verb_thresholds(&p.expr, verbs, out),
        Expr::Binary(b) if b.op.to_string() == "or" => {
            verb_thresholds(&b.lhs, verbs, out);
            verb_thresholds(&b.rhs, verbs, out);
        }
        Expr::Binary(b) if b.op.to_string() == ">" => {
            let Expr::NumberLiteral(n) = &*b.rhs else {
                panic!("a threshold is a number: {e}");
            };
            let mut admitted = BTreeSet::new();
            selected(&b.lhs, verbs, &mut admitted);
            out.push((admitted.into_iter().collect(), n.val));
        }
        other => panic!("not a thresholded branch: {other}"),
    }
}

/// Only bind may legitimately be slow (gang quorum, DRA binding
/// conditions): the latency alert holds each verb to 80% of the
/// `httpTimeout` of the extender entry that serves it, and the histogram
/// has finite buckets past every threshold (a quantile in the `+Inf` bucket
/// reads as the highest finite bound, so a threshold above it never fires).
#[test]
fn the_latency_alert_holds_each_verb_to_its_own_entrys_timeout() {
    let timeouts = entry_timeouts();
    let verbs: Vec<&'static str> = timeouts.iter().map(|(v, _)| *v).collect();
    assert_eq!(verbs.len(), 4, "every verb is served: {timeouts:?}");
    let expr = rule()["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .find(|r| r["alert"] == "KruntimesExtenderLatencyHigh")
        .and_then(|r| r["expr"].as_str())
        .expect("the latency alert")
        .to_owned();
    let ast = parser::parse(&expr).unwrap();
    let mut branches = Vec::new();
    verb_thresholds(&ast, &verbs, &mut branches);
    let top = kruntimes_scheduler::metrics::EXTENDER_SLOW_BUCKETS
        .iter()
        .copied()
        .fold(0.0, f64::max);
    for (verb, timeout) in &timeouts {
        let of_verb: Vec<f64> = branches
            .iter()
            .filter(|(vs, _)| vs.contains(verb))
            .map(|(_, t)| *t)
            .collect();
        assert_eq!(of_verb.len(), 1, "{verb}: one threshold: {branches:?}");
        let threshold = of_verb[0];
        assert!(
            (threshold - 0.8 * timeout).abs() < 1e-9,
            "{verb}: threshold {threshold}s, entry timeout {timeout}s"
        );
        assert!(
            top >= *timeout,
            "{verb}: the histogram's last finite bucket ({top}s) is below the timeout {timeout}s"
        );
    }
    // Not vacuous: the short verbs and bind have different thresholds.
    let distinct: BTreeSet<u64> = branches.iter().map(|(_, t)| t.to_bits()).collect();
    assert_eq!(distinct.len(), 2, "{branches:?}");
}
