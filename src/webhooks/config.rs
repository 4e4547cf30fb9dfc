//! The webhook configurations: the same webhooks as the kustomization ships
//! (`manifests/run-scheduler/webhooks.yaml`, compared by
//! `tests/it/webhook_certs.rs`), as the service keeps them: paths, rules,
//! failure policies, timeouts, `matchConditions`, the current CA bundle,
//! and a `namespaceSelector` that keeps `kube-system`, the service's own
//! namespace and every namespace labelled `kruntimes.io/webhooks=disabled`
//! out.
//!
//! Blast radius, webhook by webhook:
//!
//! - `scheduling.k8s.io` validation (PodGroups, CompositePodGroups,
//!   Workloads) is `failurePolicy: Ignore`: the API server validates these
//!   objects itself; this service only adds its checks on top, and its
//!   outage must not block every controller's group writes.
//! - Run validation is `Fail` (immutable requests are a contract), with
//!   [`RUN_SPEC_CHANGES`] as its `matchConditions`: a request that cannot
//!   change `spec` (metadata-only: finalizers, labels, the deletion of a
//!   namespace) is not sent, so it succeeds while the service is down.
//! - Run defaulting and the opt-in Pod rewrite are `Ignore`.
//!
//! As shipped ([`WebhookTarget::shipped_validating`]) every webhook is
//! `Ignore` and has no `caBundle`: until the service has patched in its CA
//! and promoted Run validation to `Fail`, nothing fails because the CA is
//! missing (the API server cannot verify the service, the call errs, the
//! error is ignored).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations,
    ServiceReference, ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta, OwnerReference,
};

/// The namespace label every namespace carries (set by the API server).
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";
/// The label a namespace sets to opt in to the Pod rewrite webhook.
pub const POD_REWRITE_LABEL: &str = "kruntimes.io/pod-node-name-rewrite";
/// A namespace labelled `kruntimes.io/webhooks=disabled` is sent to no
/// webhook of this service.
pub const OPT_OUT_LABEL: &str = "kruntimes.io/webhooks";
/// The value of [`OPT_OUT_LABEL`] that opts a namespace out.
pub const OPT_OUT_VALUE: &str = "disabled";

/// The Run webhook's match condition (CEL, evaluated by the API server):
/// CREATE always; UPDATE only when `spec` changed (appeared, went, or
/// differs). A metadata-only update (finalizers, labels, annotations, the
/// deletion timestamp) cannot change `spec`, so it is never sent, and
/// works while the service is down. Status never reaches the webhook: its
/// rule names `runs`, not `runs/status`. `has()` guards keep the
/// expression from erring on an object without `spec` (an error would fail
/// the request under `Fail`).
pub const RUN_SPEC_CHANGES: &str = "request.operation != 'UPDATE' || has(object.spec) != has(oldObject.spec) || (has(object.spec) && object.spec != oldObject.spec)";
/// The Pod rewrite webhook's match condition: only pods that set `spec.nodeName`.
pub const SETS_NODE_NAME: &str = "has(object.spec.nodeName) && object.spec.nodeName != ''";

/// One webhook: what it matches and how it is called.
#[derive(Clone, Copy, Debug)]
struct Def {
    name: &'static str,
    path: &'static str,
    group: &'static str,
    version: &'static str,
    resource: &'static str,
    operations: &'static [&'static str],
    failure_policy: &'static str,
    timeout_seconds: i32,
    /// `(name, CEL expression)`: the API server calls the webhook only when all hold.
    match_conditions: &'static [(&'static str, &'static str)],
}

const MUTATE_RUNS: Def = Def {
    name: "mutate-runs.kruntimes.io",
    path: "/admission/mutate/runs",
    group: "kruntimes.io",
    version: "v1alpha1",
    resource: "runs",
    operations: &["CREATE"],
    failure_policy: "Ignore",
    timeout_seconds: 10,
    match_conditions: &[],
};

/// Opt-in per namespace (label) and only for pods that set `spec.nodeName`.
const MUTATE_PODS: Def = Def {
    name: "mutate-pods.kruntimes.io",
    path: "/admission/mutate/pods",
    group: "",
    version: "v1",
    resource: "pods",
    operations: &["CREATE"],
    failure_policy: "Ignore",
    timeout_seconds: 5,
    match_conditions: &[("sets-node-name", SETS_NODE_NAME)],
};

const VALIDATING: [Def; 4] = [
    Def {
        name: "validate-runs.kruntimes.io",
        path: "/admission/validate/runs",
        group: "kruntimes.io",
        version: "v1alpha1",
        resource: "runs",
        operations: &["CREATE", "UPDATE"],
        failure_policy: "Fail",
        timeout_seconds: 10,
        match_conditions: &[("spec-may-change", RUN_SPEC_CHANGES)],
    },
    Def {
        name: "validate-podgroups.scheduling.kruntimes.io",
        path: "/admission/validate/podgroups",
        group: "scheduling.k8s.io",
        version: "v1beta1",
        resource: "podgroups",
        operations: &["CREATE", "UPDATE"],
        failure_policy: "Ignore",
        timeout_seconds: 10,
        match_conditions: &[],
    },
    Def {
        name: "validate-compositepodgroups.scheduling.kruntimes.io",
        path: "/admission/validate/compositepodgroups",
        group: "scheduling.k8s.io",
        version: "v1alpha3",
        resource: "compositepodgroups",
        operations: &["CREATE", "UPDATE"],
        failure_policy: "Ignore",
        timeout_seconds: 10,
        match_conditions: &[],
    },
    Def {
        name: "validate-workloads.scheduling.kruntimes.io",
        path: "/admission/validate/workloads",
        group: "scheduling.k8s.io",
        version: "v1beta1",
        resource: "workloads",
        operations: &["CREATE", "UPDATE"],
        failure_policy: "Ignore",
        timeout_seconds: 10,
        match_conditions: &[],
    },
];

/// Where the API server calls the webhooks and what it skips.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookTarget {
    /// Name of both configurations.
    pub config_name: String,
    /// Service in front of the webhook server.
    pub service: String,
    /// Its namespace (always excluded from matching).
    pub namespace: String,
    /// Service port.
    pub port: i32,
    /// Namespaces excluded besides `kube-system` and `namespace`.
    pub exclude_namespaces: Vec<String>,
    /// Register the opt-in Pod rewrite webhook.
    pub mutate_pods: bool,
}

impl WebhookTarget {
    /// Every namespace no webhook matches: `kube-system`, the service's own,
    /// then the configured ones, without duplicates.
    pub fn excluded_namespaces(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let all = ["kube-system".to_owned(), self.namespace.clone()];
        for ns in all.iter().chain(&self.exclude_namespaces) {
            if !ns.is_empty() && !out.contains(ns) {
                out.push(ns.clone());
            }
        }
        out
    }

    fn meta(&self, owner: Option<&OwnerReference>) -> ObjectMeta {
        ObjectMeta {
            name: Some(self.config_name.clone()),
            labels: Some(BTreeMap::from([
                (
                    "app.kubernetes.io/name".to_owned(),
                    "kruntimes-scheduler".to_owned(),
                ),
                (
                    "app.kubernetes.io/component".to_owned(),
                    "admission".to_owned(),
                ),
                (
                    "app.kubernetes.io/managed-by".to_owned(),
                    "kruntimes-scheduler".to_owned(),
                ),
            ])),
            owner_references: owner.map(|o| vec![o.clone()]),
            ..ObjectMeta::default()
        }
    }

    fn client_config(&self, def: &Def, ca_bundle: &[u8]) -> WebhookClientConfig {
        WebhookClientConfig {
            ca_bundle: Some(ByteString(ca_bundle.to_vec())),
            service: Some(ServiceReference {
                name: self.service.clone(),
                namespace: self.namespace.clone(),
                path: Some(def.path.to_owned()),
                port: Some(self.port),
            }),
            url: None,
        }
    }

    fn namespace_selector(&self, def: &Def) -> LabelSelector {
        let opt_in = (def.name == MUTATE_PODS.name)
            .then(|| BTreeMap::from([(POD_REWRITE_LABEL.to_owned(), "enabled".to_owned())]));
        LabelSelector {
            match_expressions: Some(vec![
                LabelSelectorRequirement {
                    key: NAMESPACE_NAME_LABEL.to_owned(),
                    operator: "NotIn".to_owned(),
                    values: Some(self.excluded_namespaces()),
                },
                LabelSelectorRequirement {
                    key: OPT_OUT_LABEL.to_owned(),
                    operator: "NotIn".to_owned(),
                    values: Some(vec![OPT_OUT_VALUE.to_owned()]),
                },
            ]),
            match_labels: opt_in,
        }
    }

    /// The `ValidatingWebhookConfiguration` as the kustomization ships it:
    /// no `caBundle`, no owner, every webhook `Ignore` (see the module
    /// documentation); the service patches in its CA and the policy of
    /// [`WebhookTarget::validating`].
    pub fn shipped_validating(&self) -> ValidatingWebhookConfiguration {
        let mut v = self.validating(b"", None);
        for w in v.webhooks.iter_mut().flatten() {
            w.client_config.ca_bundle = None;
            w.failure_policy = Some("Ignore".to_owned());
        }
        v
    }

    /// The `MutatingWebhookConfiguration` as the kustomization ships it
    /// (no `caBundle`, no owner; every webhook is `Ignore` anyway).
    #[cfg(any(test, feature = "testkit"))]
    pub fn shipped_mutating(&self) -> MutatingWebhookConfiguration {
        let mut m = self.mutating(b"", None);
        for w in m.webhooks.iter_mut().flatten() {
            w.client_config.ca_bundle = None;
            w.failure_policy = Some("Ignore".to_owned());
        }
        m
    }

    /// The `ValidatingWebhookConfiguration` with `ca_bundle` (PEM).
    pub fn validating(
        &self,
        ca_bundle: &[u8],
        owner: Option<&OwnerReference>,
    ) -> ValidatingWebhookConfiguration {
        ValidatingWebhookConfiguration {
            metadata: self.meta(owner),
            webhooks: Some(
                VALIDATING
                    .iter()
                    .map(|d| ValidatingWebhook {
                        admission_review_versions: vec!["v1".to_owned()],
                        client_config: self.client_config(d, ca_bundle),
                        failure_policy: Some(d.failure_policy.to_owned()),
                        match_conditions: match_conditions(d),
                        match_policy: Some("Equivalent".to_owned()),
                        name: d.name.to_owned(),
                        namespace_selector: Some(self.namespace_selector(d)),
                        rules: Some(vec![rule(d)]),
                        side_effects: "None".to_owned(),
                        timeout_seconds: Some(d.timeout_seconds),
                        ..ValidatingWebhook::default()
                    })
                    .collect(),
            ),
        }
    }

    /// The `MutatingWebhookConfiguration` with `ca_bundle` (PEM).
    pub fn mutating(
        &self,
        ca_bundle: &[u8],
        owner: Option<&OwnerReference>,
    ) -> MutatingWebhookConfiguration {
        let mut defs = vec![MUTATE_RUNS];
        if self.mutate_pods {
            defs.push(MUTATE_PODS);
        }
        MutatingWebhookConfiguration {
            metadata: self.meta(owner),
            webhooks: Some(
                defs.iter()
                    .map(|d| MutatingWebhook {
                        admission_review_versions: vec!["v1".to_owned()],
                        client_config: self.client_config(d, ca_bundle),
                        failure_policy: Some(d.failure_policy.to_owned()),
                        match_policy: Some("Equivalent".to_owned()),
                        match_conditions: match_conditions(d),
                        name: d.name.to_owned(),
                        namespace_selector: Some(self.namespace_selector(d)),
                        reinvocation_policy: Some("Never".to_owned()),
                        rules: Some(vec![rule(d)]),
                        side_effects: "None".to_owned(),
                        timeout_seconds: Some(d.timeout_seconds),
                        ..MutatingWebhook::default()
                    })
                    .collect(),
            ),
        }
    }
}

fn match_conditions(d: &Def) -> Option<Vec<MatchCondition>> {
    (!d.match_conditions.is_empty()).then(|| {
        d.match_conditions
            .iter()
            .map(|(name, expression)| MatchCondition {
                name: (*name).to_owned(),
                expression: (*expression).to_owned(),
            })
            .collect()
    })
}

fn rule(d: &Def) -> RuleWithOperations {
    RuleWithOperations {
        api_groups: Some(vec![d.group.to_owned()]),
        api_versions: Some(vec![d.version.to_owned()]),
        operations: Some(d.operations.iter().map(|s| (*s).to_owned()).collect()),
        resources: Some(vec![d.resource.to_owned()]),
        scope: Some("Namespaced".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> WebhookTarget {
        WebhookTarget {
            config_name: "kruntimes-scheduler".into(),
            service: "kruntimes-scheduler".into(),
            namespace: "kruntimes-system".into(),
            port: 443,
            exclude_namespaces: vec!["kruntimes-system".into(), "ops".into()],
            mutate_pods: true,
        }
    }

    #[test]
    fn excluded_namespaces_always_hold_kube_system_and_the_own_namespace() {
        assert_eq!(
            target().excluded_namespaces(),
            vec!["kube-system", "kruntimes-system", "ops"]
        );
    }

    #[test]
    fn every_webhook_excludes_and_carries_the_bundle_and_owner() {
        let owner = OwnerReference {
            api_version: "rbac.authorization.k8s.io/v1".into(),
            kind: "ClusterRole".into(),
            name: "kruntimes-scheduler".into(),
            uid: "u-1".into(),
            ..OwnerReference::default()
        };
        let v = target().validating(b"PEM", Some(&owner));
        let m = target().mutating(b"PEM", Some(&owner));
        assert_eq!(v.metadata.owner_references, Some(vec![owner.clone()]));
        assert_eq!(m.metadata.owner_references, Some(vec![owner]));
        let vw = v.webhooks.expect("validating");
        let mw = m.webhooks.expect("mutating");
        assert_eq!(vw.len(), 4);
        assert_eq!(mw.len(), 2);
        let selectors = vw
            .iter()
            .map(|w| (&w.client_config, &w.namespace_selector))
            .chain(mw.iter().map(|w| (&w.client_config, &w.namespace_selector)));
        for (cc, sel) in selectors {
            assert_eq!(
                cc.ca_bundle.as_ref().map(|b| b.0.as_slice()),
                Some(&b"PEM"[..])
            );
            let req = &sel
                .as_ref()
                .expect("selector")
                .match_expressions
                .as_ref()
                .expect("exprs")[0];
            assert_eq!(req.operator, "NotIn");
            assert!(
                req.values
                    .as_ref()
                    .expect("values")
                    .contains(&"kube-system".to_owned())
            );
        }
        // Only Run validation fails closed; the API server validates
        // scheduling.k8s.io objects itself.
        let policies: Vec<(&str, &str)> = vw
            .iter()
            .map(|w| (w.name.as_str(), w.failure_policy.as_deref().unwrap_or("")))
            .collect();
        assert_eq!(
            policies,
            [
                ("validate-runs.kruntimes.io", "Fail"),
                ("validate-podgroups.scheduling.kruntimes.io", "Ignore"),
                (
                    "validate-compositepodgroups.scheduling.kruntimes.io",
                    "Ignore"
                ),
                ("validate-workloads.scheduling.kruntimes.io", "Ignore"),
            ]
        );
        assert!(
            mw.iter()
                .all(|w| w.failure_policy.as_deref() == Some("Ignore"))
        );
    }

    #[test]
    fn a_namespace_label_opts_out_of_every_webhook() {
        let t = target();
        let v = t.validating(b"PEM", None).webhooks.expect("validating");
        let m = t.mutating(b"PEM", None).webhooks.expect("mutating");
        let selectors = v
            .iter()
            .map(|w| &w.namespace_selector)
            .chain(m.iter().map(|w| &w.namespace_selector));
        for sel in selectors {
            let exprs = sel
                .as_ref()
                .and_then(|s| s.match_expressions.as_ref())
                .expect("expressions");
            assert!(exprs.iter().any(|e| e.key == OPT_OUT_LABEL
                && e.operator == "NotIn"
                && e.values.as_deref() == Some(&["disabled".to_owned()][..])));
        }
    }

    /// The Run webhook's CEL condition, by shape (the API server evaluates
    /// it; `tests/it/webhook_certs.rs` checks that the requests it skips
    /// are ones the webhook allows anyway).
    #[test]
    fn the_run_webhook_skips_requests_that_cannot_change_spec() {
        let v = target()
            .validating(b"PEM", None)
            .webhooks
            .expect("validating");
        let runs = v
            .iter()
            .find(|w| w.name == "validate-runs.kruntimes.io")
            .expect("runs");
        let conds = runs.match_conditions.as_ref().expect("matchConditions");
        assert_eq!(conds.len(), 1);
        let e = &conds[0].expression;
        // CREATE is always sent; UPDATE only when spec differs.
        assert!(e.starts_with("request.operation != 'UPDATE' || "), "{e}");
        assert!(e.contains("object.spec != oldObject.spec"), "{e}");
        // Every field access is guarded by has(): an erring condition would
        // fail the request under failurePolicy Fail.
        assert!(
            e.contains("has(object.spec) != has(oldObject.spec)")
                && e.contains("(has(object.spec) && object.spec != oldObject.spec)"),
            "{e}"
        );
        // Balanced parentheses and quotes, no double-quoted strings (CEL in
        // YAML), at most one condition name per webhook.
        assert_eq!(e.matches('(').count(), e.matches(')').count());
        assert_eq!(e.matches('\'').count() % 2, 0);
        assert!(!e.contains('"'));
        assert_eq!(
            runs.rules.as_ref().expect("rules")[0].resources,
            Some(vec!["runs".to_owned()])
        );
        // The scheduling.k8s.io webhooks need none: they are Ignore.
        assert!(
            v.iter()
                .filter(|w| w.name != runs.name)
                .all(|w| w.match_conditions.is_none())
        );
    }

    #[test]
    fn as_shipped_every_webhook_is_ignore_without_a_bundle() {
        let t = target();
        let v = t.shipped_validating();
        let m = t.shipped_mutating();
        assert_eq!(v.metadata.owner_references, None);
        for (policy, cc) in v
            .webhooks
            .iter()
            .flatten()
            .map(|w| (&w.failure_policy, &w.client_config))
            .chain(
                m.webhooks
                    .iter()
                    .flatten()
                    .map(|w| (&w.failure_policy, &w.client_config)),
            )
        {
            assert_eq!(policy.as_deref(), Some("Ignore"));
            assert_eq!(cc.ca_bundle, None);
        }
    }

    #[test]
    fn the_pod_webhook_is_left_out_when_not_wanted() {
        let t = WebhookTarget {
            mutate_pods: false,
            ..target()
        };
        let names: Vec<String> = t
            .mutating(b"", None)
            .webhooks
            .expect("webhooks")
            .into_iter()
            .map(|w| w.name)
            .collect();
        assert_eq!(names, vec!["mutate-runs.kruntimes.io"]);
        assert_eq!(t.mutating(b"", None).metadata.owner_references, None);
    }
}
