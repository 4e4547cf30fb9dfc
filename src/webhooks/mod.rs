//! Self-managed webhook certificates, and the CA bundle and policy of the
//! shipped webhook configurations (cluster mode, `--manage-webhooks`).
//!
//! ```text
//!  start(client, cfg, metrics)            ManagedTls::register()        ManagedTls::run(shutdown)
//!  ─ ensure the Secret:                   ─ GET both configurations     ─ every --cert-check-interval:
//!      GET; 404 → POST (409: read back)     by name (absent: an error,     ensure the Secret again,
//!      invalid/near expiry → PUT with       never a create)                re-patch the configurations
//!      resourceVersion (409: read back)   ─ owner (if any) resolved        (when registered), then swap
//!  ─ TlsConfigHandle over the pair          again → its uid                the served certificate
//!    (for crate::tls::serve)              ─ SSA patch: caBundle and the
//!                                           promised policy (field manager
//!                                           kruntimes-scheduler, force)
//! ```
//!
//! - **The configurations ship in the kustomization**
//!   (`manifests/run-scheduler/webhooks.yaml`) with every webhook
//!   `Ignore` and no `caBundle`, so right after `kubectl apply -k` no
//!   write fails because the CA is not there yet. The service never
//!   creates them (no role of the install may: a registered mutating
//!   webhook owns the cluster); it gets and patches them by name
//!   (`resourceNames`), filling in its CA bundle and promoting Run
//!   validation to `Fail` once its TLS listener answers. An absent
//!   configuration is an error of that pass, retried: re-apply the
//!   kustomization.
//! - **Race-free creation.** Replicas never generate over each other: a
//!   Secret is created with POST only when absent, and a replica that loses
//!   the race (`409 AlreadyExists`) reads back and serves what the winner
//!   wrote. Renewal replaces the Secret with a `resourceVersion`
//!   precondition; the loser of that race (`409 Conflict`) reads back too.
//! - **Validation.** What is read is parsed and checked ([`material`]): the
//!   CA matches its key, the serving certificate matches its key, chains to
//!   the CA and is valid for every Service DNS name. A corrupt Secret is
//!   replaced; a Secret of the manual `certs` flow (no `ca.key`) gets a new
//!   CA, with the old CA kept in the bundle.
//! - **Renewal.** The serving certificate (default 1 year) is replaced when
//!   less than `--cert-renew-before` (default 30 days) is left; the CA
//!   (default 10 years) when it would expire before a fresh serving
//!   certificate, and the old CA stays in `caBundle` until it expires.
//!   Every replica re-reads the Secret each `--cert-check-interval`, so one
//!   that did not renew swaps to the new certificate within one interval.
//!   The certificate sits behind [`crate::tls::CertResolver`]'s `ArcSwap`:
//!   a handshake sees the old or the new certificate, never none. When the
//!   CA changes, a replica serves a certificate of the new CA only from the
//!   pass after the one that first read it: by then every replica's passes
//!   apply a bundle holding both CAs, so no late apply of the old bundle
//!   can leave the API server without the new CA.
//! - **Kept correct.** The patch is a server-side apply under the field
//!   manager `kruntimes-scheduler` with `force`, of the whole webhook list,
//!   so a re-applied kustomization (which sets every policy back to
//!   `Ignore`; the `caBundle` it does not carry stays) or a hand edit of a
//!   policy, selector or bundle is put back by the next pass. It happens
//!   only from [`ManagedTls::register`] on, which the caller runs once its
//!   TLS listener is bound: Run validation is never `Fail` before a server
//!   can answer it.
//! - **Owner (optional).** With `--webhook-owner KIND/NAME` both
//!   configurations also carry an ownerReference to that cluster-scoped
//!   object; its uid is resolved again on every pass, so a recreated owner
//!   is followed. Off by default: the configurations belong to the
//!   kustomization (`kubectl delete -k` removes them), and an owner
//!   recreated under a new uid would let the garbage collector delete them
//!   before the next pass, with no role allowed to create them again.
//!   `blockOwnerDeletion` is never set (it would need `update` on the
//!   owner's `finalizers`).
//! - **Metric:** `kruntimes_certificate_expiry_timestamp_seconds{certificate="Serving"|"Ca"}`.
//!
//! Wiring, in `serve` (cluster mode):
//!
//! ```text
//! if let Some(cfg) = args.manage_webhooks.config().map_err(anyhow::Error::msg)? {
//!     let managed = webhooks::start(client.clone(), cfg, metrics.clone()).await?;
//!     let listener = TcpListener::bind(webhook_addr).await?;          // bound first
//!     let server = tokio::spawn(tls::serve(listener, router, Some(managed.tls()), shutdown()));
//!     managed.register().await?;                                      // then patched
//!     tokio::spawn(managed.clone().run(shutdown()));                  // renewal + re-patch
//! }
//! ```
//!
//! A failed `start` should fail startup (the pod restarts and tries
//! again); a failed `register` is retried with backoff; failures of later
//! passes are logged and retried.
//!
//! API calls (for RBAC): `get`, `create`, `update` on the Secret
//! (namespace of the Service); `get` and `patch` on
//! `validatingwebhookconfigurations` and `mutatingwebhookconfigurations`
//! named `--webhook-config-name` (never `create`); `get` on the owner, when
//! one is set.

pub mod config;
pub mod material;

use crate::model::refs::{is_dns_label, is_dns_subdomain};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, Patch, PatchParams, PostParams};
use parking_lot::Mutex;
use time::OffsetDateTime;

use crate::metrics::{CertificateKind, Metrics};
use crate::tls::TlsConfigHandle;

pub use config::WebhookTarget;
pub use material::{Assessment, Expiry, Lifetimes, Material};

/// Field manager of the server-side applies.
pub const FIELD_MANAGER: &str = "kruntimes-scheduler";

/// How often a Secret write is retried after losing a race.
const MAX_ATTEMPTS: usize = 8;

fn parse_bool(s: &str) -> Result<bool, String> {
    match s {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err(format!("{s:?} is not a boolean; write true or false")),
    }
}

/// Flags of self-managed webhook certificates and registration.
#[derive(Debug, Clone, clap::Args)]
pub struct ManageWebhookArgs {
    /// Cluster mode: keep a CA and serving certificate in a Secret, serve
    /// it, renew it, and register the webhook configurations with its CA.
    /// Given twice, the last one counts (a kustomize patch can append
    /// `--manage-webhooks=false`).
    #[arg(long, env = "KRS_MANAGE_WEBHOOKS", default_value = "false", num_args = 0..=1,
        default_missing_value = "true", value_parser = parse_bool,
        overrides_with = "manage_webhooks")]
    pub manage_webhooks: bool,
    /// Service the API server calls the webhooks through.
    #[arg(
        long,
        env = "KRS_WEBHOOK_SERVICE",
        default_value = "kruntimes-scheduler"
    )]
    pub webhook_service: String,
    /// Namespace of that Service and of the Secret (default: POD_NAMESPACE,
    /// else `kruntimes-system`).
    #[arg(long, env = "KRS_WEBHOOK_NAMESPACE")]
    pub webhook_namespace: Option<String>,
    /// Service port the API server calls.
    #[arg(long, env = "KRS_WEBHOOK_PORT", default_value_t = 443)]
    pub webhook_port: u16,
    /// Secret holding `ca.crt`, `ca.key`, `tls.crt` and `tls.key`.
    #[arg(
        long,
        env = "KRS_WEBHOOK_SECRET",
        default_value = "kruntimes-scheduler-tls"
    )]
    pub webhook_secret: String,
    /// Name of both webhook configurations.
    #[arg(
        long,
        env = "KRS_WEBHOOK_CONFIG_NAME",
        default_value = "kruntimes-scheduler"
    )]
    pub webhook_config_name: String,
    /// Cluster-scoped owner of the configurations, `ClusterRole/NAME` or
    /// `Namespace/NAME` (a bare NAME is a ClusterRole); deleting it deletes
    /// them, and its uid is resolved again on every pass. Empty (the
    /// default): no owner; the kustomization that ships them removes them.
    #[arg(long, env = "KRS_WEBHOOK_OWNER", default_value = "")]
    pub webhook_owner: String,
    /// Further namespaces no webhook matches (comma-separated), besides
    /// `kube-system` and the Service's own namespace, which never are.
    #[arg(long, env = "KRS_WEBHOOK_NAMESPACE_EXCLUDE", value_delimiter = ',')]
    pub webhook_namespace_exclude: Vec<String>,
    /// Register the Pod rewrite webhook (`Ignore`, only in namespaces
    /// labelled `kruntimes.io/pod-node-name-rewrite=enabled`).
    #[arg(long, env = "KRS_WEBHOOK_MUTATE_PODS", default_value = "true", num_args = 0..=1,
        default_missing_value = "true", value_parser = parse_bool,
        overrides_with = "webhook_mutate_pods")]
    pub webhook_mutate_pods: bool,
    /// Validity of a new serving certificate.
    #[arg(long, env = "KRS_CERT_VALIDITY", default_value = "365d", value_parser = crate::transport::parse_duration)]
    pub cert_validity: Duration,
    /// Validity of a new CA.
    #[arg(long, env = "KRS_CA_VALIDITY", default_value = "3650d", value_parser = crate::transport::parse_duration)]
    pub ca_validity: Duration,
    /// Renew the serving certificate when less than this is left.
    #[arg(long, env = "KRS_CERT_RENEW_BEFORE", default_value = "30d", value_parser = crate::transport::parse_duration)]
    pub cert_renew_before: Duration,
    /// How often the Secret is re-read (renewal, other replicas' renewals)
    /// and the configurations re-applied.
    #[arg(long, env = "KRS_CERT_CHECK_INTERVAL", default_value = "1m", value_parser = crate::transport::parse_duration)]
    pub cert_check_interval: Duration,
}

impl ManageWebhookArgs {
    /// The configuration, or `None` when `--manage-webhooks` is off. Errors
    /// name the flag.
    pub fn config(&self) -> Result<Option<ManageConfig>, String> {
        if !self.manage_webhooks {
            return Ok(None);
        }
        let namespace = self
            .webhook_namespace
            .clone()
            .unwrap_or_else(crate::cluster::own_namespace);
        for (flag, value) in [
            ("webhook-service", &self.webhook_service),
            ("webhook-namespace", &namespace),
        ] {
            if !is_dns_label(value) {
                return Err(format!(
                    "--{flag} {value:?} is not a DNS label (lowercase letters, digits and '-', at most 63)"
                ));
            }
        }
        for (flag, value) in [
            ("webhook-secret", &self.webhook_secret),
            ("webhook-config-name", &self.webhook_config_name),
        ] {
            if !is_dns_subdomain(value) {
                return Err(format!("--{flag} {value:?} is not a valid object name"));
            }
        }
        for ns in &self.webhook_namespace_exclude {
            if !is_dns_label(ns) {
                return Err(format!(
                    "--webhook-namespace-exclude {ns:?} is not a namespace name"
                ));
            }
        }
        if self.webhook_port == 0 {
            return Err("--webhook-port must not be 0".into());
        }
        if self.cert_check_interval.is_zero() {
            return Err("--cert-check-interval must be greater than zero".into());
        }
        let owner = OwnerSpec::parse(&self.webhook_owner)?;
        let lifetimes = Lifetimes {
            ca_validity: self.ca_validity,
            serving_validity: self.cert_validity,
            renew_before: self.cert_renew_before,
        };
        lifetimes.validate()?;
        Ok(Some(ManageConfig {
            target: WebhookTarget {
                config_name: self.webhook_config_name.clone(),
                service: self.webhook_service.clone(),
                namespace,
                port: i32::from(self.webhook_port),
                exclude_namespaces: self.webhook_namespace_exclude.clone(),
                mutate_pods: self.webhook_mutate_pods,
            },
            secret: self.webhook_secret.clone(),
            owner,
            lifetimes,
            check_every: self.cert_check_interval,
        }))
    }
}

/// Kinds that may own the configurations (cluster-scoped, part of the install).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnerKind {
    /// `rbac.authorization.k8s.io/v1` ClusterRole.
    ClusterRole,
    /// `v1` Namespace.
    Namespace,
}

/// The owner named by `--webhook-owner`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerSpec {
    /// Its kind.
    pub kind: OwnerKind,
    /// Its name.
    pub name: String,
}

impl OwnerSpec {
    /// `ClusterRole/NAME`, `Namespace/NAME`, `NAME` (ClusterRole) or empty (none).
    pub fn parse(s: &str) -> Result<Option<OwnerSpec>, String> {
        let s = s.trim();
        if s.is_empty() {
            return Ok(None);
        }
        let (kind, name) = match s.split_once('/') {
            None => (OwnerKind::ClusterRole, s),
            Some(("ClusterRole", n)) => (OwnerKind::ClusterRole, n),
            Some(("Namespace", n)) => (OwnerKind::Namespace, n),
            Some((k, _)) => {
                return Err(format!(
                    "--webhook-owner kind {k:?} is not supported; use ClusterRole/NAME or Namespace/NAME"
                ));
            }
        };
        let valid = match kind {
            OwnerKind::ClusterRole => !name.is_empty() && name.len() <= 253 && !name.contains('/'),
            OwnerKind::Namespace => is_dns_label(name),
        };
        if !valid {
            return Err(format!("--webhook-owner name {name:?} is not valid"));
        }
        Ok(Some(OwnerSpec {
            kind,
            name: name.to_owned(),
        }))
    }

    /// GETs the owner and makes the ownerReference with its uid.
    pub async fn resolve(&self, client: &kube::Client) -> anyhow::Result<OwnerReference> {
        let (api_version, kind, uid) = match self.kind {
            OwnerKind::ClusterRole => {
                let o = Api::<ClusterRole>::all(client.clone())
                    .get(&self.name)
                    .await;
                (
                    "rbac.authorization.k8s.io/v1",
                    "ClusterRole",
                    o.map(|o| o.metadata.uid),
                )
            }
            OwnerKind::Namespace => {
                let o = Api::<Namespace>::all(client.clone()).get(&self.name).await;
                ("v1", "Namespace", o.map(|o| o.metadata.uid))
            }
        };
        let uid = uid
            .with_context(|| format!("reading the webhook owner {kind}/{}", self.name))?
            .with_context(|| format!("the webhook owner {kind}/{} has no uid", self.name))?;
        Ok(OwnerReference {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            name: self.name.clone(),
            uid,
            block_owner_deletion: None,
            controller: None,
        })
    }
}

/// What [`start`] manages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManageConfig {
    /// Service, namespace, configuration name, exclusions, webhooks.
    pub target: WebhookTarget,
    /// Secret name (in `target.namespace`).
    pub secret: String,
    /// Owner of the configurations (`None`: no ownerReference).
    pub owner: Option<OwnerSpec>,
    /// Certificate lifetimes and the renewal window.
    pub lifetimes: Lifetimes,
    /// Period of the Secret re-read and re-apply.
    pub check_every: Duration,
}

impl ManageConfig {
    /// The Service DNS names the serving certificate covers.
    pub fn dns_names(&self) -> Vec<String> {
        material::service_dns_names(&self.target.service, &self.target.namespace)
    }
}

/// How [`ensure_secret`] came by the material.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecretOutcome {
    /// The Secret held valid material.
    Read,
    /// This replica created the Secret.
    Created,
    /// This replica replaced invalid or expiring material.
    Renewed,
}

/// Makes sure the Secret holds valid material for `cfg` at `now`, creating
/// or renewing it race-free (see the module documentation).
pub async fn ensure_secret(
    api: &Api<Secret>,
    cfg: &ManageConfig,
    now: impl Fn() -> OffsetDateTime,
) -> anyhow::Result<(Material, Expiry, SecretOutcome)> {
    let names = cfg.dns_names();
    for _ in 0..MAX_ATTEMPTS {
        let current = api
            .get_opt(&cfg.secret)
            .await
            .with_context(|| format!("reading Secret {}/{}", cfg.target.namespace, cfg.secret))?;
        let Some(secret) = current else {
            let at = now();
            let m = Material::renew(
                None,
                &Assessment::Rotate("absent".into()),
                &names,
                &cfg.lifetimes,
                at,
            )?;
            let obj = secret_object(&cfg.secret, None, &m);
            match api.create(&PostParams::default(), &obj).await {
                Ok(_) => {
                    tracing::info!(secret = %cfg.secret, "created the webhook certificate Secret");
                    return Ok((
                        m.clone(),
                        expiry(&m, &names, cfg, at)?,
                        SecretOutcome::Created,
                    ));
                }
                Err(kube::Error::Api(e)) if e.code == 409 => continue,
                Err(e) => {
                    return Err(anyhow::Error::new(e).context(format!(
                        "creating Secret {}/{}",
                        cfg.target.namespace, cfg.secret
                    )));
                }
            }
        };
        let data = secret
            .data
            .as_ref()
            .map(|d| d.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect())
            .unwrap_or_default();
        let m = Material::from_data(&data);
        let at = now();
        let assessment = m.assess(&names, &cfg.lifetimes, at);
        let why = match &assessment {
            Assessment::Valid(e) => return Ok((m, *e, SecretOutcome::Read)),
            Assessment::RenewServing(why) | Assessment::Rotate(why) => why.clone(),
        };
        let renewed = Material::renew(Some(&m), &assessment, &names, &cfg.lifetimes, at)?;
        let obj = secret_object(&cfg.secret, Some(&secret), &renewed);
        match api.replace(&cfg.secret, &PostParams::default(), &obj).await {
            Ok(_) => {
                tracing::info!(secret = %cfg.secret, reason = %why,
                    new_ca = matches!(assessment, Assessment::Rotate(_)),
                    "renewed the webhook certificate");
                let e = expiry(&renewed, &names, cfg, at)?;
                return Ok((renewed, e, SecretOutcome::Renewed));
            }
            // Another replica wrote first (409), or deleted it (404): read again.
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => continue,
            Err(e) => {
                return Err(anyhow::Error::new(e).context(format!(
                    "updating Secret {}/{}",
                    cfg.target.namespace, cfg.secret
                )));
            }
        }
    }
    anyhow::bail!(
        "Secret {}/{} kept changing under {MAX_ATTEMPTS} attempts",
        cfg.target.namespace,
        cfg.secret
    )
}

fn expiry(
    m: &Material,
    names: &[String],
    cfg: &ManageConfig,
    at: OffsetDateTime,
) -> anyhow::Result<Expiry> {
    match m.assess(names, &cfg.lifetimes, at) {
        Assessment::Valid(e) => Ok(e),
        Assessment::RenewServing(why) | Assessment::Rotate(why) => {
            anyhow::bail!("new certificate material does not verify: {why}")
        }
    }
}

/// The Secret to write: `prev`'s metadata (with its resourceVersion as the
/// precondition) and type, or a new `kubernetes.io/tls` Secret.
fn secret_object(name: &str, prev: Option<&Secret>, m: &Material) -> Secret {
    let data = m
        .to_data()
        .into_iter()
        .map(|(k, v)| (k, ByteString(v)))
        .collect();
    match prev {
        Some(p) => Secret {
            metadata: p.metadata.clone(),
            type_: p.type_.clone(),
            data: Some(data),
            ..Secret::default()
        },
        None => Secret {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                labels: Some(
                    [
                        ("app.kubernetes.io/name", "kruntimes-scheduler"),
                        ("app.kubernetes.io/component", "admission"),
                        ("app.kubernetes.io/managed-by", "kruntimes-scheduler"),
                    ]
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect(),
                ),
                ..ObjectMeta::default()
            },
            type_: Some("kubernetes.io/tls".to_owned()),
            data: Some(data),
            ..Secret::default()
        },
    }
}

/// The managed certificate: what the TLS listener serves, and the steps
/// that register and renew it.
#[derive(Clone)]
pub struct ManagedTls {
    shared: Arc<Shared>,
}

struct Shared {
    client: kube::Client,
    cfg: ManageConfig,
    tls: TlsConfigHandle,
    metrics: Arc<Metrics>,
    /// What is served now.
    current: Mutex<Material>,
    /// What the previous pass read from the Secret (and applied).
    last_seen: Mutex<Material>,
    /// `register` succeeded: the renewal loop re-applies.
    registered: AtomicBool,
}

impl std::fmt::Debug for ManagedTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagedTls")
            .field("cfg", &self.shared.cfg)
            .field(
                "registered",
                &self.shared.registered.load(Ordering::Relaxed),
            )
            .finish_non_exhaustive()
    }
}

/// Makes sure the Secret holds valid material, and builds the TLS
/// configuration serving it. Patches nothing yet.
pub async fn start(
    client: kube::Client,
    cfg: ManageConfig,
    metrics: Arc<Metrics>,
) -> anyhow::Result<ManagedTls> {
    let api = Api::<Secret>::namespaced(client.clone(), &cfg.target.namespace);
    let (m, exp, outcome) = ensure_secret(&api, &cfg, OffsetDateTime::now_utc).await?;
    tracing::info!(secret = %cfg.secret, ?outcome, serving_expires = %exp.serving, "webhook certificate ready");
    let tls = TlsConfigHandle::from_pem(m.tls_crt.as_bytes(), m.tls_key.as_bytes())
        .context("serving the webhook certificate")?;
    metrics.certificate_expiry(CertificateKind::Serving, exp.serving.unix_timestamp());
    metrics.certificate_expiry(CertificateKind::Ca, exp.ca.unix_timestamp());
    Ok(ManagedTls {
        shared: Arc::new(Shared {
            client,
            cfg,
            tls,
            metrics,
            current: Mutex::new(m.clone()),
            last_seen: Mutex::new(m),
            registered: AtomicBool::new(false),
        }),
    })
}

impl ManagedTls {
    /// The TLS configuration to pass to [`crate::tls::serve`]; its
    /// certificate follows the Secret.
    pub fn tls(&self) -> TlsConfigHandle {
        self.shared.tls.clone()
    }

    /// The CA bundle (PEM) the configurations carry now.
    pub fn ca_bundle(&self) -> String {
        self.shared.current.lock().ca_crt.clone()
    }

    /// The chain (PEM) served now.
    #[cfg(any(test, feature = "testkit"))]
    pub fn serving_chain(&self) -> String {
        self.shared.current.lock().tls_crt.clone()
    }

    /// Patches both shipped webhook configurations with the current CA
    /// bundle and the promised policy. Call once the TLS listener is bound;
    /// from then on [`ManagedTls::run`] patches them every interval.
    pub async fn register(&self) -> anyhow::Result<()> {
        let bundle = self.ca_bundle();
        self.apply(&bundle).await?;
        self.shared.registered.store(true, Ordering::Release);
        tracing::info!(name = %self.shared.cfg.target.config_name, "webhook configurations patched with the CA bundle");
        Ok(())
    }

    /// Gets each configuration by name (absent: an error, never a create),
    /// resolves the owner again, then applies CA bundle and policy.
    async fn apply(&self, bundle: &str) -> anyhow::Result<()> {
        let s = &self.shared;
        let name = &s.cfg.target.config_name;
        let validating = Api::<ValidatingWebhookConfiguration>::all(s.client.clone());
        let mutating = Api::<MutatingWebhookConfiguration>::all(s.client.clone());
        let absent = |kind: &str| {
            anyhow::anyhow!(
                "{kind} {name} does not exist: the install ships it (kubectl apply -k manifests/), \
                 and this service may only patch it, never create it"
            )
        };
        validating
            .get_opt(name)
            .await
            .with_context(|| format!("reading ValidatingWebhookConfiguration {name}"))?
            .ok_or_else(|| absent("ValidatingWebhookConfiguration"))?;
        mutating
            .get_opt(name)
            .await
            .with_context(|| format!("reading MutatingWebhookConfiguration {name}"))?
            .ok_or_else(|| absent("MutatingWebhookConfiguration"))?;
        // Every pass: an owner recreated under a new uid is followed.
        let owner = match &s.cfg.owner {
            Some(o) => Some(o.resolve(&s.client).await?),
            None => None,
        };
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        let v = s.cfg.target.validating(bundle.as_bytes(), owner.as_ref());
        validating
            .patch(name, &pp, &Patch::Apply(&v))
            .await
            .with_context(|| format!("patching ValidatingWebhookConfiguration {name}"))?;
        let m = s.cfg.target.mutating(bundle.as_bytes(), owner.as_ref());
        mutating
            .patch(name, &pp, &Patch::Apply(&m))
            .await
            .with_context(|| format!("patching MutatingWebhookConfiguration {name}"))?;
        Ok(())
    }

    /// One renewal pass: re-read (and if needed renew) the Secret, re-apply
    /// the configurations when registered, then serve the Secret's pair.
    /// `Ok(true)` when the served certificate changed.
    pub async fn check(&self) -> anyhow::Result<bool> {
        let s = &self.shared;
        let api = Api::<Secret>::namespaced(s.client.clone(), &s.cfg.target.namespace);
        let (m, exp, _) = ensure_secret(&api, &s.cfg, OffsetDateTime::now_utc).await?;
        if s.registered.load(Ordering::Acquire) {
            // Before the swap: the API server must trust a new CA first.
            self.apply(&m.ca_crt).await?;
        }
        s.metrics
            .certificate_expiry(CertificateKind::Serving, exp.serving.unix_timestamp());
        s.metrics
            .certificate_expiry(CertificateKind::Ca, exp.ca.unix_timestamp());
        let previous = std::mem::replace(&mut *s.last_seen.lock(), m.clone());
        let mut current = s.current.lock();
        if *current == m {
            return Ok(false);
        }
        if s.registered.load(Ordering::Acquire) && !m.signer_trusted_by(&previous) {
            // A new CA: registered by this pass, but another replica's pass
            // that read the Secret before the rotation may still apply the
            // old bundle. Its certificates are served from the next pass,
            // once every replica reads the new bundle; the current
            // certificate is still valid for the renewal window.
            tracing::info!(
                "new webhook CA registered; its certificate is served from the next pass"
            );
            return Ok(false);
        }
        if current.tls_crt != m.tls_crt || current.tls_key != m.tls_key {
            s.tls
                .set_pem(m.tls_crt.as_bytes(), m.tls_key.as_bytes())
                .context("serving the renewed certificate")?;
            tracing::info!(serving_expires = %exp.serving, "serving the renewed webhook certificate");
        }
        let changed = current.tls_crt != m.tls_crt;
        *current = m;
        Ok(changed)
    }

    /// Runs [`ManagedTls::check`] every `--cert-check-interval` until
    /// `shutdown` resolves. A failed pass is logged and retried next
    /// interval; the current certificate stays in service.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()> + Send) {
        let mut tick = tokio::time::interval(self.shared.cfg.check_every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = &mut shutdown => return,
            }
            if let Err(e) = self.check().await {
                tracing::warn!(error = %format!("{e:#}"), "webhook certificate check failed; still serving the current certificate");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: ManageWebhookArgs,
    }

    fn parse(args: &[&str]) -> Result<Option<ManageConfig>, String> {
        let mut v = vec!["x"];
        v.extend_from_slice(args);
        Cli::try_parse_from(v)
            .map_err(|e| e.to_string())?
            .args
            .config()
    }

    #[test]
    fn off_by_default_and_on_with_the_flag() {
        assert_eq!(parse(&[]), Ok(None));
        assert_eq!(parse(&["--manage-webhooks=false"]), Ok(None));
        assert_eq!(
            parse(&["--manage-webhooks=true", "--manage-webhooks=false"]),
            Ok(None),
            "the last one counts"
        );
        let cfg = parse(&["--manage-webhooks", "--webhook-namespace", "ns"])
            .expect("valid")
            .expect("on");
        assert_eq!(cfg.target.namespace, "ns");
        assert_eq!(cfg.secret, "kruntimes-scheduler-tls");
        assert_eq!(cfg.owner, None, "the kustomization owns the configurations");
        assert_eq!(
            cfg.lifetimes.serving_validity,
            Duration::from_secs(365 * 86_400)
        );
        assert!(cfg.target.mutate_pods);
    }

    #[test]
    fn bad_values_name_the_flag() {
        let on = ["--manage-webhooks", "--webhook-namespace", "ns"];
        let with = |extra: &[&str]| {
            let mut v = on.to_vec();
            v.extend_from_slice(extra);
            parse(&v).unwrap_err()
        };
        assert!(with(&["--webhook-service", "Bad_Name"]).contains("--webhook-service"));
        assert!(with(&["--webhook-owner", "Deployment/x"]).contains("--webhook-owner"));
        assert!(with(&["--cert-renew-before", "400d"]).contains("--cert-renew-before"));
        assert!(
            with(&["--webhook-namespace-exclude", "a,B"]).contains("--webhook-namespace-exclude")
        );
        assert!(with(&["--cert-check-interval", "0s"]).contains("--cert-check-interval"));
    }

    #[test]
    fn owner_forms() {
        assert_eq!(OwnerSpec::parse(""), Ok(None));
        assert_eq!(
            OwnerSpec::parse("Namespace/kruntimes-system")
                .expect("ok")
                .map(|o| o.kind),
            Some(OwnerKind::Namespace)
        );
        assert_eq!(
            OwnerSpec::parse("x").expect("ok").map(|o| o.kind),
            Some(OwnerKind::ClusterRole)
        );
        assert!(OwnerSpec::parse("Namespace/").is_err());
    }
}
