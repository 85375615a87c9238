//! The append-only record log: a versioned header, then framed postcard records.
//!
//! ```text
//! header:  "SKWSCOPE" (8 bytes) | version u16 LE | kind u8 | reserved u8
//! record:  length u32 LE | crc32 u32 LE (of the payload) | postcard payload
//! ```
//!
//! The framing survives a torn tail (a writer killed mid-record) and corruption in
//! the middle: the reader keeps every record whose length and checksum hold,
//! resynchronises past anything else, and reports how many bytes it skipped.

#[cfg(feature = "fs")]
use std::fs::File;
#[cfg(feature = "fs")]
use std::io::BufWriter;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

mod frame;
mod stream;
pub use frame::{
    FRAME_HEADER_LEN, FrameAt, MAX_RECORD_LEN, RESYNC_MAX_LEN, encode_record, frame_at, resync,
    whole_frames_end,
};
pub use stream::{BodyDecoder, Next};

/// First bytes of every skewscope log.
pub const MAGIC: &[u8; 8] = b"SKWSCOPE";
/// The format version this build writes and reads.
pub const FORMAT_VERSION: u16 = 1;
/// Size of the file header.
pub const HEADER_LEN: usize = 12;
/// Which program wrote a log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogKind {
    /// `skewscope-agent`: broadcasts and per-client sends.
    Agent,
    /// `skewscope-probe`: receipts.
    Probe,
}

impl LogKind {
    fn to_byte(self) -> u8 {
        match self {
            LogKind::Agent => 1,
            LogKind::Probe => 2,
        }
    }

    fn from_byte(b: u8) -> Option<LogKind> {
        match b {
            1 => Some(LogKind::Agent),
            2 => Some(LogKind::Probe),
            _ => None,
        }
    }
}

/// Why a log could not be read at all. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The file could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// Not a regular file (a FIFO, a device, a directory): never read, so
    /// `/dev/zero` cannot fill memory and a FIFO cannot hang the report.
    #[error("{path}: not a regular file, so not a record log")]
    NotAFile {
        /// The path.
        path: PathBuf,
    },
    /// The file does not start with the skewscope header.
    #[error("{path}: not a skewscope record log (missing the SKWSCOPE header)")]
    NotALog {
        /// The file.
        path: PathBuf,
    },
    /// Written by a different format version.
    #[error(
        "{path}: record log format version {found} is not supported by this build (it reads version {FORMAT_VERSION}); use a matching skewscope"
    )]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// The version in the header.
        found: u16,
    },
    /// The header names a writer this build does not know.
    #[error("{path}: unknown log kind {found} in the header")]
    UnknownKind {
        /// The file.
        path: PathBuf,
        /// The byte found.
        found: u8,
    },
    /// The header names one writer, but the records are the other's (a
    /// damaged kind byte): read as the header says, they would be garbage.
    #[error(
        "{path}: the header says this is {header} log, but its records are {records}'s; the header is damaged"
    )]
    KindMismatch {
        /// The file.
        path: PathBuf,
        /// "an agent" or "a probe", as the header says.
        header: &'static str,
        /// "an agent" or "a probe", as the records decode.
        records: &'static str,
    },
}

/// How many leading frames [`read_file`] decodes both ways to check the
/// header's kind against the records.
#[cfg(feature = "fs")]
const KIND_CHECK_FRAMES: usize = 64;

/// Of the first intact frames of `body`, how many decode as `R`, and how
/// many were looked at.
#[cfg(feature = "fs")]
fn decodable_as<R: DeserializeOwned>(body: &[u8]) -> (usize, usize) {
    let (mut ok, mut seen, mut pos) = (0, 0, 0);
    while pos < body.len() && seen < KIND_CHECK_FRAMES {
        let FrameAt::Intact(payload) = frame_at(body, pos) else {
            break;
        };
        seen += 1;
        ok += usize::from(postcard::from_bytes::<R>(payload).is_ok());
        pos += FRAME_HEADER_LEN + payload.len();
    }
    (ok, seen)
}

/// The header's kind, checked against the first records: a flipped kind
/// byte must not turn a probe's log into an "agent" log of garbage.
#[cfg(feature = "fs")]
fn check_kind(path: &Path, kind: LogKind, body: &[u8]) -> Result<(), LogError> {
    use crate::record::{AgentRecord, ProbeRecord};
    let (as_agent, seen) = decodable_as::<AgentRecord>(body);
    let (as_probe, _) = decodable_as::<ProbeRecord>(body);
    let name = |k| match k {
        LogKind::Agent => "an agent",
        LogKind::Probe => "a probe",
    };
    let (mine, other, other_kind) = match kind {
        LogKind::Agent => (as_agent, as_probe, LogKind::Probe),
        LogKind::Probe => (as_probe, as_agent, LogKind::Agent),
    };
    if seen > 0 && other == seen && mine < seen {
        return Err(LogError::KindMismatch {
            path: path.to_owned(),
            header: name(kind),
            records: name(other_kind),
        });
    }
    Ok(())
}

/// Encodes the file header.
pub fn header(kind: LogKind) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(MAGIC);
    h[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[10] = kind.to_byte();
    h
}

/// Writes a record log to any `Write`; callers choose when to flush.
pub struct LogWriter<W: Write> {
    out: W,
    scratch: Vec<u8>,
    written: u64,
}

#[cfg(feature = "fs")]
impl LogWriter<BufWriter<File>> {
    /// Creates (or truncates) a log file and writes its header.
    pub fn create(path: &Path, kind: LogKind) -> io::Result<Self> {
        let file = File::create(path)?;
        let mut writer = LogWriter::new(BufWriter::with_capacity(256 * 1024, file), kind)?;
        // On disk at once: a writer killed before its first flush still leaves a
        // file that reads as an (empty) log rather than as a foreign file. A
        // header that cannot be written (a full disk) leaves no file at all.
        if let Err(e) = writer.flush() {
            let _ = writer.discard_buffered();
            let _ = std::fs::remove_file(path);
            return Err(e);
        }
        Ok(writer)
    }

    /// Reopens a log for appending (SIGHUP after a log rotation): appends to
    /// `path` if it already holds a log of this kind, else creates it afresh.
    /// Returns the writer and whether the file was created.
    pub fn reopen(path: &Path, kind: LogKind) -> io::Result<(Self, bool)> {
        // Only the header is read: a long log is appended to, not loaded.
        let existing = File::open(path).ok().and_then(|mut file| {
            let mut head = [0u8; HEADER_LEN];
            io::Read::read_exact(&mut file, &mut head).ok()?;
            let len = file.metadata().ok()?.len();
            (read_header(path, &head).ok() == Some(kind)).then_some(len)
        });
        match existing {
            Some(len) => {
                let file = std::fs::OpenOptions::new().append(true).open(path)?;
                Ok((
                    LogWriter {
                        out: BufWriter::with_capacity(256 * 1024, file),
                        scratch: Vec::with_capacity(4096),
                        written: len,
                    },
                    false,
                ))
            }
            None => Ok((LogWriter::create(path, kind)?, true)),
        }
    }

    /// Drops what is buffered but not yet written, without writing it:
    /// after a failed write (a full disk) those records are counted lost,
    /// and must not reach the file later behind ones written since. The
    /// file may end in a torn frame, which readers skip.
    pub fn discard_buffered(&mut self) -> io::Result<()> {
        let file = self.out.get_ref().try_clone()?;
        let len = file.metadata()?.len();
        let old = std::mem::replace(&mut self.out, BufWriter::with_capacity(256 * 1024, file));
        // into_parts, unlike a drop, writes nothing.
        let _ = old.into_parts();
        self.written = len;
        Ok(())
    }

    /// Flushes buffered records and asks the OS to make them durable.
    pub fn sync(&mut self) -> io::Result<()> {
        self.out.flush()?;
        self.out.get_ref().sync_data()
    }
}

impl<W: Write> LogWriter<W> {
    /// Wraps `out` and writes the header.
    pub fn new(mut out: W, kind: LogKind) -> io::Result<Self> {
        out.write_all(&header(kind))?;
        Ok(LogWriter {
            out,
            scratch: Vec::with_capacity(4096),
            written: HEADER_LEN as u64,
        })
    }

    /// Appends one record. A record is written with a single `write_all`, so a
    /// crash leaves at worst one torn record at the tail.
    pub fn append<R: Serialize>(&mut self, record: &R) -> io::Result<()> {
        self.scratch.clear();
        encode_record(record, &mut self.scratch);
        self.written += self.scratch.len() as u64;
        self.out.write_all(&self.scratch)
    }

    /// Bytes written so far, header included: for rotating segments by size.
    pub fn bytes_written(&self) -> u64 {
        self.written
    }

    /// Pushes buffered bytes to the OS.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Returns the inner writer.
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// What a reader recovered from one log.
#[derive(Debug)]
pub struct Decoded<R> {
    /// Every complete, intact record, in file order.
    pub records: Vec<R>,
    /// Bytes that were not part of an intact record (torn tail, corruption,
    /// records of a kind this build does not know).
    pub skipped_bytes: u64,
    /// Whether the file ended in the middle of a record (a writer killed mid-write).
    pub torn_tail: bool,
}

/// Reads the header and returns the kind, or an error naming `path`.
pub fn read_header(path: &Path, bytes: &[u8]) -> Result<LogKind, LogError> {
    if bytes.len() < HEADER_LEN || &bytes[..8] != MAGIC {
        return Err(LogError::NotALog {
            path: path.to_owned(),
        });
    }
    let version = u16::from_le_bytes([bytes[8], bytes[9]]);
    if version != FORMAT_VERSION {
        return Err(LogError::UnsupportedVersion {
            path: path.to_owned(),
            found: version,
        });
    }
    LogKind::from_byte(bytes[10]).ok_or(LogError::UnknownKind {
        path: path.to_owned(),
        found: bytes[10],
    })
}

/// Decodes the records after the header, recovering from damage.
pub fn decode_records<R: DeserializeOwned>(body: &[u8]) -> Decoded<R> {
    let mut decoder = BodyDecoder::new();
    decoder.push(body);
    decoder.finish();
    let mut records = Vec::new();
    let mut undecodable = 0u64;
    while let Next::Frame(payload) = decoder.next_frame() {
        match postcard::from_bytes::<R>(payload) {
            Ok(r) => records.push(r),
            Err(_) => undecodable += (FRAME_HEADER_LEN + payload.len()) as u64,
        }
    }
    Decoded {
        records,
        skipped_bytes: decoder.skipped_bytes() + undecodable,
        torn_tail: decoder.torn_tail(),
    }
}

/// A log read from disk, of either kind.
#[derive(Debug)]
pub enum AnyLog {
    /// An agent's log.
    Agent(Decoded<crate::record::AgentRecord>),
    /// A probe's log.
    Probe(Decoded<crate::record::ProbeRecord>),
}

/// Reads a log file of either kind. Damage inside the file is recovered and
/// counted; only a missing or foreign file is an error. Every record is held:
/// for long logs, read with [`LogFileReader`] instead.
#[cfg(feature = "fs")]
pub fn read_file(path: &Path) -> Result<AnyLog, LogError> {
    fn all<R: DeserializeOwned>(mut reader: LogFileReader) -> Result<Decoded<R>, LogError> {
        let mut records = Vec::new();
        while let Some(r) = reader.next_record()? {
            records.push(r);
        }
        Ok(Decoded {
            records,
            skipped_bytes: reader.skipped_bytes(),
            torn_tail: reader.torn_tail(),
        })
    }
    let reader = LogFileReader::open(path)?;
    Ok(match reader.kind() {
        LogKind::Agent => AnyLog::Agent(all(reader)?),
        LogKind::Probe => AnyLog::Probe(all(reader)?),
    })
}

/// Bytes read from a log file at a time.
#[cfg(feature = "fs")]
const READ_CHUNK: usize = 256 * 1024;

/// A log file's records, read as they come: memory is one chunk plus the
/// frame being read, whatever the file's size, so a report over a day-long
/// log does not hold the file.
#[cfg(feature = "fs")]
pub struct LogFileReader {
    path: PathBuf,
    file: std::io::Take<File>,
    /// The file's length when opened: what is read, however it grows.
    len: u64,
    kind: LogKind,
    decoder: BodyDecoder,
    chunk: Vec<u8>,
    undecodable: u64,
}

#[cfg(feature = "fs")]
impl LogFileReader {
    /// Opens a log: refuses what is not a regular file before opening it, a
    /// foreign header before reading further, and a header whose kind the
    /// first records contradict. Reads the file as long as it is now: a log
    /// still being written ends there for this reader.
    pub fn open(path: &Path) -> Result<LogFileReader, LogError> {
        LogFileReader::open_upto(path, u64::MAX)
    }

    /// [`LogFileReader::open`], reading at most the first `len` bytes: a
    /// second pass over a growing log reads what the first did.
    pub fn open_upto(path: &Path, len: u64) -> Result<LogFileReader, LogError> {
        use std::io::Read;
        let io = |source| LogError::Io {
            path: path.to_owned(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(io)?;
        if !meta.is_file() {
            return Err(LogError::NotAFile {
                path: path.to_owned(),
            });
        }
        let len = len.min(meta.len());
        let mut file = File::open(path).map_err(io)?.take(len);
        let mut head = Vec::with_capacity(HEADER_LEN);
        (&mut file)
            .take(HEADER_LEN as u64)
            .read_to_end(&mut head)
            .map_err(io)?;
        let kind = read_header(path, &head)?;
        let mut reader = LogFileReader {
            path: path.to_owned(),
            file,
            len,
            kind,
            decoder: BodyDecoder::new(),
            chunk: vec![0; READ_CHUNK],
            undecodable: 0,
        };
        // The first chunk holds the records the kind is checked against,
        // and at least the first whole frame, however long.
        let mut first = Vec::new();
        (&mut reader.file)
            .take(READ_CHUNK as u64)
            .read_to_end(&mut first)
            .map_err(io)?;
        if first.len() == READ_CHUNK && first.len() >= FRAME_HEADER_LEN {
            let announced = u32::from_le_bytes(first[..4].try_into().expect("4 bytes")) as usize;
            if announced <= MAX_RECORD_LEN && FRAME_HEADER_LEN + announced > first.len() {
                let more = (FRAME_HEADER_LEN + announced - first.len()) as u64;
                (&mut reader.file)
                    .take(more)
                    .read_to_end(&mut first)
                    .map_err(io)?;
            }
        }
        check_kind(path, kind, &first)?;
        reader.decoder.push(&first);
        if (first.len() as u64) + (HEADER_LEN as u64) >= len {
            reader.decoder.finish();
        }
        Ok(reader)
    }

    /// Which writer the header names (checked against the records).
    pub fn kind(&self) -> LogKind {
        self.kind
    }

    /// How many bytes of the file this reader reads (its length when
    /// opened): what a later pass passes to [`LogFileReader::open_upto`].
    pub fn read_len(&self) -> u64 {
        self.len
    }

    /// The next record that decodes as `R`; `None` at the end of the file.
    /// Frames that do not decode are counted as skipped.
    pub fn next_record<R: DeserializeOwned>(&mut self) -> Result<Option<R>, LogError> {
        use std::io::Read;
        loop {
            match self.decoder.next_frame() {
                Next::Frame(payload) => match postcard::from_bytes::<R>(payload) {
                    Ok(r) => return Ok(Some(r)),
                    Err(_) => self.undecodable += (FRAME_HEADER_LEN + payload.len()) as u64,
                },
                Next::End => return Ok(None),
                Next::NeedMore => {
                    let n = loop {
                        match self.file.read(&mut self.chunk) {
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                            other => break other,
                        }
                    }
                    .map_err(|source| LogError::Io {
                        path: self.path.clone(),
                        source,
                    })?;
                    if n == 0 {
                        self.decoder.finish();
                    } else {
                        self.decoder.push(&self.chunk[..n]);
                    }
                }
            }
        }
    }

    /// Bytes so far that were not part of an intact, decodable record.
    pub fn skipped_bytes(&self) -> u64 {
        self.decoder.skipped_bytes() + self.undecodable
    }

    /// Whether the file ended in the middle of a record.
    pub fn torn_tail(&self) -> bool {
        self.decoder.torn_tail()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Stamp;
    use crate::record::{MessageKey, ProbeRecord, Receipt};

    fn receipt(i: u64) -> ProbeRecord {
        ProbeRecord::Receipt(Receipt {
            conn: i as u32,
            key: MessageKey::Seq(i),
            hash: i * 7,
            len: 450,
            at: Stamp {
                wall_ns: 1_700_000_000_000_000_000 + i,
                mono_ns: i,
            },
            kernel_delay_ns: Some(i),
        })
    }

    fn log_of(n: u64) -> Vec<u8> {
        let mut w = LogWriter::new(Vec::new(), LogKind::Probe).unwrap();
        for i in 0..n {
            w.append(&receipt(i)).unwrap();
        }
        w.into_inner()
    }

    #[test]
    fn round_trips_every_record() {
        let bytes = log_of(100);
        assert_eq!(read_header(Path::new("x"), &bytes).unwrap(), LogKind::Probe);
        let d: Decoded<ProbeRecord> = decode_records(&bytes[HEADER_LEN..]);
        assert_eq!(d.records.len(), 100);
        assert_eq!(d.records[42], receipt(42));
        assert_eq!(d.skipped_bytes, 0);
        assert!(!d.torn_tail);
    }

    #[test]
    fn megabytes_of_random_garbage_between_records_lose_only_the_garbage() {
        // Random bytes announce random lengths; each must not cost a CRC
        // over up to MAX_RECORD_LEN (that made 32 MiB take over a minute).
        let bytes = log_of(20);
        let one = (bytes.len() - HEADER_LEN) / 20;
        let split = HEADER_LEN + 10 * one;
        let mut rng = fastrand::Rng::with_seed(0x9e37_79b9_7f4a_7c15);
        let garbage: Vec<u8> = std::iter::repeat_with(|| rng.u8(..))
            .take(4 << 20)
            .collect();
        let mut damaged = bytes[HEADER_LEN..split].to_vec();
        damaged.extend(&garbage);
        damaged.extend(&bytes[split..]);
        let d: Decoded<ProbeRecord> = decode_records(&damaged);
        assert_eq!(d.records.len(), 20);
        assert_eq!(d.records[19], receipt(19));
        assert_eq!(d.skipped_bytes, garbage.len() as u64);
    }

    #[test]
    fn a_flipped_kind_byte_is_an_error_not_a_log_of_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("probe.sklog");
        let mut bytes = log_of(10);
        bytes[10] = LogKind::Agent.to_byte();
        std::fs::write(&path, &bytes).unwrap();
        let err = read_file(&path).unwrap_err();
        assert!(
            matches!(
                err,
                LogError::KindMismatch {
                    header: "an agent",
                    records: "a probe",
                    ..
                }
            ),
            "{err}"
        );
        // As written, it reads.
        bytes[10] = LogKind::Probe.to_byte();
        std::fs::write(&path, &bytes).unwrap();
        assert!(matches!(read_file(&path), Ok(AnyLog::Probe(d)) if d.records.len() == 10));

        // A first record longer than the first read is checked whole too.
        let mut w = LogWriter::new(Vec::new(), LogKind::Agent).unwrap();
        w.append(&ProbeRecord::Started(Box::new(
            crate::record::ProbeStarted {
                name: "n".repeat(600_000),
                host: "h".into(),
                url: "ws://x/".into(),
                connections: 1,
                version: "t".into(),
                at: Stamp {
                    wall_ns: 1,
                    mono_ns: 1,
                },
            },
        )))
        .unwrap();
        std::fs::write(&path, w.into_inner()).unwrap();
        assert!(matches!(
            read_file(&path),
            Err(LogError::KindMismatch {
                header: "an agent",
                ..
            })
        ));
    }

    #[test]
    fn torn_tail_keeps_every_complete_record() {
        let bytes = log_of(10);
        let full = bytes.len();
        let one = (full - HEADER_LEN) / 10;
        // Cut 5 bytes into the last record.
        let cut = &bytes[HEADER_LEN..full - one + 5];
        let d: Decoded<ProbeRecord> = decode_records(cut);
        assert_eq!(d.records.len(), 9);
        assert_eq!(d.skipped_bytes, 5);
        assert!(d.torn_tail);
    }

    #[test]
    fn corruption_in_the_middle_loses_only_that_record() {
        let mut bytes = log_of(10);
        let one = (bytes.len() - HEADER_LEN) / 10;
        // Flip a payload byte of record 3.
        bytes[HEADER_LEN + 3 * one + FRAME_HEADER_LEN + 2] ^= 0xff;
        let d: Decoded<ProbeRecord> = decode_records(&bytes[HEADER_LEN..]);
        assert_eq!(d.records.len(), 9);
        assert_eq!(d.skipped_bytes, one as u64);
        assert!(!d.records.contains(&receipt(3)));
        assert!(d.records.contains(&receipt(4)));
        assert!(!d.torn_tail);
    }

    #[test]
    fn corrupt_length_resynchronises() {
        let mut bytes = log_of(10);
        let one = (bytes.len() - HEADER_LEN) / 10;
        bytes[HEADER_LEN + 5 * one..HEADER_LEN + 5 * one + 4]
            .copy_from_slice(&u32::MAX.to_le_bytes());
        let d: Decoded<ProbeRecord> = decode_records(&bytes[HEADER_LEN..]);
        assert_eq!(d.records.len(), 9);
        assert!(d.records.contains(&receipt(6)));
    }

    #[test]
    fn foreign_and_future_files_are_errors_naming_the_file() {
        let e = read_header(Path::new("/tmp/notes.txt"), b"hello world, not a log").unwrap_err();
        assert!(e.to_string().contains("/tmp/notes.txt"));
        assert!(e.to_string().contains("not a skewscope record log"));

        let mut bytes = log_of(1);
        bytes[8..10].copy_from_slice(&99u16.to_le_bytes());
        let e = read_header(Path::new("future.sklog"), &bytes).unwrap_err();
        assert!(matches!(e, LogError::UnsupportedVersion { found: 99, .. }));
        assert!(e.to_string().contains("future.sklog"));
    }

    #[cfg(all(feature = "fs", unix))]
    #[test]
    fn what_is_not_a_regular_file_or_not_a_log_is_refused_unread() {
        let e = read_file(Path::new("/dev/zero")).unwrap_err();
        assert!(matches!(e, LogError::NotAFile { .. }), "{e}");
        let dir = std::env::temp_dir();
        let e = read_file(&dir).unwrap_err();
        assert!(matches!(e, LogError::NotAFile { .. }), "{e}");
        // A FIFO is refused before it is opened (opening it would block).
        let fifo = dir.join(format!("skewscope-fifo-{}", std::process::id()));
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let e = read_file(&fifo).unwrap_err();
        std::fs::remove_file(&fifo).unwrap();
        assert!(matches!(e, LogError::NotAFile { .. }), "{e}");
        // A large sparse file that is not a log: its header is read, not it.
        let big = dir.join(format!("skewscope-sparse-{}", std::process::id()));
        let f = std::fs::File::create(&big).unwrap();
        f.set_len(2 << 30).unwrap();
        let e = read_file(&big).unwrap_err();
        std::fs::remove_file(&big).unwrap();
        assert!(matches!(e, LogError::NotALog { .. }), "{e}");
    }

    #[test]
    fn empty_log_has_no_records() {
        let bytes = log_of(0);
        let d: Decoded<ProbeRecord> = decode_records(&bytes[HEADER_LEN..]);
        assert!(d.records.is_empty());
        assert_eq!(d.skipped_bytes, 0);
    }

    #[test]
    fn a_follower_gets_whole_frames_only_and_is_never_stalled_by_damage() {
        let bytes = log_of(10);
        let body = &bytes[HEADER_LEN..];
        let one = body.len() / 10;
        // All of it; then, with the last frame cut, all but that frame.
        assert_eq!(whole_frames_end(body, 0, usize::MAX), body.len());
        assert_eq!(
            whole_frames_end(&body[..body.len() - 3], 0, usize::MAX),
            9 * one
        );
        // A limit stops at the first frame boundary past it, never inside one.
        assert_eq!(whole_frames_end(body, 0, one + 1), 2 * one);
        assert_eq!(whole_frames_end(body, 4 * one, 1), 5 * one);
        // A damaged frame in the middle is passed over, not waited on.
        let mut damaged = bytes.clone();
        damaged[HEADER_LEN + 3 * one + FRAME_HEADER_LEN + 1] ^= 0xff;
        let body = &damaged[HEADER_LEN..];
        assert_eq!(whole_frames_end(body, 0, usize::MAX), body.len());
        // Following piece by piece reads exactly what reading at once does.
        let (mut pos, mut pieces) = (0, Vec::new());
        while pos < body.len() {
            let end = whole_frames_end(body, pos, one);
            pieces.extend_from_slice(&body[pos..end]);
            pos = end;
        }
        let whole: Decoded<ProbeRecord> = decode_records(body);
        let followed: Decoded<ProbeRecord> = decode_records(&pieces);
        assert_eq!(followed.records, whole.records);
        assert_eq!(followed.records.len(), 9);
    }
}
