//! kube-scheduler's `NodeNames` lists resolved to slot indexes: a list is
//! resolved once per slot layout and reused for the pods that follow
//! (kept by the JSON text, bounded in count and bytes).

use super::ClusterState;
use super::nodes::NO_SLOT;
use std::sync::Arc;

/// How many resolved `NodeNames` arrays are kept (a lookup scans them).
const REFS_CACHED: usize = 8;
/// How many bytes the kept arrays may hold together ([`NodeRefs::bytes`]):
/// a list larger than this is resolved for its request and not kept, and
/// older lists are dropped until a new one fits.
pub const REFS_CACHED_BYTES: usize = 32 * 1024 * 1024;

/// The hash a `NodeNames` array's text is looked up by.
fn refs_hash(raw: &str) -> u64 {
    use std::hash::BuildHasher as _;
    foldhash::fast::FixedState::with_seed(0).hash_one(raw)
}

/// A `NodeNames` array resolved to slot indexes ([`NO_SLOT`] for names the
/// cache does not know), valid under the layout it was resolved in.
#[derive(Debug, Default)]
pub struct NodeRefs {
    /// The array's JSON text, as the request carried it.
    raw: Box<str>,
    /// The hash of `raw` a lookup compares first.
    hash: u64,
    /// The slot layout the names were resolved under.
    layout: u64,
    /// The names, in request order.
    names: Vec<Box<str>>,
    /// The slot index of each name ([`NO_SLOT`]: unknown).
    slots: Vec<u32>,
    /// No name needs escaping in JSON (checked once per list).
    plain: bool,
    /// The heap this resolution holds: the raw text, each name with its
    /// box, the slots.
    bytes: usize,
}

impl NodeRefs {
    /// The heap bytes this resolution holds, as the reuse cache counts them.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether every name can be written between quotes as is.
    pub fn all_plain(&self) -> bool {
        self.plain
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// `(name, slot)` in request order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u32)> {
        self.names
            .iter()
            .map(|n| &**n)
            .zip(self.slots.iter().copied())
    }
}

// === impl ClusterState ===

impl ClusterState {
    /// Every cached node, in name order, resolved to its slot, without the
    /// reuse table [`ClusterState::resolve_names`] keeps for kube-scheduler's
    /// lists (a read-only caller such as `/v1/explain/pod` must not evict
    /// them).
    pub fn all_node_refs(&self) -> Arc<NodeRefs> {
        let names: Vec<Box<str>> = self.node_names().into_iter().map(Into::into).collect();
        let raw = serde_json::to_string(&names).unwrap_or_default();
        Arc::new(self.node_refs(&raw, refs_hash(&raw), names))
    }

    /// The resolution of `names` (the array `raw`, hashed `hash`) under the
    /// current layout.
    fn node_refs(&self, raw: &str, hash: u64, names: Vec<Box<str>>) -> NodeRefs {
        let slots: Vec<u32> = names
            .iter()
            .map(|n| self.nodes.find(n).unwrap_or(NO_SLOT))
            .collect();
        let plain = names
            .iter()
            .all(|n| n.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\'));
        let bytes = std::mem::size_of::<NodeRefs>()
            + raw.len()
            + names
                .iter()
                .map(|n| n.len() + std::mem::size_of::<Box<str>>())
                .sum::<usize>()
            + std::mem::size_of_val(&slots[..]);
        NodeRefs {
            raw: raw.into(),
            hash,
            layout: self.nodes.layout,
            names,
            slots,
            plain,
            bytes,
        }
    }

    /// Resolves a `NodeNames` array (its raw JSON text) to slot indexes,
    /// reusing the resolution of an identical array seen under the same
    /// layout: kube-scheduler sends the same list for pod after pod.
    pub fn resolve_names(&self, raw: &str) -> Result<Arc<NodeRefs>, serde_json::Error> {
        let hash = refs_hash(raw);
        let layout = self.nodes.layout;
        {
            let mut cache = self.refs.lock();
            if let Some(pos) = cache
                .iter()
                .position(|r| r.hash == hash && r.layout == layout && *r.raw == *raw)
            {
                let hit = cache.remove(pos);
                cache.insert(0, Arc::clone(&hit));
                return Ok(hit);
            }
        }
        let names: Vec<Box<str>> =
            serde_json::from_str::<Option<Vec<Box<str>>>>(raw)?.unwrap_or_default();
        let refs = Arc::new(self.node_refs(raw, hash, names));
        let bytes = refs.bytes;
        if bytes > REFS_CACHED_BYTES {
            return Ok(refs);
        }
        let mut cache = self.refs.lock();
        cache.retain(|r| r.layout == layout);
        cache.insert(0, Arc::clone(&refs));
        cache.truncate(REFS_CACHED);
        let mut total = 0;
        let keep = cache
            .iter()
            .take_while(|r| {
                total += r.bytes;
                total <= REFS_CACHED_BYTES
            })
            .count();
        cache.truncate(keep);
        Ok(refs)
    }
}
