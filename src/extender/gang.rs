//! Group semantics, pure over a [`ClusterState`] snapshot: membership and
//! quorum of PodGroups (`gang.minCount`, `basic`) and CompositePodGroups
//! (`gang.minGroupCount`), topology domains (`schedulingConstraints.topology[0].key`,
//! nested: a child's domain lies inside its parent's), domain choice by
//! simulation, early infeasibility, and the prioritize preference.
//!
//! ```text
//!   filter ──▶ filter_gate: group exists? enough pods exist? domain fixed by placed
//!              members, else the plan (chosen once per group by simulating the
//!              whole remaining group in every domain, kept by the GangPlanner),
//!              remaining members still fit?
//!   prioritize ──▶ prefer: the nodes the simulation fills first score 10
//!   bind ──▶ quorum: the unit (group, or outermost gang composite) and whether
//!            enough members are placed (bound or assumed)
//! ```
//!
//! The simulation is first-fit over the domain's nodes in name order, the
//! group's members largest first, against `allocatable - used` (what is
//! bound or assumed), after the members other planned groups still need in
//! overlapping domains are placed the same way (so two gangs never plan the
//! same room). Among domains that can hold what the group needs, the one
//! left with the least room for another pod of the group's largest shape
//! wins (best fit: the least fragmentation, big empty domains stay whole
//! for big groups); ties go to the smallest label value. When
//! kube-scheduler sent a sample of the nodes that stopped inside a domain
//! that can hold the group, that domain wins over best fit: its next
//! cycle's sample starts there ([`simulation::SampleEnd`]).
//!
//! Files: [`hierarchy`] (specs, the chain walk, members, quorum),
//! [`simulation`] (rooms, demand, the group tree and domain trials),
//! [`gate`] (the filter verdict in steps), [`prefer`] (prioritize) and
//! [`preemption`] (where preempting can help). Plans live in the
//! [`GangPlanner`], never in the snapshot.

pub mod explain;
mod gate;
mod hierarchy;
mod planner;
mod preemption;
mod prefer;
mod simulation;

pub use gate::{GroupVerdict, drop_plans, filter_gate, filter_gate_for};
pub use hierarchy::{
    AllowedNodes, Level, Policy, Quorum, Spec, bounded, chain, chain_from,
    completes_released_group, group_of, outside_fixed_domain, placed, quorum, spec_of, surplus,
    surplus_message, surplus_while_gathering, tree_of,
};
pub use planner::{GangPlanner, PLAN_TTL, Plan, Plans};
pub use preemption::preemption_nodes;
pub use prefer::{Prefer, prefer};

use crate::cache::cluster_index::{ChainError, ClusterState, DomainIndex, GroupObject, Rejection};
use crate::model::refs::GroupRef;
use crate::pods::fit::{self, Amounts};
use hierarchy::*;
use k8s_openapi::api::core::v1::Pod;
use simulation::*;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use tokio::time::Instant;

/// Deepest group hierarchy followed (the Workload API allows 4 levels).
pub use crate::model::refs::MAX_GROUP_DEPTH as MAX_DEPTH;
/// Longest status message or rejection detail (the same bound as Run
/// status messages).
pub use crate::model::refs::MAX_MESSAGE;
/// Domains up to this many nodes get an exact "does the rest still fit"
/// check per node in prioritize.
const EXACT_PREFER_NODES: usize = 64;

#[cfg(test)]
mod tests;
