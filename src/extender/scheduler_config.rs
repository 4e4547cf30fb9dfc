//! `--scheduler-config PATH`: the extender reads kube-scheduler's own
//! `KubeSchedulerConfiguration`, so the two cannot disagree.
//!
//! - `profiles[].pluginConfig[name=DynamicResources].args.bindingTimeout`
//!   is the binding timeout of device binding conditions (kube-scheduler's
//!   default, 600s, when absent); `--binding-timeout`, when given as well,
//!   must say the same.
//! - The bind entry's `httpTimeout` (the entry with `bindVerb`, or the only
//!   entry; kube-scheduler's default 5s when absent) bounds a bind: it must
//!   exceed `--binding-wait` + `--gang-wait`, the longest a bind waits, or
//!   kube-scheduler gives up on binds the extender still holds.
//! - Every entry on this extender's URL with `filterVerb`, `prioritizeVerb`
//!   or `preemptVerb` has an `httpTimeout` of at most
//!   [`MAX_SERIAL_TIMEOUT`]: those verbs run in kube-scheduler's serial
//!   scheduling loop, where one hung call stalls every pod of the profile.
//!   So bind, which may wait long, has an entry of its own (two entries on
//!   the same URL, as the shipped configuration has).
//! - `leaderElection.resourceNamespace`, when set, is the namespace the pod
//!   runs in ([`SchedulerConfig::check_namespace`]): a kustomize
//!   `namespace:` override moves the pods but not this file, and the two
//!   kube-schedulers would then contest a Lease elsewhere.
//!
//! A configuration that cannot work is refused at start with a message
//! naming the fields. Durations are Go's (`30s`, `1m30s`, `1.5h`, `500ms`).

use serde::Deserialize;
use std::time::Duration;

/// kube-scheduler's default extender `httpTimeout`.
pub const DEFAULT_HTTP_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest `httpTimeout` of an entry with a serial verb (filter,
/// prioritize, preempt): kube-scheduler's own default, the longest its
/// scheduling loop should stall on one pod.
pub const MAX_SERIAL_TIMEOUT: Duration = Duration::from_secs(5);
/// kube-scheduler's default `DynamicResourcesArgs.bindingTimeout`.
pub use crate::extender::bind::device_gate::DEFAULT_BINDING_TIMEOUT;

/// What the extender takes from kube-scheduler's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// The binding timeout of DRA binding conditions.
    pub binding_timeout: Duration,
    /// The bind entry's `httpTimeout`.
    pub http_timeout: Duration,
    /// Index of that entry in `extenders` (for messages).
    pub extender: usize,
    /// `(index, httpTimeout)` of each entry on the same URL with a serial
    /// verb (filter, prioritize, preempt).
    pub serial: Vec<(usize, Duration)>,
    /// `leaderElection.resourceNamespace`, when set.
    pub lease_namespace: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Config {
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    leader_election: Option<LeaderElection>,
    #[serde(default)]
    profiles: Vec<Profile>,
    #[serde(default)]
    extenders: Vec<Extender>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LeaderElection {
    #[serde(default)]
    resource_namespace: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Profile {
    #[serde(default)]
    plugin_config: Vec<PluginConfig>,
}

#[derive(Deserialize)]
struct PluginConfig {
    name: String,
    #[serde(default)]
    args: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Extender {
    #[serde(default)]
    url_prefix: Option<String>,
    #[serde(default)]
    filter_verb: Option<String>,
    #[serde(default)]
    prioritize_verb: Option<String>,
    #[serde(default)]
    preempt_verb: Option<String>,
    #[serde(default)]
    bind_verb: Option<String>,
    #[serde(default)]
    http_timeout: Option<String>,
}

fn set(v: &Option<String>) -> bool {
    v.as_deref().is_some_and(|v| !v.is_empty())
}

impl Extender {
    /// Has a verb of kube-scheduler's serial scheduling loop.
    fn serial(&self) -> bool {
        set(&self.filter_verb) || set(&self.prioritize_verb) || set(&self.preempt_verb)
    }

    fn timeout(&self, i: usize) -> Result<Duration, String> {
        match &self.http_timeout {
            Some(t) => go_duration(t, &format!("extenders[{i}].httpTimeout")),
            None => Ok(DEFAULT_HTTP_TIMEOUT),
        }
    }
}

/// Parses a Go `time.Duration` string (`300ms`, `1m30s`, `1.5h`; units ns,
/// us, µs, ms, s, m, h). Negative durations are refused.
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("invalid duration {s:?}; write e.g. 30s, 1m30s, 500ms");
    let t = s.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    if t.is_empty() || t.starts_with('-') {
        return Err(bad());
    }
    let t = t.strip_prefix('+').unwrap_or(t);
    let mut total = 0f64;
    let mut rest = t;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        if num_len == 0 {
            return Err(bad());
        }
        let n: f64 = rest[..num_len].parse().map_err(|_| bad())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += n * scale;
        rest = &rest[unit_len..];
    }
    Duration::try_from_secs_f64(total).map_err(|_| bad())
}

fn go_duration(v: &str, field: &str) -> Result<Duration, String> {
    parse_go_duration(v).map_err(|e| format!("{field}: {e}"))
}

/// Reads what the extender needs from a `KubeSchedulerConfiguration`
/// (YAML or JSON text).
pub fn parse(text: &str) -> Result<SchedulerConfig, String> {
    let c: Config = serde_saphyr::from_str(text)
        .map_err(|e| format!("not a KubeSchedulerConfiguration: {e}"))?;
    if let Some(kind) = c
        .kind
        .as_deref()
        .filter(|k| *k != "KubeSchedulerConfiguration")
    {
        return Err(format!("kind is {kind}, not KubeSchedulerConfiguration"));
    }
    let mut binding: Option<(Duration, String)> = None;
    for (i, p) in c.profiles.iter().enumerate() {
        for (j, pc) in p.plugin_config.iter().enumerate() {
            if pc.name != "DynamicResources" {
                continue;
            }
            let Some(v) = pc.args.as_ref().and_then(|a| a.get("bindingTimeout")) else {
                continue;
            };
            let field = format!("profiles[{i}].pluginConfig[{j}].args.bindingTimeout");
            let text = v
                .as_str()
                .ok_or_else(|| format!("{field}: a duration string, e.g. 600s"))?;
            let d = go_duration(text, &field)?;
            if d.is_zero() {
                return Err(format!("{field}: must be positive"));
            }
            match &binding {
                Some((other, at)) if *other != d => {
                    return Err(format!(
                        "{field} is {d:?} but {at} is {other:?}: the extender has one binding timeout"
                    ));
                }
                _ => binding = Some((d, field)),
            }
        }
    }
    let extender = match c
        .extenders
        .iter()
        .position(|e| e.bind_verb.as_deref().is_some_and(|v| !v.is_empty()))
    {
        Some(i) => i,
        None if c.extenders.len() == 1 => 0,
        None if c.extenders.is_empty() => {
            return Err("extenders: no extender is configured".into());
        }
        None => {
            return Err(
                "extenders: several entries and none with bindVerb; which one is this extender?"
                    .into(),
            );
        }
    };
    let bind = &c.extenders[extender];
    let http_timeout = bind.timeout(extender)?;
    let mut serial = Vec::new();
    for (i, e) in c.extenders.iter().enumerate() {
        if e.serial() && e.url_prefix == bind.url_prefix {
            serial.push((i, e.timeout(i)?));
        }
    }
    Ok(SchedulerConfig {
        binding_timeout: binding.map_or(DEFAULT_BINDING_TIMEOUT, |(d, _)| d),
        http_timeout,
        extender,
        serial,
        lease_namespace: c
            .leader_election
            .and_then(|l| l.resource_namespace)
            .filter(|n| !n.is_empty()),
    })
}

impl SchedulerConfig {
    /// Refuses a configuration under which a bind can outlast the call:
    /// `httpTimeout` must exceed `binding_wait + gang_wait`.
    /// Also refuses a serial verb (filter, prioritize, preempt) with an
    /// `httpTimeout` above [`MAX_SERIAL_TIMEOUT`].
    pub fn check_waits(&self, binding_wait: Duration, gang_wait: Duration) -> Result<(), String> {
        for (i, t) in &self.serial {
            if *t > MAX_SERIAL_TIMEOUT {
                let shared = if *i == self.extender {
                    " (it is also the bind entry: give bind an entry of its own on the same URL, with the long timeout)"
                } else {
                    ""
                };
                return Err(format!(
                    "extenders[{i}].httpTimeout is {t:?}, but filter, prioritize and preempt run in kube-scheduler's \
                     serial scheduling loop, where a hung call stalls every pod of the profile: at most {MAX_SERIAL_TIMEOUT:?}{shared}"
                ));
            }
        }
        let longest = binding_wait.saturating_add(gang_wait);
        if self.http_timeout <= longest {
            return Err(format!(
                "extenders[{}].httpTimeout is {:?}, but a bind may wait --binding-wait {:?} + --gang-wait {:?} = {:?}: \
                 kube-scheduler would give up on binds the extender still holds; raise httpTimeout or lower the waits",
                self.extender, self.http_timeout, binding_wait, gang_wait, longest
            ));
        }
        Ok(())
    }

    /// Refuses a Lease namespace other than the pod's (`POD_NAMESPACE`):
    /// the sign of a kustomize `namespace:` override, which this install
    /// does not support (see docs/prerequisites.md).
    pub fn check_namespace(&self, pod_namespace: Option<&str>) -> Result<(), String> {
        match (self.lease_namespace.as_deref(), pod_namespace) {
            (Some(lease), Some(pod)) if !pod.is_empty() && lease != pod => Err(format!(
                "leaderElection.resourceNamespace is {lease:?} but this pod runs in {pod:?}: \
                 a kustomize `namespace:` override is not supported (it moves the pods but not \
                 this file, the webhook configurations or the kube-system RoleBinding); \
                 install into {lease:?}, or edit every namespace as docs/prerequisites.md lists"
            )),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        for (s, want) in [
            ("30s", Duration::from_secs(30)),
            ("1m30s", Duration::from_secs(90)),
            ("1.5h", Duration::from_secs(5400)),
            ("500ms", Duration::from_millis(500)),
            ("0", Duration::ZERO),
            ("10m0s", Duration::from_secs(600)),
        ] {
            assert_eq!(parse_go_duration(s), Ok(want), "{s}");
        }
        for s in ["", "-1s", "10", "1x", "s", "1.2.3s"] {
            assert!(parse_go_duration(s).is_err(), "{s}");
        }
    }

    const SHIPPED: &str = include_str!("../../manifests/kube-scheduler/scheduler-config.yaml");

    #[test]
    fn the_shipped_configuration_works_with_the_shipped_waits() {
        let c = parse(SHIPPED).expect("parses");
        assert_eq!(c.binding_timeout, Duration::from_secs(600));
        assert!(c.http_timeout > Duration::from_secs(25));
        // Two entries on one URL: the serial verbs short, bind alone long.
        assert_eq!(c.extender, 1);
        assert_eq!(c.serial, [(0, Duration::from_secs(5))]);
        assert_eq!(c.lease_namespace.as_deref(), Some("kruntimes-system"));
        assert_eq!(c.check_namespace(Some("kruntimes-system")), Ok(()));
        assert_eq!(c.check_namespace(None), Ok(()));
        // The shipped extender flags: --binding-wait 5s, --gang-wait 20s (defaults).
        assert_eq!(
            c.check_waits(Duration::from_secs(5), Duration::from_secs(20)),
            Ok(())
        );
    }

    #[test]
    fn binding_timeout_and_http_timeout_are_read() {
        let text = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
            profiles:\n- schedulerName: a\n  pluginConfig:\n  - name: NodeResourcesFit\n    args: {}\n  \
            - name: DynamicResources\n    args:\n      bindingTimeout: 2m\n\
            extenders:\n- urlPrefix: http://x\n  filterVerb: filter\n- urlPrefix: http://127.0.0.1:8888/scheduler\n  bindVerb: bind\n  httpTimeout: 1m\n";
        let c = parse(text).expect("parses");
        assert_eq!(
            c,
            SchedulerConfig {
                binding_timeout: Duration::from_secs(120),
                http_timeout: Duration::from_secs(60),
                extender: 1,
                serial: Vec::new(),
                lease_namespace: None,
            }
        );
    }

    #[test]
    fn a_serial_verb_with_a_long_timeout_is_refused() {
        // The old single entry: every verb under bind's 30s.
        let one = "extenders:\n- urlPrefix: http://127.0.0.1:8888/scheduler\n  filterVerb: filter\n  \
            prioritizeVerb: prioritize\n  bindVerb: bind\n  httpTimeout: 30s\n";
        let e = parse(one)
            .expect("parses")
            .check_waits(Duration::from_secs(5), Duration::from_secs(20))
            .unwrap_err();
        assert!(
            e.contains("extenders[0].httpTimeout is 30s") && e.contains("entry of its own"),
            "{e}"
        );
        // A separate serial entry that is too long.
        let two = "extenders:\n- urlPrefix: http://x/s\n  preemptVerb: preempt\n  httpTimeout: 10s\n\
            - urlPrefix: http://x/s\n  bindVerb: bind\n  httpTimeout: 30s\n";
        let e = parse(two)
            .expect("parses")
            .check_waits(Duration::from_secs(5), Duration::from_secs(20))
            .unwrap_err();
        assert!(e.contains("extenders[0].httpTimeout is 10s"), "{e}");
        // Another extender's entry (another URL) is not this one's business;
        // an unset timeout is kube-scheduler's 5s, which is fine.
        let other = "extenders:\n- urlPrefix: http://elsewhere\n  filterVerb: f\n  httpTimeout: 1m\n\
            - urlPrefix: http://x/s\n  filterVerb: filter\n\
            - urlPrefix: http://x/s\n  bindVerb: bind\n  httpTimeout: 30s\n";
        let c = parse(other).expect("parses");
        assert_eq!(c.serial, [(1, DEFAULT_HTTP_TIMEOUT)]);
        assert_eq!(
            c.check_waits(Duration::from_secs(5), Duration::from_secs(20)),
            Ok(())
        );
    }

    #[test]
    fn a_lease_in_another_namespace_is_refused() {
        let c = parse(SHIPPED).expect("parses");
        let e = c.check_namespace(Some("team-a")).unwrap_err();
        assert!(
            e.contains("leaderElection.resourceNamespace is \"kruntimes-system\"")
                && e.contains("namespace:` override is not supported"),
            "{e}"
        );
    }

    #[test]
    fn a_configuration_that_cannot_work_is_refused_naming_the_fields() {
        let short = "kind: KubeSchedulerConfiguration\nextenders:\n- urlPrefix: http://x\n  bindVerb: bind\n  httpTimeout: 10s\n";
        let c = parse(short).expect("parses");
        let e = c
            .check_waits(Duration::from_secs(5), Duration::from_secs(20))
            .unwrap_err();
        assert!(e.contains("extenders[0].httpTimeout is 10s"), "{e}");
        assert!(
            e.contains("--binding-wait 5s") && e.contains("--gang-wait 20s"),
            "{e}"
        );
        // Unset: kube-scheduler's default of 5s.
        let unset = parse("extenders:\n- urlPrefix: http://x\n").expect("parses");
        assert_eq!(unset.http_timeout, DEFAULT_HTTP_TIMEOUT);
        assert!(
            unset
                .check_waits(Duration::from_secs(5), Duration::ZERO)
                .is_err()
        );
        for (text, field) in [
            ("kind: Pod\n", "kind is Pod"),
            ("extenders: []\n", "no extender"),
            (
                "extenders:\n- urlPrefix: a\n- urlPrefix: b\n",
                "none with bindVerb",
            ),
            (
                "extenders:\n- httpTimeout: soon\n",
                "extenders[0].httpTimeout",
            ),
            (
                "profiles:\n- pluginConfig:\n  - name: DynamicResources\n    args: {bindingTimeout: 0s}\nextenders:\n- {}\n",
                "profiles[0].pluginConfig[0].args.bindingTimeout",
            ),
            (
                "profiles:\n- pluginConfig:\n  - name: DynamicResources\n    args: {bindingTimeout: 1m}\n- pluginConfig:\n  - name: DynamicResources\n    args: {bindingTimeout: 2m}\nextenders:\n- {}\n",
                "profiles[1].pluginConfig[0].args.bindingTimeout is 120s but profiles[0]",
            ),
            ("[", "not a KubeSchedulerConfiguration"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(field), "{text:?}: {e}");
        }
    }
}
