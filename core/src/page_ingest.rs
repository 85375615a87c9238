//! The JSON dialect of `/ingest`, spoken by the browser probe (the page the
//! agent serves at `/probe`), as bytes and rules, without I/O.
//!
//! A page cannot write the record log's binary frames, nor hash a payload
//! the way the native probe does (XXH3), so it sends *events* in JSON text
//! messages and the agent turns each into exactly one [`ProbeRecord`]:
//! event `first_seq + i` of a batch is the run's record `first_seq + i`,
//! so the exactly-once rules of [`crate::ingest`] hold unchanged (the
//! agent checks and stores the converted frames with the same code). Keys
//! and hashes are computed here from the payload the page sends, so a
//! page's receipt names a broadcast exactly as a native probe's does.
//!
//! ```text
//! page:  {"hello": {"version": 1, "run_id": "<32 hex digits>"}}
//! page:  {"events": {"first_seq": 0, "events": [{"kind": "started", ...}, ...]}}
//! agent: {"ack": {"next_seq": 2}}   or   {"busy": {"next_seq": 2, "reason": "..."}}
//! ```
//!
//! Times are the page's clock (`performance.timeOrigin + performance.now()`)
//! in milliseconds, as JavaScript numbers: a stamp's wall and monotonic
//! readings are both that clock, which does not step while a page is open.

use serde::Deserialize;

use crate::Stamp;
use crate::convert;
use crate::identity::{parse_test_message, payload_hash};
use crate::ingest::{INGEST_VERSION, IngestError, ToAgent, ToProbe};
use crate::log::encode_record;
use crate::record::{
    ActPlan, Action, ActionFrame, AppRun, ClockTags, MessageKey, MessagePayload,
    PAYLOAD_EXCERPT_BYTES, PageProbe, ProbeConnectionClosed, ProbeConnectionFailed,
    ProbeConnectionOpened, ProbeRecord, ProbeStarted, Receipt, RunIdentity, TimeSample,
};

/// How a page names its connections to the agent's own hub, as the
/// `?probe=` label of `/ws`: `page.RUNID.CONN`. A browser cannot read the
/// hub's `X-Skewscope-Conn` answer, so the join finds the hub's
/// connection by this label instead (the n-th opening of the label is the
/// page connection's n-th opening).
pub const PAGE_LABEL_PREFIX: &str = "page.";

/// The hub label of connection `conn` of page run `run_id`.
pub fn page_label(run_id: u128, conn: u32) -> String {
    format!("{PAGE_LABEL_PREFIX}{run_id:032x}.{conn}")
}

/// How an app that reports its own actions (the clock module given a
/// name) names its connections to the agent's hub: `app.RUNID.CONN`, as a
/// page does, for the same reason.
pub const APP_LABEL_PREFIX: &str = "app.";

/// The run and connection a hub label names, if it is a page's or an
/// app's (`page.RUNID.CONN`, `app.RUNID.CONN`).
pub fn parse_page_label(label: &str) -> Option<(u128, u32)> {
    let rest = label
        .strip_prefix(PAGE_LABEL_PREFIX)
        .or_else(|| label.strip_prefix(APP_LABEL_PREFIX))?;
    let (run, conn) = rest.split_once('.')?;
    if conn.is_empty() || !conn.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((run_id_of(run).ok()?, conn.parse().ok()?))
}

/// What a page names its host in `Started` (it has none to tell); an app
/// may name its own.
pub const PAGE_HOST: &str = "browser";

/// Longest free-text field a page may send (names, URLs, reasons).
pub const MAX_TEXT: usize = 1024;

/// A page's message.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum PageToAgent {
    Hello {
        version: u16,
        run_id: String,
        /// The run's owner secret (32 hex digits), when the page keeps one.
        #[serde(default)]
        secret: Option<String>,
    },
    Events {
        first_seq: u64,
        events: Vec<PageEvent>,
    },
}

/// A message's payload as a page received it: text, or binary as hex.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PageMessage {
    text: Option<String>,
    hex: Option<String>,
    /// Earlier receipts of the same payload on this connection.
    #[serde(default)]
    occurrence: u32,
}

/// One event; each becomes one record.
#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
enum PageEvent {
    Started {
        name: String,
        /// The host an app runs on (a page has none to tell).
        #[serde(default)]
        host: Option<String>,
        url: String,
        connections: u32,
        version: String,
        at_ms: f64,
    },
    Identity {
        run_id: String,
        clock_id: String,
    },
    Page {
        user_agent: String,
        clock_step_ms: f64,
        isolated: bool,
    },
    ActPlan {
        pointer: String,
        unit: String,
        at_ms: f64,
    },
    Opened {
        conn: u32,
        at_ms: f64,
    },
    Failed {
        conn: u32,
        at_ms: f64,
        error: String,
    },
    Closed {
        conn: u32,
        at_ms: f64,
        reason: String,
    },
    Receipt {
        conn: u32,
        message: PageMessage,
        at_ms: f64,
    },
    Payload {
        message: PageMessage,
    },
    Exchange {
        t1_ms: f64,
        t2_ms: f64,
        t3_ms: f64,
        t4_ms: f64,
    },
    Action {
        conn: u32,
        message: PageMessage,
        act_at_ms: f64,
        offset_ms: Option<f64>,
        bound_ms: Option<f64>,
        target_ms: f64,
        done_ms: f64,
        late_ms: f64,
    },
    Stopped {
        at_ms: f64,
    },
    ClockTags {
        keyed: bool,
        refused: u64,
        at_ms: f64,
    },
    App {
        module: String,
        runtime: String,
    },
    Frame {
        conn: u32,
        message: PageMessage,
        frame_ms: f64,
    },
}

/// Decodes a page's text message into the binary protocol's message: a
/// batch of events becomes the log frames of their records.
pub fn decode(text: &str) -> Result<ToAgent, IngestError> {
    let message: PageToAgent = serde_json::from_str(text).map_err(|_| IngestError::Malformed)?;
    match message {
        PageToAgent::Hello {
            version,
            run_id,
            secret,
        } => {
            if version != INGEST_VERSION {
                return Err(IngestError::Version(version));
            }
            let run_id = run_id_of(&run_id)?;
            Ok(match secret {
                Some(secret) => ToAgent::HelloOwned {
                    version,
                    run_id,
                    secret: run_id_of(&secret)?,
                },
                None => ToAgent::Hello { version, run_id },
            })
        }
        PageToAgent::Events { first_seq, events } => {
            let mut frames = Vec::new();
            for event in events {
                encode_record(&record_of(event)?, &mut frames);
            }
            Ok(ToAgent::Records { first_seq, frames })
        }
    }
}

/// The agent's answer, as the page reads it.
pub fn encode_reply(reply: &ToProbe) -> String {
    match reply {
        ToProbe::Ack { next_seq } => serde_json::json!({ "ack": { "next_seq": next_seq } }),
        ToProbe::Busy { next_seq, reason } => {
            serde_json::json!({ "busy": { "next_seq": next_seq, "reason": reason } })
        }
    }
    .to_string()
}

fn record_of(event: PageEvent) -> Result<ProbeRecord, IngestError> {
    Ok(match event {
        PageEvent::Started {
            name,
            host,
            url,
            connections,
            version,
            at_ms,
        } => ProbeRecord::Started(Box::new(ProbeStarted {
            name: text(name)?,
            host: match host {
                Some(host) => text(host)?,
                None => PAGE_HOST.to_owned(),
            },
            url: text(url)?,
            connections,
            version: text(version)?,
            at: stamp(at_ms)?,
        })),
        PageEvent::Identity { run_id, clock_id } => ProbeRecord::Identity(RunIdentity {
            run_id: run_id_of(&run_id)?,
            boot_id: Some(text(clock_id)?),
        }),
        PageEvent::ClockTags {
            keyed,
            refused,
            at_ms,
        } => ProbeRecord::ClockTags(ClockTags {
            at: stamp(at_ms)?,
            keyed,
            refused,
        }),
        PageEvent::Page {
            user_agent,
            clock_step_ms,
            isolated,
        } => ProbeRecord::Page(PageProbe {
            user_agent: text(user_agent)?,
            clock_step_ns: ns(clock_step_ms)?,
            isolated,
        }),
        PageEvent::ActPlan {
            pointer,
            unit,
            at_ms,
        } => ProbeRecord::ActPlan(ActPlan {
            pointer: text(pointer)?,
            unit: text(unit)?,
            at: stamp(at_ms)?,
        }),
        PageEvent::Opened { conn, at_ms } => ProbeRecord::ConnectionOpened(ProbeConnectionOpened {
            conn,
            agent_conn: None,
            at: stamp(at_ms)?,
        }),
        PageEvent::Failed { conn, at_ms, error } => {
            ProbeRecord::ConnectionFailed(ProbeConnectionFailed {
                conn,
                at: stamp(at_ms)?,
                error: text(error)?,
            })
        }
        PageEvent::Closed {
            conn,
            at_ms,
            reason,
        } => ProbeRecord::ConnectionClosed(ProbeConnectionClosed {
            conn,
            at: stamp(at_ms)?,
            reason: text(reason)?,
        }),
        PageEvent::Receipt {
            conn,
            message,
            at_ms,
        } => {
            let payload = payload_of(&message)?;
            let (key, hash) = key_of(&payload, message.occurrence);
            ProbeRecord::Receipt(Receipt {
                conn,
                key,
                hash,
                len: u32::try_from(payload.len()).map_err(|_| IngestError::Malformed)?,
                at: stamp(at_ms)?,
                kernel_delay_ns: None,
            })
        }
        PageEvent::Payload { message } => {
            let payload = payload_of(&message)?;
            ProbeRecord::Payload(MessagePayload {
                hash: payload_hash(&payload),
                len: u32::try_from(payload.len()).map_err(|_| IngestError::Malformed)?,
                excerpt: payload[..payload.len().min(PAYLOAD_EXCERPT_BYTES)].to_vec(),
            })
        }
        PageEvent::Exchange {
            t1_ms,
            t2_ms,
            t3_ms,
            t4_ms,
        } => ProbeRecord::TimeSample(TimeSample {
            t1: stamp(t1_ms)?,
            t2_wall_ns: ns(t2_ms)?,
            t3_wall_ns: ns(t3_ms)?,
            t4: stamp(t4_ms)?,
        }),
        PageEvent::Action {
            conn,
            message,
            act_at_ms,
            offset_ms,
            bound_ms,
            target_ms,
            done_ms,
            late_ms,
        } => {
            let payload = payload_of(&message)?;
            let (key, hash) = key_of(&payload, message.occurrence);
            ProbeRecord::Action(Action {
                conn,
                key,
                hash,
                act_at_ns: ns(act_at_ms)?,
                offset_ns: offset_ms.map(signed_ns).transpose()?,
                offset_bound_ns: bound_ms.map(ns).transpose()?,
                target: stamp(target_ms)?,
                done: stamp(done_ms)?,
                late_ns: ns(late_ms)?,
            })
        }
        PageEvent::Stopped { at_ms } => ProbeRecord::Stopped(stamp(at_ms)?),
        PageEvent::App { module, runtime } => ProbeRecord::App(AppRun {
            module: text(module)?,
            runtime: text(runtime)?,
        }),
        PageEvent::Frame {
            conn,
            message,
            frame_ms,
        } => {
            let payload = payload_of(&message)?;
            let (key, hash) = key_of(&payload, message.occurrence);
            ProbeRecord::Frame(ActionFrame {
                conn,
                key,
                hash,
                at: stamp(frame_ms)?,
            })
        }
    })
}

/// A message is keyed as the native probe keys it: a skewscope test
/// message by its sequence, anything else by its hash and occurrence.
fn key_of(payload: &[u8], occurrence: u32) -> (MessageKey, u64) {
    let hash = payload_hash(payload);
    match parse_test_message(payload) {
        Some(test) => (MessageKey::Seq(test.seq), hash),
        None => (MessageKey::Hash { hash, occurrence }, hash),
    }
}

fn payload_of(message: &PageMessage) -> Result<Vec<u8>, IngestError> {
    match (&message.text, &message.hex) {
        (Some(t), None) => Ok(t.as_bytes().to_vec()),
        (None, Some(h)) => hex_bytes(h),
        _ => Err(IngestError::Malformed),
    }
}

fn hex_bytes(hex: &str) -> Result<Vec<u8>, IngestError> {
    if !hex.len().is_multiple_of(2) {
        return Err(IngestError::Malformed);
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                .ok_or(IngestError::Malformed)
        })
        .collect()
}

fn run_id_of(hex: &str) -> Result<u128, IngestError> {
    if hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(IngestError::Malformed);
    }
    u128::from_str_radix(hex, 16).map_err(|_| IngestError::Malformed)
}

fn text(s: String) -> Result<String, IngestError> {
    if s.len() > MAX_TEXT {
        return Err(IngestError::Malformed);
    }
    Ok(s)
}

/// Milliseconds (a JavaScript number) as whole nanoseconds. At today's
/// epoch times an f64 of ms is exact to about a quarter of a microsecond;
/// whole ms and the fraction are converted apart, so the product's own
/// rounding (256 ns at 1.7e18) adds nothing to that.
fn ns(ms: f64) -> Result<u64, IngestError> {
    if !ms.is_finite() || ms < 0.0 || ms >= (u64::MAX / 1_000_000) as f64 {
        return Err(IngestError::Malformed);
    }
    let whole = ms.floor();
    let fraction = convert::from_float(((ms - whole) * 1e6).round());
    Ok(convert::from_float(whole) * 1_000_000 + fraction)
}

fn signed_ns(ms: f64) -> Result<i64, IngestError> {
    let magnitude = i64::try_from(ns(ms.abs())?).map_err(|_| IngestError::Malformed)?;
    Ok(if ms < 0.0 { -magnitude } else { magnitude })
}

/// One reading of the page's clock, as both of a stamp's clocks.
fn stamp(ms: f64) -> Result<Stamp, IngestError> {
    let at = ns(ms)?;
    Ok(Stamp {
        wall_ns: at,
        mono_ns: at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::accept_batch;

    const RUN: &str = "000000000000000000000000000feed1";

    fn events(first_seq: u64, events: &str) -> String {
        format!(r#"{{"events": {{"first_seq": {first_seq}, "events": [{events}]}}}}"#)
    }

    const HEAD: &str = r#"{"kind": "started", "name": "lobby-tv", "url": "ws://h:1/ws", "connections": 1, "version": "page 1", "at_ms": 1700000000000.5},
        {"kind": "identity", "run_id": "000000000000000000000000000feed1", "clock_id": "page-abc"},
        {"kind": "page", "user_agent": "Chromium", "clock_step_ms": 0.005, "isolated": true}"#;

    #[test]
    fn hello_names_the_run() {
        let hello = format!(r#"{{"hello": {{"version": 1, "run_id": "{RUN}"}}}}"#);
        assert_eq!(
            decode(&hello),
            Ok(ToAgent::Hello {
                version: 1,
                run_id: 0xfeed1
            })
        );
        let other = format!(r#"{{"hello": {{"version": 9, "run_id": "{RUN}"}}}}"#);
        assert_eq!(decode(&other), Err(IngestError::Version(9)));
        let short = r#"{"hello": {"version": 1, "run_id": "feed"}}"#;
        assert_eq!(decode(short), Err(IngestError::Malformed));
    }

    #[test]
    fn a_batch_becomes_one_record_per_event_and_passes_the_binary_rules() {
        let test_message = crate::identity::encode_test_message(crate::identity::TestMessage {
            seq: 7,
            sent_wall_ns: 1_700_000_000_000_000_000,
            at_wall_ns: Some(1_700_000_000_100_000_000),
        });
        let test_message = serde_json::to_string(&test_message).unwrap();
        let batch = events(
            0,
            &format!(
                r#"{HEAD},
                {{"kind": "opened", "conn": 0, "at_ms": 1700000000001}},
                {{"kind": "receipt", "conn": 0, "message": {{"text": {test_message}}}, "at_ms": 1700000000002.25}},
                {{"kind": "receipt", "conn": 0, "message": {{"hex": "00ff", "occurrence": 1}}, "at_ms": 1700000000003}},
                {{"kind": "exchange", "t1_ms": 1.0, "t2_ms": 2.5, "t3_ms": 2.75, "t4_ms": 4.0}},
                {{"kind": "clock_tags", "keyed": false, "refused": 2, "at_ms": 1700000000004}}"#
            ),
        );
        let Ok(ToAgent::Records { first_seq, frames }) = decode(&batch) else {
            panic!("{:?}", decode(&batch));
        };
        let accepted = accept_batch(0xfeed1, 0, first_seq, &frames).unwrap();
        assert_eq!(accepted.new_records, 8);
        let r = &accepted.records;
        assert!(
            matches!(&r[1], ProbeRecord::Identity(i) if i.boot_id.as_deref() == Some("page-abc"))
        );
        assert!(matches!(&r[2], ProbeRecord::Page(p) if p.clock_step_ns == 5_000 && p.isolated));
        let ProbeRecord::Receipt(seq) = r[4] else {
            panic!()
        };
        // Keyed as the native probe keys a test message, and stamped on
        // the page's clock to the nanosecond it gave.
        assert_eq!(seq.key, MessageKey::Seq(7));
        assert_eq!(seq.at.wall_ns, 1_700_000_000_002_250_000);
        assert_eq!(seq.at.mono_ns, seq.at.wall_ns);
        assert_eq!(seq.kernel_delay_ns, None);
        let ProbeRecord::Receipt(bin) = r[5] else {
            panic!()
        };
        assert_eq!(
            bin.key,
            MessageKey::Hash {
                hash: payload_hash(&[0, 255]),
                occurrence: 1
            }
        );
        assert_eq!(bin.len, 2);
        let ProbeRecord::TimeSample(t) = r[6] else {
            panic!()
        };
        assert_eq!((t.t2_wall_ns, t.t3_wall_ns), (2_500_000, 2_750_000));
        assert!(matches!(r[7], ProbeRecord::ClockTags(t) if !t.keyed && t.refused == 2));
    }

    #[test]
    fn a_run_must_start_with_its_own_started_and_identity() {
        let wrong = events(
            0,
            r#"{"kind": "opened", "conn": 0, "at_ms": 1}, {"kind": "stopped", "at_ms": 2}"#,
        );
        let Ok(ToAgent::Records { first_seq, frames }) = decode(&wrong) else {
            panic!()
        };
        assert_eq!(
            accept_batch(0xfeed1, 0, first_seq, &frames).unwrap_err(),
            IngestError::WrongRun(0xfeed1)
        );
    }

    #[test]
    fn bad_events_refuse_the_whole_batch() {
        for bad in [
            r#"{"kind": "stopped", "at_ms": -1}"#,
            r#"{"kind": "stopped", "at_ms": 1e300}"#,
            r#"{"kind": "receipt", "conn": 0, "message": {"hex": "0"}, "at_ms": 1}"#,
            r#"{"kind": "receipt", "conn": 0, "message": {"hex": "zz"}, "at_ms": 1}"#,
            r#"{"kind": "receipt", "conn": 0, "message": {"text": "a", "hex": "00"}, "at_ms": 1}"#,
            r#"{"kind": "receipt", "conn": 0, "message": {}, "at_ms": 1}"#,
            r#"{"kind": "stopped", "at_ms": 1, "extra": 2}"#,
            r#"{"kind": "unknown"}"#,
        ] {
            assert_eq!(
                decode(&events(5, bad)).unwrap_err(),
                IngestError::Malformed,
                "{bad}"
            );
        }
        let long = format!(
            r#"{{"kind": "closed", "conn": 0, "at_ms": 1, "reason": "{}"}}"#,
            "x".repeat(MAX_TEXT + 1)
        );
        assert_eq!(
            decode(&events(5, &long)).unwrap_err(),
            IngestError::Malformed
        );
        assert_eq!(decode("not json").unwrap_err(), IngestError::Malformed);
    }

    #[test]
    fn an_app_run_says_so_and_its_frames_name_their_action() {
        let batch = events(
            0,
            &format!(
                r#"{{"kind": "started", "name": "kiosk-1", "host": "kiosk-host", "url": "ws://h:1/clock", "connections": 0, "version": "skewscope_clock.py 1", "at_ms": 1700000000000}},
                {{"kind": "identity", "run_id": "{RUN}", "clock_id": "app-abc"}},
                {{"kind": "app", "module": "skewscope_clock.py 1", "runtime": "CPython 3.11.7"}},
                {{"kind": "frame", "conn": 2, "message": {{"text": "{{\"at\": 1}}", "occurrence": 3}}, "frame_ms": 1700000000016.5}}"#
            ),
        );
        let Ok(ToAgent::Records { first_seq, frames }) = decode(&batch) else {
            panic!("{:?}", decode(&batch));
        };
        let accepted = accept_batch(0xfeed1, 0, first_seq, &frames).unwrap();
        let r = &accepted.records;
        assert!(matches!(&r[0], ProbeRecord::Started(s) if s.host == "kiosk-host"));
        assert!(
            matches!(&r[2], ProbeRecord::App(a) if a.module == "skewscope_clock.py 1" && a.runtime == "CPython 3.11.7")
        );
        let ProbeRecord::Frame(f) = r[3] else {
            panic!("{:?}", r[3])
        };
        assert_eq!(f.conn, 2);
        assert_eq!(
            f.key,
            MessageKey::Hash {
                hash: payload_hash(br#"{"at": 1}"#),
                occurrence: 3
            }
        );
        assert_eq!(f.at.wall_ns, 1_700_000_000_016_500_000);
        let long = format!(
            r#"{{"kind": "app", "module": "{}", "runtime": "x"}}"#,
            "m".repeat(MAX_TEXT + 1)
        );
        assert_eq!(
            decode(&events(3, &long)).unwrap_err(),
            IngestError::Malformed
        );
    }

    #[test]
    fn a_hello_may_carry_the_runs_secret_in_hex() {
        let with = format!(
            r#"{{"hello": {{"version": 1, "run_id": "{RUN}", "secret": "0123456789abcdef0123456789ABCDEF"}}}}"#
        );
        assert_eq!(
            decode(&with),
            Ok(ToAgent::HelloOwned {
                version: 1,
                run_id: 0xfeed1,
                secret: 0x0123456789abcdef0123456789abcdef
            })
        );
        for bad in [
            "",
            "0123",
            "0123456789abcdef0123456789abcdeg",
            "+123456789abcdef0123456789abcdef",
        ] {
            let hello =
                format!(r#"{{"hello": {{"version": 1, "run_id": "{RUN}", "secret": "{bad}"}}}}"#);
            assert_eq!(decode(&hello), Err(IngestError::Malformed), "{bad}");
        }
    }

    #[test]
    fn page_labels_name_a_run_and_a_connection() {
        let label = page_label(0xfeed1, 3);
        assert_eq!(label, "page.000000000000000000000000000feed1.3");
        assert_eq!(parse_page_label(&label), Some((0xfeed1, 3)));
        // Within the 64 printable bytes the hub keeps of a label.
        assert!(page_label(u128::MAX, u32::MAX).len() <= 64);
        assert_eq!(
            parse_page_label("app.000000000000000000000000000feed1.7"),
            Some((0xfeed1, 7))
        );
        for other in [
            "lobby",
            "page.feed.1",
            "page.000000000000000000000000000feed1.+1",
            "app.000000000000000000000000000feed1.",
            "apps.000000000000000000000000000feed1.1",
            "page.000000000000000000000000000feed1",
            "page.000000000000000000000000000feed1.x",
        ] {
            assert_eq!(parse_page_label(other), None, "{other}");
        }
    }

    #[test]
    fn replies_are_json_the_page_reads() {
        assert_eq!(
            encode_reply(&ToProbe::Ack { next_seq: 3 }),
            r#"{"ack":{"next_seq":3}}"#
        );
        let busy = encode_reply(&ToProbe::Busy {
            next_seq: 3,
            reason: "disk full".into(),
        });
        assert_eq!(busy, r#"{"busy":{"next_seq":3,"reason":"disk full"}}"#);
    }
}
