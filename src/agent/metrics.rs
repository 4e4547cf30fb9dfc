//! The agent's Prometheus metrics, served at `/metrics` on the socket (and
//! on `--metrics-addr` when given). Labels come from fixed sets; a resource
//! name is a label value only when the operator lists it
//! (`--metrics-resource`), plus `runs`, which every pod has.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::collections::BTreeSet;

/// How a reservation request ended.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Outcome {
    /// Reserved by this call (201).
    Admitted,
    /// Already held by the caller (200).
    Held,
    /// Does not fit, queued (409).
    Queued,
    /// Left the queue without admission (409).
    Dropped,
    /// Queue full (429).
    QueueFull,
    /// Held or queued by another caller (403).
    NotYours,
    /// Invalid request (4xx).
    Invalid,
    /// Watches not synced (503).
    Unavailable,
}

/// Label values in snake case, from a fixed list.
macro_rules! snake_labels {
    ($t:ty { $($v:ident => $s:literal),* $(,)? }) => {
        impl $t {
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$v => $s),* }
            }
        }
        impl EncodeLabelValue for $t {
            fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
                std::fmt::Write::write_str(encoder, self.as_str())
            }
        }
    };
}

snake_labels!(Outcome {
    Admitted => "admitted",
    Held => "held",
    Queued => "queued",
    Dropped => "dropped",
    QueueFull => "queue_full",
    NotYours => "not_yours",
    Invalid => "invalid",
    Unavailable => "unavailable",
});

snake_labels!(JournalError {
    Write => "write",
    Compact => "compact",
    Corrupt => "corrupt",
});

snake_labels!(Refusal {
    Peer => "peer",
    NotYours => "not_yours",
});

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub result: Outcome,
}

/// A journal failure.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum JournalError {
    /// Appending or syncing records failed.
    Write,
    /// Rewriting the compacted journal failed.
    Compact,
    /// The journal read at start had a corrupt or truncated tail.
    Corrupt,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JournalErrorLabels {
    pub kind: JournalError,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    pub resource: String,
}

/// Journal counters, shared with the journal's writer thread.
#[derive(Clone, Debug, Default)]
pub struct JournalStats {
    pub errors: Family<JournalErrorLabels, Counter>,
    pub compactions: Counter,
    /// Batches written and synced (one `fdatasync` each): admissions per
    /// sync show how much group commit shares. On a memory-backed journal,
    /// records written (no `fdatasync`).
    pub syncs: Counter,
}

impl JournalStats {
    pub fn error(&self, kind: JournalError) {
        self.errors
            .get_or_create(&JournalErrorLabels { kind })
            .inc();
    }
}

/// Peer-credential refusals.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Refusal {
    /// The peer's uid and gid are not allowed on the socket.
    Peer,
    /// A release of a hold created by another caller.
    NotYours,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusalLabels {
    pub reason: Refusal,
}

/// Every metric of the agent.
#[derive(Debug)]
pub struct AgentMetrics {
    pub registry: Registry,
    pub admissions: Family<OutcomeLabels, Counter>,
    pub refusals: Family<RefusalLabels, Counter>,
    pub releases: Counter,
    pub queue_length: Gauge,
    pub capacity: Family<ResourceLabels, Gauge>,
    pub reserved: Family<ResourceLabels, Gauge>,
    pub free: Family<ResourceLabels, Gauge>,
    pub wait_seconds: Histogram,
    pub journal: JournalStats,
    /// Resource names allowed as label values.
    resources: BTreeSet<String>,
}

impl AgentMetrics {
    /// Metrics whose per-resource gauges report `runs` and `resources`.
    pub fn new(resources: impl IntoIterator<Item = String>) -> Self {
        let mut registry = Registry::with_prefix("kruntimes_agent");
        let admissions = Family::default();
        registry.register(
            "admissions",
            "Reservation requests answered, by result",
            admissions.clone(),
        );
        let refusals = Family::default();
        registry.register(
            "refusals",
            "Calls refused: peer not allowed, or a hold of another caller",
            refusals.clone(),
        );
        let releases = Counter::default();
        registry.register(
            "releases",
            "Reservations released or withdrawn by DELETE",
            releases.clone(),
        );
        let queue_length = Gauge::default();
        registry.register(
            "queue_length",
            "Runs waiting for capacity",
            queue_length.clone(),
        );
        let capacity = Family::default();
        registry.register(
            "capacity",
            "Declared capacity of the pod, by resource",
            capacity.clone(),
        );
        let reserved = Family::default();
        registry.register("reserved", "Reserved amount, by resource", reserved.clone());
        let free = Family::default();
        registry.register("free", "Capacity minus reserved, by resource", free.clone());
        // 100µs .. ~27 min
        let wait_seconds = Histogram::new(exponential_buckets(1e-4, 4.0, 12));
        registry.register(
            "wait_seconds",
            "Time from a Run's first reservation request to its admission",
            wait_seconds.clone(),
        );
        let journal = JournalStats::default();
        registry.register(
            "journal_errors",
            "Journal failures, by kind",
            journal.errors.clone(),
        );
        registry.register(
            "journal_compactions",
            "Journal compactions",
            journal.compactions.clone(),
        );
        registry.register(
            "journal_syncs",
            "Journal batches written and synced (one fdatasync each)",
            journal.syncs.clone(),
        );
        let mut resources: BTreeSet<String> = resources.into_iter().collect();
        resources.insert("runs".to_owned());
        AgentMetrics {
            registry,
            admissions,
            refusals,
            releases,
            queue_length,
            capacity,
            reserved,
            free,
            wait_seconds,
            journal,
            resources,
        }
    }

    pub fn outcome(&self, result: Outcome) {
        self.admissions
            .get_or_create(&OutcomeLabels { result })
            .inc();
    }

    pub fn refused(&self, reason: Refusal) {
        self.refusals.get_or_create(&RefusalLabels { reason }).inc();
    }

    /// Sets the per-resource gauges for the allowed names.
    pub fn set_amounts(
        &self,
        capacity: &crate::model::resources::Amounts,
        reserved: &crate::model::resources::Amounts,
        free: &crate::model::resources::Amounts,
    ) {
        for name in &self.resources {
            let labels = ResourceLabels {
                resource: name.clone(),
            };
            let get = |a: &crate::model::resources::Amounts| {
                i64::try_from(a.get(name).copied().unwrap_or(0)).unwrap_or(i64::MAX)
            };
            self.capacity.get_or_create(&labels).set(get(capacity));
            self.reserved.get_or_create(&labels).set(get(reserved));
            self.free.get_or_create(&labels).set(get(free));
        }
    }

    /// OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

impl Default for AgentMetrics {
    fn default() -> Self {
        AgentMetrics::new(Vec::new())
    }
}
