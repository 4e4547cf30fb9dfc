//! The webhook configurations the service registers: the same webhooks as
//! the manifests declare (paths, rules, failure policies, timeouts), with
//! the current CA bundle, a `namespaceSelector` that keeps `kube-system`
//! and the service's own namespace out, and an ownerReference to a
//! cluster-scoped object of the install.

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
    },
    Def {
        name: "validate-podgroups.scheduling.kruntimes.io",
        path: "/admission/validate/podgroups",
        group: "scheduling.k8s.io",
        version: "v1beta1",
        resource: "podgroups",
        operations: &["CREATE", "UPDATE"],
        failure_policy: "Fail",
        timeout_seconds: 10,
    },
    Def {
        name: "validate-compositepodgroups.scheduling.kruntimes.io",
        path: "/admission/validate/compositepodgroups",
        group: "scheduling.k8s.io",
        version: "v1alpha3",
        resource: "compositepodgroups",
        operations: &["CREATE", "UPDATE"],
        failure_policy: "Fail",
        timeout_seconds: 10,
    },
    Def {
        name: "validate-workloads.scheduling.kruntimes.io",
        path: "/admission/validate/workloads",
        group: "scheduling.k8s.io",
        version: "v1beta1",
        resource: "workloads",
        operations: &["CREATE", "UPDATE"],
        failure_policy: "Fail",
        timeout_seconds: 10,
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
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: NAMESPACE_NAME_LABEL.to_owned(),
                operator: "NotIn".to_owned(),
                values: Some(self.excluded_namespaces()),
            }]),
            match_labels: opt_in,
        }
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
                        match_conditions: (d.name == MUTATE_PODS.name).then(|| {
                            vec![MatchCondition {
                                name: "sets-node-name".to_owned(),
                                expression:
                                    "has(object.spec.nodeName) && object.spec.nodeName != ''"
                                        .to_owned(),
                            }]
                        }),
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
        assert!(
            vw.iter()
                .all(|w| w.failure_policy.as_deref() == Some("Fail"))
        );
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
