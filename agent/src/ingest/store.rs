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
use std::sync::atomic::{AtomicU64, Ordering};

use skewscope_core::log::{FRAME_HEADER_LEN, FrameAt, HEADER_LEN, LogKind, frame_at, header};

/// The subdirectory of the data directory that holds uploaded runs.
pub const PROBES_DIR: &str = "probes";

/// Counters shown in `/healthz`.
#[derive(Debug, Default)]
pub struct IngestCounters {
    /// Records durably stored.
    pub records: AtomicU64,
    /// Records received again after a lost ack, and not stored twice.
    pub duplicates: AtomicU64,
    /// Batches refused for space (data budget or disk): nothing stored, no ack.
    pub busy: AtomicU64,
    /// Connections refused, by reason.
    pub rejected: Mutex<HashMap<&'static str, u64>>,
}

impl IngestCounters {
    /// Counts one refused connection.
    pub fn reject(&self, reason: &'static str) {
        *self
            .rejected
            .lock()
            .expect("counters lock")
            .entry(reason)
            .or_default() += 1;
    }
}

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
}

/// Every uploaded run, and which are being uploaded right now.
#[derive(Debug)]
pub struct IngestStore {
    data_dir: PathBuf,
    max_data_bytes: u64,
    uploading: Mutex<std::collections::HashSet<u128>>,
    /// What was stored and refused.
    pub counters: IngestCounters,
}

/// Why a run could not be opened for upload.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Another connection is uploading this run right now.
    #[error("run {0:032x} is already being uploaded by another connection")]
    InUse(u128),
    /// Its file could not be opened or created.
    #[error("cannot open the run's log: {0}")]
    Io(#[from] io::Error),
}

impl IngestStore {
    /// A store in `data_dir/probes`, counted against `max_data_bytes`
    /// together with the agent's own segments.
    pub fn new(data_dir: &Path, max_data_bytes: u64) -> io::Result<IngestStore> {
        std::fs::create_dir_all(data_dir.join(PROBES_DIR))?;
        Ok(IngestStore {
            data_dir: data_dir.to_owned(),
            max_data_bytes,
            uploading: Mutex::default(),
            counters: IngestCounters::default(),
        })
    }

    /// The file of run `run_id`.
    pub fn path_of(&self, run_id: u128) -> PathBuf {
        self.data_dir
            .join(PROBES_DIR)
            .join(format!("probe-{run_id:032x}.sklog"))
    }

    /// Claims run `run_id` for one connection (released by [`Self::release`])
    /// and opens its file, cutting a torn tail.
    pub fn open(&self, run_id: u128) -> Result<OpenRun, OpenError> {
        if !self.uploading.lock().expect("lock").insert(run_id) {
            return Err(OpenError::InUse(run_id));
        }
        open_run(&self.path_of(run_id), run_id)
            .inspect_err(|_| self.release(run_id))
            .map_err(OpenError::from)
    }

    /// Gives run `run_id` back: another connection may now upload it.
    pub fn release(&self, run_id: u128) {
        self.uploading.lock().expect("lock").remove(&run_id);
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
            let _ = run.file.set_len(run.len);
            return Err(e);
        }
        run.len += frames.len() as u64;
        run.next_seq += records;
        self.counters.records.fetch_add(records, Ordering::Relaxed);
        Ok(())
    }
}

/// Opens (or creates) a run's log and counts its intact records.
fn open_run(path: &Path, run_id: u128) -> io::Result<OpenRun> {
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
        return Ok(OpenRun {
            file,
            len: HEADER_LEN as u64,
            next_seq: 0,
            run_id,
        });
    }
    let body = &bytes[HEADER_LEN..];
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
    Ok(OpenRun {
        file,
        len,
        next_seq: records,
        run_id,
    })
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
