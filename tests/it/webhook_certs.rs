//! Self-managed webhook certificates and the shipped webhook
//! configurations, through the test API server: replicas racing to create
//! the Secret, the patched CA bundle verifying the served certificate over
//! a real TLS handshake, renewal under handshakes, the optional
//! ownerReference re-resolved on every pass, configurations that are
//! patched but never created, repair of a corrupt Secret, a blanked
//! `caBundle` or a re-applied kustomization, and the Run webhook's
//! match condition skipping only requests the webhook allows anyway.

use crate::apiserver;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use apiserver::{FakeApi, Res};
use axum::Router;
use axum::routing::get;
use base64::Engine as _;
use kruntimes_scheduler::metrics::Metrics;
use kruntimes_scheduler::webhooks::{
    self, Lifetimes, ManageConfig, ManagedTls, OwnerKind, OwnerSpec, WebhookTarget,
};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tokio::net::TcpStream;

const NS: &str = "kruntimes-system";
const NAME: &str = "kruntimes-scheduler";
const SNI: &str = "kruntimes-scheduler.kruntimes-system.svc";
const DAY: Duration = Duration::from_secs(86_400);

fn config(lifetimes: Lifetimes, check_every: Duration) -> ManageConfig {
    ManageConfig {
        target: WebhookTarget {
            config_name: NAME.into(),
            service: NAME.into(),
            namespace: NS.into(),
            port: 443,
            exclude_namespaces: vec!["monitoring".into()],
            mutate_pods: true,
        },
        secret: "kruntimes-scheduler-tls".into(),
        owner: None,
        lifetimes,
        check_every,
    }
}

fn default_config() -> ManageConfig {
    config(
        Lifetimes {
            ca_validity: 3650 * DAY,
            serving_validity: 365 * DAY,
            renew_before: 30 * DAY,
        },
        Duration::from_secs(60),
    )
}

/// The webhook configurations as `kubectl apply -k` leaves them: the
/// shipped file, stored as is (every webhook `Ignore`, no `caBundle`).
fn ship(api: &FakeApi) {
    for doc in shipped() {
        let res = match doc["kind"].as_str() {
            Some("ValidatingWebhookConfiguration") => Res::ValidatingWebhookConfigurations,
            Some("MutatingWebhookConfiguration") => Res::MutatingWebhookConfigurations,
            k => panic!("unexpected {k:?} in webhooks.yaml"),
        };
        api.put_cluster(res, doc);
    }
}

/// The documents of `manifests/run-scheduler/webhooks.yaml`.
fn shipped() -> Vec<Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/manifests/run-scheduler/webhooks.yaml"
    );
    let text = std::fs::read_to_string(path).expect("shipped webhooks");
    serde_saphyr::from_multiple(&text).expect("YAML")
}

/// `(webhook name, failurePolicy)` of a stored configuration.
fn policies(api: &FakeApi, res: Res) -> Vec<(String, String)> {
    let cfg = api.get_cluster(res, NAME).expect("configuration");
    cfg["webhooks"]
        .as_array()
        .expect("webhooks")
        .iter()
        .map(|w| {
            (
                w["name"].as_str().unwrap_or_default().to_owned(),
                w["failurePolicy"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// A replica's TLS listener (real `tls::serve`), answering `/healthz`.
struct Listener {
    addr: std::net::SocketAddr,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn listen(managed: &ManagedTls) -> Listener {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let router = Router::new().route("/healthz", get(|| async { "ok" }));
    let task = tokio::spawn(kruntimes_scheduler::tls::serve(
        listener,
        router,
        Some(managed.tls()),
        std::future::pending(),
    ));
    Listener { addr, task }
}

fn pem_certs(pem: &[u8]) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .expect("PEM certificates")
}

fn secret_data(api: &FakeApi, key: &str) -> Vec<u8> {
    let s = api
        .get(Res::Secrets, NS, "kruntimes-scheduler-tls")
        .expect("Secret");
    let b64 = s["data"][key].as_str().expect("key present");
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("base64")
}

/// The `caBundle` (decoded PEM) of each applied configuration, validating
/// first; within one configuration every webhook has the same.
fn registered_bundles(api: &FakeApi) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for res in [
        Res::ValidatingWebhookConfigurations,
        Res::MutatingWebhookConfigurations,
    ] {
        let cfg = api.get_cluster(res, NAME).expect("configuration applied");
        let bundles: Vec<Vec<u8>> = cfg["webhooks"]
            .as_array()
            .expect("webhooks")
            .iter()
            .map(|w| {
                let b64 = w["clientConfig"]["caBundle"].as_str().expect("caBundle");
                base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .expect("base64")
            })
            .collect();
        assert!(!bundles.is_empty());
        assert!(
            bundles.windows(2).all(|w| w[0] == w[1]),
            "one bundle in {res:?}"
        );
        out.push(bundles[0].clone());
    }
    out
}

/// The one `caBundle` of both configurations (when no apply is in flight).
fn registered_bundle(api: &FakeApi) -> Vec<u8> {
    let mut b = registered_bundles(api);
    assert_eq!(b[0], b[1], "both configurations carry the same bundle");
    b.swap_remove(0)
}

/// A TLS handshake trusting only `bundle`, with the Service name as SNI, then
/// `GET /healthz`: the leaf the server presented.
async fn handshake(addr: std::net::SocketAddr, bundle: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut roots = rustls::RootCertStore::empty();
    for c in pem_certs(bundle) {
        roots.add(c)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(addr).await?;
    let mut tls = connector.connect(ServerName::try_from(SNI)?, tcp).await?;
    let leaf = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.as_ref().to_vec())
        .ok_or_else(|| anyhow::anyhow!("no peer certificate"))?;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    tls.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await?;
    let mut answer = Vec::new();
    tls.read_to_end(&mut answer).await?;
    anyhow::ensure!(
        answer.starts_with(b"HTTP/1.1 200"),
        "unexpected answer {:?}",
        String::from_utf8_lossy(&answer)
    );
    Ok(leaf)
}

fn served_leaf(m: &ManagedTls) -> Vec<u8> {
    m.tls().current().cert[0].as_ref().to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_racing_replicas_create_one_secret_and_serve_the_same_certificate() {
    let api = FakeApi::start().await;
    ship(&api);
    // Both creates wait until both replicas have found no Secret and POSTed.
    api.inner.lock().webhooks.create_gate = Some(Arc::new(tokio::sync::Barrier::new(2)));
    let (a, b) = tokio::join!(
        webhooks::start(api.client(), default_config(), Arc::new(Metrics::default())),
        webhooks::start(api.client(), default_config(), Arc::new(Metrics::default())),
    );
    let (a, b) = (a.expect("replica a"), b.expect("replica b"));
    {
        let g = api.inner.lock();
        assert_eq!(g.webhooks.secret_creates, 1, "one Secret created");
        assert_eq!(g.webhooks.secret_create_conflicts, 1, "the loser got 409");
        assert_eq!(g.webhooks.secret_updates, 0, "the loser did not overwrite");
    }
    assert_eq!(api.list(Res::Secrets).len(), 1);
    assert_eq!(a.serving_chain(), b.serving_chain());
    assert_eq!(a.ca_bundle(), b.ca_bundle());
    assert_eq!(served_leaf(&a), served_leaf(&b));
    assert_eq!(secret_data(&api, "tls.crt"), a.serving_chain().into_bytes());
    let secret = api
        .get(Res::Secrets, NS, "kruntimes-scheduler-tls")
        .expect("Secret");
    assert_eq!(secret["type"], "kubernetes.io/tls");
    // A third replica starting later reads what is there and writes nothing.
    let c = webhooks::start(api.client(), default_config(), Arc::new(Metrics::default()))
        .await
        .expect("replica c");
    assert_eq!(c.serving_chain(), a.serving_chain());
    let g = api.inner.lock();
    assert_eq!(
        (g.webhooks.secret_creates, g.webhooks.secret_updates),
        (1, 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_renewing_at_once_write_one_renewal() {
    let api = FakeApi::start().await;
    ship(&api);
    webhooks::start(api.client(), default_config(), Arc::new(Metrics::default()))
        .await
        .expect("first start");
    let before = secret_data(&api, "tls.crt");
    // Under these lifetimes the 1-year certificate is due (400 days before
    // expiry); a fresh 800-day one is not.
    let due = config(
        Lifetimes {
            ca_validity: 3650 * DAY,
            serving_validity: 800 * DAY,
            renew_before: 400 * DAY,
        },
        Duration::from_secs(60),
    );
    // Both updates wait until both replicas have read the same resourceVersion.
    api.inner.lock().webhooks.update_gate = Some(Arc::new(tokio::sync::Barrier::new(2)));
    let secrets = kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(api.client(), NS);
    let now = time::OffsetDateTime::now_utc;
    let (a, b) = tokio::join!(
        webhooks::ensure_secret(&secrets, &due, now),
        webhooks::ensure_secret(&secrets, &due, now),
    );
    let (a, b) = (a.expect("replica a"), b.expect("replica b"));
    let mut outcomes = [a.2, b.2];
    outcomes.sort_by_key(|o| format!("{o:?}"));
    assert_eq!(
        outcomes,
        [
            webhooks::SecretOutcome::Read,
            webhooks::SecretOutcome::Renewed
        ],
        "one renewed, the other read the renewal back"
    );
    assert_eq!(a.0, b.0, "both hold the same material");
    {
        let g = api.inner.lock();
        assert_eq!(g.webhooks.secret_updates, 1);
        assert_eq!(g.webhooks.secret_update_conflicts, 1, "the loser got 409");
    }
    let after = secret_data(&api, "tls.crt");
    assert_ne!(after, before);
    assert_eq!(after, a.0.tls_crt.into_bytes());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registered_ca_bundle_verifies_the_served_certificate() {
    let api = FakeApi::start().await;
    ship(&api);
    let metrics = Arc::new(Metrics::default());
    let managed = webhooks::start(api.client(), default_config(), metrics.clone())
        .await
        .expect("start");
    // Nothing is patched before the listener exists: as shipped, every
    // webhook is Ignore and has no caBundle.
    for res in [
        Res::ValidatingWebhookConfigurations,
        Res::MutatingWebhookConfigurations,
    ] {
        assert!(policies(&api, res).iter().all(|(_, p)| p == "Ignore"));
        let cfg = api.get_cluster(res, NAME).expect("shipped");
        assert!(
            cfg["webhooks"]
                .as_array()
                .expect("webhooks")
                .iter()
                .all(|w| w["clientConfig"].get("caBundle").is_none())
        );
    }
    let listener = listen(&managed).await;
    managed.register().await.expect("register");

    let bundle = registered_bundle(&api);
    assert_eq!(bundle, secret_data(&api, "ca.crt"));
    let leaf = handshake(listener.addr, &bundle).await.expect("handshake");
    assert_eq!(leaf, served_leaf(&managed));

    // Another CA does not verify it; neither does another name.
    let other = kruntimes_scheduler::certs::generate(&["x".into()]).expect("other CA");
    assert!(
        handshake(listener.addr, other.ca_pem.as_bytes())
            .await
            .is_err()
    );

    // Server-side apply, own field manager, forced.
    {
        let g = api.inner.lock();
        assert!(!g.webhooks.applies.is_empty());
        for (res, name, manager, force) in &g.webhooks.applies {
            assert!(matches!(
                res,
                Res::ValidatingWebhookConfigurations | Res::MutatingWebhookConfigurations
            ));
            assert_eq!(
                (name.as_str(), manager.as_str(), *force),
                (NAME, "kruntimes-scheduler", true)
            );
        }
    }
    // Run validation is promoted to Fail; the rest stay Ignore.
    assert_eq!(
        policies(&api, Res::ValidatingWebhookConfigurations),
        [
            ("validate-runs.kruntimes.io", "Fail"),
            ("validate-podgroups.scheduling.kruntimes.io", "Ignore"),
            (
                "validate-compositepodgroups.scheduling.kruntimes.io",
                "Ignore"
            ),
            ("validate-workloads.scheduling.kruntimes.io", "Ignore"),
        ]
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
    );
    // Only gets and patches of the configurations, by name: never a create.
    {
        let g = api.inner.lock();
        let calls: BTreeSet<(String, String)> = g
            .requests
            .iter()
            .filter(|r| r.resource.ends_with("webhookconfigurations"))
            .map(|r| (r.verb.clone(), r.name.clone()))
            .collect();
        assert_eq!(
            calls,
            BTreeSet::from([
                ("get".to_owned(), NAME.to_owned()),
                ("patch".to_owned(), NAME.to_owned())
            ])
        );
    }
    // Every webhook calls the Service and skips kube-system, its own namespace,
    // the configured ones and namespaces that opt out.
    for res in [
        Res::ValidatingWebhookConfigurations,
        Res::MutatingWebhookConfigurations,
    ] {
        let cfg = api.get_cluster(res, NAME).expect("applied");
        for w in cfg["webhooks"].as_array().expect("webhooks") {
            assert_eq!(w["clientConfig"]["service"]["name"], NAME);
            assert_eq!(w["clientConfig"]["service"]["namespace"], NS);
            assert_eq!(w["clientConfig"]["service"]["port"], 443);
            assert_eq!(
                w["namespaceSelector"]["matchExpressions"],
                json!([{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                    "values": ["kube-system", NS, "monitoring"]},
                    {"key": "kruntimes.io/webhooks", "operator": "NotIn", "values": ["disabled"]}])
            );
        }
    }
    // The expiry is exported.
    let text = metrics.encode();
    let serving = text
        .lines()
        .find(|l| {
            l.starts_with("kruntimes_certificate_expiry_timestamp_seconds{certificate=\"Serving\"}")
        })
        .expect("serving expiry exported");
    let ts: i64 = serving.rsplit(' ').next().unwrap().parse().expect("number");
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    assert!(
        ts > now + 364 * 86_400 && ts <= now + 366 * 86_400,
        "{serving}"
    );
    assert!(text.contains("kruntimes_certificate_expiry_timestamp_seconds{certificate=\"Ca\"}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_swaps_the_served_certificate_with_no_failed_handshake() {
    let api = FakeApi::start().await;
    ship(&api);
    // Serving certificates of 6s renewed with 4s left: a new one every ~2s.
    let cfg = config(
        Lifetimes {
            ca_validity: 365 * DAY,
            serving_validity: Duration::from_secs(6),
            renew_before: Duration::from_secs(4),
        },
        Duration::from_millis(200),
    );
    let a = webhooks::start(api.client(), cfg.clone(), Arc::new(Metrics::default()))
        .await
        .expect("a");
    let b = webhooks::start(api.client(), cfg, Arc::new(Metrics::default()))
        .await
        .expect("b");
    let (la, lb) = (listen(&a).await, listen(&b).await);
    a.register().await.expect("register a");
    b.register().await.expect("register b");
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let run = |m: ManagedTls| {
        let mut rx = stop_rx.clone();
        tokio::spawn(m.run(async move {
            let _ = rx.wait_for(|s| *s).await;
        }))
    };
    let (ra, rb) = (run(a.clone()), run(b.clone()));

    let mut seen: Vec<Vec<u8>> = Vec::new();
    let mut handshakes = 0usize;
    let deadline = Instant::now() + Duration::from_secs(9);
    while Instant::now() < deadline {
        for addr in [la.addr, lb.addr] {
            // Each configuration's bundle as the API server has it now.
            for bundle in registered_bundles(&api) {
                let leaf = handshake(addr, &bundle)
                    .await
                    .unwrap_or_else(|e| panic!("handshake {handshakes} failed: {e:#}"));
                handshakes += 1;
                if !seen.contains(&leaf) {
                    seen.push(leaf);
                }
            }
        }
    }
    let _ = stop_tx.send(true);
    let _ = tokio::join!(ra, rb);
    assert!(
        seen.len() >= 3,
        "expected at least two renewals, saw {} certificates in {handshakes} handshakes",
        seen.len()
    );
    let (creates, updates) = {
        let g = api.inner.lock();
        (g.webhooks.secret_creates, g.webhooks.secret_updates)
    };
    assert_eq!(creates, 1);
    assert!(updates >= 2, "renewals written to the Secret");
    // Both replicas converged on the Secret's certificate.
    a.check().await.expect("check a");
    b.check().await.expect("check b");
    let chain = secret_data(&api, "tls.crt");
    assert_eq!(a.serving_chain().into_bytes(), chain);
    assert_eq!(b.serving_chain().into_bytes(), chain);
    // The CA did not change: one CA in the bundle.
    assert_eq!(pem_certs(&registered_bundle(&api)).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ca_rotation_trusts_old_and_new_ca_with_no_failed_handshake() {
    let api = FakeApi::start().await;
    ship(&api);
    // A CA of 16s is replaced when less than 4s + 2.5s is left: at ~9.5s.
    // (2.5s of margin: a pass delayed less than that never serves an
    // expired certificate, even on a loaded machine.)
    let cfg = config(
        Lifetimes {
            ca_validity: Duration::from_secs(16),
            serving_validity: Duration::from_secs(4),
            renew_before: Duration::from_millis(2500),
        },
        Duration::from_millis(200),
    );
    let a = webhooks::start(api.client(), cfg.clone(), Arc::new(Metrics::default()))
        .await
        .expect("a");
    let b = webhooks::start(api.client(), cfg, Arc::new(Metrics::default()))
        .await
        .expect("b");
    let first_ca = pem_certs(a.ca_bundle().as_bytes())[0].clone();
    let (la, lb) = (listen(&a).await, listen(&b).await);
    a.register().await.expect("register a");
    b.register().await.expect("register b");
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let run = |m: ManagedTls| {
        let mut rx = stop_rx.clone();
        tokio::spawn(m.run(async move {
            let _ = rx.wait_for(|s| *s).await;
        }))
    };
    let (ra, rb) = (run(a.clone()), run(b.clone()));
    let mut overlap_seen = false;
    let mut rotated = false;
    let deadline = Instant::now() + Duration::from_secs(14);
    while Instant::now() < deadline && !(overlap_seen && rotated) {
        for addr in [la.addr, lb.addr] {
            for bundle in registered_bundles(&api) {
                let cas = pem_certs(&bundle);
                overlap_seen |= cas.len() == 2 && cas[1] == first_ca;
                rotated |= cas[0] != first_ca;
                handshake(addr, &bundle).await.unwrap_or_else(|e| {
                    panic!("handshake failed (bundle of {}): {e:#}", cas.len())
                });
            }
        }
    }
    let _ = stop_tx.send(true);
    let _ = tokio::join!(ra, rb);
    assert!(rotated, "the CA was replaced");
    assert!(overlap_seen, "old and new CA were registered together");
    // Two more passes: both replicas serve a certificate of the new CA alone.
    for _ in 0..2 {
        a.check().await.expect("check a");
        b.check().await.expect("check b");
    }
    let bundle = registered_bundle(&api);
    let new_ca_only = pem_certs(&bundle)[0].clone();
    let pem = format!(
        "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
        base64::engine::general_purpose::STANDARD.encode(new_ca_only.as_ref())
    );
    for addr in [la.addr, lb.addr] {
        handshake(addr, pem.as_bytes())
            .await
            .expect("served by the new CA");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_is_resolved_again_on_every_pass() {
    let api = FakeApi::start().await;
    ship(&api);
    let cfg = ManageConfig {
        owner: Some(OwnerSpec {
            kind: OwnerKind::ClusterRole,
            name: NAME.into(),
        }),
        ..default_config()
    };
    let managed = webhooks::start(api.client(), cfg, Arc::new(Metrics::default()))
        .await
        .expect("start: the owner is not needed yet");
    let _l = listen(&managed).await;
    // Without the owner the pass fails and patches nothing.
    let err = managed.register().await.expect_err("owner missing");
    assert!(
        format!("{err:#}").contains("ClusterRole/kruntimes-scheduler"),
        "{err:#}"
    );
    assert!(
        policies(&api, Res::ValidatingWebhookConfigurations)
            .iter()
            .all(|(_, p)| p == "Ignore")
    );

    let uid = api.add_cluster_role(NAME);
    managed.register().await.expect("register");
    for res in [
        Res::ValidatingWebhookConfigurations,
        Res::MutatingWebhookConfigurations,
    ] {
        let cfg = api.get_cluster(res, NAME).expect("patched");
        // The garbage collector deletes dependents whose owner uid is gone;
        // without blockOwnerDeletion no finalizers permission is needed.
        assert_eq!(
            cfg["metadata"]["ownerReferences"],
            json!([{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "name": NAME, "uid": uid}])
        );
    }

    // The owner is recreated (new uid): the next pass of the same process
    // follows it, with no restart.
    api.delete(Res::ClusterRoles, "", NAME);
    let uid2 = api.add_cluster_role(NAME);
    assert_ne!(uid, uid2);
    managed.check().await.expect("next pass");
    for res in [
        Res::ValidatingWebhookConfigurations,
        Res::MutatingWebhookConfigurations,
    ] {
        let cfg = api.get_cluster(res, NAME).expect("patched");
        assert_eq!(cfg["metadata"]["ownerReferences"][0]["uid"], json!(uid2));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configurations_are_patched_never_created() {
    let api = FakeApi::start().await;
    let managed = webhooks::start(api.client(), default_config(), Arc::new(Metrics::default()))
        .await
        .expect("start");
    let _l = listen(&managed).await;
    let err = managed.register().await.expect_err("nothing shipped");
    let msg = format!("{err:#}");
    assert!(
        msg.contains("ValidatingWebhookConfiguration kruntimes-scheduler does not exist")
            && msg.contains("kubectl apply -k"),
        "{msg}"
    );
    assert!(
        api.get_cluster(Res::ValidatingWebhookConfigurations, NAME)
            .is_none()
    );
    assert!(
        api.get_cluster(Res::MutatingWebhookConfigurations, NAME)
            .is_none()
    );
    assert!(
        api.inner.lock().webhooks.applies.is_empty(),
        "no apply, so no create"
    );
    // Once the kustomization is applied, the next try patches them.
    ship(&api);
    managed.register().await.expect("register");
    assert_eq!(registered_bundle(&api), managed.ca_bundle().into_bytes());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reapplied_kustomization_is_put_back_and_keeps_working() {
    let api = FakeApi::start().await;
    ship(&api);
    let managed = webhooks::start(api.client(), default_config(), Arc::new(Metrics::default()))
        .await
        .expect("start");
    let l = listen(&managed).await;
    managed.register().await.expect("register");
    let good = registered_bundle(&api);
    // `kubectl apply -k` again (an upgrade): the shipped policies come
    // back (Ignore), the caBundle the file does not carry stays.
    for res in [
        Res::ValidatingWebhookConfigurations,
        Res::MutatingWebhookConfigurations,
    ] {
        let mut live = api.get_cluster(res, NAME).expect("live");
        let file = shipped()
            .into_iter()
            .find(|d| d["kind"] == live["kind"])
            .expect("shipped kind");
        for (w, f) in live["webhooks"]
            .as_array_mut()
            .expect("webhooks")
            .iter_mut()
            .zip(file["webhooks"].as_array().expect("file webhooks"))
        {
            w["failurePolicy"] = f["failurePolicy"].clone();
            w["namespaceSelector"] = f["namespaceSelector"].clone();
        }
        api.put_cluster(res, live);
    }
    // Still working in between: the bundle verifies, nothing is Fail.
    assert_eq!(registered_bundle(&api), good);
    handshake(l.addr, &good)
        .await
        .expect("verifies after re-apply");
    assert!(
        policies(&api, Res::ValidatingWebhookConfigurations)
            .iter()
            .all(|(_, p)| p == "Ignore")
    );
    // The next pass promotes Run validation again.
    managed.check().await.expect("pass");
    assert_eq!(
        policies(&api, Res::ValidatingWebhookConfigurations)[0],
        ("validate-runs.kruntimes.io".to_owned(), "Fail".to_owned())
    );
    assert_eq!(registered_bundle(&api), good);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_secret_is_replaced() {
    let api = FakeApi::start().await;
    ship(&api);
    let garbage = base64::engine::general_purpose::STANDARD.encode("not a certificate");
    api.put(
        Res::Secrets,
        json!({"metadata": {"name": "kruntimes-scheduler-tls", "namespace": NS,
            "labels": {"keep": "me"}},
            "type": "kubernetes.io/tls",
            "data": {"tls.crt": garbage, "tls.key": garbage, "ca.crt": garbage}}),
    );
    let managed = webhooks::start(api.client(), default_config(), Arc::new(Metrics::default()))
        .await
        .expect("start");
    {
        let g = api.inner.lock();
        assert_eq!(
            (g.webhooks.secret_creates, g.webhooks.secret_updates),
            (0, 1)
        );
    }
    let s = api
        .get(Res::Secrets, NS, "kruntimes-scheduler-tls")
        .expect("Secret");
    assert_eq!(s["metadata"]["labels"]["keep"], "me", "metadata kept");
    assert_eq!(s["type"], "kubernetes.io/tls");
    assert_eq!(
        pem_certs(&secret_data(&api, "ca.crt")).len(),
        1,
        "no garbage kept"
    );
    let l = listen(&managed).await;
    managed.register().await.expect("register");
    handshake(l.addr, &registered_bundle(&api))
        .await
        .expect("the new certificate verifies");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_of_the_manual_flow_gets_a_new_ca_and_keeps_the_old_in_the_bundle() {
    let api = FakeApi::start().await;
    ship(&api);
    let names = kruntimes_scheduler::webhooks::material::service_dns_names(NAME, NS);
    let manual = kruntimes_scheduler::certs::generate(&names).expect("manual certs");
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    api.put(
        Res::Secrets,
        json!({"metadata": {"name": "kruntimes-scheduler-tls", "namespace": NS},
            "type": "Opaque",
            "data": {"tls.crt": b64(&manual.chain_pem), "tls.key": b64(&manual.key_pem),
                "ca.crt": b64(&manual.ca_pem)}}),
    );
    let managed = webhooks::start(api.client(), default_config(), Arc::new(Metrics::default()))
        .await
        .expect("start");
    let bundle = pem_certs(managed.ca_bundle().as_bytes());
    assert_eq!(bundle.len(), 2, "new CA, then the manual one");
    assert_eq!(bundle[1], pem_certs(manual.ca_pem.as_bytes())[0]);
    let s = api
        .get(Res::Secrets, NS, "kruntimes-scheduler-tls")
        .expect("Secret");
    assert_eq!(s["type"], "Opaque", "the immutable type is kept");
    assert!(!secret_data(&api, "ca.key").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blanked_ca_bundle_is_restored_by_the_next_pass() {
    let api = FakeApi::start().await;
    ship(&api);
    let managed = webhooks::start(api.client(), default_config(), Arc::new(Metrics::default()))
        .await
        .expect("start");
    let l = listen(&managed).await;
    managed.register().await.expect("register");
    let good = registered_bundle(&api);
    // As a re-applied manifest with an empty caBundle would leave it.
    let mut cfg = api
        .get_cluster(Res::ValidatingWebhookConfigurations, NAME)
        .expect("applied");
    for w in cfg["webhooks"].as_array_mut().expect("webhooks") {
        w["clientConfig"]["caBundle"] = Value::String(String::new());
    }
    api.put_cluster(Res::ValidatingWebhookConfigurations, cfg);
    assert!(!managed.check().await.expect("check"), "same certificate");
    assert_eq!(registered_bundle(&api), good);
    handshake(l.addr, &good).await.expect("still verifies");
}

/// The kustomization ships the webhooks the service patches: the same
/// names, rules, selectors and conditions, every one `Ignore` and with no
/// `caBundle` until the service patches them.
#[test]
fn the_shipped_configurations_are_what_the_service_patches_before_promotion() {
    let docs = shipped();
    let target = WebhookTarget {
        config_name: NAME.into(),
        service: NAME.into(),
        namespace: NS.into(),
        port: 443,
        exclude_namespaces: vec![],
        mutate_pods: true,
    };
    let want = [
        serde_json::to_value(target.shipped_validating()).expect("json"),
        serde_json::to_value(target.shipped_mutating()).expect("json"),
    ];
    for want in want {
        let kind = want["kind"].as_str().expect("kind");
        let got = docs
            .iter()
            .find(|d| d["kind"] == kind)
            .unwrap_or_else(|| panic!("{kind} missing"));
        assert_eq!(got["metadata"]["name"], NAME);
        assert_eq!(got["metadata"]["labels"], want["metadata"]["labels"]);
        assert_eq!(got["webhooks"], want["webhooks"], "{kind} webhooks differ");
    }
}

// === the Run webhook's match condition, by behaviour ===

/// An admission review of a Run UPDATE from `old` to `new`.
fn run_update(old: &Value, new: &Value) -> String {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "r-1", "kind": {"group": "kruntimes.io", "version": "v1alpha1", "kind": "Run"},
            "resource": {"group": "kruntimes.io", "version": "v1alpha1", "resource": "runs"},
            "namespace": "ns", "name": "r", "operation": "UPDATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:namespace-controller"},
            "object": new, "oldObject": old}})
    .to_string()
}

/// Every UPDATE the condition skips (`spec` unchanged: finalizers removed,
/// labels changed, the deletion timestamp set, status changed) is one the
/// webhook would allow anyway, even for a Run whose requests are invalid
/// (written while the webhook was down): skipping it loses no check and
/// lets namespace deletion finish while the service is down. A spec change
/// is still sent, and still checked.
#[tokio::test]
async fn updates_the_run_condition_skips_are_allowed_by_the_webhook() {
    let app = crate::common::app("");
    let base = json!({"apiVersion": "kruntimes.io/v1alpha1", "kind": "Run",
        "metadata": {"name": "r", "namespace": "ns", "uid": "u", "finalizers": ["kruntimes.io/cleanup"]},
        "spec": {"runtime": "py", "resources": {"requests": {"runs": "1", "gpu": "1.5"}}}});
    type Edit = (&'static str, fn(&mut Value));
    let edits: [Edit; 4] = [
        ("finalizer removed", |v| {
            v["metadata"]["finalizers"] = json!([]);
        }),
        ("label added", |v| {
            v["metadata"]["labels"] = json!({"team": "a"})
        }),
        ("deleted", |v| {
            v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }),
        ("status written", |v| {
            v["status"] = json!({"phase": "Failed"})
        }),
    ];
    for (what, edit) in edits {
        let mut new = base.clone();
        edit(&mut new);
        assert_eq!(
            new["spec"], base["spec"],
            "{what}: a request the condition skips"
        );
        let r =
            crate::common::post(&app, "/admission/validate/runs", &run_update(&base, &new)).await;
        assert_eq!(r.status, 200, "{what}: {}", r.text);
        assert_eq!(r.body["response"]["allowed"], true, "{what}: {}", r.text);
    }
    // A spec change is what the condition sends; it is checked.
    let mut changed = base.clone();
    changed["spec"]["resources"]["requests"]["runs"] = json!("2");
    let r = crate::common::post(
        &app,
        "/admission/validate/runs",
        &run_update(&base, &changed),
    )
    .await;
    assert_eq!(r.body["response"]["allowed"], false, "{}", r.text);
}
