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

/// How many leading frames [`check_kind`] decodes both ways to check the
/// header's kind against the records.
const KIND_CHECK_FRAMES: usize = 64;

/// Of the first intact frames of `body`, how many decode as `R`, and how
/// many were looked at.
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

/// The header's kind, checked against the first records (`body`: the
/// bytes after the header, at least its first whole frame): a flipped kind
/// byte must not turn a probe's log into an "agent" log of garbage.
pub fn check_kind(path: &Path, kind: LogKind, body: &[u8]) -> Result<(), LogError> {
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
    /// `written` at the last flush that worked: every byte up to it is
    /// whole frames in the output.
    flushed: u64,
}

impl<W: Write> LogWriter<W> {
    /// Wraps `out` and writes the header.
    pub fn new(mut out: W, kind: LogKind) -> io::Result<Self> {
        out.write_all(&header(kind))?;
        Ok(LogWriter {
            out,
            scratch: Vec::with_capacity(4096),
            written: HEADER_LEN as u64,
            flushed: 0,
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
        self.out.flush()?;
        self.flushed = self.written;
        Ok(())
    }

    /// Bytes known to be whole frames in the output: `bytes_written` at
    /// the last flush that worked. After a failed write the output may hold
    /// a torn frame past it; a writer cuts back to here so no record is
    /// ever written behind one (a reader that follows a growing log, as the
    /// audit and the uploads do, could not get past it).
    pub fn bytes_flushed(&self) -> u64 {
        self.flushed
    }

    /// Returns the inner writer.
    pub fn into_inner(self) -> W {
        self.out
    }

    /// Appends to `out`, which already holds a log of `written` bytes (its
    /// header included): a log reopened after a rotation.
    pub fn resume(out: W, written: u64) -> Self {
        LogWriter {
            out,
            scratch: Vec::with_capacity(4096),
            written,
            flushed: written,
        }
    }

    /// The inner writer, for what only it can do (sync a file to disk).
    pub fn writer(&self) -> &W {
        &self.out
    }

    /// Puts `out` in place of the inner writer, now `written` bytes long,
    /// and returns the old one unflushed: what a writer that must drop its
    /// buffered records after a failed write (a full disk) needs.
    pub fn replace_writer(&mut self, out: W, written: u64) -> W {
        self.written = written;
        self.flushed = written;
        std::mem::replace(&mut self.out, out)
    }
}

/// Decodes a whole log held in memory (`path` only names it in errors): its
/// header, checked against its first records, and every record after it.
pub fn decode_log(path: &Path, bytes: &[u8]) -> Result<AnyLog, LogError> {
    let kind = read_header(path, bytes)?;
    let body = &bytes[HEADER_LEN..];
    check_kind(path, kind, body)?;
    Ok(match kind {
        LogKind::Agent => AnyLog::Agent(decode_records(body)),
        LogKind::Probe => AnyLog::Probe(decode_records(body)),
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Stamp;
    use crate::record::{MessageKey, ProbeRecord, Receipt};

    fn receipt(i: u64) -> ProbeRecord {
        ProbeRecord::Receipt(Receipt {
            kernel_delay_ns: Some(i),
            ..crate::fixtures::receipt(
                i as u32,
                MessageKey::Seq(i),
                i * 7,
                Stamp {
                    wall_ns: 1_700_000_000_000_000_000 + i,
                    mono_ns: i,
                },
            )
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
        let path = Path::new("probe.sklog");
        let mut bytes = log_of(10);
        bytes[10] = LogKind::Agent.to_byte();
        let err = decode_log(path, &bytes).unwrap_err();
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
        assert!(matches!(decode_log(path, &bytes), Ok(AnyLog::Probe(d)) if d.records.len() == 10));

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
        assert!(matches!(
            decode_log(path, &w.into_inner()),
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
