//! The documentation cannot drift from the code. `README.md` and every
//! `docs/*.md` may name only:
//!
//! - `kruntimes-scheduler` flags that some `--help` of the binary lists
//!   (the subcommand's own when the docs show it invoked; flags of other
//!   programs — kubectl, curl, cargo, criterion, … — are told apart by the
//!   command they appear in);
//! - HTTP paths of this service that its router (or the agent's) serves: a
//!   path answered by the fallback's `404 no route for …` is not served;
//! - `kruntimes_…` metrics the service or the agent exports (histogram
//!   `_bucket`/`_sum`/`_count` and counter `_total` samples count as their
//!   family);
//! - repository paths (`src/…`, `tests/…`, `manifests/…`, …) that exist,
//!   and relative markdown links (and their `#anchors`) that resolve.
//!
//! The facts come from the real binary and routers; the checker itself is
//! a pure function over a doc's text and those facts, tested below on a
//! small bad doc.

use crate::common;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Method, Request, StatusCode};
use http_body_util::BodyExt as _;
use kruntimes_scheduler::agent::Agent;
use kruntimes_scheduler::agent::metrics::JournalError;
use kruntimes_scheduler::agent::server::{self, Peer, PeerPolicy};
use kruntimes_scheduler::agent::source::AgentConfig;
use kruntimes_scheduler::metrics::{EvictionResult, Metrics, Task};
use kruntimes_scheduler::testkit;
use kube::runtime::watcher::Event;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use tower::ServiceExt as _;

// === The facts: what the binary, the routers and the registries know ===

/// What the docs are checked against.
struct Facts {
    /// Flags by subcommand path (`""` for the top level, `"serve"`,
    /// `"explain pod"`), each as `--name`.
    flags: BTreeMap<String, BTreeSet<String>>,
    /// The HTTP paths (as the docs write them, normalised) that a router
    /// serves.
    served: BTreeSet<String>,
    /// Exported metric names: families and their sample names.
    metrics: BTreeSet<String>,
    /// The repository root paths and links resolve against.
    root: PathBuf,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// `--help` of the binary and of every subcommand it lists, recursively.
fn cli_flags() -> BTreeMap<String, BTreeSet<String>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![Vec::<String>::new()];
    while let Some(path) = todo.pop() {
        let help = Command::new(env!("CARGO_BIN_EXE_kruntimes-scheduler"))
            .args(&path)
            .arg("--help")
            .output()
            .expect("the binary runs");
        assert!(help.status.success(), "{path:?} --help failed");
        let text = String::from_utf8(help.stdout).expect("help is UTF-8");
        let (flags, subcommands) = parse_help(&text);
        for sub in subcommands {
            let mut p = path.clone();
            p.push(sub);
            todo.push(p);
        }
        out.insert(path.join(" "), flags);
    }
    out
}

/// The flags (`--name`) of a clap help text's option lines, and the
/// subcommands its `Commands:` section lists (without `help`).
fn parse_help(text: &str) -> (BTreeSet<String>, Vec<String>) {
    let mut flags = BTreeSet::new();
    let mut subcommands = Vec::new();
    let mut in_commands = false;
    for line in text.lines() {
        if !line.starts_with(' ') {
            in_commands = line.trim_end() == "Commands:";
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        let spec = line.trim_start();
        if in_commands && indent == 2 {
            if let Some(name) = spec.split_whitespace().next().filter(|n| *n != "help") {
                subcommands.push(name.to_owned());
            }
        } else if indent < 8 && spec.starts_with('-') {
            // The option spec ends where its description starts.
            let spec = spec.split("  ").next().unwrap_or_default();
            for word in spec.split([' ', ',']) {
                if let Some(name) = word.strip_prefix("--") {
                    // `--name=<V>`, `--name[=<V>]`: the name alone.
                    let end = name.find(|c| !flag_char(c)).unwrap_or(name.len());
                    flags.insert(format!("--{}", &name[..end]));
                }
            }
        }
    }
    (flags, subcommands)
}

/// A request as the agent's router gets it from a peer with uid `uid`
/// (it reads the peer's credentials).
fn agent_request(method: Method, path: &str, body: &str, uid: u32) -> Request<Body> {
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .body(Body::from(body.to_owned()))
        .unwrap();
    req.extensions_mut().insert(ConnectInfo(Peer {
        uid: Some(uid),
        gid: Some(uid),
        pid: Some(1),
    }));
    req
}

fn agent_router(agent: &std::sync::Arc<Agent>) -> axum::Router {
    let policy = PeerPolicy {
        uids: [0].into(),
        gids: BTreeSet::new(),
    };
    server::router(std::sync::Arc::clone(agent), policy)
}

/// The agent's metrics after it admitted, queued, refused, released and
/// found a corrupt journal.
async fn agent_metrics() -> String {
    let agent = Agent::new(AgentConfig::new("pod", "ns"), Duration::from_secs(1));
    let pod = testkit::runtime_pod("pod", &[("runs", "1")], "2026-01-01T00:00:00Z");
    agent.apply_pod_event(Event::Init);
    agent.apply_pod_event(Event::InitApply(pod.typed()));
    agent.apply_pod_event(Event::InitDone);
    agent.apply_run_event(Event::Init);
    agent.apply_run_event(Event::InitDone);
    let reserve = |name: &str, runs: &str| {
        format!(
            r#"{{"namespace":"ns","name":"{name}","uid":"{name}","requests":{{"runs":"{runs}"}}}}"#
        )
    };
    let call = |method: Method, path: &str, body: String, uid: u32| {
        let req = agent_request(method, path, &body, uid);
        let router = agent_router(&agent);
        async move { router.oneshot(req).await.unwrap().status() }
    };
    let post = |body| call(Method::POST, "/v1/reservations", body, 0);
    assert_eq!(post(reserve("a", "1")).await, StatusCode::CREATED);
    assert_eq!(
        post(reserve("b", "1")).await,
        StatusCode::CONFLICT,
        "queued"
    );
    assert_eq!(
        post(reserve("c", "1.5")).await,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    let stranger = call(Method::GET, "/v1/reservations", String::new(), 7);
    assert_eq!(stranger.await, StatusCode::FORBIDDEN);
    let release = call(Method::DELETE, "/v1/reservations/a", String::new(), 0);
    assert_eq!(release.await, StatusCode::NO_CONTENT, "b is admitted");
    // A fault no request reaches.
    agent.metrics().journal.error(JournalError::Corrupt);
    agent.metrics_text()
}

/// Whether an answer is a route's: anything but the fallback's 404.
async fn routed(resp: axum::response::Response) -> bool {
    if resp.status() != StatusCode::NOT_FOUND {
        return true;
    }
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&body);
    !(text.is_empty() || text.contains("no route for"))
}

/// Every fact, from the real binary, routers and registries. `paths` are
/// the HTTP paths the docs name; each is asked of the service's router
/// (every surface, standalone) and of the agent's.
async fn facts(paths: &BTreeSet<String>) -> Facts {
    let app = common::app("");
    let agent = Agent::new(AgentConfig::new("pod", "ns"), Duration::from_secs(1));
    let mut served = BTreeSet::new();
    for path in paths.iter().filter(|p| !p.ends_with("/...")) {
        let probe = path.replace(['{', '}'], "");
        let service = kruntimes_scheduler::http::router(app.state.clone())
            .oneshot(Request::get(&probe).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let on_agent = agent_router(&agent)
            .oneshot(agent_request(Method::GET, &probe, "", 0))
            .await
            .unwrap();
        if routed(service).await || routed(on_agent).await {
            served.insert(path.clone());
        }
    }
    // A family appears in a scrape once it has a sample: scrape the
    // service after the cluster-mode scenario `metrics.rs` runs, and the
    // agent after it answered every kind of request.
    let scrape = common::get(&app, "/metrics").await;
    assert_eq!(scrape.status, StatusCode::OK);
    let mut metrics = metric_names(&scrape.text);
    metrics.extend(metric_names(&crate::metrics::scenario().await.text));
    metrics.extend(metric_names(&agent_metrics().await));
    // Faults the scenario does not reach: a background task restarted
    // after a panic, an eviction of the `All`-disruption evictor.
    let faults = Metrics::default();
    faults.task_restart(Task::RunWorker);
    faults.disruption_eviction(EvictionResult::Evicted);
    metrics.extend(metric_names(&faults.encode()));
    Facts {
        flags: cli_flags(),
        served,
        metrics,
        root: root(),
    }
}

/// The families an OpenMetrics text declares (`# TYPE`), with the sample
/// names each type exports, and every sample name present.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if let Some(decl) = line.strip_prefix("# TYPE ") {
            let mut it = decl.split_whitespace();
            let (Some(name), Some(kind)) = (it.next(), it.next()) else {
                continue;
            };
            names.insert(name.to_owned());
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" => &["_bucket", "_sum", "_count"],
                "info" => &["_info"],
                _ => &[],
            };
            for s in suffixes {
                names.insert(format!("{name}{s}"));
            }
        } else if !line.starts_with('#')
            && let Some(sample) = line.split(['{', ' ']).next().filter(|s| !s.is_empty())
        {
            names.insert(sample.to_owned());
        }
    }
    names
}

// === Reading a markdown file ===

/// Where a line of a markdown file is.
#[derive(Clone, Copy, PartialEq)]
enum Place<'a> {
    Prose,
    /// Inside a fenced block of this language (`""` when none is given).
    Fence(&'a str),
}

/// A doc's lines, numbered from 1, with where each is. Fence lines
/// themselves are left out.
fn lines(text: &str) -> Vec<(usize, &str, Place<'_>)> {
    let mut out = Vec::new();
    let mut fence: Option<&str> = None;
    for (i, line) in text.lines().enumerate() {
        if let Some(info) = line.trim_start().strip_prefix("```") {
            fence = match fence {
                None => Some(info.trim()),
                Some(_) => None,
            };
            continue;
        }
        out.push((i + 1, line, fence.map_or(Place::Prose, Place::Fence)));
    }
    out
}

/// Fenced blocks read as shell commands.
fn is_shell(lang: &str) -> bool {
    matches!(lang, "" | "sh" | "bash" | "shell" | "console")
}

/// A problem found in a doc.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Problem {
    doc: String,
    line: usize,
    what: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.doc, self.line, self.what)
    }
}

/// Occurrences of tokens starting with `start` (at a token boundary: not
/// preceded by a byte of `[A-Za-z0-9_./-]`), each as (byte offset, token),
/// where the token runs while `keep` holds.
fn tokens<'a>(text: &'a str, start: &str, keep: impl Fn(char) -> bool) -> Vec<(usize, &'a str)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find(start).map(|i| i + from) {
        from = at + start.len();
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || "_./-".contains(c)) {
            continue;
        }
        let len = text[at..]
            .char_indices()
            .find(|&(_, c)| !keep(c))
            .map_or(text.len() - at, |(i, _)| i);
        out.push((at, &text[at..at + len]));
        from = at + len.max(start.len());
    }
    out
}

// === Flags ===

/// Whose flags a command line passes.
#[derive(Clone, Debug, PartialEq)]
enum Owner {
    /// This binary, with the subcommand path when it is known.
    Ours(Option<String>),
    /// Another program.
    Foreign,
}

/// Flags of other programs the docs name in prose, outside any command.
const FOREIGN_FLAGS: &[&str] = &[
    // criterion's, passed through `cargo bench ... --`.
    "--warm-up-time",
    "--measurement-time",
    // cargo's (`--features`, `--no-default-features` for the system
    // allocator) and `cargo fmt --check`.
    "--features",
    "--no-default-features",
    "--check",
];

/// One command of a shell line.
struct Piece<'a> {
    text: &'a str,
    /// Its byte offset in the line.
    at: usize,
    /// It ends at a `$(` (or `(`): what follows until `)` is another command.
    opens: bool,
    /// It starts after a `)`: it continues the command `$(` interrupted.
    continues: bool,
}

/// Splits a shell line into commands at `|`, `;`, `&`, `$(`, `(` and `)`
/// outside single quotes.
fn commands(line: &str) -> Vec<Piece<'_>> {
    let mut out = Vec::new();
    let (mut start, mut quoted, mut continues) = (0, false, false);
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let cut = match bytes[i] {
            b'\'' => {
                quoted = !quoted;
                None
            }
            _ if quoted => None,
            b'|' | b';' | b'&' => Some((1, false, false)),
            b'(' => Some((1, true, false)),
            b'$' if bytes.get(i + 1) == Some(&b'(') => Some((2, true, false)),
            b')' => Some((1, false, true)),
            _ => None,
        };
        let Some((len, opens, next_continues)) = cut else {
            i += 1;
            continue;
        };
        out.push(Piece {
            text: &line[start..i],
            at: start,
            opens,
            continues,
        });
        continues = next_continues;
        start = i + len;
        i += len;
    }
    out.push(Piece {
        text: &line[start..],
        at: start,
        opens: false,
        continues,
    });
    out
}

/// The flags of a shell line (or a code span), each with its byte offset
/// and its owner. `carried` is the command a `\` continued from the line
/// before; the command the line leaves open is returned with the flags.
fn command_flags(
    code: &str,
    carried: &str,
    facts: &Facts,
) -> (Vec<(usize, String, Owner)>, String) {
    let mut out = Vec::new();
    let mut interrupted: Vec<String> = Vec::new();
    let mut so_far = String::new();
    for (i, piece) in commands(code).into_iter().enumerate() {
        so_far = if piece.continues {
            format!("{} X{}", interrupted.pop().unwrap_or_default(), piece.text)
        } else if i == 0 {
            format!("{carried} {}", piece.text)
        } else {
            piece.text.to_owned()
        };
        let who = owner(&so_far, facts);
        for (at, flag) in flags_in(piece.text) {
            out.push((piece.at + at, flag, who.clone()));
        }
        if piece.opens {
            interrupted.push(so_far.clone());
        }
    }
    let open = so_far.trim_end().trim_end_matches('\\').to_owned();
    (out, open)
}

/// Who owns the flags of one command (its words, env assignments and a
/// `$ ` prompt skipped), given the subcommand paths the binary has.
fn owner(command: &str, facts: &Facts) -> Owner {
    let mut words = command
        .split_whitespace()
        .skip_while(|w| *w == "$" || is_assignment(w));
    let Some(program) = words.next() else {
        return Owner::Ours(None);
    };
    let rest: Vec<&str> = match program {
        p if p.rsplit('/').next() == Some("kruntimes-scheduler") => words.collect(),
        "cargo" => {
            let args: Vec<&str> = words.collect();
            let Some(dashdash) = args.iter().position(|w| *w == "--") else {
                return Owner::Foreign;
            };
            if args.first() != Some(&"run")
                || args[..dashdash]
                    .iter()
                    .any(|w| *w == "--example" || *w == "--bin")
            {
                return Owner::Foreign;
            }
            args[dashdash + 1..].to_vec()
        }
        // Bare `--`: the arguments another program passes on.
        "--" => return Owner::Foreign,
        flag if flag.starts_with('-') => return Owner::Ours(None),
        // A subcommand named alone (`serve --listen …` in prose).
        sub if facts.flags.contains_key(sub) => std::iter::once(sub).chain(words).collect(),
        _ => return Owner::Foreign,
    };
    let mut path = String::new();
    for w in rest {
        let longer = if path.is_empty() {
            w.to_owned()
        } else {
            format!("{path} {w}")
        };
        if w.starts_with('-') || !facts.flags.contains_key(&longer) {
            break;
        }
        path = longer;
    }
    Owner::Ours(Some(path))
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

fn flag_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'
}

/// The flags in `text` (`--name`, a trailing `*` making it a prefix).
fn flags_in(text: &str) -> Vec<(usize, String)> {
    tokens(text, "--", flag_char)
        .into_iter()
        .filter(|(_, t)| t.len() > 2 && t.as_bytes()[2].is_ascii_alphanumeric())
        .map(|(at, t)| {
            let star = text[at + t.len()..].starts_with('*');
            (at, if star { format!("{t}*") } else { t.to_owned() })
        })
        .collect()
}

/// Whether `owner` knows `flag`.
fn knows(facts: &Facts, owner: &Owner, flag: &str) -> bool {
    let matches = |known: &String| match flag.strip_suffix('*') {
        Some(prefix) => known.starts_with(prefix),
        None => known == flag,
    };
    match owner {
        Owner::Foreign => true,
        Owner::Ours(Some(path)) => facts
            .flags
            .get(path.as_str())
            .is_some_and(|f| f.iter().any(matches)),
        Owner::Ours(None) => {
            FOREIGN_FLAGS.contains(&flag) || facts.flags.values().flatten().any(matches)
        }
    }
}

fn check_flags(text: &str, facts: &Facts, report: &mut impl FnMut(usize, String)) {
    let mut complain = |line: usize, owner: &Owner, flag: &str| {
        if !knows(facts, owner, flag) {
            let whose = match owner {
                Owner::Ours(Some(p)) if !p.is_empty() => {
                    format!("`kruntimes-scheduler {p} --help`")
                }
                Owner::Ours(Some(_)) => "`kruntimes-scheduler --help`".to_owned(),
                _ => "any `kruntimes-scheduler … --help`".to_owned(),
            };
            report(line, format!("flag `{flag}` is not listed by {whose}"));
        }
    };
    // Shell blocks: command by command, a `\` continuing the line's command.
    let mut carried: Option<String> = None;
    for (no, line, place) in lines(text) {
        let Place::Fence(lang) = place else {
            carried = None;
            continue;
        };
        if !is_shell(lang) {
            for (_, flag) in flags_in(line) {
                complain(no, &Owner::Ours(None), &flag);
            }
            continue;
        }
        let (code, comment) = split_comment(line);
        let (flags, open) = command_flags(code, &carried.take().unwrap_or_default(), facts);
        for (_, flag, who) in flags {
            complain(no, &who, &flag);
        }
        for (_, flag) in flags_in(comment) {
            complain(no, &Owner::Ours(None), &flag);
        }
        if code.trim_end().ends_with('\\') {
            carried = Some(open);
        }
    }
    // Prose, paragraph by paragraph: a code span is a command; flags
    // outside spans are this binary's.
    for (start_line, para) in paragraphs(text) {
        let line_of = |at: usize| start_line + para[..at].matches('\n').count();
        let mut rest_from = 0;
        let mut spans = Vec::new();
        while let Some(open) = para[rest_from..].find('`').map(|i| i + rest_from) {
            let Some(close) = para[open + 1..].find('`').map(|i| i + open + 1) else {
                break;
            };
            spans.push((open + 1, close));
            rest_from = close + 1;
        }
        for (at, flag) in flags_in(&para) {
            if !spans.iter().any(|&(a, b)| a <= at && at < b) {
                complain(line_of(at), &Owner::Ours(None), &flag);
            }
        }
        for &(a, b) in &spans {
            // A span may wrap: one command, offsets kept.
            let span = para[a..b].replace('\n', " ");
            for (at, flag, who) in command_flags(&span, "", facts).0 {
                complain(line_of(a + at), &who, &flag);
            }
        }
    }
}

/// A shell line's code and its `#` comment (a `#` starting a word, outside
/// single quotes).
fn split_comment(line: &str) -> (&str, &str) {
    let mut quoted = false;
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        match c {
            '\'' => quoted = !quoted,
            '#' if !quoted && prev.is_whitespace() => return (&line[..i], &line[i..]),
            _ => {}
        }
        prev = c;
    }
    (line, "")
}

/// Prose paragraphs (runs of non-blank lines outside fences), each with the
/// number of its first line.
fn paragraphs(text: &str) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut last = 0;
    for (no, line, place) in lines(text) {
        if place != Place::Prose || line.trim().is_empty() {
            last = 0;
            continue;
        }
        match out.last_mut() {
            Some((_, para)) if last + 1 == no => {
                para.push('\n');
                para.push_str(line);
            }
            _ => out.push((no, line.to_owned())),
        }
        last = no;
    }
    out
}

// === HTTP paths ===

/// Where the service's HTTP paths start.
const PATH_PREFIXES: &[&str] = &[
    "/v1/",
    "/scheduler/",
    "/admission/",
    "/metrics",
    "/healthz",
    "/readyz",
];

/// The HTTP paths of this service a line names, each with its offset:
/// written alone (after a space, quote, `(`, …) or after a host
/// (`localhost:8080/v1/runs`, `http://agent/v1/reservations`), up to its
/// query (`?`) or an optional part (`[`). A path ending in `/...` stands
/// for every path under it.
fn http_paths(line: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (at, _) in line.match_indices('/') {
        let rest = &line[at..];
        let Some(prefix) = PATH_PREFIXES.iter().find(|p| rest.starts_with(**p)) else {
            continue;
        };
        let before = &line[..at];
        let alone = before
            .chars()
            .next_back()
            .is_none_or(|c| c.is_whitespace() || "`'\"([|=".contains(c));
        if !alone && !after_host(before) {
            continue;
        }
        let len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || "/_.{}-".contains(c)))
            .unwrap_or(rest.len());
        let mut path = &rest[..len];
        if !path.ends_with("/...") {
            path = path.trim_end_matches('.');
        }
        // `/metrics` must end there (not `/metricsfoo`).
        if !prefix.ends_with('/') && path.len() != prefix.len() {
            continue;
        }
        out.push((at, path.to_owned()));
    }
    out
}

/// Whether `before` ends with a host: `name:port` or `scheme://name`.
fn after_host(before: &str) -> bool {
    let host_start = before
        .rfind(|c: char| !(c.is_ascii_alphanumeric() || ".:-".contains(c)))
        .map_or(0, |i| i + 1);
    let host = &before[host_start..];
    let with_port = host.rsplit_once(':').is_some_and(|(h, p)| {
        !h.is_empty() && !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())
    });
    let with_scheme = before[..host_start].ends_with("://") && !host.is_empty();
    with_port || with_scheme
}

fn check_http_paths(text: &str, facts: &Facts, report: &mut impl FnMut(usize, String)) {
    for (no, line, _) in lines(text) {
        for (_, path) in http_paths(line) {
            let known = match path.strip_suffix("...") {
                Some(prefix) => facts.served.iter().any(|s| s.starts_with(prefix)),
                None => facts.served.contains(&path),
            };
            if !known {
                report(
                    no,
                    format!(
                        "HTTP path `{path}` is not served by the service's or the agent's router"
                    ),
                );
            }
        }
    }
}

// === Metrics ===

fn check_metrics(text: &str, facts: &Facts, report: &mut impl FnMut(usize, String)) {
    let metric_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_';
    for (no, line, _) in lines(text) {
        for (at, name) in tokens(line, "kruntimes_", metric_char) {
            let after = &line[at + name.len()..];
            // The crate's name (`kruntimes_scheduler::workload`), and the
            // prefix alone.
            if name == "kruntimes_scheduler" || name == "kruntimes_" {
                continue;
            }
            let known = if after.starts_with('*') {
                facts.metrics.iter().any(|m| m.starts_with(name))
            } else {
                facts.metrics.contains(name)
            };
            if !known {
                report(
                    no,
                    format!("metric `{name}` is not exported by the service or the agent"),
                );
            }
        }
    }
}

// === Repository paths and links ===

/// Where the repository paths the docs name start.
const REPO_PREFIXES: &[&str] = &[
    "src/",
    "tests/",
    "manifests/",
    "scripts/",
    "examples/",
    "benches/",
    "docs/",
    "certs/",
];

/// Paths the docs name that are made by a command they show, not kept in
/// the repository.
const GENERATED: &[&str] = &["certs/out"];

fn check_repo_paths(text: &str, facts: &Facts, report: &mut impl FnMut(usize, String)) {
    let path_char = |c: char| c.is_ascii_alphanumeric() || "_./*-".contains(c);
    for (no, line, _) in lines(text) {
        for prefix in REPO_PREFIXES {
            for (_, token) in tokens(line, prefix, path_char) {
                let path = token.trim_end_matches(['.', ',', ':']);
                // A glob is checked up to its first `*`.
                let path = path.split('*').next().unwrap_or(path);
                if GENERATED.iter().any(|g| path.starts_with(g)) {
                    continue;
                }
                if !facts.root.join(path).exists() {
                    report(no, format!("repository path `{path}` does not exist"));
                }
            }
        }
    }
}

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces
/// as hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a markdown text's headings (a repeated one gets `-1`,
/// `-2`, … as on GitHub).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, line, place) in lines(text) {
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        if place != Place::Prose {
            continue;
        }
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let s = slug(heading);
        let n = seen.entry(s.clone()).or_default();
        out.insert(if *n == 0 {
            s.clone()
        } else {
            format!("{s}-{n}")
        });
        *n += 1;
    }
    out
}

/// Relative links (`[text](target)`, images too) in prose, outside code
/// spans, each with its line.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (start_line, para) in paragraphs(text) {
        let mut in_span = false;
        let bytes = para.as_bytes();
        for i in 0..bytes.len() {
            match bytes[i] {
                b'`' => in_span = !in_span,
                b']' if !in_span && bytes.get(i + 1) == Some(&b'(') => {
                    let Some(len) = para[i + 2..].find(')') else {
                        continue;
                    };
                    let target = &para[i + 2..i + 2 + len];
                    if !target.contains("://") && !target.starts_with("mailto:") {
                        let line = start_line + para[..i].matches('\n').count();
                        out.push((line, target.to_owned()));
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// Checks the links of the doc at `doc_path` (relative to the root), whose
/// text is `text`.
fn check_links(doc_path: &str, text: &str, facts: &Facts, report: &mut impl FnMut(usize, String)) {
    let dir = Path::new(doc_path).parent().unwrap_or(Path::new(""));
    for (no, target) in links(text) {
        let (file, anchor) = match target.split_once('#') {
            Some((f, a)) => (f, Some(a)),
            None => (target.as_str(), None),
        };
        if file.is_empty() {
            if let Some(anchor) = anchor.filter(|a| !anchors(text).contains(*a)) {
                report(
                    no,
                    format!("link `{target}`: {doc_path} has no heading with anchor #{anchor}"),
                );
            }
            continue;
        }
        let Ok(resolved) = facts.root.join(dir).join(file).canonicalize() else {
            report(
                no,
                format!("link `{target}` does not resolve: no file {file}"),
            );
            continue;
        };
        if !resolved.starts_with(facts.root.canonicalize().unwrap()) {
            report(no, format!("link `{target}` leaves the repository"));
            continue;
        }
        let Some(anchor) = anchor else { continue };
        let is_md = resolved.extension().is_some_and(|e| e == "md");
        let ok =
            is_md && std::fs::read_to_string(&resolved).is_ok_and(|t| anchors(&t).contains(anchor));
        if !ok {
            report(
                no,
                format!("link `{target}`: {file} has no heading with anchor #{anchor}"),
            );
        }
    }
}

// === The checker ===

/// Every problem of one doc (`doc_path` relative to the repository root).
fn check(doc_path: &str, text: &str, facts: &Facts) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut report = |line: usize, what: String| {
        problems.push(Problem {
            doc: doc_path.to_owned(),
            line,
            what,
        })
    };
    check_flags(text, facts, &mut report);
    check_http_paths(text, facts, &mut report);
    check_metrics(text, facts, &mut report);
    check_repo_paths(text, facts, &mut report);
    check_links(doc_path, text, facts, &mut report);
    problems.sort();
    problems.dedup();
    problems
}

/// README.md and every docs/*.md, as (path relative to the root, text).
fn documents() -> Vec<(String, String)> {
    let root = root();
    let mut names = vec!["README.md".to_owned()];
    let mut pages: Vec<String> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    pages.sort();
    names.extend(pages);
    names
        .into_iter()
        .map(|n| {
            let text = std::fs::read_to_string(root.join(&n)).unwrap();
            (n, text)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_docs_name_only_what_exists() {
    let docs = documents();
    assert!(docs.len() > 10, "README.md and the docs/ pages are read");
    let paths: BTreeSet<String> = docs
        .iter()
        .flat_map(|(_, text)| lines(text).into_iter().flat_map(|(_, l, _)| http_paths(l)))
        .map(|(_, p)| p)
        .collect();
    let facts = facts(&paths).await;
    let problems: Vec<String> = docs
        .iter()
        .flat_map(|(name, text)| check(name, text, &facts))
        .map(|p| p.to_string())
        .collect();
    assert!(
        problems.is_empty(),
        "the docs name {} things that do not exist:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

// === The checker's own tests ===

/// Facts small enough to read: a binary with `serve --listen` and
/// `explain pod --server`, one route, one counter and one histogram.
fn small_facts() -> Facts {
    let flags = |f: &[&str]| f.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    Facts {
        flags: BTreeMap::from([
            (String::new(), flags(&["--help", "--log-format"])),
            (
                "serve".to_owned(),
                flags(&["--help", "--listen", "--log-format"]),
            ),
            ("explain".to_owned(), flags(&["--help"])),
            ("explain pod".to_owned(), flags(&["--help", "--server"])),
            ("certs".to_owned(), flags(&["--help", "--out"])),
        ]),
        served: ["/v1/runs".to_owned(), "/scheduler/filter".to_owned()].into(),
        metrics: metric_names(
            "# TYPE kruntimes_runs_scheduled counter\nkruntimes_runs_scheduled_total 1\n\
             # TYPE kruntimes_decision_duration_seconds histogram\n",
        ),
        root: root(),
    }
}

const BAD_DOC: &str = "# A page

Start it with `kruntimes-scheduler serve --lisen 127.0.0.1:8080`, then
ask `GET /v1/nope` and watch `kruntimes_runs_lost_total`.

```sh
kruntimes-scheduler explain pod ml/p --server http://x --token T
curl -s localhost:8080/v1/runs/gone
```

The code is in `src/no_such_module.rs`; see [the missing page](missing.md)
and [a missing heading](#no-such-heading).
";

#[test]
fn a_bad_doc_is_refused_naming_the_file_the_line_and_the_thing() {
    let problems: Vec<String> = check("docs/bad.md", BAD_DOC, &small_facts())
        .iter()
        .map(|p| p.to_string())
        .collect();
    assert_eq!(
        problems,
        [
            "docs/bad.md:3: flag `--lisen` is not listed by `kruntimes-scheduler serve --help`",
            "docs/bad.md:4: HTTP path `/v1/nope` is not served by the service's or the agent's router",
            "docs/bad.md:4: metric `kruntimes_runs_lost_total` is not exported by the service or the agent",
            "docs/bad.md:7: flag `--token` is not listed by `kruntimes-scheduler explain pod --help`",
            "docs/bad.md:8: HTTP path `/v1/runs/gone` is not served by the service's or the agent's router",
            "docs/bad.md:11: link `missing.md` does not resolve: no file missing.md",
            "docs/bad.md:11: repository path `src/no_such_module.rs` does not exist",
            "docs/bad.md:12: link `#no-such-heading`: docs/bad.md has no heading with anchor #no-such-heading",
        ]
    );
}

const GOOD_DOC: &str = "# A page

## Try it

`serve --listen 0.0.0.0:8443` (or `--log-format json`) serves `/v1/runs`
and the extender under `/scheduler/...`; `kruntimes_runs_scheduled_total`
counts, `kruntimes_decision_duration_seconds_bucket` times. Benchmarks take
`cargo bench --bench gang -- --warm-up-time 1
--measurement-time 3`. See `src/lib.rs`, [the page](../README.md) and
[this heading](#try-it); [the spec](https://kubernetes.io/docs/x.v1/#y).

```sh
kubectl get events --field-selector reason=Scheduled -o yaml | grep --count x
cargo run --release --example extender_load -- --nodes 5 && \\
  cargo run -- serve --listen 127.0.0.1:9 \\
    --log-format json   # then --listen elsewhere
POD=$(kubectl get lease x -o jsonpath='{.a}' --sort-by=x) kruntimes-scheduler explain pod a/b --server \"$(echo --nope)\"
kubectl apply -f examples/manifests/gang.yaml
kruntimes-scheduler certs --out certs/out   # certs/out is made by the command
```

Kubernetes groups (`resource.k8s.io/v1`, `scheduling.k8s.io/v1beta1/x`) and
`use kruntimes_scheduler::workload;` are not this service's.
";

#[test]
fn a_good_doc_passes_and_other_programs_keep_their_flags() {
    let problems = check("docs/good.md", GOOD_DOC, &small_facts());
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_flags_come_from_every_help_of_the_binary() {
    let flags = cli_flags();
    for (sub, flag) in [
        ("", "--log-format"),
        ("serve", "--gang-wait"),
        ("serve", "--manage-webhooks"),
        ("agent", "--max-bypass"),
        ("certs", "--out"),
        ("explain pod", "--examples"),
        ("workload validate", "--old"),
    ] {
        assert!(
            flags.get(sub).is_some_and(|f| f.contains(flag)),
            "{sub:?} has no {flag}: {flags:?}"
        );
    }
    assert!(!flags.values().any(|f| f.contains("--no-such-flag")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_is_told_from_the_fallback() {
    let asked: BTreeSet<String> = [
        "/v1/runs/plan",            // POST only: a 405 to GET
        "/v1/objects",              // standalone objects API
        "/v1/explain/pod",          // a 400 without its query
        "/v1/reservations/{uid}",   // the agent's, DELETE only
        "/admission/validate/runs", // admission
        "/scheduler/bind",          // extender
        "/metrics",
        "/v1/no-such-thing", // the fallback's 404
        "/admission/validate/nothing",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let facts = facts(&asked).await;
    let served: Vec<&str> = facts.served.iter().map(String::as_str).collect();
    assert_eq!(
        served,
        [
            "/admission/validate/runs",
            "/metrics",
            "/scheduler/bind",
            "/v1/explain/pod",
            "/v1/objects",
            "/v1/reservations/{uid}",
            "/v1/runs/plan",
        ]
    );
    for m in [
        "kruntimes_leader",
        "kruntimes_decision_duration_seconds_bucket",
        "kruntimes_watch_errors_total",
        "kruntimes_agent_admissions_total",
    ] {
        assert!(facts.metrics.contains(m), "{m} is exported");
    }
}
