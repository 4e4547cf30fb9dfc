//! A pod's own node constraints, as group feasibility reads them for
//! members other than the pod being filtered: `spec.nodeSelector` and the
//! required node affinity (`requiredDuringSchedulingIgnoredDuringExecution`),
//! matched the way kube-scheduler's NodeAffinity plugin matches them.

use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, PodSpec};
use std::collections::BTreeMap;

/// What a pod requires of a node's name and labels.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeRule {
    /// `nodeSelector`: every pair must be a label of the node.
    selector: BTreeMap<String, String>,
    /// Required affinity terms, ORed; `None`: no required affinity.
    terms: Option<Vec<Term>>,
}

/// One `nodeSelectorTerm`: every requirement must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Term {
    exprs: Vec<Req>,
    fields: Vec<Req>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Req {
    key: String,
    op: String,
    values: Vec<String>,
}

impl Req {
    fn of(r: &NodeSelectorRequirement) -> Req {
        Req {
            key: r.key.clone(),
            op: r.operator.clone(),
            values: r.values.clone().unwrap_or_default(),
        }
    }

    /// Whether `value` (the label's or field's value, `None` when absent)
    /// satisfies the requirement. Unknown operators match nothing.
    fn holds(&self, value: Option<&str>) -> bool {
        let int = |s: &str| s.parse::<i64>().ok();
        let bound = || match self.values.as_slice() {
            [v] => int(v),
            _ => None,
        };
        match self.op.as_str() {
            "In" => value.is_some_and(|v| self.values.iter().any(|x| x == v)),
            "NotIn" => value.is_none_or(|v| self.values.iter().all(|x| x != v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            "Gt" => matches!((value.and_then(int), bound()), (Some(v), Some(b)) if v > b),
            "Lt" => matches!((value.and_then(int), bound()), (Some(v), Some(b)) if v < b),
            _ => false,
        }
    }
}

impl Term {
    fn matches(&self, name: &str, labels: &BTreeMap<String, String>) -> bool {
        // A term with no requirements matches no node.
        if self.exprs.is_empty() && self.fields.is_empty() {
            return false;
        }
        self.exprs
            .iter()
            .all(|r| r.holds(labels.get(&r.key).map(String::as_str)))
            && self.fields.iter().all(|r| {
                r.holds(match r.key.as_str() {
                    "metadata.name" => Some(name),
                    _ => None,
                })
            })
    }
}

fn terms_of(sel: &NodeSelector) -> Vec<Term> {
    sel.node_selector_terms
        .iter()
        .map(|t| Term {
            exprs: t.match_expressions.iter().flatten().map(Req::of).collect(),
            fields: t.match_fields.iter().flatten().map(Req::of).collect(),
        })
        .collect()
}

impl NodeRule {
    /// A NodeSelector alone (a ResourceSlice's or a device's
    /// `nodeSelector`): its terms ORed, as `nodeaffinity.NewNodeSelector`
    /// matches them.
    pub fn of_selector(sel: &NodeSelector) -> NodeRule {
        NodeRule {
            selector: BTreeMap::new(),
            terms: Some(terms_of(sel)),
        }
    }

    /// The pod's node constraints; `None` when it has none.
    pub fn of(spec: &PodSpec) -> Option<NodeRule> {
        let selector: BTreeMap<String, String> = spec.node_selector.clone().unwrap_or_default();
        let terms = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .map(terms_of);
        if selector.is_empty() && terms.is_none() {
            return None;
        }
        Some(NodeRule { selector, terms })
    }

    /// Whether a node with this name and labels satisfies the rule.
    pub fn matches(&self, name: &str, labels: &BTreeMap<String, String>) -> bool {
        self.selector.iter().all(|(k, v)| labels.get(k) == Some(v))
            && self
                .terms
                .as_ref()
                .is_none_or(|ts| ts.iter().any(|t| t.matches(name, labels)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(spec: serde_json::Value) -> Option<NodeRule> {
        let mut s = json!({"containers": []});
        for (k, v) in spec.as_object().unwrap() {
            s[k] = v.clone();
        }
        NodeRule::of(&serde_json::from_value(s).unwrap())
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn affinity(terms: serde_json::Value) -> serde_json::Value {
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": terms}}}})
    }

    #[test]
    fn selectors_and_required_affinity_match_as_upstream() {
        assert_eq!(rule(json!({})), None);
        let gpu = labels(&[("gpu", "a100"), ("cores", "64")]);
        let plain = labels(&[("cores", "8")]);
        let sel = rule(json!({"nodeSelector": {"gpu": "a100"}})).unwrap();
        assert!(sel.matches("n", &gpu) && !sel.matches("n", &plain));
        let cases = [
            (
                json!([{"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100", "h100"]}]}]),
                true,
                false,
            ),
            (
                json!([{"matchExpressions": [{"key": "gpu", "operator": "NotIn", "values": ["a100"]}]}]),
                false,
                true,
            ),
            (
                json!([{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]),
                true,
                false,
            ),
            (
                json!([{"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}]),
                false,
                true,
            ),
            (
                json!([{"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["16"]}]}]),
                true,
                false,
            ),
            (
                json!([{"matchExpressions": [{"key": "cores", "operator": "Lt", "values": ["16"]}]}]),
                false,
                true,
            ),
            // Terms are ORed; an empty term matches nothing.
            (
                json!([{}, {"matchExpressions": [{"key": "cores", "operator": "In", "values": ["8"]}]}]),
                false,
                true,
            ),
            (json!([{}]), false, false),
            (
                json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]),
                true,
                false,
            ),
        ];
        for (terms, on_gpu, on_plain) in cases {
            let r = rule(affinity(terms.clone())).unwrap();
            assert_eq!(r.matches("n1", &gpu), on_gpu, "{terms}");
            assert_eq!(r.matches("n2", &plain), on_plain, "{terms}");
        }
        // Selector and affinity must both hold.
        let mut both =
            affinity(json!([{"matchExpressions": [{"key": "cores", "operator": "Exists"}]}]));
        both["nodeSelector"] = json!({"gpu": "a100"});
        let r = rule(both).unwrap();
        assert!(r.matches("n", &gpu) && !r.matches("n", &plain));
    }
}
