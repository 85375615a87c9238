//! What the probe tells the app beside it at each action's moment
//! (`--act-notify`): one JSON datagram per action, so an app written in
//! anything that can read a socket (C++, Qt, Unity, Python) acts when the
//! probe's precise timer fires, without a clock model of its own.
//!
//! The datagram is a flat JSON object, easy to read without a JSON library
//! in a hurry: the message (its payload's `hash`; `seq` for the agent's
//! test message, `occurrence` for any other payload), the time to act in the server's clock,
//! the moment aimed at and the moment the timer fired on both of the
//! device's clocks (`*_mono_ns` is `CLOCK_MONOTONIC`, which the app shares:
//! its own reading on receipt minus `done_mono_ns` is what the datagram
//! cost it), and whether the message came too late to act at its time.
//!
//! The probe's own clock is `CLOCK_MONOTONIC_RAW`, which no time daemon
//! slews; apps read `CLOCK_MONOTONIC`, which every language offers. So the
//! book is handed the difference of the two when it writes a notice and
//! when it reads an answer (`app_minus_probe_ns`), and converts: the
//! datagrams are on the app's clock, the records on the probe's.
//!
//! The app answers each notice with one datagram saying when it acted,
//! on the same monotonic clock ([`ActAnswer`]): that is the app's own
//! action, which the probe records beside its own ([`NoticeBook`]), so an
//! audit judges what the app did, not only when the probe told it. A
//! notice never answered is counted, never taken for an action.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::Stamp;
use crate::convert;
use crate::record::{Action, AppAction, MessageKey, NoticeTotals};

/// One action, as the datagram carries it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActNotice {
    /// The notice's number within the run, from 0: what the app's answer
    /// names.
    pub notice: u64,
    /// The probe's connection that received the message (a probe with
    /// several connections sends one datagram for each).
    pub conn: u32,
    /// The agent's test message's sequence number; `null` for any other payload.
    pub seq: Option<u64>,
    /// The payload's 64-bit hash ([`crate::identity::payload_hash`]), 16 hex
    /// digits (a JSON number would lose bits in JavaScript and many JSON
    /// readers): what names any payload.
    pub hash: String,
    /// How many times this connection had seen that payload before (0 the
    /// first time); `null` for a test message.
    pub occurrence: Option<u32>,
    /// The time to act the message named: the server's wall clock, ns.
    pub act_at_ns: u64,
    /// The moment aimed at, on this device's wall clock (ns since the epoch).
    pub target_wall_ns: u64,
    /// The moment aimed at, on this device's `CLOCK_MONOTONIC`.
    pub target_mono_ns: u64,
    /// The moment the timer fired, on this device's wall clock.
    pub done_wall_ns: u64,
    /// The moment the timer fired, on `CLOCK_MONOTONIC`.
    pub done_mono_ns: u64,
    /// Whether the message came after its time to act (then the probe
    /// acted at once, and says so rather than pretending it was on time).
    pub late: bool,
    /// How long after the target the message came; 0 when on time.
    pub late_ns: u64,
    /// The offset the probe mapped the time with (the server's clock minus
    /// this one's); `null` before any time exchange was answered.
    pub offset_ns: Option<i64>,
    /// That offset's error bound: the action is within it (plus the timer's
    /// error) of the server's time to act.
    pub offset_bound_ns: Option<u64>,
}

impl ActNotice {
    /// Notice number `notice` of an action the probe recorded, its
    /// monotonic moments moved onto the app's clock (`app_minus_probe_ns`:
    /// the app's clock minus the probe's, now).
    pub fn of(notice: u64, action: &Action, app_minus_probe_ns: i64) -> ActNotice {
        let on_app =
            |probe_ns: u64| convert::narrow_unsigned(probe_ns as i128 + app_minus_probe_ns as i128);
        let (seq, occurrence) = match action.key {
            MessageKey::Seq(seq) => (Some(seq), None),
            MessageKey::Hash { occurrence, .. } => (None, Some(occurrence)),
        };
        ActNotice {
            notice,
            conn: action.conn,
            seq,
            hash: format!("{:016x}", action.hash),
            occurrence,
            act_at_ns: action.act_at_ns,
            target_wall_ns: action.target.wall_ns,
            target_mono_ns: on_app(action.target.mono_ns),
            done_wall_ns: action.done.wall_ns,
            done_mono_ns: on_app(action.done.mono_ns),
            late: action.late_ns > 0,
            late_ns: action.late_ns,
            offset_ns: action.offset_ns,
            offset_bound_ns: action.offset_bound_ns,
        }
    }

    /// The datagram's bytes: one JSON object, no trailing newline.
    pub fn to_datagram(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a struct of numbers and strings always encodes")
    }
}

/// Longest answer datagram read: one small JSON object.
pub const MAX_ANSWER_BYTES: usize = 512;
/// Notices awaiting an answer at most; past it the oldest is counted
/// never answered.
pub const MAX_PENDING: usize = 4_096;
/// How long after its notice an answer may come: an app that took longer
/// did not act when told, and a later answer is refused.
pub const ANSWER_WAIT_NS: u64 = 10_000_000_000;

/// What an app says back: it acted on notice `notice` at `acted_mono_ns`
/// (`CLOCK_MONOTONIC`, read right when its action ran).
///
/// ```json
/// {"notice": 17, "acted_mono_ns": 81234567891234}
/// ```
/// Other keys are allowed and ignored, so an app may echo more.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub struct ActAnswer {
    /// The notice answered.
    pub notice: u64,
    /// When the app acted, on the device's monotonic clock.
    pub acted_mono_ns: u64,
}

impl ActAnswer {
    /// Reads one answer datagram; `None` for anything else.
    pub fn parse(bytes: &[u8]) -> Option<ActAnswer> {
        if bytes.len() > MAX_ANSWER_BYTES {
            return None;
        }
        serde_json::from_slice(bytes).ok()
    }

    /// The answer's datagram, as an app writes it.
    pub fn to_datagram(&self) -> Vec<u8> {
        format!(
            r#"{{"notice":{},"acted_mono_ns":{}}}"#,
            self.notice, self.acted_mono_ns
        )
        .into_bytes()
    }
}

/// Why an answer was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BadAnswer {
    /// Not an answer datagram.
    #[error("not an answer (want {{\"notice\": N, \"acted_mono_ns\": T}})")]
    Malformed,
    /// It names no notice awaiting an answer: never sent, answered already,
    /// or answered after [`ANSWER_WAIT_NS`] (then counted never answered).
    #[error("names no notice awaiting an answer")]
    UnknownNotice,
    /// The app says it acted before the probe told it, or after the answer
    /// arrived: not this device's monotonic clock.
    #[error(
        "its time is not on this device's monotonic clock (before the notice, or after the answer)"
    )]
    NotThisClock,
}

/// A notice sent and not yet answered.
#[derive(Clone, Copy, Debug)]
struct Sent {
    action: Action,
    sent_mono_ns: u64,
    /// The app's clock minus the probe's when the notice was written.
    app_minus_probe_ns: i64,
}

/// The notices sent to one app and their answers, without I/O: the probe
/// hands it each notice it sends and each datagram the app sends back,
/// with the time, and records the app actions it returns.
#[derive(Debug)]
pub struct NoticeBook {
    app: String,
    next: u64,
    pending: BTreeMap<u64, Sent>,
    totals: NoticeTotals,
}

impl NoticeBook {
    /// No notice yet, for the app named `app`.
    pub fn new(app: &str) -> NoticeBook {
        NoticeBook {
            app: app.to_owned(),
            next: 0,
            pending: BTreeMap::new(),
            totals: NoticeTotals {
                app: app.to_owned(),
                at: Stamp::default(),
                sent: 0,
                undelivered: 0,
                answered: 0,
                unanswered: 0,
                bad_answers: 0,
            },
        }
    }

    /// The notice for `action`, numbered and awaiting its answer from
    /// `now_mono_ns` (the probe's clock) on, its moments on the app's clock
    /// (`app_minus_probe_ns`: the app's clock minus the probe's, now); send
    /// it, and say [`NoticeBook::not_delivered`] if the socket refused it.
    /// (Awaited before it is sent: an app can answer before the sender
    /// looks up again.)
    pub fn notice(
        &mut self,
        action: &Action,
        now_mono_ns: u64,
        app_minus_probe_ns: i64,
    ) -> ActNotice {
        let notice = ActNotice::of(self.next, action, app_minus_probe_ns);
        self.next += 1;
        self.totals.sent += 1;
        self.pending.insert(
            notice.notice,
            Sent {
                action: *action,
                sent_mono_ns: now_mono_ns,
                app_minus_probe_ns,
            },
        );
        while self.pending.len() > MAX_PENDING {
            self.pending.pop_first();
            self.totals.unanswered += 1;
        }
        notice
    }

    /// The socket refused notice `notice`: counted not delivered, and no
    /// answer is awaited.
    pub fn not_delivered(&mut self, notice: u64) {
        if self.pending.remove(&notice).is_some() {
            self.totals.sent -= 1;
            self.totals.undelivered += 1;
        }
    }

    /// An answer datagram that came at `now` (the probe's clocks; the
    /// app's clock is `app_minus_probe_ns` ahead of the probe's): the
    /// app's action on the probe's clocks, or why it was refused (counted).
    pub fn answered(
        &mut self,
        datagram: &[u8],
        now: Stamp,
        app_minus_probe_ns: i64,
    ) -> Result<AppAction, BadAnswer> {
        let result = self.check(datagram, now, app_minus_probe_ns);
        match &result {
            Ok(_) => self.totals.answered += 1,
            Err(_) => self.totals.bad_answers += 1,
        }
        result
    }

    fn check(
        &mut self,
        datagram: &[u8],
        now: Stamp,
        app_minus_probe_ns: i64,
    ) -> Result<AppAction, BadAnswer> {
        let answer = ActAnswer::parse(datagram).ok_or(BadAnswer::Malformed)?;
        let sent = self
            .pending
            .get(&answer.notice)
            .ok_or(BadAnswer::UnknownNotice)?;
        // Checked on the app's clock, against what the notice told it and
        // the app's clock now; then moved onto the probe's with the
        // difference now (NTP parts the two by microseconds over the
        // milliseconds an answer takes), kept between the timer and now.
        let done_on_app = sent.action.done.mono_ns as i128 + sent.app_minus_probe_ns as i128;
        let now_on_app = now.mono_ns as i128 + app_minus_probe_ns as i128;
        let acted_on_app = answer.acted_mono_ns as i128;
        if acted_on_app < done_on_app || acted_on_app > now_on_app {
            return Err(BadAnswer::NotThisClock);
        }
        let acted_mono_ns = convert::narrow_unsigned(
            (acted_on_app - app_minus_probe_ns as i128)
                .clamp(sent.action.done.mono_ns as i128, now.mono_ns as i128),
        );
        let sent = self.pending.remove(&answer.notice).expect("just found");
        // The wall reading at that moment: the probe's wall clock, at the
        // level it has when the answer comes.
        let level = now.wall_ns as i128 - now.mono_ns as i128;
        let wall_ns = convert::narrow_unsigned(acted_mono_ns as i128 + level);
        Ok(AppAction {
            app: self.app.clone(),
            action: Action {
                done: Stamp {
                    wall_ns,
                    mono_ns: acted_mono_ns,
                },
                ..sent.action
            },
        })
    }

    /// The app's port refused a notice (a UDP port nobody listens on: the
    /// kernel says so on a later call): the latest notice awaiting an
    /// answer is counted not delivered rather than sent.
    pub fn refused_by_port(&mut self) {
        if self.pending.pop_last().is_some() {
            self.totals.sent -= 1;
            self.totals.undelivered += 1;
        }
    }

    /// A datagram from someone other than the app: refused, counted.
    pub fn refused_sender(&mut self) {
        self.totals.bad_answers += 1;
    }

    /// Counts as never answered every notice sent more than
    /// [`ANSWER_WAIT_NS`] before `now_mono_ns`.
    pub fn expire(&mut self, now_mono_ns: u64) {
        let before = self.pending.len();
        self.pending
            .retain(|_, s| s.sent_mono_ns.saturating_add(ANSWER_WAIT_NS) >= now_mono_ns);
        self.totals.unanswered += (before - self.pending.len()) as u64;
    }

    /// Notices awaiting an answer.
    pub fn awaiting(&self) -> usize {
        self.pending.len()
    }

    /// The counts at `at`, every notice still awaiting an answer counted
    /// never answered (the run is ending).
    pub fn close(&mut self, at: Stamp) -> NoticeTotals {
        self.totals.unanswered += self.pending.len() as u64;
        self.pending.clear();
        NoticeTotals {
            at,
            ..self.totals.clone()
        }
    }

    /// The counts so far.
    pub fn totals(&self) -> &NoticeTotals {
        &self.totals
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Stamp;

    fn action(key: MessageKey, late_ns: u64) -> Action {
        Action {
            conn: 2,
            key,
            hash: 0xfeed,
            act_at_ns: 1_800_000_000_123_456_789,
            offset_ns: Some(-3_000_000),
            offset_bound_ns: Some(450_000),
            target: Stamp {
                wall_ns: 1_800_000_000_126_456_789,
                mono_ns: 5_000_000,
            },
            done: Stamp {
                wall_ns: 1_800_000_000_126_456_800,
                mono_ns: 5_000_011,
            },
            late_ns,
        }
    }

    #[test]
    fn a_test_message_is_named_by_its_sequence_number() {
        let json: serde_json::Value = serde_json::from_slice(
            &ActNotice::of(5, &action(MessageKey::Seq(17), 0), 0).to_datagram(),
        )
        .unwrap();
        assert_eq!(json["notice"], 5);
        assert_eq!(json["seq"], 17);
        assert_eq!(json["hash"], "000000000000feed");
        assert!(json["occurrence"].is_null());
        assert_eq!(json["late"], false);
        assert_eq!(json["done_mono_ns"], 5_000_011);
        assert_eq!(json["act_at_ns"], 1_800_000_000_123_456_789u64);
    }

    #[test]
    fn any_payload_is_named_by_its_hash_in_hex_and_occurrence() {
        let key = MessageKey::Hash {
            hash: 0x00ab_cdef_0123_4567,
            occurrence: 3,
        };
        let mut a = action(key, 2_500_000);
        a.hash = 0x00ab_cdef_0123_4567;
        let notice = ActNotice::of(6, &a, 0);
        let back: ActNotice = serde_json::from_slice(&notice.to_datagram()).unwrap();
        assert_eq!(back, notice);
        assert_eq!(back.hash, "00abcdef01234567");
        assert_eq!(back.occurrence, Some(3));
        assert!(back.late && back.late_ns == 2_500_000);
        assert_eq!(back.seq, None);
    }

    fn now(mono: u64) -> Stamp {
        Stamp {
            wall_ns: 1_800_000_000_000_000_000 + mono,
            mono_ns: mono,
        }
    }

    #[test]
    fn an_answer_is_the_apps_action_at_its_own_moment() {
        let mut book = NoticeBook::new("kiosk-ui");
        let a = action(MessageKey::Seq(1), 0);
        let n = book.notice(&a, 5_000_020, 0);
        let answer = ActAnswer {
            notice: n.notice,
            acted_mono_ns: 5_060_000,
        };
        let app = book
            .answered(&answer.to_datagram(), now(5_100_000), 0)
            .unwrap();
        assert_eq!(app.app, "kiosk-ui");
        assert_eq!(app.action.done.mono_ns, 5_060_000);
        // On the probe's wall clock at the level it has when the answer came.
        assert_eq!(
            app.action.done.wall_ns,
            1_800_000_000_000_000_000 + 5_060_000
        );
        assert_eq!((app.action.target, app.action.key), (a.target, a.key));
        // A second answer to it is refused, and counted.
        assert_eq!(
            book.answered(&answer.to_datagram(), now(5_200_000), 0),
            Err(BadAnswer::UnknownNotice)
        );
        let t = book.close(now(6_000_000));
        assert_eq!(
            (t.sent, t.answered, t.unanswered, t.bad_answers),
            (1, 1, 0, 1)
        );
    }

    #[test]
    fn notices_and_answers_are_on_the_apps_clock_records_on_the_probes() {
        // The app's CLOCK_MONOTONIC is 250 ms ahead of the probe's raw
        // clock: the notice says the app's times, the answer comes in
        // them, and the app's action is recorded on the probe's clock.
        const AHEAD: i64 = 250_000_000;
        let mut book = NoticeBook::new("kiosk-ui");
        let a = action(MessageKey::Seq(1), 0);
        let n = book.notice(&a, 5_000_020, AHEAD);
        assert_eq!(n.done_mono_ns, 5_000_011 + 250_000_000);
        assert_eq!(n.target_mono_ns, 5_000_000 + 250_000_000);
        // Acted 49 us after the timer, on the app's clock.
        let answer = ActAnswer {
            notice: n.notice,
            acted_mono_ns: 255_049_011,
        };
        let app = book
            .answered(&answer.to_datagram(), now(5_100_000), AHEAD)
            .unwrap();
        assert_eq!(app.action.done.mono_ns, 5_049_011);
        // A time on the probe's own clock is before the notice on the app's.
        let n = book.notice(&a, 5_000_020, AHEAD);
        let raw = ActAnswer {
            notice: n.notice,
            acted_mono_ns: 5_049_011,
        };
        assert_eq!(
            book.answered(&raw.to_datagram(), now(5_100_000), AHEAD),
            Err(BadAnswer::NotThisClock)
        );
    }

    #[test]
    fn answers_off_this_clock_or_malformed_are_refused() {
        let mut book = NoticeBook::new("app");
        let a = action(MessageKey::Seq(1), 0);
        book.notice(&a, 5_000_020, 0);
        for (bytes, why) in [
            (b"{}".to_vec(), BadAnswer::Malformed),
            (b"null".to_vec(), BadAnswer::Malformed),
            (vec![b' '; MAX_ANSWER_BYTES + 1], BadAnswer::Malformed),
            (
                br#"{"notice": 0, "acted_mono_ns": -1}"#.to_vec(),
                BadAnswer::Malformed,
            ),
            (
                br#"{"notice": 9, "acted_mono_ns": 5000100}"#.to_vec(),
                BadAnswer::UnknownNotice,
            ),
            // Before the probe's timer fired, and after the answer came.
            (
                br#"{"notice": 0, "acted_mono_ns": 4000000}"#.to_vec(),
                BadAnswer::NotThisClock,
            ),
            (
                br#"{"notice": 0, "acted_mono_ns": 9000000}"#.to_vec(),
                BadAnswer::NotThisClock,
            ),
        ] {
            assert_eq!(
                book.answered(&bytes, now(5_100_000), 0),
                Err(why),
                "{bytes:?}"
            );
        }
        // Still awaiting the real one, which an extra key does not spoil.
        let ok = br#"{"notice": 0, "acted_mono_ns": 5000050, "app": "x"}"#;
        assert!(book.answered(ok, now(5_100_000), 0).is_ok());
        assert_eq!(book.totals().bad_answers, 7);
    }

    #[test]
    fn notices_never_answered_are_counted_not_lost() {
        let mut book = NoticeBook::new("app");
        let a = action(MessageKey::Seq(1), 0);
        for i in 0..3u64 {
            book.notice(&a, i * ANSWER_WAIT_NS, 0);
        }
        let n = book.notice(&a, 0, 0);
        book.not_delivered(n.notice);
        book.expire(2 * ANSWER_WAIT_NS + 1);
        assert_eq!(book.totals().unanswered, 2);
        assert_eq!(book.awaiting(), 1);
        let t = book.close(now(1));
        assert_eq!((t.sent, t.undelivered, t.unanswered), (3, 1, 3));
        // A flood beyond the bound counts the oldest as never answered.
        let mut book = NoticeBook::new("app");
        for _ in 0..MAX_PENDING + 5 {
            book.notice(&a, 1, 0);
        }
        assert_eq!(book.awaiting(), MAX_PENDING);
        assert_eq!(book.totals().unanswered, 5);
    }
}
