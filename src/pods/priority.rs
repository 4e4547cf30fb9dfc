//! Pod and group priority: resolution from PriorityClasses and the
//! consistency rule for pods in a PodGroup (the group is authoritative).

use std::collections::HashMap;

/// Upstream's message for a member whose priority differs from its group's.
pub const PRIORITY_MISMATCH: &str =
    "all pods in a single pod group should have the same priority as the pod group";
/// Upstream's message for a member whose preemption policy differs from its group's.
pub const PREEMPTION_POLICY_MISMATCH: &str = "all pods in a single pod group should have the same preemption policy as the pod group's preemption policy";

/// Upstream's message, with the `PodGroupPreemptionPolicy` gate off, for a
/// member whose preemption policy differs from another member's.
pub const PREEMPTION_POLICY_SHARED: &str =
    "all pods in a single pod group should have the same preemption policy";

/// The default preemption policy.
pub const PREEMPT_LOWER_PRIORITY: &str = "PreemptLowerPriority";

/// What the cache keeps of a PriorityClass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Class {
    pub value: i32,
    pub preemption_policy: Option<String>,
    pub global_default: bool,
}

/// PriorityClasses by name.
pub type Classes = HashMap<String, Class>;

/// What a PriorityClass index knows about one name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClassLookup {
    /// The class exists, with this value.
    Found(i32),
    /// The index is synced and has no class of that name.
    Missing,
    /// The index has not seen its initial list yet.
    NotSynced,
}

/// Looks `name` up in `classes`, or [`ClassLookup::NotSynced`] before the
/// index has seen its initial list.
pub fn lookup(classes: &Classes, synced: bool, name: &str) -> ClassLookup {
    if !synced {
        return ClassLookup::NotSynced;
    }
    classes
        .get(name)
        .map_or(ClassLookup::Missing, |c| ClassLookup::Found(c.value))
}

/// The priority fields of a pod spec or a PodGroup spec.
#[derive(Debug, Clone, Copy, Default)]
pub struct Declared<'a> {
    pub priority: Option<i32>,
    pub class_name: Option<&'a str>,
    pub preemption_policy: Option<&'a str>,
}

/// A resolved priority and preemption policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effective {
    pub priority: i32,
    pub preemption_policy: String,
}

/// Resolves as the Priority admission plugin does: an explicit value wins;
/// else the named class; else the global default class; else 0. The
/// policy: explicit, else the class's, else `PreemptLowerPriority`.
pub fn resolve(d: Declared<'_>, classes: &Classes) -> Effective {
    let class = match d.class_name.filter(|n| !n.is_empty()) {
        Some(n) => classes.get(n),
        None => classes
            .iter()
            .filter(|(_, c)| c.global_default)
            .min_by_key(|(n, _)| n.as_str())
            .map(|(_, c)| c),
    };
    Effective {
        priority: d.priority.or(class.map(|c| c.value)).unwrap_or(0),
        preemption_policy: d
            .preemption_policy
            .map(str::to_owned)
            .or_else(|| class.and_then(|c| c.preemption_policy.clone()))
            .unwrap_or_else(|| PREEMPT_LOWER_PRIORITY.to_owned()),
    }
}

/// Whether a member agrees with its group; the upstream message if not.
pub fn check_member(pod: &Effective, group: &Effective) -> Result<(), &'static str> {
    if pod.priority != group.priority {
        return Err(PRIORITY_MISMATCH);
    }
    if pod.preemption_policy != group.preemption_policy {
        return Err(PREEMPTION_POLICY_MISMATCH);
    }
    Ok(())
}

/// [`check_member`] with the `PodGroupPreemptionPolicy` gate off: groups
/// have no preemption policy, so the priority is checked against the
/// group's and the policy against the other members' (`others`).
pub fn check_member_without_group_policy<'a>(
    pod: &Effective,
    group_priority: i32,
    others: impl IntoIterator<Item = &'a str>,
) -> Result<(), &'static str> {
    if pod.priority != group_priority {
        return Err(PRIORITY_MISMATCH);
    }
    if others.into_iter().any(|p| p != pod.preemption_policy) {
        return Err(PREEMPTION_POLICY_SHARED);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classes() -> Classes {
        [
            (
                "high".to_owned(),
                Class {
                    value: 1000,
                    preemption_policy: Some("Never".into()),
                    global_default: false,
                },
            ),
            (
                "default".to_owned(),
                Class {
                    value: 10,
                    preemption_policy: None,
                    global_default: true,
                },
            ),
        ]
        .into_iter()
        .collect()
    }

    fn eff(p: i32, pol: &str) -> Effective {
        Effective {
            priority: p,
            preemption_policy: pol.into(),
        }
    }

    #[test]
    fn resolution_order() {
        let c = classes();
        let cases = [
            (Declared::default(), eff(10, PREEMPT_LOWER_PRIORITY)),
            (
                Declared {
                    class_name: Some("high"),
                    ..Default::default()
                },
                eff(1000, "Never"),
            ),
            (
                Declared {
                    priority: Some(5),
                    class_name: Some("high"),
                    preemption_policy: Some("PreemptLowerPriority"),
                },
                eff(5, PREEMPT_LOWER_PRIORITY),
            ),
            (
                Declared {
                    class_name: Some("missing"),
                    ..Default::default()
                },
                eff(0, PREEMPT_LOWER_PRIORITY),
            ),
        ];
        for (d, want) in cases {
            assert_eq!(resolve(d, &c), want, "{d:?}");
        }
        assert_eq!(
            resolve(Declared::default(), &Classes::new()),
            eff(0, PREEMPT_LOWER_PRIORITY)
        );
    }

    #[test]
    fn member_consistency() {
        let g = eff(100, PREEMPT_LOWER_PRIORITY);
        assert_eq!(check_member(&g, &g), Ok(()));
        assert_eq!(
            check_member(&eff(99, PREEMPT_LOWER_PRIORITY), &g),
            Err(PRIORITY_MISMATCH)
        );
        assert_eq!(
            check_member(&eff(100, "Never"), &g),
            Err(PREEMPTION_POLICY_MISMATCH)
        );
        // Priority is reported first when both differ.
        assert_eq!(check_member(&eff(1, "Never"), &g), Err(PRIORITY_MISMATCH));
    }

    #[test]
    fn member_consistency_with_the_gate_off() {
        let me = eff(100, "Never");
        let check = |me: &Effective, p: i32, others: &[&str]| {
            check_member_without_group_policy(me, p, others.iter().copied())
        };
        // The group's policy does not exist: only the members agree.
        assert_eq!(check(&me, 100, &[]), Ok(()));
        assert_eq!(check(&me, 100, &["Never", "Never"]), Ok(()));
        assert_eq!(
            check(&me, 100, &["Never", PREEMPT_LOWER_PRIORITY]),
            Err(PREEMPTION_POLICY_SHARED)
        );
        assert_eq!(check(&me, 7, &["Never"]), Err(PRIORITY_MISMATCH));
    }
}
