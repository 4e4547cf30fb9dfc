//! The journal of admitted reservations: what the agent promised, kept in
//! the pod's socket volume so that a restarted agent keeps its promises.
//!
//! # Format
//!
//! An 8-byte header (`KRSAGJ1\n`), then records: a little-endian `u32`
//! payload length, a little-endian `u32` CRC-32 (IEEE) of the payload, and
//! the payload, one JSON object (`{"op":"admit",...}` or
//! `{"op":"release","uid":...}`).
//!
//! # Writing
//!
//! The agent appends under its lock, so the journal's order is the ledger's
//! order. How a record becomes durable depends on the file system
//! ([`SyncMode`]):
//!
//! - on a disk, appends only fill a buffer; one writer thread writes
//!   whatever has gathered and makes it durable with one `fdatasync` (group
//!   commit), then publishes the last sequence number written;
//! - on a memory-backed file system (tmpfs, such as an `emptyDir` with
//!   `medium: Memory`, or ramfs) the page cache *is* the storage: a record
//!   is durable, for as long as the volume lives, once `write` returns, and
//!   `fdatasync` has nothing to do. Records are written at once, under the
//!   agent's lock, with no hand-off to a thread and no sync.
//!
//! An admission is answered only once its record is durable; a release is
//! not waited for (losing it in a crash only keeps a hold a little longer,
//! until the watch or the unseen bound releases it).
//!
//! # Compaction and recovery
//!
//! When the records written since the last compaction outnumber four times
//! the live holds (and at least [`COMPACT_MIN_RECORDS`]), the agent asks for
//! a snapshot: the live holds are written to a new file, synced and renamed
//! over the journal. Opening reads the journal up to the last whole, valid
//! record (a torn or corrupt tail is dropped with a warning, never an error)
//! and rewrites it compacted.

use super::ledger::{Hold, Origin};
use crate::model::refs::RunRef;
use crate::model::resources::{Requests, effective_requests};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use parking_lot::{Condvar, Mutex};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::watch;

const MAGIC: &[u8; 8] = b"KRSAGJ1\n";
/// A record longer than this is corruption, not a hold.
const MAX_RECORD: u32 = 1 << 20;
/// Compaction waits for at least this many records.
pub const COMPACT_MIN_RECORDS: u64 = 1024;

/// A hold as the journal keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalHold {
    pub run: RunRef,
    pub requests: Requests,
    pub creator: Option<u32>,
}

#[derive(Debug, Deserialize, PartialEq, Eq)]
#[serde(tag = "op", rename_all = "lowercase")]
enum Record {
    Admit {
        uid: String,
        namespace: String,
        name: String,
        requests: BTreeMap<String, u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        creator: Option<u32>,
    },
    Release {
        uid: String,
    },
}

/// CRC-32 (IEEE 802.3, reflected), table-driven.
fn crc32(data: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut t = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
                k += 1;
            }
            t[i] = c;
            i += 1;
        }
        t
    };
    let mut c = !0u32;
    for &b in data {
        c = TABLE[((c ^ b as u32) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

/// A record as written: the same JSON as [`Record`], borrowed from the hold
/// so that appending copies nothing but bytes.
#[derive(Serialize)]
#[serde(tag = "op", rename_all = "lowercase")]
enum RecordRef<'a> {
    Admit {
        uid: &'a str,
        namespace: &'a str,
        name: &'a str,
        requests: RequestsRef<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        creator: Option<u32>,
    },
    Release {
        uid: &'a str,
    },
}

/// Requests as a JSON object of integers, in their (sorted) order.
struct RequestsRef<'a>(&'a Requests);

impl Serialize for RequestsRef<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter())
    }
}

/// Appends one framed record (length, CRC, JSON payload) to `out`.
fn encode(rec: &RecordRef<'_>, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; 8]);
    // Serializing plain strings and integers into a Vec cannot fail; if it
    // somehow did, the partial record is taken back.
    if serde_json::to_writer(&mut *out, rec).is_err() {
        out.truncate(start);
        return;
    }
    let payload_len = (out.len() - start - 8) as u32;
    let crc = crc32(&out[start + 8..]);
    out[start..start + 4].copy_from_slice(&payload_len.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

fn admit_record(h: &JournalHold) -> RecordRef<'_> {
    admit_ref(&h.run, &h.requests, h.creator)
}

fn admit_ref<'a>(run: &'a RunRef, requests: &'a Requests, creator: Option<u32>) -> RecordRef<'a> {
    RecordRef::Admit {
        uid: &run.uid,
        namespace: &run.namespace,
        name: &run.name,
        requests: RequestsRef(requests),
        creator,
    }
}

impl From<&Hold> for JournalHold {
    fn from(h: &Hold) -> Self {
        JournalHold {
            run: h.run.clone(),
            requests: h.requests.clone(),
            creator: h.creator,
        }
    }
}

/// What reading a journal found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// Live holds: admitted and not released, in admission order.
    pub holds: Vec<JournalHold>,
    /// Whole records read.
    pub records: u64,
    /// Bytes dropped after the last whole record (torn or corrupt tail).
    pub dropped_bytes: u64,
    /// Why the tail was dropped, when it was.
    pub problem: Option<String>,
}

/// Reads journal bytes up to the last whole, valid record. Never fails: a
/// bad header or record ends the read and is reported in `problem`.
pub fn decode(bytes: &[u8]) -> Recovered {
    let mut live: Vec<Option<JournalHold>> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut records = 0;
    let mut problem = None;
    let mut pos = 0usize;
    if bytes.is_empty() {
        return Recovered {
            holds: Vec::new(),
            records: 0,
            dropped_bytes: 0,
            problem: None,
        };
    }
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        return Recovered {
            holds: Vec::new(),
            records: 0,
            dropped_bytes: bytes.len() as u64,
            problem: Some("not a journal (bad header)".into()),
        };
    }
    pos += MAGIC.len();
    while pos < bytes.len() {
        let rest = &bytes[pos..];
        if rest.len() < 8 {
            problem = Some(format!("truncated record header at byte {pos}"));
            break;
        }
        let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
        let crc = u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]);
        if len > MAX_RECORD {
            problem = Some(format!("record length {len} at byte {pos} is implausible"));
            break;
        }
        let Some(payload) = rest.get(8..8 + len as usize) else {
            problem = Some(format!("truncated record at byte {pos}"));
            break;
        };
        if crc32(payload) != crc {
            problem = Some(format!("checksum mismatch at byte {pos}"));
            break;
        }
        let rec: Record = match serde_json::from_slice(payload) {
            Ok(r) => r,
            Err(e) => {
                problem = Some(format!("undecodable record at byte {pos}: {e}"));
                break;
            }
        };
        let hold = match rec {
            Record::Admit {
                uid,
                namespace,
                name,
                requests,
                creator,
            } => {
                let q: BTreeMap<String, Quantity> = requests
                    .into_iter()
                    .map(|(n, a)| (n, Quantity(a.to_string())))
                    .collect();
                match effective_requests(Some(&q)) {
                    Ok(requests) => Some(JournalHold {
                        run: RunRef {
                            namespace,
                            name,
                            uid,
                        },
                        requests,
                        creator,
                    }),
                    Err(e) => {
                        problem = Some(format!("invalid requests at byte {pos}: {e}"));
                        break;
                    }
                }
            }
            Record::Release { uid } => {
                if let Some(i) = index.remove(&uid) {
                    live[i] = None;
                }
                None
            }
        };
        if let Some(h) = hold
            && !index.contains_key(&h.run.uid)
        {
            index.insert(h.run.uid.clone(), live.len());
            live.push(Some(h));
        }
        records += 1;
        pos += 8 + len as usize;
    }
    Recovered {
        holds: live.into_iter().flatten().collect(),
        records,
        dropped_bytes: (bytes.len() - pos) as u64,
        problem,
    }
}

use super::metrics::JournalError;
pub use super::metrics::JournalStats;

/// What the writer has not taken yet. Records are framed straight into
/// `appends`; the writer swaps the buffers, so steady-state appends
/// allocate nothing.
#[derive(Default)]
struct Pending {
    /// Records appended since the last snapshot (or since the writer last
    /// took the buffers).
    appends: Vec<u8>,
    /// The newest snapshot not yet written, and the records appended
    /// before it (kept in case the snapshot cannot be written).
    snapshot: Option<(Vec<u8>, Vec<u8>)>,
    /// Sequence number of the last record or snapshot queued.
    seq: u64,
    closed: bool,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.appends.is_empty() && self.snapshot.is_none()
    }
}

struct Shared {
    pending: Mutex<Pending>,
    cv: Condvar,
}

/// How the journal makes its records durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncMode {
    /// [`SyncMode::Inline`] on a memory-backed file system (tmpfs, ramfs),
    /// [`SyncMode::GroupCommit`] anywhere else.
    Auto,
    /// A writer thread writes every record gathered meanwhile with one
    /// `write` and one `fdatasync`.
    GroupCommit,
    /// Each record is written at once by the caller, without `fdatasync`:
    /// only where the page cache is the storage.
    Inline,
}

impl SyncMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SyncMode::Auto => "auto",
            SyncMode::GroupCommit => "group commit (fdatasync)",
            SyncMode::Inline => "inline (memory-backed, no fdatasync)",
        }
    }
}

/// Whether `path` is on a memory-backed file system (tmpfs, ramfs), where
/// what is written outlives the process (for as long as the volume does)
/// and `fdatasync` has nothing to make durable.
pub fn memory_backed(path: &Path) -> bool {
    const TMPFS_MAGIC: u64 = 0x0102_1994;
    const RAMFS_MAGIC: u64 = 0x8584_58f6;
    rustix::fs::statfs(path)
        .is_ok_and(|s| matches!(u64::try_from(s.f_type), Ok(TMPFS_MAGIC | RAMFS_MAGIC)))
}

/// The journal file appended to, with its length as written (to cut a
/// partial write without asking the file system on every append).
struct Appender {
    file: File,
    len: Option<u64>,
    /// `fdatasync` after each write.
    sync: bool,
}

impl Appender {
    fn new(file: File, sync: bool) -> Self {
        let len = file.metadata().map(|m| m.len()).ok();
        Appender { file, len, sync }
    }

    /// Writes (and syncs) `bytes`; on failure logs, counts, and cuts the
    /// partial record so later appends stay readable.
    fn append(&mut self, bytes: &[u8], path: &Path, stats: &JournalStats) {
        let sync = self.sync;
        let file = &mut self.file;
        match file
            .write_all(bytes)
            .and_then(|()| if sync { file.sync_data() } else { Ok(()) })
        {
            Ok(()) => {
                self.len = self.len.map(|l| l + bytes.len() as u64);
                stats.syncs.inc();
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "journal write failed");
                stats.error(JournalError::Write);
                if let Some(l) = self.len {
                    let _ = self.file.set_len(l);
                }
            }
        }
    }

    /// Replaces the file by `snapshot` and appends to the new file; keeps
    /// the old one when that fails (returns false).
    fn replace(&mut self, snapshot: &[u8], path: &Path, stats: &JournalStats) -> bool {
        match replace_file(path, snapshot).and_then(|()| open_append(path)) {
            Ok(f) => {
                self.file = f;
                self.len = Some(snapshot.len() as u64);
                stats.compactions.inc();
                true
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "journal compaction failed");
                stats.error(JournalError::Compact);
                false
            }
        }
    }
}

/// Where appended records go.
enum Sink {
    /// Buffered for the writer thread (group commit).
    Writer {
        shared: Arc<Shared>,
        writer: Option<std::thread::JoinHandle<()>>,
    },
    /// Written at once (memory-backed file system).
    Inline(Appender),
}

/// An open journal. Appends are made by the agent under its lock; a
/// writer thread makes them durable, or they are written at once on a
/// memory-backed file system.
pub struct Journal {
    path: PathBuf,
    sink: Sink,
    durable: watch::Sender<u64>,
    /// Records appended since the last compaction (the file's length in
    /// records, roughly).
    since_compact: u64,
    /// Sequence number of the last op pushed.
    last: u64,
    /// Where one record is framed before it joins the pending buffer.
    scratch: Vec<u8>,
    stats: JournalStats,
}

fn write_snapshot(path: &Path, holds: &[JournalHold]) -> std::io::Result<Vec<u8>> {
    let mut buf = MAGIC.to_vec();
    for h in holds {
        encode(&admit_record(h), &mut buf);
    }
    replace_file(path, &buf)?;
    Ok(buf)
}

/// Writes `bytes` to a temporary file beside `path`, syncs it, renames it
/// over `path` and syncs the directory.
fn replace_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = tmp_path(path);
    {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(".tmp");
    path.with_file_name(name)
}

fn open_append(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().append(true).mode(0o600).open(path)
}

impl Journal {
    /// Opens (or creates) the journal at `path`: recovers what it holds up
    /// to the last whole record, rewrites it compacted, and starts the
    /// writer. Only I/O errors on the compacted rewrite fail; a corrupt or
    /// truncated journal is recovered with a warning.
    pub fn open(path: &Path, stats: JournalStats) -> std::io::Result<(Journal, Recovered)> {
        Self::open_with(path, stats, SyncMode::Auto)
    }

    /// [`Self::open`] with the way records are made durable chosen by the
    /// caller ([`SyncMode::Auto`] detects it).
    pub fn open_with(
        path: &Path,
        stats: JournalStats,
        mode: SyncMode,
    ) -> std::io::Result<(Journal, Recovered)> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        let recovered = decode(&bytes);
        if let Some(problem) = &recovered.problem {
            tracing::warn!(
                path = %path.display(),
                problem = %problem,
                records = recovered.records,
                dropped_bytes = recovered.dropped_bytes,
                "journal recovered up to its last whole record"
            );
            stats.error(JournalError::Corrupt);
        }
        write_snapshot(path, &recovered.holds)?;
        let file = open_append(path)?;
        let mode = match mode {
            SyncMode::Auto if memory_backed(path) => SyncMode::Inline,
            SyncMode::Auto => SyncMode::GroupCommit,
            m => m,
        };
        let durable = watch::Sender::new(0u64);
        let sink = match mode {
            SyncMode::Inline => Sink::Inline(Appender::new(file, false)),
            _ => {
                let shared = Arc::new(Shared {
                    pending: Mutex::new(Pending::default()),
                    cv: Condvar::new(),
                });
                let writer = {
                    let shared = Arc::clone(&shared);
                    let durable = durable.clone();
                    let stats = stats.clone();
                    let path = path.to_owned();
                    std::thread::Builder::new()
                        .name("agent-journal".into())
                        .spawn(move || writer_loop(path, file, shared, durable, stats))?
                };
                Sink::Writer {
                    shared,
                    writer: Some(writer),
                }
            }
        };
        Ok((
            Journal {
                path: path.to_owned(),
                sink,
                durable,
                since_compact: recovered.holds.len() as u64,
                last: 0,
                scratch: Vec::with_capacity(256),
                stats,
            },
            recovered,
        ))
    }

    /// How this journal makes records durable (never `Auto`).
    pub fn mode(&self) -> SyncMode {
        match self.sink {
            Sink::Writer { .. } => SyncMode::GroupCommit,
            Sink::Inline(_) => SyncMode::Inline,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn stats(&self) -> &JournalStats {
        &self.stats
    }

    /// A handle to wait for durability without the journal.
    pub fn durability(&self) -> Durability {
        Durability(self.durable.clone())
    }

    /// Queues (or writes) the record framed in `scratch`.
    fn push_scratch(&mut self) -> u64 {
        match &mut self.sink {
            Sink::Writer { shared, .. } => {
                let mut p = shared.pending.lock();
                p.appends.extend_from_slice(&self.scratch);
                self.last = queued(shared, p);
            }
            Sink::Inline(a) => {
                a.append(&self.scratch, &self.path, &self.stats);
                self.last += 1;
                self.durable.send_replace(self.last);
            }
        }
        self.last
    }

    /// The sequence number of the last record appended.
    pub fn last(&self) -> u64 {
        self.last
    }

    /// Records an admission; returns its sequence number.
    pub fn admit(&mut self, hold: &Hold) -> u64 {
        debug_assert_eq!(hold.origin, Origin::Admitted);
        self.scratch.clear();
        encode(
            &admit_ref(&hold.run, &hold.requests, hold.creator),
            &mut self.scratch,
        );
        self.since_compact += 1;
        self.push_scratch()
    }

    /// Records a release; returns its sequence number.
    pub fn release(&mut self, uid: &str) -> u64 {
        self.scratch.clear();
        encode(&RecordRef::Release { uid }, &mut self.scratch);
        self.since_compact += 1;
        self.push_scratch()
    }

    /// Whether enough records have gathered for a compaction to be due
    /// for some number of live holds (cheap; see [`Self::wants_compaction`]).
    pub fn may_compact(&self) -> bool {
        self.since_compact >= COMPACT_MIN_RECORDS
    }

    /// Whether the file has grown enough, for `live` holds, to compact.
    pub fn wants_compaction(&self, live: usize) -> bool {
        self.since_compact >= COMPACT_MIN_RECORDS.max(4 * live as u64)
    }

    /// Replaces the journal by a snapshot of the live holds, in order with
    /// the appends before and after it. Returns its sequence number.
    pub fn compact(&mut self, holds: &[JournalHold]) -> u64 {
        let mut buf = Vec::with_capacity(MAGIC.len() + 128 * holds.len());
        buf.extend_from_slice(MAGIC);
        for h in holds {
            encode(&admit_record(h), &mut buf);
        }
        self.since_compact = holds.len() as u64;
        let shared = match &mut self.sink {
            Sink::Writer { shared, .. } => shared,
            Sink::Inline(a) => {
                // On failure the old file, which has every record, stays.
                a.replace(&buf, &self.path, &self.stats);
                self.last += 1;
                self.durable.send_replace(self.last);
                return self.last;
            }
        };
        let mut p = shared.pending.lock();
        let before = std::mem::take(&mut p.appends);
        match &mut p.snapshot {
            // An older snapshot not written yet: this one supersedes it,
            // and everything appended between them is kept as "before".
            Some((snapshot, kept)) => {
                kept.extend_from_slice(&before);
                *snapshot = buf;
            }
            None => p.snapshot = Some((buf, before)),
        }
        self.last = queued(shared, p);
        self.last
    }

    /// Waits until every record up to `seq` is durable (or has failed to be
    /// written, which is counted and logged).
    pub fn durable(&self, seq: u64) -> impl Future<Output = ()> + Send + 'static + use<> {
        self.durability().wait(seq)
    }

    /// Writes what is pending and stops the writer.
    pub fn close(&mut self) {
        if let Sink::Writer { shared, writer } = &mut self.sink {
            shared.pending.lock().closed = true;
            shared.cv.notify_one();
            if let Some(w) = writer.take() {
                let _ = w.join();
            }
        }
    }
}

/// Counts what was just queued under `p`, releases the lock and wakes the
/// writer. Returns the sequence number of what was queued.
fn queued(shared: &Shared, mut p: parking_lot::MutexGuard<'_, Pending>) -> u64 {
    p.seq += 1;
    let seq = p.seq;
    drop(p);
    shared.cv.notify_one();
    seq
}

/// Waits for records to be durable.
#[derive(Debug, Clone)]
pub struct Durability(watch::Sender<u64>);

impl Durability {
    /// Completes once every record up to `seq` has been written and synced
    /// (or has failed to be, which is counted and logged).
    pub fn wait(&self, seq: u64) -> impl Future<Output = ()> + Send + 'static + use<> {
        let mut rx = self.0.subscribe();
        async move {
            if *rx.borrow() >= seq {
                return;
            }
            let _ = rx.wait_for(|d| *d >= seq).await;
        }
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        self.close();
    }
}

fn writer_loop(
    path: PathBuf,
    file: File,
    shared: Arc<Shared>,
    durable: watch::Sender<u64>,
    stats: JournalStats,
) {
    let mut out = Appender::new(file, true);
    let mut appends: Vec<u8> = Vec::new();
    loop {
        appends.clear();
        let (snapshot, seq, closed) = {
            let mut p = shared.pending.lock();
            while p.is_empty() && !p.closed {
                shared.cv.wait(&mut p);
            }
            std::mem::swap(&mut appends, &mut p.appends);
            (p.snapshot.take(), p.seq, p.closed)
        };
        if appends.is_empty() && snapshot.is_none() && closed {
            return;
        }
        // The snapshot supersedes every record before it; when it cannot
        // be written, keep appending to the old file, records in order.
        if let Some((snapshot, before)) = snapshot
            && !out.replace(&snapshot, &path, &stats)
        {
            let mut all = before;
            all.extend_from_slice(&appends);
            appends = all;
        }
        if !appends.is_empty() {
            out.append(&appends, &path, &stats);
        }
        durable.send_replace(seq);
        if closed {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(uid: &str, runs: u64) -> Hold {
        let q: BTreeMap<String, Quantity> =
            [("runs".to_owned(), Quantity(runs.to_string()))].into();
        Hold {
            run: RunRef {
                namespace: "default".into(),
                name: format!("run-{uid}"),
                uid: uid.into(),
            },
            requests: effective_requests(Some(&q)).expect("valid"),
            origin: Origin::Admitted,
            creator: Some(1000),
        }
    }

    fn dir(test: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("krs-journal-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("dir");
        d
    }

    #[test]
    fn agent_journal_crc32_matches_the_standard_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    const MODES: [SyncMode; 2] = [SyncMode::GroupCommit, SyncMode::Inline];

    fn open(path: &Path, mode: SyncMode) -> (Journal, Recovered) {
        let (j, rec) = Journal::open_with(path, JournalStats::default(), mode).expect("open");
        assert_eq!(j.mode(), mode);
        (j, rec)
    }

    #[tokio::test]
    async fn agent_journal_round_trip_release_and_reopen() {
        for mode in MODES {
            let d = dir(&format!("roundtrip-{mode:?}"));
            let path = d.join("agent.journal");
            let (mut j, rec) = open(&path, mode);
            assert!(rec.holds.is_empty());
            j.admit(&hold("a", 1));
            j.admit(&hold("b", 2));
            j.admit(&hold("c", 1));
            let seq = j.release("b");
            j.durable(seq).await;
            drop(j);
            let (_j, rec) = open(&path, mode);
            assert_eq!(rec.problem, None);
            let uids: Vec<&str> = rec.holds.iter().map(|h| h.run.uid.as_str()).collect();
            assert_eq!(uids, ["a", "c"], "{mode:?}");
            assert_eq!(rec.holds[0], JournalHold::from(&hold("a", 1)));
            let _ = std::fs::remove_dir_all(&d);
        }
    }

    #[tokio::test]
    async fn agent_journal_inline_records_are_in_the_file_when_appended() {
        let d = dir("inline");
        let path = d.join("agent.journal");
        let (mut j, _) = open(&path, SyncMode::Inline);
        let seq = j.admit(&hold("a", 1));
        // Durable at once: no writer to wait for, and the bytes are there
        // for a process that reads the file now (as a restarted agent).
        j.durable(seq).await;
        assert_eq!(j.stats().syncs.get(), 1);
        let rec = decode(&std::fs::read(&path).expect("read"));
        assert_eq!(rec.holds, [JournalHold::from(&hold("a", 1))]);
        drop(j);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn agent_journal_detects_memory_backed_file_systems() {
        // /proc is never tmpfs; /dev/shm is tmpfs where the mount table says so.
        assert!(!memory_backed(Path::new("/proc")));
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
        let shm_tmpfs = mounts.lines().any(|l| {
            let mut f = l.split_whitespace();
            f.nth(1) == Some("/dev/shm") && f.next() == Some("tmpfs")
        });
        assert_eq!(memory_backed(Path::new("/dev/shm")), shm_tmpfs);
        if shm_tmpfs {
            let path = Path::new("/dev/shm").join(format!("krs-journal-{}", std::process::id()));
            let (j, _) = Journal::open(&path, JournalStats::default()).expect("open");
            assert_eq!(j.mode(), SyncMode::Inline);
            drop(j);
            let _ = std::fs::remove_file(&path);
        }
    }

    #[test]
    fn agent_journal_truncated_or_corrupt_tail_is_dropped() {
        let mut bytes = MAGIC.to_vec();
        for u in ["a", "b", "c"] {
            encode(&admit_record(&JournalHold::from(&hold(u, 1))), &mut bytes);
        }
        let whole = decode(&bytes);
        assert_eq!(whole.holds.len(), 3);
        // Cut anywhere inside the last record: the first two survive.
        let mut two = MAGIC.to_vec();
        for u in ["a", "b"] {
            encode(&admit_record(&JournalHold::from(&hold(u, 1))), &mut two);
        }
        for cut in two.len() + 1..bytes.len() {
            let r = decode(&bytes[..cut]);
            assert_eq!(r.holds.len(), 2, "cut at {cut}");
            assert_eq!(r.dropped_bytes, (cut - two.len()) as u64);
            assert!(r.problem.is_some());
        }
        // A flipped byte in the second record stops the read there.
        let mut bad = bytes.clone();
        let at = MAGIC.len() + (two.len() - MAGIC.len()) / 2 + 12;
        bad[at] ^= 0x40;
        let r = decode(&bad);
        assert_eq!(r.holds.len(), 1);
        assert!(r.problem.as_deref().is_some_and(|p| p.contains("checksum")));
        // Garbage is not a journal: nothing recovered, no panic.
        let r = decode(b"hello world, not a journal");
        assert!(r.holds.is_empty() && r.problem.is_some());
        // A huge length is refused without allocating it.
        let mut huge = MAGIC.to_vec();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        huge.extend_from_slice(&[0; 4]);
        assert!(decode(&huge).problem.is_some());
    }

    #[tokio::test]
    async fn agent_journal_open_recovers_a_torn_file_and_appends_after_it() {
        for mode in MODES {
            let d = dir(&format!("torn-{mode:?}"));
            let path = d.join("agent.journal");
            let (mut j, _) = open(&path, mode);
            j.admit(&hold("a", 1));
            let seq = j.admit(&hold("b", 1));
            j.durable(seq).await;
            drop(j);
            let len = std::fs::metadata(&path).expect("meta").len();
            let f = OpenOptions::new().write(true).open(&path).expect("open");
            f.set_len(len - 3).expect("truncate");
            drop(f);
            let (mut j, rec) = open(&path, mode);
            assert_eq!(rec.holds.len(), 1);
            assert!(rec.problem.is_some());
            let seq = j.admit(&hold("c", 1));
            j.durable(seq).await;
            drop(j);
            let (_j, rec) = open(&path, mode);
            assert_eq!(rec.problem, None, "the torn tail was cut before appending");
            assert_eq!(rec.holds.len(), 2, "{mode:?}");
            let _ = std::fs::remove_dir_all(&d);
        }
    }

    #[tokio::test]
    async fn agent_journal_compaction_keeps_only_live_holds() {
        for mode in MODES {
            let d = dir(&format!("compact-{mode:?}"));
            let path = d.join("agent.journal");
            let (mut j, _) = open(&path, mode);
            for i in 0..50 {
                j.admit(&hold(&format!("u{i}"), 1));
                j.release(&format!("u{i}"));
            }
            j.admit(&hold("keep", 1));
            let live = [JournalHold::from(&hold("keep", 1))];
            j.compact(&live);
            let seq = j.admit(&hold("after", 1));
            j.durable(seq).await;
            let size = std::fs::metadata(&path).expect("meta").len();
            assert!(size < 400, "compacted file is small: {size}");
            assert_eq!(j.stats().compactions.get(), 1);
            drop(j);
            let (_j, rec) = open(&path, mode);
            let uids: Vec<&str> = rec.holds.iter().map(|h| h.run.uid.as_str()).collect();
            assert_eq!(uids, ["keep", "after"], "{mode:?}");
            let _ = std::fs::remove_dir_all(&d);
        }
    }
}
