//! A run's record log read forward for the uploader: where each sequence
//! number's frame starts, across log rotations. After logrotate moves the
//! log away and SIGHUP makes the recorder start a new file at the same path,
//! the run goes on in the new file; its records continue the sequence, so
//! the agent stores one run, the concatenation of the files.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use skewscope_core::log::{FRAME_HEADER_LEN, FrameAt, HEADER_LEN, frame_at, resync};

/// The files of one run, read in order.
pub struct Spool {
    path: PathBuf,
    /// The first file as opened, then each that replaced it at `path`.
    /// Handles stay open: a rotated file may be deleted and still be read.
    files: Vec<File>,
    /// Whether the run may still grow (and rotate): the live run does, a
    /// previous run's log does not.
    follow: bool,
    /// The file being read, the byte offset in it and the sequence number
    /// of the next unread frame.
    current: usize,
    offset: u64,
    seq: u64,
}

impl Spool {
    /// Opens the log at `path`; `follow` for a run still being written.
    pub fn open(path: &Path, follow: bool) -> io::Result<Spool> {
        Ok(Spool {
            path: path.to_owned(),
            files: vec![File::open(path)?],
            follow,
            current: 0,
            offset: HEADER_LEN as u64,
            seq: 0,
        })
    }

    /// Whole frames from sequence number `seq` on, at most `max_bytes` (or
    /// one frame, if it alone is larger): what has been flushed so far, empty
    /// when there is nothing new.
    pub fn batch_from(&mut self, seq: u64, max_bytes: usize) -> io::Result<(u64, Vec<u8>)> {
        if seq < self.seq {
            // The agent has less than we thought (it lost a torn tail): rescan.
            (self.current, self.offset, self.seq) = (0, HEADER_LEN as u64, 0);
        }
        let mut out = Vec::new();
        loop {
            // Looked at before reading: once the path names a newer file, this
            // one is final, so reading it to its end drains it.
            let replaced = self.follow && self.current + 1 == self.files.len() && self.replaced();
            let full = self.read_frames(seq, max_bytes, &mut out)?;
            if full || !out.is_empty() {
                return Ok((seq, out));
            }
            if self.current + 1 < self.files.len() {
                (self.current, self.offset) = (self.current + 1, HEADER_LEN as u64);
            } else if replaced {
                self.files.push(File::open(&self.path)?);
                (self.current, self.offset) = (self.current + 1, HEADER_LEN as u64);
            } else {
                return Ok((seq, out));
            }
        }
    }

    /// Every intact record of the log (an earlier run's, which no longer
    /// grows): the most the agent can have of it. Reads it through once,
    /// then goes on from where it was.
    pub fn records(&mut self) -> io::Result<u64> {
        let (current, offset, seq) = (self.current, self.offset, self.seq);
        (self.current, self.offset, self.seq) = (0, HEADER_LEN as u64, 0);
        let mut sink = Vec::new();
        while {
            sink.clear();
            self.read_frames(u64::MAX, 1 << 20, &mut sink)?;
            self.current + 1 < self.files.len()
        } {
            (self.current, self.offset) = (self.current + 1, HEADER_LEN as u64);
        }
        let total = self.seq;
        (self.current, self.offset, self.seq) = (current, offset, seq);
        Ok(total)
    }

    /// Whether `path` now names another file than the last one opened.
    fn replaced(&self) -> bool {
        let (Ok(now), Ok(ours)) = (
            std::fs::metadata(&self.path),
            self.files.last().expect("a spool has a file").metadata(),
        ) else {
            return false;
        };
        (now.dev(), now.ino()) != (ours.dev(), ours.ino())
    }

    /// Appends to `out` the frames of the current file from `seq` on (up to
    /// `max_bytes`), skipping those before it; true when it stopped for size.
    fn read_frames(&mut self, seq: u64, max_bytes: usize, out: &mut Vec<u8>) -> io::Result<bool> {
        let mut buf = vec![0u8; max_bytes + 64 * 1024];
        loop {
            let file = &mut self.files[self.current];
            file.seek(SeekFrom::Start(self.offset))?;
            let n = read_up_to(file, &mut buf)?;
            let mut pos = 0;
            loop {
                match frame_at(&buf[..n], pos) {
                    FrameAt::Intact(payload) => {
                        let len = FRAME_HEADER_LEN + payload.len();
                        if self.seq >= seq {
                            if out.len() + len > max_bytes && !out.is_empty() {
                                return Ok(true);
                            }
                            out.extend_from_slice(&buf[pos..pos + len]);
                        }
                        pos += len;
                        self.offset += len as u64;
                        self.seq += 1;
                    }
                    // Damage with an intact frame after it (a torn write the
                    // recorder went on from) is stepped over, as every reader
                    // of the log does, so the records after it are numbered
                    // and sent alike; stopping here stalled the upload for
                    // good (found by collector/tests/faults.rs). A frame
                    // still being written has nothing after it: wait.
                    FrameAt::Corrupt | FrameAt::Truncated => match resync(&buf[..n], pos + 1) {
                        Some(next) => {
                            self.offset += (next - pos) as u64;
                            pos = next;
                        }
                        None => break,
                    },
                }
            }
            // Read on only when a full buffer was consumed while still
            // skipping forward to `seq`.
            if pos == 0 || n < buf.len() || !out.is_empty() {
                return Ok(false);
            }
        }
    }
}

fn read_up_to(file: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use skewscope_core::log::{LogKind, LogWriter, decode_records};
    use skewscope_core::record::ProbeRecord;
    use skewscope_os::log_files::FileLogWriter;

    fn stopped(i: u64) -> ProbeRecord {
        ProbeRecord::Stopped(skewscope_core::Stamp {
            wall_ns: i,
            mono_ns: i,
        })
    }

    fn write(path: &Path, range: std::ops::Range<u64>) {
        let mut log = LogWriter::create(path, LogKind::Probe).unwrap();
        for i in range {
            log.append(&stopped(i)).unwrap();
        }
        log.sync().unwrap();
    }

    fn all_from(spool: &mut Spool, mut seq: u64) -> Vec<ProbeRecord> {
        let mut frames = Vec::new();
        loop {
            let (_, batch) = spool.batch_from(seq, 100).unwrap();
            if batch.is_empty() {
                return decode_records::<ProbeRecord>(&frames).records;
            }
            seq += decode_records::<ProbeRecord>(&batch).records.len() as u64;
            frames.extend(batch);
        }
    }

    #[test]
    fn a_rotated_run_continues_in_the_new_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("probe.sklog");
        write(&path, 0..10);
        let mut spool = Spool::open(&path, true).unwrap();
        assert_eq!(all_from(&mut spool, 0).len(), 10);
        // logrotate moves it away (and later deletes it); a new file starts.
        std::fs::rename(&path, dir.path().join("probe.sklog.1")).unwrap();
        write(&path, 10..15);
        std::fs::remove_file(dir.path().join("probe.sklog.1")).unwrap();
        let rest = all_from(&mut spool, 10);
        assert_eq!(rest, (10..15).map(stopped).collect::<Vec<_>>());
        // A rescan from 0 reads the deleted file through its handle.
        let again = all_from(&mut spool, 0);
        assert_eq!(again, (0..15).map(stopped).collect::<Vec<_>>());
    }

    #[test]
    fn a_finished_run_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("probe.sklog");
        write(&path, 0..3);
        let mut spool = Spool::open(&path, false).unwrap();
        std::fs::rename(&path, dir.path().join("moved.sklog")).unwrap();
        write(&path, 100..105);
        assert_eq!(
            all_from(&mut spool, 0),
            (0..3).map(stopped).collect::<Vec<_>>()
        );
    }

    #[test]
    fn damage_in_the_middle_is_stepped_over_and_what_follows_is_sent() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("probe.sklog");
        write(&path, 0..5);
        // A torn frame (a header announcing more than follows), eight
        // zeros (a hole), then intact frames again.
        let mut tail = vec![0x40, 0, 0, 0, 1, 2, 3];
        tail.extend([0u8; 8]);
        for i in 5..10 {
            skewscope_core::log::encode_record(&stopped(i), &mut tail);
        }
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut file, &tail).unwrap();
        let mut spool = Spool::open(&path, true).unwrap();
        let all = all_from(&mut spool, 0);
        assert_eq!(all, (0..10).map(stopped).collect::<Vec<_>>());
        // Numbered as the log reader numbers them.
        let read = skewscope_os::log_files::read_file(&path).unwrap();
        let skewscope_core::log::AnyLog::Probe(decoded) = read else {
            panic!("a probe log");
        };
        assert_eq!(decoded.records, all);
        assert_eq!(decoded.skipped_bytes, 15);
    }
}
