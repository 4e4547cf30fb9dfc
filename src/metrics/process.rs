//! The standard process series (`process_resident_memory_bytes`,
//! `process_cpu_seconds_total`, `process_open_fds`, ...), read from
//! `/proc/self` at scrape time, named as Prometheus' own client libraries
//! name them so stock dashboards work. Where `/proc` is missing (not
//! Linux) the series are left out.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Clock ticks per second of `/proc/<pid>/stat` times: the kernel reports
/// them in `USER_HZ`, which is 100 on every architecture Kubernetes runs on.
const USER_HZ: f64 = 100.0;

/// What one read of `/proc/self` found.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ProcessSample {
    pub resident_bytes: Option<u64>,
    pub virtual_bytes: Option<u64>,
    pub cpu_seconds: Option<f64>,
    pub start_time_seconds: Option<f64>,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
    pub threads: Option<u64>,
}

impl ProcessSample {
    /// Reads the running process.
    pub fn read() -> Self {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
        let boot = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let open_fds = std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|d| d.count() as u64);
        let mut s = Self::parse(&status, &stat, &limits, &boot);
        s.open_fds = open_fds;
        s
    }

    /// Parses the texts of `/proc/self/status`, `/proc/self/stat`,
    /// `/proc/self/limits` and `/proc/stat`; a field that does not parse
    /// is left out.
    pub fn parse(status: &str, stat: &str, limits: &str, boot: &str) -> Self {
        let kib = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().strip_suffix("kB"))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(|v| v * 1024)
        };
        let threads = status
            .lines()
            .find_map(|l| l.strip_prefix("Threads:"))
            .and_then(|v| v.trim().parse().ok());
        // Fields after the command, which is in parentheses and may hold
        // spaces: field 3 (state) is index 0 here.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<u64>().ok());
        let cpu_seconds = match (field(14), field(15)) {
            (Some(u), Some(s)) => Some((u + s) as f64 / USER_HZ),
            _ => None,
        };
        let btime = boot
            .lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|v| v.trim().parse::<u64>().ok());
        let start_time_seconds = match (btime, field(22)) {
            (Some(b), Some(t)) => Some(b as f64 + t as f64 / USER_HZ),
            _ => None,
        };
        let max_fds = limits
            .lines()
            .find_map(|l| l.strip_prefix("Max open files"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok());
        ProcessSample {
            resident_bytes: kib("VmRSS:"),
            virtual_bytes: kib("VmSize:"),
            cpu_seconds,
            start_time_seconds,
            open_fds: None,
            max_fds,
            threads,
        }
    }
}

/// Encodes a [`ProcessSample`] read at each scrape.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessCollector;

fn gauge(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: Option<f64>,
) -> Result<(), std::fmt::Error> {
    if let Some(v) = value {
        let g = ConstGauge::new(v);
        let e = encoder.encode_descriptor(name, help, None, g.metric_type())?;
        g.encode(e)?;
    }
    Ok(())
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let s = ProcessSample::read();
        let f = |v: Option<u64>| v.map(|v| v as f64);
        gauge(
            &mut encoder,
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            f(s.resident_bytes),
        )?;
        gauge(
            &mut encoder,
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes",
            f(s.virtual_bytes),
        )?;
        if let Some(cpu) = s.cpu_seconds {
            let c = ConstCounter::new(cpu);
            let e = encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                c.metric_type(),
            )?;
            c.encode(e)?;
        }
        gauge(
            &mut encoder,
            "process_start_time_seconds",
            "Start time of the process since the Unix epoch in seconds",
            s.start_time_seconds,
        )?;
        gauge(
            &mut encoder,
            "process_open_fds",
            "Number of open file descriptors",
            f(s.open_fds),
        )?;
        gauge(
            &mut encoder,
            "process_max_fds",
            "Maximum number of open file descriptors",
            f(s.max_fds),
        )?;
        gauge(
            &mut encoder,
            "process_threads",
            "Number of OS threads in the process",
            f(s.threads),
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_texts() {
        let status = "Name:\tx\nVmSize:\t  2048 kB\nVmRSS:\t  1024 kB\nThreads:\t7\n";
        // The command holds a space and a parenthesis.
        let stat = "42 (my (cmd) x) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 7 0 1000 2097152 256 18446744073709551615";
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1024                 524288               files\n";
        let boot = "cpu  1 2 3\nbtime 1700000000\n";
        let s = ProcessSample::parse(status, stat, limits, boot);
        assert_eq!(s.resident_bytes, Some(1024 * 1024));
        assert_eq!(s.virtual_bytes, Some(2048 * 1024));
        assert_eq!(s.cpu_seconds, Some(3.0));
        assert_eq!(s.start_time_seconds, Some(1_700_000_010.0));
        assert_eq!(s.max_fds, Some(1024));
        assert_eq!(s.threads, Some(7));
        // Garbage leaves fields out rather than failing.
        assert_eq!(
            ProcessSample::parse("", "junk", "", ""),
            ProcessSample::default()
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn reads_this_process() {
        let s = ProcessSample::read();
        assert!(s.resident_bytes.is_some_and(|b| b > 0));
        assert!(s.open_fds.is_some_and(|n| n > 0));
        assert!(s.cpu_seconds.is_some());
    }
}
