//! Reports over logs read as they come: the streamed join over files (a
//! rotated run in two segments, damage in the middle, several devices)
//! gives the report the whole-run join gives over the same records, while
//! holding only the broadcasts still arriving.

use std::path::{Path, PathBuf};

use collector::inputs::read_inputs;
use collector::joined::{Scope, analyse, join};
use skewscope_core::Stamp;
use skewscope_core::analysis::join::join as join_records;
use skewscope_core::analysis::report::Report;
use skewscope_core::log::{AnyLog, LogKind, LogWriter};
use skewscope_core::record::{MessageKey, ProbeRecord, Receipt, TimeSample};
use skewscope_os::log_files::{FileLogWriter, read_file};

const T0: u64 = 1_764_000_000_000_000_000;

fn at(mono: u64, ahead_ns: u64) -> Stamp {
    Stamp {
        wall_ns: T0 + mono + ahead_ns,
        mono_ns: mono,
    }
}

/// One device's run: `conns` connections, `broadcasts` broadcasts 1 ms
/// apart (one in 50 missed by connection 0), a time exchange every 100 ms,
/// its clock `ahead_ns` ahead.
fn device(name: &str, conns: u32, broadcasts: u64, ahead_ns: u64) -> Vec<ProbeRecord> {
    let mut r = vec![skewscope_core::fixtures::probe_started(
        name,
        conns,
        at(0, ahead_ns),
    )];
    for conn in 0..conns {
        r.push(skewscope_core::fixtures::connection_opened(
            conn,
            None,
            at(1, ahead_ns),
        ));
    }
    for n in 0..broadcasts {
        let t = 1_000_000 + n * 1_000_000;
        if n % 100 == 0 {
            r.push(ProbeRecord::TimeSample(TimeSample {
                t1: at(t, ahead_ns),
                t2_wall_ns: T0 + t + 40_000,
                t3_wall_ns: T0 + t + 45_000,
                t4: at(t + 85_000 + n % 7 * 1_000, ahead_ns),
            }));
        }
        for conn in 0..conns {
            if conn == 0 && n % 50 == 7 {
                continue;
            }
            r.push(ProbeRecord::Receipt(Receipt {
                kernel_delay_ns: Some(20_000 + u64::from(conn)),
                ..skewscope_core::fixtures::receipt(
                    conn,
                    MessageKey::Seq(n),
                    n,
                    at(t + 200_000 + u64::from(conn) * 3_000, ahead_ns),
                )
            }));
        }
    }
    r.push(ProbeRecord::Stopped(at(
        2_000_000 + broadcasts * 1_000_000,
        ahead_ns,
    )));
    r
}

fn write_log(path: &Path, records: &[ProbeRecord]) {
    let mut w = LogWriter::create(path, LogKind::Probe).unwrap();
    for r in records {
        w.append(r).unwrap();
    }
    w.sync().unwrap();
}

fn decoded(path: &Path) -> Vec<ProbeRecord> {
    match read_file(path).unwrap() {
        AnyLog::Probe(d) => d.records,
        AnyLog::Agent(_) => panic!("a probe log"),
    }
}

#[test]
fn a_report_over_files_read_as_they_come_is_the_whole_run_report() {
    let dir = tempfile::tempdir().unwrap();
    let (lobby, stage) = (
        device("lobby", 8, 3_000, 0),
        device("stage", 5, 3_000, 2_000_000),
    );
    // The lobby's run rotated half way: its second segment starts again
    // with the run's Started record, as a reopened probe log does.
    let half = lobby.len() / 2;
    let mut second = vec![lobby[0].clone()];
    second.extend_from_slice(&lobby[half..]);
    let files: Vec<PathBuf> = ["lobby-0.sklog", "lobby-1.sklog", "stage.sklog"]
        .iter()
        .map(|f| dir.path().join(f))
        .collect();
    write_log(&files[0], &lobby[..half]);
    write_log(&files[1], &second);
    write_log(&files[2], &stage);
    // 4 KB of garbage in the middle of the stage's log.
    let mut bytes = std::fs::read(&files[2]).unwrap();
    let middle = bytes.len() / 2;
    let garbage: Vec<u8> = (0..4_096u32)
        .map(|i| i.wrapping_mul(2_654_435_761) as u8)
        .collect();
    bytes.splice(middle..middle, garbage);
    std::fs::write(&files[2], &bytes).unwrap();

    let inputs = read_inputs(&files).unwrap();
    assert_eq!(inputs.probes.len(), 2, "the rotated run is one run");
    let summaries = inputs.summaries.clone();
    let held = join(&inputs, Scope::default()).unwrap().most_receipts_held;
    let (streamed, figures) = analyse(inputs, None, Scope::default(), true).unwrap();

    // The same records, decoded whole and joined whole.
    let mut lobby_read = decoded(&files[0]);
    lobby_read.extend(decoded(&files[1]));
    let stage_read = decoded(&files[2]);
    assert!(stage_read.len() < stage.len(), "the garbage cost a record");
    let mut whole = Report::build(&join_records(None, &[&lobby_read, &stage_read]), summaries);
    // What the collector adds to the core's report: the reference it chose.
    assert_eq!(
        streamed.reference.as_ref().map(|r| r.kind),
        Some(skewscope_core::analysis::report::ReferenceKind::None)
    );
    whole.reference = streamed.reference.clone();
    assert_eq!(streamed, whole);

    // Connection 0 of each device misses 60; the garbage cut one record.
    let receipts = 3_000 * 13 - 120;
    assert!(streamed.receipts >= receipts - 2 && streamed.receipts <= receipts);
    assert_eq!(streamed.broadcasts, 3_000);
    assert!(streamed.missing >= 120);
    assert!(streamed.skew_corrected_ns.is_some());
    // Every receipt of ~39,000, but only the broadcasts still arriving at once.
    assert!(held <= 4 * 13, "held {held} receipts at once");
    let figures = figures.unwrap();
    assert_eq!(figures.broadcasts_total, 3_000);
    assert!(figures.heatmap.columns <= skewscope_core::analysis::figures::MAX_HEATMAP_COLUMNS);
}
