//! Small shared domain types and rules every layer may use: references to
//! Runs and groups, the bound on messages, Kubernetes name validators and
//! the group hierarchy's depth limit.

/// The Run an event is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// Pod annotation: the CompositePodGroup the pod's PodGroup named as its
/// parent when the extender bound the pod (set through the Binding, so in
/// the same write as `spec.nodeName`). A pod names only its PodGroup; when
/// that group is deleted while the pod stays bound, this is what still ties
/// the pod to the composite whose topology domain it fixes, for an
/// extender that never saw the group (a standby taking over, a restart).
pub const PARENT_COMPOSITE_ANNOTATION: &str = "kruntimes.io/parent-composite-pod-group";

/// A PodGroup or CompositePodGroup.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupRef {
    /// A CompositePodGroup (else a PodGroup).
    pub composite: bool,
    pub namespace: String,
    pub name: String,
}

impl GroupRef {
    pub fn group(namespace: &str, name: &str) -> Self {
        GroupRef {
            composite: false,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }

    pub fn composite(namespace: &str, name: &str) -> Self {
        GroupRef {
            composite: true,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }

    /// `PodGroup` or `CompositePodGroup`.
    pub fn kind(&self) -> &'static str {
        if self.composite {
            "CompositePodGroup"
        } else {
            "PodGroup"
        }
    }
}

impl std::fmt::Display for GroupRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = if self.composite {
            "composite pod group"
        } else {
            "pod group"
        };
        write!(f, "{kind} {}/{}", self.namespace, self.name)
    }
}

// === group hierarchy ===

/// Deepest group hierarchy followed: the Workload API allows 4 levels (a
/// root template is level 1), and every walk up `parentCompositePodGroupName`
/// stops here, which also ends a cycle of bad references.
pub const MAX_GROUP_DEPTH: usize = 4;

/// `pod group ns/a → composite pod group ns/b → …`: a walked chain, for
/// messages about a cycle or a hierarchy that is too deep.
pub fn hierarchy_path<'a>(groups: impl IntoIterator<Item = &'a GroupRef>) -> String {
    let mut s = String::new();
    for (i, g) in groups.into_iter().enumerate() {
        if i > 0 {
            s.push_str(" → ");
        }
        s.push_str(&g.to_string());
    }
    s
}

/// The message for a parent reference that comes back to a group already
/// on the chain.
pub fn cycle_message<'a>(chain: impl IntoIterator<Item = &'a GroupRef>) -> String {
    format!("parent cycle: {}", hierarchy_path(chain))
}

/// The message for a chain longer than [`MAX_GROUP_DEPTH`] levels.
pub fn too_deep_message<'a>(chain: impl IntoIterator<Item = &'a GroupRef>) -> String {
    format!(
        "group hierarchy deeper than {MAX_GROUP_DEPTH} levels: {}",
        hierarchy_path(chain)
    )
}

// === messages ===

/// Upper bound of a status message or rejection detail.
pub const MAX_MESSAGE: usize = 256;

/// Truncates on a char boundary, marking the cut with "...".
pub fn truncate(mut s: String, max: usize) -> String {
    if s.len() <= max {
        return s;
    }
    let mut cut = max.saturating_sub(3);
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    s.truncate(cut);
    s.push_str("...");
    s
}

// === names ===

pub const DNS_LABEL_MAX: usize = 63;
pub const DNS_SUBDOMAIN_MAX: usize = 253;

fn is_label_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'
}

/// RFC 1123 label: lowercase alphanumerics and '-', alphanumeric at both ends.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= DNS_LABEL_MAX
        && s.chars().all(is_label_char)
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// RFC 1123 subdomain as Kubernetes checks it (`IsDNS1123Subdomain`): at
/// most 253 characters of dot-separated parts, each of lowercase
/// alphanumerics and '-', alphanumeric at both ends. Unlike a label, a part
/// has no length limit of its own.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= DNS_SUBDOMAIN_MAX
        && s.split('.').all(|part| {
            !part.is_empty()
                && part.chars().all(is_label_char)
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncate_cuts_on_a_char_boundary() {
        assert_eq!(truncate("short".into(), 10), "short");
        let cut = truncate("ééééé".into(), 6);
        assert!(cut.len() <= 6 && cut.ends_with("..."), "{cut}");
    }

    #[test]
    fn hierarchy_messages_name_the_chain() {
        let a = GroupRef::group("ns", "a");
        let b = GroupRef::composite("ns", "b");
        assert_eq!(
            cycle_message([&a, &b, &b]),
            "parent cycle: pod group ns/a → composite pod group ns/b → composite pod group ns/b"
        );
        assert!(too_deep_message([&a]).starts_with("group hierarchy deeper than 4 levels: "));
    }

    #[test]
    fn dns_names() {
        assert!(is_dns_label("a-1") && !is_dns_label("-a") && !is_dns_label("a.b"));
        assert!(is_dns_label(&"a".repeat(63)) && !is_dns_label(&"a".repeat(64)));
        assert!(is_dns_subdomain("a.b-c") && !is_dns_subdomain("a..b") && !is_dns_subdomain(""));
    }
}
