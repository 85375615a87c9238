//! The on-disk format, frozen: logs written once, committed, and decoded
//! by every later build to exactly the records they were written from.
//!
//! Audits are kept for years; a reordered field, a changed type or a
//! variant inserted in the middle of an enum would make old logs read as
//! garbage (postcard is not self-describing). Two kinds of committed logs:
//! - `data/records-2026-12-02.{agent,probe}.sklog`: every record variant
//!   this format has, with fixed values ([`every_agent_record`],
//!   [`every_probe_record`]). A variant appended later leaves them valid:
//!   add it with a new pair of files, never by rewriting these.
//!   `records-2026-12-02b.probe.sklog` holds the variants appended since
//!   (`MessagePayload`), written by `write_the_frozen_logs_of_2026_12_02b`;
//!   `records-2026-12-03.probe.sklog` the browser probe's `PageProbe`;
//!   `records-2026-12-06.probe.sklog` a probe's `LogsPruned` (`--out-dir`
//!   kept within `--keep-runs` and `--keep-bytes`);
//!   `records-2026-12-06b.probe.sklog` its `ClockTags` (the time
//!   exchange's authentication), `records-2026-12-06b.agent.sklog` the
//!   agent's `LeadChosen` (`?lead=`, `lead=auto`);
//!   `records-2026-12-06c.probe.sklog` the records of apps that report
//!   their own actions (`AppRun`, `ActionFrame`, `AppAction`, `NoticeTotals`),
//!   `records-2026-12-06c.agent.sklog` `lead=auto`'s `AutoLeadBasis`.
//! - `data/c41f7be/`: logs written by the previous release's binaries (the
//!   agent and a probe, three test broadcasts), read and joined here.
//!
//! `cargo test -p skewscope-core --test frozen_format -- --ignored
//! write_the_frozen_logs` wrote the first kind; it is not run otherwise.

use std::path::{Path, PathBuf};

use skewscope_core::Stamp;
use skewscope_core::log::{AnyLog, LogKind, LogWriter, decode_log};
use skewscope_core::record::*;

/// A committed log, decoded (the core reads bytes; files are the OS
/// layer's, which the core's own tests do not use).
fn read_file(path: &Path) -> Result<AnyLog, skewscope_core::log::LogError> {
    decode_log(path, &std::fs::read(path).unwrap())
}

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn at(n: u64) -> Stamp {
    Stamp {
        wall_ns: 1_764_633_600_000_000_000 + n,
        mono_ns: 1_000_000_000 + n,
    }
}

fn claim() -> ClockState {
    ClockState {
        at: at(7),
        kernel: Some(KernelClock {
            synchronized: true,
            status: 0x2001,
            max_error_ns: 1_500_000,
            est_error_ns: 20_000,
            offset_ns: -1_234,
            freq_ppb: 5_678,
        }),
        chrony: Some(ChronyTracking {
            reference: "ntp.lan".into(),
            stratum: 3,
            system_offset_ns: -12,
            last_offset_ns: 34,
            rms_offset_ns: 56,
            root_delay_ns: 78_000,
            root_dispersion_ns: 9_000,
            leap: "Normal".into(),
        }),
    }
}

/// One of every agent record, in declaration order.
fn every_agent_record() -> Vec<AgentRecord> {
    vec![
        AgentRecord::Started(AgentStarted {
            host: "srv".into(),
            version: "0.1.0".into(),
            at: at(1),
            shards: 2,
            order: SendOrder::Rotate,
            per_client_times: true,
        }),
        AgentRecord::ConnectionOpened(AgentConnectionOpened {
            conn: 3,
            label: Some("lobby".into()),
            peer: "192.0.2.9:40000".into(),
            shard: 1,
            at: at(2),
        }),
        AgentRecord::ConnectionClosed(AgentConnectionClosed {
            conn: 3,
            at: at(3),
            reason: CloseReason::ProtocolError("unmasked frame".into()),
        }),
        AgentRecord::Broadcast(BroadcastStarted {
            id: 4,
            seq: Some(5),
            hash: 0x0123_4567_89ab_cdef,
            len: 450,
            text: true,
            at: at(4),
        }),
        AgentRecord::ShardSends(ShardSends {
            broadcast: 4,
            shard: 0,
            loop_start_mono_ns: 1_000_000_005,
            slots: vec![
                SendSlot {
                    conn: 3,
                    position: 0,
                    outcome: SendOutcome::Written,
                    mono_ns: 1_000_000_006,
                },
                SendSlot {
                    conn: 8,
                    position: 1,
                    outcome: SendOutcome::Queued,
                    mono_ns: 1_000_000_007,
                },
            ],
        }),
        AgentRecord::SendCompleted(SendCompleted {
            broadcast: 4,
            conn: 8,
            mono_ns: 1_000_000_009,
        }),
        AgentRecord::Stopped(at(99)),
        AgentRecord::ClockState(claim()),
        AgentRecord::TimePort(TimePortTotals {
            answered: 10,
            malformed: 1,
            oversized: 2,
            replayed: 3,
        }),
        AgentRecord::TxStamp(TxStamp {
            broadcast: 4,
            conn: 3,
            kind: TxKind::Software,
            mono_ns: 1_000_000_008,
        }),
        AgentRecord::Identity(RunIdentity {
            run_id: 0x00ff_00ff_00ff_00ff_00ff_00ff_00ff_00ff,
            boot_id: Some("6f1c0a3e-0000-4000-8000-000000000001".into()),
        }),
        AgentRecord::TapStarted(TapStarted {
            port: 8000,
            interface: Some("eth0".into()),
            at: at(10),
        }),
        AgentRecord::TapConnectionOpened(TapConnectionEvent {
            client: "192.0.2.9:40001".into(),
            at_wall_ns: 1_764_633_600_000_000_011,
            detail: "permessage-deflate".into(),
        }),
        AgentRecord::TapConnectionClosed(TapConnectionEvent {
            client: "192.0.2.9:40001".into(),
            at_wall_ns: 1_764_633_600_000_000_012,
            detail: "FIN".into(),
        }),
        AgentRecord::TapBroadcast(TapBroadcast {
            id: 1,
            seq: None,
            hash: 42,
            len: 3_400,
            copies: vec![TapCopy {
                client: "192.0.2.9:40001".into(),
                first_byte_wall_ns: 1_764_633_600_000_000_013,
                last_byte_wall_ns: 1_764_633_600_000_000_014,
            }],
        }),
        AgentRecord::TapCounters(TapCountersRecord {
            at: at(15),
            tap: TapCounters {
                segments: 1,
                ignored_packets: 2,
                followed: 3,
                open_before_tap: 4,
                not_websocket: 5,
                tls: 6,
                broken: 7,
                lost: 8,
                retransmitted: 9,
                reordered: 10,
                messages: 11,
                compressed: 12,
                inflated: 13,
            },
            inflater_bytes: 44_032,
            ring_packets: 100,
            ring_drops: 1,
        }),
        AgentRecord::TapConnectionTotals(TapConnectionTotals {
            client: "192.0.2.9:40001".into(),
            at_wall_ns: 1_764_633_600_000_000_016,
            segments: 20,
            resent: 1,
            reordered: 2,
        }),
        AgentRecord::ConnectionSubprotocol(ConnectionSubprotocol {
            conn: 3,
            subprotocol: "chat.v2".into(),
        }),
        AgentRecord::RecordsLost(RecordsLost {
            count: 17,
            since: at(17),
            at: at(18),
        }),
    ]
}

/// One of every probe record, in declaration order.
fn every_probe_record() -> Vec<ProbeRecord> {
    vec![
        ProbeRecord::Started(Box::new(ProbeStarted {
            name: "lobby".into(),
            host: "kiosk-3".into(),
            url: "ws://srv:8080/ws?probe=lobby".into(),
            connections: 2,
            version: "0.1.0".into(),
            at: at(1),
        })),
        ProbeRecord::ConnectionOpened(ProbeConnectionOpened {
            conn: 0,
            agent_conn: Some(3),
            at: at(2),
        }),
        ProbeRecord::ConnectionFailed(ProbeConnectionFailed {
            conn: 1,
            at: at(3),
            error: "connection refused".into(),
        }),
        ProbeRecord::ConnectionClosed(ProbeConnectionClosed {
            conn: 0,
            at: at(4),
            reason: "count reached".into(),
        }),
        ProbeRecord::Receipt(Receipt {
            conn: 0,
            key: MessageKey::Hash {
                hash: 42,
                occurrence: 1,
            },
            hash: 42,
            len: 450,
            at: at(5),
            kernel_delay_ns: Some(12_345),
        }),
        ProbeRecord::Stopped(at(99)),
        ProbeRecord::ClockState(Box::new(claim())),
        ProbeRecord::TimeSample(TimeSample {
            t1: at(6),
            t2_wall_ns: 1_764_633_600_000_000_106,
            t3_wall_ns: 1_764_633_600_000_000_107,
            t4: at(8),
        }),
        ProbeRecord::Identity(RunIdentity {
            run_id: 7,
            boot_id: None,
        }),
        ProbeRecord::ConnectionAddresses(ConnectionAddresses {
            conn: 0,
            local: "192.0.2.9:40000".into(),
            remote: "192.0.2.1:8080".into(),
        }),
        ProbeRecord::LogFull(LogFull {
            at: at(9),
            max_bytes: 1 << 20,
        }),
        ProbeRecord::ConnectionTls(ConnectionTls {
            conn: 0,
            version: "TLSv1_3".into(),
            cipher: "TLS13_AES_128_GCM_SHA256".into(),
            verified: true,
        }),
        ProbeRecord::ConnectionDeflate(ConnectionDeflate {
            conn: 0,
            server_no_context_takeover: true,
            server_max_window_bits: Some(15),
        }),
        ProbeRecord::ActPlan(ActPlan {
            pointer: "/at".into(),
            unit: "auto".into(),
            at: at(10),
        }),
        ProbeRecord::Action(Action {
            conn: 0,
            key: MessageKey::Seq(5),
            hash: 42,
            act_at_ns: 1_764_633_600_030_000_000,
            offset_ns: Some(-2_000_000),
            offset_bound_ns: Some(40_000),
            target: at(11),
            done: at(12),
            late_ns: 0,
        }),
    ]
}

/// A compile-time check that the lists above hold every variant: a new
/// variant fails this match until it is given a frozen file of its own.
#[allow(dead_code)]
fn every_variant_is_frozen(a: &AgentRecord, p: &ProbeRecord) {
    match a {
        AgentRecord::Started(_)
        | AgentRecord::ConnectionOpened(_)
        | AgentRecord::ConnectionClosed(_)
        | AgentRecord::Broadcast(_)
        | AgentRecord::ShardSends(_)
        | AgentRecord::SendCompleted(_)
        | AgentRecord::Stopped(_)
        | AgentRecord::ClockState(_)
        | AgentRecord::TimePort(_)
        | AgentRecord::TxStamp(_)
        | AgentRecord::Identity(_)
        | AgentRecord::TapStarted(_)
        | AgentRecord::TapConnectionOpened(_)
        | AgentRecord::TapConnectionClosed(_)
        | AgentRecord::TapBroadcast(_)
        | AgentRecord::TapCounters(_)
        | AgentRecord::TapConnectionTotals(_)
        | AgentRecord::ConnectionSubprotocol(_)
        | AgentRecord::RecordsLost(_) => {}
        // Appended after the first frozen files: in their own.
        AgentRecord::LeadChosen(_) => {}
        AgentRecord::AutoLeadBasis(_) => {}
    }
    match p {
        ProbeRecord::Started(_)
        | ProbeRecord::ConnectionOpened(_)
        | ProbeRecord::ConnectionFailed(_)
        | ProbeRecord::ConnectionClosed(_)
        | ProbeRecord::Receipt(_)
        | ProbeRecord::Stopped(_)
        | ProbeRecord::ClockState(_)
        | ProbeRecord::TimeSample(_)
        | ProbeRecord::Identity(_)
        | ProbeRecord::ConnectionAddresses(_)
        | ProbeRecord::LogFull(_)
        | ProbeRecord::ConnectionTls(_)
        | ProbeRecord::ConnectionDeflate(_)
        | ProbeRecord::ActPlan(_)
        | ProbeRecord::Action(_) => {}
        // Appended after the first frozen files: in their own.
        ProbeRecord::Payload(_) => {}
        ProbeRecord::Page(_) => {}
        ProbeRecord::LogsPruned(_) => {}
        ProbeRecord::ClockTags(_) => {}
        ProbeRecord::App(_)
        | ProbeRecord::Frame(_)
        | ProbeRecord::AppAction(_)
        | ProbeRecord::NoticeTotals(_) => {}
    }
}

/// Agent records appended after `records-2026-12-06b`, frozen in
/// `records-2026-12-06c.agent.sklog`.
fn agent_records_added_2026_12_06c() -> Vec<AgentRecord> {
    vec![AgentRecord::AutoLeadBasis(AutoLeadBasis {
        broadcast: 9,
        wanted_ns: 1_400_000_000,
        ceiling_ns: 1_000_000_000,
        readiness_ns: 350_000,
        reads: 812,
        tail_model: true,
        left_out: vec!["kiosk-7".into()],
    })]
}

/// Probe records appended after `records-2026-12-06b`, frozen in
/// `records-2026-12-06c.probe.sklog`: apps that report their own actions.
fn probe_records_added_2026_12_06c() -> Vec<ProbeRecord> {
    let action = Action {
        conn: 1,
        key: MessageKey::Hash {
            hash: 0xfeed,
            occurrence: 2,
        },
        hash: 0xfeed,
        act_at_ns: 1_764_633_600_300_000_000,
        offset_ns: Some(-2_500),
        offset_bound_ns: Some(700),
        target: at(70),
        done: at(71),
        late_ns: 0,
    };
    vec![
        ProbeRecord::App(AppRun {
            module: "skewscope_clock.py 1".into(),
            runtime: "CPython 3.11.7".into(),
        }),
        ProbeRecord::Frame(ActionFrame {
            conn: 1,
            key: MessageKey::Seq(9),
            hash: 0xbeef,
            at: at(72),
        }),
        ProbeRecord::AppAction(AppAction {
            app: "kiosk-ui".into(),
            action,
        }),
        ProbeRecord::NoticeTotals(NoticeTotals {
            app: "kiosk-ui".into(),
            at: at(73),
            sent: 40,
            undelivered: 1,
            answered: 37,
            unanswered: 2,
            bad_answers: 3,
        }),
    ]
}

/// Agent records appended after `records-2026-12-02`, frozen in
/// `records-2026-12-06b.agent.sklog`.
fn agent_records_added_2026_12_06b() -> Vec<AgentRecord> {
    vec![
        AgentRecord::LeadChosen(LeadChosen {
            broadcast: 7,
            lead_ns: 42_000_000,
            auto: true,
            basis_copies: 4_096,
        }),
        AgentRecord::LeadChosen(LeadChosen {
            broadcast: 8,
            lead_ns: 30_000_000,
            auto: false,
            basis_copies: 0,
        }),
    ]
}

/// Probe records appended after `records-2026-12-06`, frozen in
/// `records-2026-12-06b.probe.sklog`.
fn probe_records_added_2026_12_06b() -> Vec<ProbeRecord> {
    vec![
        ProbeRecord::ClockTags(ClockTags {
            at: at(61),
            keyed: true,
            refused: 0,
        }),
        ProbeRecord::ClockTags(ClockTags {
            at: at(62),
            keyed: false,
            refused: 17,
        }),
    ]
}

/// Probe records appended after `records-2026-12-03`, frozen in
/// `records-2026-12-06.probe.sklog`.
fn probe_records_added_2026_12_06() -> Vec<ProbeRecord> {
    vec![ProbeRecord::LogsPruned(LogsPruned {
        at: at(60),
        runs: 3,
        bytes: 123_456,
        kept_runs: 16,
        kept_bytes: 9_876_543,
        max_runs: 20,
        max_bytes: 64 << 20,
    })]
}

/// Probe records appended after `records-2026-12-02b`, frozen in
/// `records-2026-12-03.probe.sklog`.
fn probe_records_added_2026_12_03() -> Vec<ProbeRecord> {
    vec![ProbeRecord::Page(PageProbe {
        user_agent: "Mozilla/5.0 (X11; Linux x86_64) Chrome/140.0.0.0".into(),
        clock_step_ns: 5_000,
        isolated: true,
    })]
}

/// Probe records appended after `records-2026-12-02`, frozen in
/// `records-2026-12-02b.probe.sklog`.
fn probe_records_added_2026_12_02b() -> Vec<ProbeRecord> {
    vec![
        ProbeRecord::Payload(MessagePayload {
            hash: 42,
            len: 14,
            excerpt: br#"{"type":"go"}"#.to_vec(),
        }),
        ProbeRecord::Payload(MessagePayload {
            hash: 43,
            len: 100_000,
            excerpt: vec![b'x'; PAYLOAD_EXCERPT_BYTES],
        }),
    ]
}

#[test]
fn every_record_variant_reads_as_it_was_written() {
    match read_file(&data("records-2026-12-02.agent.sklog")).unwrap() {
        AnyLog::Agent(d) => {
            assert_eq!(d.skipped_bytes, 0);
            assert!(!d.torn_tail);
            assert_eq!(d.records, every_agent_record());
        }
        AnyLog::Probe(_) => panic!("an agent log"),
    }
    match read_file(&data("records-2026-12-02.probe.sklog")).unwrap() {
        AnyLog::Probe(d) => {
            assert_eq!(d.skipped_bytes, 0);
            assert!(!d.torn_tail);
            assert_eq!(d.records, every_probe_record());
        }
        AnyLog::Agent(_) => panic!("a probe log"),
    }
    match read_file(&data("records-2026-12-02b.probe.sklog")).unwrap() {
        AnyLog::Probe(d) => {
            assert_eq!((d.skipped_bytes, d.torn_tail), (0, false));
            assert_eq!(d.records, probe_records_added_2026_12_02b());
        }
        AnyLog::Agent(_) => panic!("a probe log"),
    }
    for (file, records) in [
        (
            "records-2026-12-06b.agent.sklog",
            agent_records_added_2026_12_06b(),
        ),
        (
            "records-2026-12-06c.agent.sklog",
            agent_records_added_2026_12_06c(),
        ),
    ] {
        match read_file(&data(file)).unwrap() {
            AnyLog::Agent(d) => {
                assert_eq!((d.skipped_bytes, d.torn_tail), (0, false), "{file}");
                assert_eq!(d.records, records, "{file}");
            }
            AnyLog::Probe(_) => panic!("{file}: an agent log"),
        }
    }
    for (file, records) in [
        (
            "records-2026-12-03.probe.sklog",
            probe_records_added_2026_12_03(),
        ),
        (
            "records-2026-12-06.probe.sklog",
            probe_records_added_2026_12_06(),
        ),
        (
            "records-2026-12-06b.probe.sklog",
            probe_records_added_2026_12_06b(),
        ),
        (
            "records-2026-12-06c.probe.sklog",
            probe_records_added_2026_12_06c(),
        ),
    ] {
        match read_file(&data(file)).unwrap() {
            AnyLog::Probe(d) => {
                assert_eq!((d.skipped_bytes, d.torn_tail), (0, false), "{file}");
                assert_eq!(d.records, records, "{file}");
            }
            AnyLog::Agent(_) => panic!("{file}: a probe log"),
        }
    }
}

#[test]
fn logs_of_the_previous_release_read_and_join_in_this_one() {
    let AnyLog::Agent(agent) = read_file(&data("c41f7be/agent.sklog")).unwrap() else {
        panic!("an agent log");
    };
    let AnyLog::Probe(probe) = read_file(&data("c41f7be/probe.sklog")).unwrap() else {
        panic!("a probe log");
    };
    assert_eq!((agent.skipped_bytes, probe.skipped_bytes), (0, 0));
    let joined = skewscope_core::analysis::join::join(Some(&agent.records), &[&probe.records]);
    let report = skewscope_core::analysis::report::Report::build(&joined, vec![]);
    // Three test broadcasts to the probe's two connections, none missing.
    assert_eq!(report.broadcasts, 3);
    assert_eq!(report.receipts, 6);
    assert_eq!(report.missing, 0);
    assert!(report.fanout_ns.is_some());
    // Written before actions existed: none, and none looked for.
    assert!(report.actions.is_none());
}

/// Writes a frozen probe log of `records`.
fn write_probe_log(file: &str, records: Vec<ProbeRecord>) {
    let mut probe = LogWriter::new(Vec::new(), LogKind::Probe).unwrap();
    let probe_path = data(file);
    for r in records {
        probe.append(&r).unwrap();
    }
    std::fs::write(&probe_path, probe.into_inner()).unwrap();
}

#[test]
#[ignore = "writes a frozen file; run once, by hand, when variants are appended"]
fn write_the_frozen_logs_of_2026_12_02b() {
    write_probe_log(
        "records-2026-12-02b.probe.sklog",
        probe_records_added_2026_12_02b(),
    );
}

#[test]
#[ignore = "writes a frozen file; run once, by hand, when variants are appended"]
fn write_the_frozen_logs_of_2026_12_03() {
    write_probe_log(
        "records-2026-12-03.probe.sklog",
        probe_records_added_2026_12_03(),
    );
}

#[test]
#[ignore = "writes a frozen file; run once, by hand, when variants are appended"]
fn write_the_frozen_logs_of_2026_12_06() {
    write_probe_log(
        "records-2026-12-06.probe.sklog",
        probe_records_added_2026_12_06(),
    );
}

#[test]
#[ignore = "writes a frozen file; run once, by hand, when variants are appended"]
fn write_the_frozen_logs_of_2026_12_06b() {
    write_probe_log(
        "records-2026-12-06b.probe.sklog",
        probe_records_added_2026_12_06b(),
    );
    let mut agent = LogWriter::new(Vec::new(), LogKind::Agent).unwrap();
    for r in agent_records_added_2026_12_06b() {
        agent.append(&r).unwrap();
    }
    std::fs::write(data("records-2026-12-06b.agent.sklog"), agent.into_inner()).unwrap();
}

#[test]
#[ignore = "writes a frozen file; run once, by hand, when variants are appended"]
fn write_the_frozen_logs_of_2026_12_06c() {
    write_probe_log(
        "records-2026-12-06c.probe.sklog",
        probe_records_added_2026_12_06c(),
    );
    let mut agent = LogWriter::new(Vec::new(), LogKind::Agent).unwrap();
    for r in agent_records_added_2026_12_06c() {
        agent.append(&r).unwrap();
    }
    std::fs::write(data("records-2026-12-06c.agent.sklog"), agent.into_inner()).unwrap();
}

#[test]
#[ignore = "writes the frozen files; run once, by hand, for a new format"]
fn write_the_frozen_logs() {
    let mut agent = LogWriter::new(Vec::new(), LogKind::Agent).unwrap();
    let agent_path = data("records-2026-12-02.agent.sklog");
    for r in every_agent_record() {
        agent.append(&r).unwrap();
    }
    std::fs::write(&agent_path, agent.into_inner()).unwrap();
    let mut probe = LogWriter::new(Vec::new(), LogKind::Probe).unwrap();
    let probe_path = data("records-2026-12-02.probe.sklog");
    for r in every_probe_record() {
        probe.append(&r).unwrap();
    }
    std::fs::write(&probe_path, probe.into_inner()).unwrap();
}
