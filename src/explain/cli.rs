//! `kruntimes-scheduler explain pod NS/NAME` and `explain run NS/NAME`:
//! ask a running service why a pod or a Run is pending, and print a short
//! human answer (`--json`: the endpoint's answer as is).

use crate::model::refs::{is_dns_label, is_dns_subdomain};
use crate::transport::parse_duration;
use anyhow::{Context, bail};
use serde_json::Value;
use std::fmt::Write as _;
use std::time::Duration;

/// `explain` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum ExplainCommand {
    /// Why a pod is pending: the extender's filter over every cached node
    /// (`GET /v1/explain/pod`). Ask the extender's main listener.
    Pod {
        /// `NAMESPACE/NAME` (or `NAME` in `default`).
        target: String,
        /// Example nodes per reason.
        #[arg(long, default_value_t = 3)]
        examples: usize,
        #[command(flatten)]
        conn: Connection,
    },
    /// Where a Run would be placed now (`GET /v1/explain/run`). Ask the Run
    /// scheduler's listener.
    Run {
        /// `NAMESPACE/NAME` (or `NAME` in `default`).
        target: String,
        /// Feasible and rejected Runtime Pods listed.
        #[arg(long, default_value_t = 5)]
        limit: usize,
        #[command(flatten)]
        conn: Connection,
    },
}

/// How to reach the service.
#[derive(Debug, Clone, clap::Args)]
pub struct Connection {
    /// Base URL of the service (`http://` or `https://`), e.g. a
    /// `kubectl port-forward` to the pod's listener.
    #[arg(long, env = "KRS_SERVER", default_value = "http://127.0.0.1:8080")]
    pub server: String,
    /// Bearer token (cluster mode with `--authorize-reads`), e.g.
    /// `$(kubectl create token NAME)`.
    #[arg(long, env = "KRS_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Accept any TLS certificate of the server.
    #[arg(long)]
    pub insecure_skip_tls_verify: bool,
    /// Print the endpoint's JSON answer instead of the short one.
    #[arg(long)]
    pub json: bool,
    /// Give up on an unanswered request after this long.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub timeout: Duration,
}

/// `NAMESPACE/NAME` or `NAME` (namespace `default`), checked as
/// Kubernetes names.
pub fn parse_target(target: &str) -> anyhow::Result<(String, String)> {
    let (ns, name) = match target.split_once('/') {
        Some((ns, name)) => (ns, name),
        None => ("default", target),
    };
    if !is_dns_label(ns) {
        bail!("{target:?}: namespace {ns:?} is not a valid namespace name (a DNS label)");
    }
    if !is_dns_subdomain(name) {
        bail!("{target:?}: name {name:?} is not a valid object name (a DNS subdomain)");
    }
    Ok((ns.to_owned(), name.to_owned()))
}

/// Runs the subcommand: prints the answer on stdout; an error says what
/// failed (an unreachable server, a 4xx/5xx with the server's message).
pub async fn run(cmd: ExplainCommand) -> anyhow::Result<()> {
    let (path, conn, render): (String, Connection, fn(&Value) -> String) = match cmd {
        ExplainCommand::Pod {
            target,
            examples,
            conn,
        } => {
            let (ns, name) = parse_target(&target)?;
            (
                format!("/v1/explain/pod?namespace={ns}&name={name}&examples={examples}"),
                conn,
                render_pod,
            )
        }
        ExplainCommand::Run {
            target,
            limit,
            conn,
        } => {
            let (ns, name) = parse_target(&target)?;
            (
                format!("/v1/explain/run?namespace={ns}&name={name}&limit={limit}"),
                conn,
                render_run,
            )
        }
    };
    let body = fetch(&conn, &path).await?;
    if conn.json {
        println!("{}", serde_json::to_string_pretty(&body)?);
    } else {
        print!("{}", render(&body));
    }
    Ok(())
}

/// GETs `path` from the server; the JSON body of a 2xx answer.
pub async fn fetch(conn: &Connection, path: &str) -> anyhow::Result<Value> {
    let base: axum::http::Uri = conn
        .server
        .parse()
        .with_context(|| format!("--server {:?} is not a URL", conn.server))?;
    if !matches!(base.scheme_str(), Some("http" | "https")) || base.host().is_none() {
        bail!(
            "--server {:?}: must be an http:// or https:// URL with a host",
            conn.server
        );
    }
    let mut config = kube::Config::new(base);
    config.accept_invalid_certs = conn.insecure_skip_tls_verify;
    config.connect_timeout = Some(conn.timeout);
    config.read_timeout = Some(conn.timeout);
    config.write_timeout = Some(conn.timeout);
    let client = kube::Client::try_from(config).context("building the HTTP client")?;
    let mut req = axum::http::Request::get(path);
    if let Some(t) = &conn.token {
        req = req.header(axum::http::header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let req = req
        .body(kube::client::Body::from(Vec::new()))
        .context("building the request")?;
    let call = async {
        let res = client.send(req).await?;
        let status = res.status();
        let bytes = res.into_body().collect_bytes().await?;
        Ok::<_, kube::Error>((status, bytes))
    };
    let (status, bytes) = tokio::time::timeout(conn.timeout, call)
        .await
        .map_err(|_| anyhow::anyhow!("{}: no answer within {:?}", conn.server, conn.timeout))?
        .map_err(|e| anyhow::anyhow!("cannot reach {}: {e}", conn.server))?;
    let body: Option<Value> = serde_json::from_slice(&bytes).ok();
    if !status.is_success() {
        let why = body
            .as_ref()
            .and_then(|b| b["error"].as_str())
            .map(str::to_owned)
            .unwrap_or_else(|| String::from_utf8_lossy(&bytes).trim().to_owned());
        bail!("{} answered {status}: {why}", conn.server);
    }
    body.with_context(|| {
        format!(
            "{} answered {status} with a body that is not JSON",
            conn.server
        )
    })
}

fn list(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// The short answer for a pod explanation.
pub fn render_pod(v: &Value) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{}", v["summary"].as_str().unwrap_or_default());
    if let Some(reasons) = v["reasons"].as_array() {
        for r in reasons {
            let examples = list(&r["examples"]);
            let _ = writeln!(
                s,
                "  {:>6} nodes  {}{}{}",
                r["nodes"].as_u64().unwrap_or(0),
                r["reason"].as_str().unwrap_or_default(),
                if r["unresolvable"] == true {
                    " [unresolvable]"
                } else {
                    ""
                },
                if examples.is_empty() {
                    String::new()
                } else {
                    format!(" (e.g. {})", examples.join(", "))
                }
            );
        }
    }
    let group = &v["group"];
    if let Some(levels) = group["levels"].as_array() {
        for l in levels {
            let _ = writeln!(
                s,
                "  group {} {}/{} ({}{}): {} exist, {} needed, {} placed",
                l["kind"].as_str().unwrap_or_default(),
                l["namespace"].as_str().unwrap_or_default(),
                l["name"].as_str().unwrap_or_default(),
                l["policy"].as_str().unwrap_or_default(),
                l["topologyKey"]
                    .as_str()
                    .map(|k| format!(", topology {k}"))
                    .unwrap_or_default(),
                l["existing"],
                l["needed"],
                l["placed"],
            );
        }
    }
    if let Some(e) = group["error"].as_str() {
        let _ = writeln!(s, "  group: {e}");
    }
    if let Some(d) = v["chosenDomain"].as_object() {
        let _ = writeln!(
            s,
            "  domain {} ({})",
            list(&d["domain"]).join(", "),
            d["source"].as_str().unwrap_or_default()
        );
    }
    if let Some(ds) = group["domain"]["domains"].as_array() {
        for d in ds.iter().filter(|d| d["chosen"] != true) {
            if let Some(why) = d["why"].as_str() {
                let _ = writeln!(
                    s,
                    "    {}={}: {why}",
                    group["domain"]["key"].as_str().unwrap_or_default(),
                    d["value"].as_str().unwrap_or_default()
                );
            }
        }
        if let Some(n) = group["domain"]["omitted"].as_u64().filter(|n| *n > 0) {
            let _ = writeln!(s, "    ({n} more domains)");
        }
    }
    let p = &v["priority"];
    if p["ok"] == false {
        let _ = writeln!(
            s,
            "  priority: {}",
            p["message"].as_str().unwrap_or_default()
        );
    }
    s
}

/// The short answer for a Run's plan.
pub fn render_run(v: &Value) -> String {
    let mut s = String::new();
    let run = &v["run"];
    let who = format!(
        "Run {}/{}",
        run["namespace"].as_str().unwrap_or_default(),
        run["name"].as_str().unwrap_or_default()
    );
    let phase = run["phase"].as_str().unwrap_or("Pending");
    match v["selected"].as_str() {
        Some(pod) => {
            let _ = writeln!(
                s,
                "{who} ({phase}): would be placed on {pod} (Runtime {})",
                v["runtime"].as_str().unwrap_or_default()
            );
        }
        None => {
            let _ = writeln!(
                s,
                "{who} ({phase}): no Runtime Pod of {} can take it: {}",
                v["runtime"].as_str().unwrap_or_default(),
                v["reason"].as_str().unwrap_or("no reason given")
            );
        }
    }
    if let Some(m) = run["message"].as_str() {
        let _ = writeln!(s, "  status: {m}");
    }
    if let Some(until) = v["backoffUntil"].as_str() {
        let _ = writeln!(
            s,
            "  backing off before its next attempt: not placed before {until}"
        );
    }
    if let Some(rej) = v["rejected"].as_object() {
        for (pod, why) in rej {
            let _ = writeln!(s, "  {pod}: {}", why.as_str().unwrap_or_default());
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_checked_as_names() {
        assert_eq!(
            parse_target("ml/train-0").unwrap(),
            ("ml".into(), "train-0".into())
        );
        assert_eq!(
            parse_target("web").unwrap(),
            ("default".into(), "web".into())
        );
        let e = parse_target("Bad_NS/x").unwrap_err().to_string();
        assert!(e.contains("namespace \"Bad_NS\""), "{e}");
        let e = parse_target("ml/").unwrap_err().to_string();
        assert!(e.contains("name \"\""), "{e}");
        let e = parse_target("ml/a/b").unwrap_err().to_string();
        assert!(e.contains("name \"a/b\""), "{e}");
    }
}
