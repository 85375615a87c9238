//! Record logs on disk: created, reopened after a rotation, synced, and
//! read back as they come. The format (header, framing, records, damage
//! recovery) is the core's ([`skewscope_core::log`]); this is only the
//! files, with `std::fs` alone, so it works wherever the collector runs.

use std::fs::File;
use std::io::{self, BufWriter};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use skewscope_core::log::{
    AnyLog, BodyDecoder, Decoded, FRAME_HEADER_LEN, HEADER_LEN, LogError, LogKind, LogWriter,
    MAX_RECORD_LEN, Next, check_kind, read_header,
};

/// A record log writing to a file.
pub type FileLog = LogWriter<BufWriter<File>>;

/// What a [`LogWriter`] on a file can do beyond writing records: bring it
/// into `use` and `LogWriter::create(path, kind)` opens one.
pub trait FileLogWriter: Sized {
    /// Creates (or truncates) a log file and writes its header.
    fn create(path: &Path, kind: LogKind) -> io::Result<Self>;
    /// Reopens a log for appending (SIGHUP after a log rotation): appends to
    /// `path` if it already holds a log of this kind, else creates it afresh.
    /// Returns the writer and whether the file was created.
    fn reopen(path: &Path, kind: LogKind) -> io::Result<(Self, bool)>;
    /// Drops what is buffered but not yet written, without writing it:
    /// after a failed write (a full disk) those records are counted lost,
    /// and must not reach the file later behind ones written since. The
    /// file may end in a torn frame, which readers skip.
    fn discard_buffered(&mut self) -> io::Result<()>;
    /// Flushes buffered records and asks the OS to make them durable.
    fn sync(&mut self) -> io::Result<()>;
}

impl FileLogWriter for LogWriter<BufWriter<File>> {
    /// Creates (or truncates) a log file and writes its header.
    fn create(path: &Path, kind: LogKind) -> io::Result<Self> {
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
    fn reopen(path: &Path, kind: LogKind) -> io::Result<(Self, bool)> {
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
                    LogWriter::resume(BufWriter::with_capacity(256 * 1024, file), len),
                    false,
                ))
            }
            None => Ok((LogWriter::create(path, kind)?, true)),
        }
    }

    /// Drops what is buffered but not yet written, without writing it:
    /// after a failed write (a full disk) those records are counted lost,
    /// and must not reach the file later behind ones written since. The
    /// file is cut back to the last flush that worked: a failed write can
    /// leave part of a frame, and records written after it would sit behind
    /// a torn frame whose length field can claim up to 64 MiB, which a
    /// reader following the growing file (the audit's copy, the probe's
    /// uploads) would wait on for ever (found by collector/tests/faults.rs
    /// under load: an audit saw no broadcast for its whole --settle).
    fn discard_buffered(&mut self) -> io::Result<()> {
        let mut file = self.writer().get_ref().try_clone()?;
        let good = self.bytes_flushed();
        if file.metadata()?.len() > good {
            file.set_len(good)?;
        }
        // The offset the two handles share is still past the cut: writing
        // there would leave a hole of zeros.
        io::Seek::seek(&mut file, io::SeekFrom::Start(good))?;
        let old = self.replace_writer(BufWriter::with_capacity(256 * 1024, file), good);
        // into_parts, unlike a drop, writes nothing.
        let _ = old.into_parts();
        Ok(())
    }

    /// Flushes buffered records and asks the OS to make them durable.
    fn sync(&mut self) -> io::Result<()> {
        self.flush()?;
        self.writer().get_ref().sync_data()
    }
}

/// Reads a log file of either kind. Damage inside the file is recovered and
/// counted; only a missing or foreign file is an error. Every record is held:
/// for long logs, read with [`LogFileReader`] instead.
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
const READ_CHUNK: usize = 256 * 1024;

/// A log file's records, read as they come: memory is one chunk plus the
/// frame being read, whatever the file's size, so a report over a day-long
/// log does not hold the file.
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

/// A log read while it is written: each [`LogFollower::next_record`] reads
/// what was appended since the last one, and `None` means "nothing more
/// yet", not the end. For a caller that waits on what a running writer
/// records (`skewscope sweep` waits for every connection's receipt of a
/// broadcast before the next one); a frame half written is waited for,
/// never counted as damage.
pub struct LogFollower {
    path: PathBuf,
    file: File,
    /// The header's bytes until it is whole, then `None`.
    head: Option<Vec<u8>>,
    decoder: BodyDecoder,
    chunk: Vec<u8>,
}

impl LogFollower {
    /// Opens `path` to follow it from its start; its header is checked as
    /// soon as it has been written.
    pub fn open(path: &Path) -> Result<LogFollower, LogError> {
        let file = File::open(path).map_err(|source| LogError::Io {
            path: path.to_owned(),
            source,
        })?;
        Ok(LogFollower {
            path: path.to_owned(),
            file,
            head: Some(Vec::with_capacity(HEADER_LEN)),
            decoder: BodyDecoder::new(),
            chunk: vec![0; READ_CHUNK],
        })
    }

    /// The next record that decodes as `R`, if the writer has appended
    /// one; `Ok(None)` when everything written so far has been read.
    /// A foreign file is an error once its header is there to read.
    pub fn next_record<R: DeserializeOwned>(&mut self) -> Result<Option<R>, LogError> {
        use std::io::Read;
        loop {
            if self.head.is_none() {
                match self.decoder.next_frame() {
                    Next::Frame(payload) => {
                        if let Ok(record) = postcard::from_bytes::<R>(payload) {
                            return Ok(Some(record));
                        }
                        continue;
                    }
                    Next::End => return Ok(None),
                    Next::NeedMore => {}
                }
            }
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
                return Ok(None);
            }
            let mut bytes = &self.chunk[..n];
            if let Some(head) = &mut self.head {
                let take = (HEADER_LEN - head.len()).min(bytes.len());
                head.extend_from_slice(&bytes[..take]);
                bytes = &bytes[take..];
                if head.len() < HEADER_LEN {
                    continue;
                }
                read_header(&self.path, head)?;
                self.head = None;
            }
            self.decoder.push(bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skewscope_core::Stamp;
    use skewscope_core::record::ProbeRecord;

    /// A record that says which it is.
    fn stopped(i: u64) -> ProbeRecord {
        ProbeRecord::Stopped(Stamp {
            wall_ns: 1_800_000_000_000_000_000 + i,
            mono_ns: i,
        })
    }

    #[test]
    fn a_log_written_synced_reopened_and_read_holds_every_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("probe.sklog");
        let mut log = FileLog::create(&path, LogKind::Probe).unwrap();
        for i in 0..10 {
            log.append(&stopped(i)).unwrap();
        }
        log.sync().unwrap();
        drop(log);
        let (mut log, created) = FileLog::reopen(&path, LogKind::Probe).unwrap();
        assert!(!created);
        log.append(&stopped(10)).unwrap();
        // A write that failed part way (a full disk): half a frame reached
        // the file. What was buffered never reaches it, and the torn half
        // is cut away, so the next record is not written behind it.
        {
            use std::io::Write;
            let mut torn = Vec::new();
            skewscope_core::log::encode_record(&stopped(10), &mut torn);
            let mut file = std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .unwrap();
            file.write_all(&torn[..torn.len() / 2]).unwrap();
        }
        log.discard_buffered().unwrap();
        log.append(&stopped(11)).unwrap();
        log.sync().unwrap();
        let Ok(AnyLog::Probe(d)) = read_file(&path) else {
            panic!("a probe log");
        };
        let want: Vec<ProbeRecord> = (0..10).chain([11]).map(stopped).collect();
        assert_eq!(d.records, want);
        assert_eq!((d.skipped_bytes, d.torn_tail), (0, false));
        // Another kind at the path: a new log, not an append.
        let (_, created) = FileLog::reopen(&path, LogKind::Agent).unwrap();
        assert!(created);
    }

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
    fn a_follower_reads_what_is_appended_and_waits_on_a_half_written_frame() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("probe.sklog");
        let mut file = std::fs::File::create(&path).unwrap();
        let mut follower = LogFollower::open(&path).unwrap();
        // Nothing yet, not even the whole header.
        file.write_all(&skewscope_core::log::header(LogKind::Probe)[..5])
            .unwrap();
        assert_eq!(follower.next_record::<ProbeRecord>().unwrap(), None);
        file.write_all(&skewscope_core::log::header(LogKind::Probe)[5..])
            .unwrap();
        let mut frames = Vec::new();
        for i in 0..3 {
            skewscope_core::log::encode_record(&stopped(i), &mut frames);
        }
        // Two records and a half.
        let cut = frames.len() - 7;
        file.write_all(&frames[..cut]).unwrap();
        assert_eq!(follower.next_record().unwrap(), Some(stopped(0)));
        assert_eq!(follower.next_record().unwrap(), Some(stopped(1)));
        assert_eq!(follower.next_record::<ProbeRecord>().unwrap(), None);
        file.write_all(&frames[cut..]).unwrap();
        assert_eq!(follower.next_record().unwrap(), Some(stopped(2)));
        assert_eq!(follower.next_record::<ProbeRecord>().unwrap(), None);
        // A file that is no log is refused once its header can be read.
        let other = dir.path().join("notes.txt");
        std::fs::write(&other, b"hello, this is not a log").unwrap();
        let e = LogFollower::open(&other)
            .unwrap()
            .next_record::<ProbeRecord>()
            .unwrap_err();
        assert!(matches!(e, LogError::NotALog { .. }), "{e}");
    }
}
