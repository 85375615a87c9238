//! Where uploaded probe runs are kept: one ordinary probe record log per run
//! in `DATA_DIR/probes/`, so `skewscope report DATA_DIR` reads them like any
//! other log. A run's next sequence number is the count of intact records in
//! its file; a torn tail (the agent killed mid-append) is cut off when the
//! run is opened again, so nothing half-written is ever counted.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use skewscope_core::log::{FRAME_HEADER_LEN, FrameAt, HEADER_LEN, LogKind, frame_at, header};
use skewscope_core::record::ProbeRecord;
use skewscope_core::run_owner::{Claim, OwnerDigest, claim};

use crate::counters::IngestCounters;

/// The subdirectory of the data directory that holds uploaded runs.
pub const PROBES_DIR: &str = "probes";

/// One run being uploaded: its file and how many records it holds.
#[derive(Debug)]
pub struct OpenRun {
    file: File,
    /// Intact bytes in the file (header included).
    len: u64,
    /// Records in the file: the next sequence number expected.
    pub next_seq: u64,
    /// The run's id.
    pub run_id: u128,
    /// Which claim on the run this is: a newer connection's open takes the
    /// next, and this one may then append nothing more.
    claim: u64,
}

impl OpenRun {
    /// Which claim on the run this is, for [`IngestStore::release`].
    pub fn claim(&self) -> u64 {
        self.claim
    }
}

/// What the audit is told about one run uploaded since the agent started.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RunStatus {
    /// The run id, 32 hex digits.
    pub run: String,
    /// Its log, relative to the data directory.
    pub file: String,
    /// The probe's `--name`, from the run's `Started` record.
    pub name: String,
    /// The device's host name, from the same record.
    pub host: String,
    /// Records durably stored.
    pub records: u64,
    /// A connection is uploading it right now.
    pub uploading: bool,
    /// Milliseconds since its last batch was stored (or since it was opened).
    pub idle_ms: u64,
    #[serde(skip)]
    last_activity: Option<std::time::Instant>,
    /// The claim the connection uploading it holds (see [`OpenRun`]).
    #[serde(skip)]
    claim: u64,
    /// What the agent keeps of the run's owner secret, once a hello gave
    /// one (kept beside the run's log, read again after a restart).
    #[serde(skip)]
    owner: Option<OwnerDigest>,
}

/// Why a run could not be opened for a connection.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The file could not be opened or read.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The run belongs to the device that started it, and this hello did
    /// not give its secret.
    #[error(
        "run {0:032x} belongs to the device that started it: this connection did not give its owner secret"
    )]
    NotOwner(u128),
    /// A hello without a secret for a run another connection uploads: it
    /// cannot prove it may take it over.
    #[error(
        "run {0:032x}: another connection uploads it, and this one gave no owner secret to take it over"
    )]
    InUse(u128),
}

impl OpenError {
    /// The rejection to count, when it is one.
    pub fn counter(&self) -> Option<&'static str> {
        match self {
            OpenError::Io(_) => None,
            OpenError::NotOwner(_) => Some("not_owner"),
            OpenError::InUse(_) => Some("run_in_use"),
        }
    }
}

/// Every uploaded run, and which are being uploaded right now.
#[derive(Debug)]
pub struct IngestStore {
    data_dir: PathBuf,
    max_data_bytes: u64,
    runs: Mutex<HashMap<u128, RunStatus>>,
    /// What was stored and refused.
    pub counters: IngestCounters,
}

impl IngestStore {
    /// A store in `data_dir/probes`, counted against `max_data_bytes`
    /// together with the agent's own segments, counting into `counters`.
    pub fn new(
        data_dir: &Path,
        max_data_bytes: u64,
        counters: IngestCounters,
    ) -> io::Result<IngestStore> {
        std::fs::create_dir_all(data_dir.join(PROBES_DIR))?;
        Ok(IngestStore {
            data_dir: data_dir.to_owned(),
            max_data_bytes,
            runs: Mutex::default(),
            counters,
        })
    }

    /// The file of run `run_id`.
    pub fn path_of(&self, run_id: u128) -> PathBuf {
        self.data_dir
            .join(PROBES_DIR)
            .join(format!("probe-{run_id:032x}.sklog"))
    }

    /// The file that keeps run `run_id`'s owner digest.
    fn owner_path(&self, run_id: u128) -> PathBuf {
        self.data_dir
            .join(PROBES_DIR)
            .join(format!("probe-{run_id:032x}.owner"))
    }

    /// Claims run `run_id` for one connection (released by [`Self::release`])
    /// and opens its file, cutting a torn tail. `secret` is the hello's
    /// owner secret, if it gave one.
    ///
    /// A run belongs to the device that started it: the first hello that
    /// gives a secret binds the run to it (kept beside the log, so a
    /// restarted agent knows it), and from then on a hello without it is
    /// refused and counted (`not_owner`). The owner's newest connection
    /// wins: a probe that reconnects after its link dropped (or a page
    /// that reloads) says hello before the agent has seen the old
    /// connection end, and a half-open one is seen only when keepalive
    /// gives up on it, minutes later; refusing the new one would stall the
    /// run's upload that long, so it takes the run over (as MQTT does with
    /// a client id already connected), counted in `takeovers`, and the old
    /// connection's next batch is refused ([`Self::holds`]). A hello
    /// without a secret (a probe from before secrets) may upload a run
    /// never bound, but not take it from a connection that uploads it
    /// (`run_in_use`). Opens and appends all run on the one ingest worker
    /// thread, so a new claim counts the records after every append of the
    /// old one.
    pub fn open(&self, run_id: u128, secret: Option<u128>) -> Result<OpenRun, OpenError> {
        let owner_file = self.owner_path(run_id);
        let claim = {
            let mut runs = self.statuses();
            let status = runs.entry(run_id).or_insert_with(|| RunStatus {
                run: format!("{run_id:032x}"),
                file: format!("{PROBES_DIR}/probe-{run_id:032x}.sklog"),
                name: String::new(),
                host: String::new(),
                records: 0,
                uploading: false,
                idle_ms: 0,
                last_activity: None,
                claim: 0,
                owner: std::fs::read_to_string(&owner_file)
                    .ok()
                    .and_then(|t| OwnerDigest::from_hex(&t)),
            });
            match claim(status.owner.as_ref(), secret) {
                Claim::NotOwner => return Err(OpenError::NotOwner(run_id)),
                Claim::Unproven if status.uploading => return Err(OpenError::InUse(run_id)),
                Claim::Unproven => {}
                Claim::Owner { bind } => {
                    if let Some(digest) = bind {
                        keep_owner(&owner_file, &digest)?;
                        status.owner = Some(digest);
                    }
                    if status.uploading {
                        self.counters.takeovers.inc();
                    }
                }
            }
            status.uploading = true;
            status.claim += 1;
            status.claim
        };
        let (run, started) = open_run(&self.path_of(run_id), run_id, claim)
            .inspect_err(|_| self.release(run_id, claim))?;
        self.update(run_id, |s| {
            s.records = run.next_seq;
            s.last_activity = Some(std::time::Instant::now());
            if let Some((name, host)) = started {
                (s.name, s.host) = (name, host);
            }
        });
        Ok(run)
    }

    /// Gives back claim `claim` on run `run_id`, unless a newer connection
    /// has taken the run over since.
    pub fn release(&self, run_id: u128, claim: u64) {
        self.update(run_id, |s| {
            if s.claim == claim {
                s.uploading = false;
            }
        });
    }

    /// Whether `run` still holds its run: false once a newer connection
    /// has opened it.
    pub fn holds(&self, run: &OpenRun) -> bool {
        self.statuses()
            .get(&run.run_id)
            .is_some_and(|s| s.claim == run.claim)
    }

    /// Every run uploaded since the agent started, by name then run id.
    pub fn runs(&self) -> Vec<RunStatus> {
        let now = std::time::Instant::now();
        let mut runs: Vec<RunStatus> = self
            .statuses()
            .values()
            .map(|s| RunStatus {
                idle_ms: s
                    .last_activity
                    .map_or(0, |t| now.duration_since(t).as_millis() as u64),
                ..s.clone()
            })
            .collect();
        runs.sort_by(|a, b| (&a.name, &a.run).cmp(&(&b.name, &b.run)));
        runs
    }

    /// The runs' statuses. A panic that held the lock (a bug in one
    /// upload's handling) leaves at most one status half-updated: every
    /// later upload goes on with them, as the hub goes on with its shards.
    fn statuses(&self) -> std::sync::MutexGuard<'_, HashMap<u128, RunStatus>> {
        self.runs.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn update(&self, run_id: u128, change: impl FnOnce(&mut RunStatus)) {
        if let Some(s) = self.statuses().get_mut(&run_id) {
            change(s);
        }
    }

    /// Appends `frames` (`records` whole records, already checked) and makes
    /// them durable. On any failure the file is cut back to where it was and
    /// the error returned: nothing is acknowledged, nothing half-written kept.
    pub fn append(&self, run: &mut OpenRun, frames: &[u8], records: u64) -> io::Result<()> {
        if frames.is_empty() {
            return Ok(());
        }
        let used = record_bytes(&self.data_dir) + record_bytes(&self.data_dir.join(PROBES_DIR));
        if used + frames.len() as u64 > self.max_data_bytes {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                format!(
                    "the data directory holds {used} bytes of records and --max-data-bytes is {}",
                    self.max_data_bytes
                ),
            ));
        }
        let written = run
            .file
            .write_all(frames)
            .and_then(|()| run.file.sync_data());
        if let Err(e) = written {
            // Cut back, and move the handle back too: a write that failed
            // part way left it past the cut, and the next append would
            // leave a hole of zeros there (the fault test found the hole,
            // and zeros read as records once the agent restarted).
            let _ = run.file.set_len(run.len);
            let _ = io::Seek::seek(&mut run.file, io::SeekFrom::Start(run.len));
            return Err(e);
        }
        let first_batch = run.next_seq == 0;
        run.len += frames.len() as u64;
        run.next_seq += records;
        self.counters.records.inc_by(records);
        let started = first_batch.then(|| started_by(frames)).flatten();
        self.update(run.run_id, |s| {
            s.records = run.next_seq;
            s.last_activity = Some(std::time::Instant::now());
            if let Some((name, host)) = started {
                (s.name, s.host) = (name, host);
            }
        });
        Ok(())
    }
}

/// The probe name and host of a run's `Started` record, the first of `frames`.
fn started_by(frames: &[u8]) -> Option<(String, String)> {
    match frame_at(frames, 0) {
        FrameAt::Intact(payload) => match postcard::from_bytes::<ProbeRecord>(payload) {
            Ok(ProbeRecord::Started(s)) => Some((s.name, s.host)),
            _ => None,
        },
        _ => None,
    }
}

/// Opens (or creates) a run's log and counts its intact records; also
/// returns who started the run, when the file already says.
fn open_run(
    path: &Path,
    run_id: u128,
    claim: u64,
) -> io::Result<(OpenRun, Option<(String, String)>)> {
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    let mut bytes = Vec::new();
    io::Read::read_to_end(&mut file, &mut bytes)?;
    if bytes.len() < HEADER_LEN || bytes[..HEADER_LEN] != header(LogKind::Probe) {
        // New (or never got its header onto the disk): start it.
        file.set_len(0)?;
        file.write_all(&header(LogKind::Probe))?;
        file.sync_data()?;
        let run = OpenRun {
            file,
            len: HEADER_LEN as u64,
            next_seq: 0,
            run_id,
            claim,
        };
        return Ok((run, None));
    }
    let body = &bytes[HEADER_LEN..];
    let started = started_by(body);
    let (mut pos, mut records) = (0usize, 0u64);
    while let FrameAt::Intact(payload) = frame_at(body, pos) {
        pos += FRAME_HEADER_LEN + payload.len();
        records += 1;
    }
    let len = (HEADER_LEN + pos) as u64;
    if len != bytes.len() as u64 {
        file.set_len(len)?;
        file.sync_data()?;
    }
    // Reading left the handle at the end, where appends go.
    if len != bytes.len() as u64 {
        io::Seek::seek(&mut file, io::SeekFrom::Start(len))?;
    }
    let run = OpenRun {
        file,
        len,
        next_seq: records,
        run_id,
        claim,
    };
    Ok((run, started))
}

/// Keeps a run's owner digest, durably, readable by the agent's user only.
fn keep_owner(path: &Path, digest: &OwnerDigest) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let temp = path.with_extension("owner.new");
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temp)?;
    file.write_all(digest.to_hex().as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&temp, path)?;
    if let Some(dir) = path.parent() {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Bytes of record logs directly in `dir`.
pub fn record_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "sklog"))
            .filter_map(|e| e.metadata().ok())
            .map(|m| m.len())
            .sum()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A panic while the statuses were locked does not end every later
    /// upload: the run opens, is listed and is released as before.
    #[test]
    fn a_panic_under_the_lock_leaves_uploads_working() {
        let dir = tempfile::tempdir().unwrap();
        let store = IngestStore::new(dir.path(), u64::MAX, IngestCounters::default()).unwrap();
        std::thread::scope(|s| {
            let poisoned = s
                .spawn(|| {
                    let _held = store.runs.lock().unwrap();
                    panic!("a bug while the statuses are locked");
                })
                .join();
            assert!(poisoned.is_err());
        });
        assert!(store.runs.is_poisoned());
        let run = store.open(7, None).expect("the run opens after the panic");
        assert_eq!(run.next_seq, 0);
        assert_eq!(store.runs().len(), 1);
        store.release(7, run.claim);
        assert!(store.open(7, None).is_ok(), "released, and open again");
        assert_eq!(store.counters.takeovers.get(), 0);
    }

    /// A second open of a run in use, with its owner's secret, takes it
    /// over: the first may append nothing more, its release does not free
    /// the run, and the second counts the records the first stored.
    #[test]
    fn the_owners_newest_connection_takes_a_run_over() {
        let dir = tempfile::tempdir().unwrap();
        let store = IngestStore::new(dir.path(), u64::MAX, IngestCounters::default()).unwrap();
        let mut old = store.open(9, Some(0x5ec)).unwrap();
        store.append(&mut old, &one_frame(), 1).unwrap();
        let new = store.open(9, Some(0x5ec)).unwrap();
        assert_eq!(store.counters.takeovers.get(), 1);
        assert!(!store.holds(&old));
        assert!(store.holds(&new));
        assert_eq!(new.next_seq, 1, "the old connection's records are counted");
        store.release(9, old.claim);
        assert!(
            store.runs()[0].uploading,
            "the new connection still uploads"
        );
        store.release(9, new.claim);
        assert!(!store.runs()[0].uploading);
    }

    /// Only the secret that first claimed a run claims it again, also
    /// after a restart of the agent; without a secret a run in use is not
    /// taken, and an unbound one is.
    #[test]
    fn a_run_belongs_to_the_first_secret_it_was_given() {
        let dir = tempfile::tempdir().unwrap();
        let store = IngestStore::new(dir.path(), u64::MAX, IngestCounters::default()).unwrap();
        let owner = store.open(3, Some(0xaa)).unwrap();
        assert!(matches!(
            store.open(3, Some(0xbb)),
            Err(OpenError::NotOwner(3))
        ));
        assert!(matches!(store.open(3, None), Err(OpenError::NotOwner(3))));
        assert!(store.holds(&owner), "a refused hello takes nothing");
        store.release(3, owner.claim);
        // A restarted agent reads the owner back.
        let again = IngestStore::new(dir.path(), u64::MAX, IngestCounters::default()).unwrap();
        assert!(matches!(
            again.open(3, Some(0xbb)),
            Err(OpenError::NotOwner(3))
        ));
        assert!(again.open(3, Some(0xaa)).is_ok());
        let kept = std::fs::read_to_string(again.owner_path(3)).unwrap();
        assert!(!kept.contains("aa"), "the digest, not the secret: {kept}");
        // A run never bound: uploaded without a secret, never taken over.
        let legacy = again.open(4, None).unwrap();
        assert!(matches!(again.open(4, None), Err(OpenError::InUse(4))));
        assert!(again.holds(&legacy));
        assert_eq!(again.counters.takeovers.get(), 0);
    }

    /// One intact frame of a `Stopped` record.
    fn one_frame() -> Vec<u8> {
        let mut log = skewscope_core::log::LogWriter::new(Vec::new(), LogKind::Probe).unwrap();
        log.append(&ProbeRecord::Stopped(skewscope_core::Stamp::default()))
            .unwrap();
        log.into_inner()[HEADER_LEN..].to_vec()
    }
}
