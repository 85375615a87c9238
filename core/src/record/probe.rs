//! What a probe (or a page, or an app's own run) writes to its log: its
//! run, its connections, each receipt and action, its time exchanges.

use serde::{Deserialize, Serialize};

use super::clock::{ClockState, RunIdentity};
use crate::Stamp;

/// How a probe identifies a received message across connections.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
pub enum MessageKey {
    /// A skewscope test message, by its sequence number.
    Seq(u64),
    /// Any other payload: a 64-bit hash of its bytes and how many times this
    /// connection had already seen that hash.
    Hash {
        /// [`crate::identity::payload_hash`] of the payload.
        hash: u64,
        /// 0 for the first time this connection saw the hash, then 1, 2, ...
        occurrence: u32,
    },
}

/// Everything a probe writes to its log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum ProbeRecord {
    /// First record: who and what is being probed.
    Started(Box<ProbeStarted>),
    /// A connection's upgrade completed.
    ConnectionOpened(ProbeConnectionOpened),
    /// A connection attempt failed.
    ConnectionFailed(ProbeConnectionFailed),
    /// A connection ended.
    ConnectionClosed(ProbeConnectionClosed),
    /// A message arrived.
    Receipt(Receipt),
    /// Last record of a clean stop.
    Stopped(Stamp),
    /// The device clock's own claim about its error, at start and every few seconds.
    ClockState(Box<ClockState>),
    /// One completed time exchange with the agent.
    TimeSample(TimeSample),
    /// What names this run and its clock exactly; written after `Started`.
    Identity(RunIdentity),
    /// A connection's two socket addresses, written right after its
    /// `ConnectionOpened`: what joins it to the same connection tapped on
    /// the server's side.
    ConnectionAddresses(ConnectionAddresses),
    /// The log reached `--max-log-bytes`: the last record, and the run
    /// stopped. Receipts missing after it were not recorded, not lost.
    LogFull(LogFull),
    /// A connection runs over TLS (`wss://`), written right after its
    /// `ConnectionOpened`: what was negotiated, and whether the server's
    /// certificate was checked (`--insecure` skips that, and reports say so).
    ConnectionTls(ConnectionTls),
    /// A connection negotiated permessage-deflate, written right after its
    /// `ConnectionOpened`: the server compresses what it sends it, as it
    /// does for the browsers among its clients.
    ConnectionDeflate(ConnectionDeflate),
    /// The probe acts on broadcasts (`--act-at`): where it reads each one's
    /// time to act. Written after `Identity`; without it, it never acts.
    ActPlan(ActPlan),
    /// The probe acted on a message at its time to act (or at once, late).
    Action(Action),
    /// A message's payload, the first time this probe run received it (on
    /// any of its connections): what a report's `--match` judges broadcasts
    /// by, at one record per message, not per connection.
    Payload(MessagePayload),
    /// The run is a page in a browser (the agent's `/probe`), written after
    /// `Identity`: its stamps are the page's own clock read in userspace
    /// (no kernel stamps), and its clock bound comes from the WebSocket
    /// time exchange (`/clock`).
    Page(PageProbe),
    /// The probe keeps its `--out-dir` within its limits (`--keep-runs`,
    /// `--keep-bytes`), written after `Identity`: what it deleted at start
    /// (only logs the agent had in full) and what this run may write.
    LogsPruned(LogsPruned),
    /// Whether the run's time exchange checks the agent's tags, and how
    /// many replies it refused: written when the exchange starts and after
    /// each exchange that refused one (at most one record an exchange).
    ClockTags(ClockTags),
    /// The run is an app's own: the clock module inside a site's app
    /// (Python's `connect_clock(.., name=)`, the page module's
    /// `connectClock(.., {name})`), written after `Identity`. Its actions
    /// are what the app itself did, not a probe's beside it: the report
    /// lists it as a device of its own and says whose actions were whose.
    App(AppRun),
    /// The frame an action was drawn in (a page's next
    /// `requestAnimationFrame` after its callback), on the run's clock:
    /// what a screen shows waits for it.
    Frame(ActionFrame),
    /// An app beside the probe (`--act-notify`) answered a notice: the
    /// moment it says it acted, on the device's monotonic clock it shares
    /// with the probe. The app's action, as the probe's `Action` is the
    /// probe's.
    AppAction(AppAction),
    /// What `--act-notify` sent its app and what came back, written when
    /// the run ends: notices never answered are counted, never silent.
    NoticeTotals(NoticeTotals),
}

/// An app that reports its own actions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AppRun {
    /// The module and its version (`skewscope_clock.py 1`).
    pub module: String,
    /// What it runs in (a Python version, a browser's user agent, node's).
    pub runtime: String,
}

/// The frame one action was drawn in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ActionFrame {
    /// The connection whose action it drew.
    pub conn: u32,
    /// The message acted on, as the action names it.
    pub key: MessageKey,
    /// [`crate::identity::payload_hash`] of the payload.
    pub hash: u64,
    /// The frame's time (the animation frame's timestamp), on the run's
    /// clocks.
    pub at: Stamp,
}

/// One action of an app beside the probe (`--act-notify`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AppAction {
    /// The app's name (`--act-notify-name`).
    pub app: String,
    /// The notice's action with `done` the moment the app says it acted
    /// (its `CLOCK_MONOTONIC` reading; the wall reading is the probe's
    /// wall clock at that moment).
    pub action: Action,
}

/// `--act-notify`'s counts for one app.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NoticeTotals {
    /// The app's name (`--act-notify-name`).
    pub app: String,
    /// When counted.
    pub at: Stamp,
    /// Notices sent.
    pub sent: u64,
    /// Notices the socket refused (the app was not listening or reading).
    pub undelivered: u64,
    /// Notices the app answered (each an `AppAction`).
    pub answered: u64,
    /// Notices sent that were never answered.
    pub unanswered: u64,
    /// Answers refused: malformed, naming no notice sent, or a second
    /// answer to one notice.
    pub bad_answers: u64,
}

/// A probe run's time exchange and its authentication.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ClockTags {
    /// When.
    pub at: Stamp,
    /// The probe holds a key (the agent's token): it takes only replies
    /// tagged under it. Without one, anyone on the path could have moved
    /// its clock.
    pub keyed: bool,
    /// Replies refused so far: untagged, or a tag that did not verify
    /// (altered on the way, or another token). None was used.
    pub refused: u64,
}

/// What a probe deleted from its `--out-dir` at start, and what it kept.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LogsPruned {
    /// When.
    pub at: Stamp,
    /// Earlier runs' logs deleted (each acknowledged in full by the agent).
    pub runs: u32,
    /// Their bytes.
    pub bytes: u64,
    /// Earlier runs' logs kept.
    pub kept_runs: u32,
    /// Their bytes.
    pub kept_bytes: u64,
    /// The most run logs kept, this one included (0: no limit).
    pub max_runs: u32,
    /// The most bytes, this log included (0: no limit).
    pub max_bytes: u64,
}

/// What a browser probe says about the page it runs in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PageProbe {
    /// The browser's user agent string, for people.
    pub user_agent: String,
    /// The smallest step of the page's clock the page saw, in ns: browsers
    /// coarsen `performance.now()` (Chromium: 100 µs, or 5 µs when the page
    /// is cross-origin isolated, as `/probe` is served).
    pub clock_step_ns: u64,
    /// Whether the page was cross-origin isolated (`crossOriginIsolated`).
    pub isolated: bool,
}

/// Payload bytes a probe keeps of each message: the small JSON and text
/// messages that tell devices what to do fit whole.
pub const PAYLOAD_EXCERPT_BYTES: usize = 4096;

/// One message's payload, as a probe first received it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MessagePayload {
    /// [`crate::identity::payload_hash`] of the whole payload: what joins
    /// it to receipts and broadcasts.
    pub hash: u64,
    /// The whole payload's length.
    pub len: u32,
    /// Its first bytes, at most [`PAYLOAD_EXCERPT_BYTES`]: all of it when
    /// `len` fits.
    pub excerpt: Vec<u8>,
}

/// Where a probe reads each broadcast's time to act.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ActPlan {
    /// The JSON pointer (`--act-at`).
    pub pointer: String,
    /// The unit (`--act-unit`: auto, s, ms, us, ns).
    pub unit: String,
    /// When the probe started acting.
    pub at: Stamp,
}

/// One connection's action on one message: what time it was told, the
/// moment on its own clocks it aimed at, and the moment it acted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Action {
    /// Connection index within this probe.
    pub conn: u32,
    /// Which message (as its receipt names it).
    pub key: MessageKey,
    /// [`crate::identity::payload_hash`] of the payload.
    pub hash: u64,
    /// The time to act the message carried: the server's wall clock, ns.
    pub act_at_ns: u64,
    /// The offset it was mapped with into this device's clock (the agent's
    /// clock minus this one's), from the probe's time exchanges; `None`
    /// with none (this clock was taken for the server's).
    pub offset_ns: Option<i64>,
    /// That offset's error bound when it was used.
    pub offset_bound_ns: Option<u64>,
    /// The moment aimed at, on this device's clocks.
    pub target: Stamp,
    /// The moment it acted, on this device's clocks, read right after its
    /// timer fired (or at once when late).
    pub done: Stamp,
    /// How much after the target the message reached the probe (its read;
    /// 0: before, and it acted at the target). A late action happens as
    /// soon as it can.
    pub late_ns: u64,
}

/// What one probe connection's permessage-deflate agreed (RFC 7692).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ConnectionDeflate {
    /// Connection index within this probe.
    pub conn: u32,
    /// The server compresses each message on its own (no context takeover).
    pub server_no_context_takeover: bool,
    /// The server's window bits, when it said (15 otherwise).
    pub server_max_window_bits: Option<u8>,
}

impl ProbeRecord {
    /// The probe-clock stamp the record was made at, if it carries one: for
    /// clock-step detection and for how far a log has reached. A time
    /// exchange counts by its receipt (`t4`).
    pub fn stamp(&self) -> Option<Stamp> {
        match self {
            ProbeRecord::Started(s) => Some(s.at),
            ProbeRecord::ConnectionOpened(o) => Some(o.at),
            ProbeRecord::ConnectionFailed(f) => Some(f.at),
            ProbeRecord::ConnectionClosed(c) => Some(c.at),
            ProbeRecord::Receipt(r) => Some(r.at),
            ProbeRecord::Stopped(at) => Some(*at),
            ProbeRecord::ClockState(c) => Some(c.at),
            ProbeRecord::TimeSample(t) => Some(t.t4),
            ProbeRecord::LogFull(l) => Some(l.at),
            ProbeRecord::LogsPruned(l) => Some(l.at),
            ProbeRecord::ClockTags(t) => Some(t.at),
            ProbeRecord::ActPlan(p) => Some(p.at),
            ProbeRecord::Action(a) => Some(a.done),
            ProbeRecord::Frame(f) => Some(f.at),
            ProbeRecord::AppAction(a) => Some(a.action.done),
            ProbeRecord::NoticeTotals(t) => Some(t.at),
            ProbeRecord::Identity(_)
            | ProbeRecord::ConnectionAddresses(_)
            | ProbeRecord::ConnectionTls(_)
            | ProbeRecord::ConnectionDeflate(_)
            | ProbeRecord::Payload(_)
            | ProbeRecord::Page(_)
            | ProbeRecord::App(_) => None,
        }
    }
}

/// How one probe connection's TLS went.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ConnectionTls {
    /// Connection index within this probe.
    pub conn: u32,
    /// The protocol version, like `TLSv1_3`.
    pub version: String,
    /// The cipher suite, like `TLS13_AES_128_GCM_SHA256`.
    pub cipher: String,
    /// The server's certificate was verified (false only with `--insecure`).
    pub verified: bool,
}

/// Where a probe stopped recording because its log was full.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LogFull {
    /// When.
    pub at: Stamp,
    /// The `--max-log-bytes` it reached.
    pub max_bytes: u64,
}

/// A probe connection's endpoints, as its socket reports them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ConnectionAddresses {
    /// Connection index within this probe.
    pub conn: u32,
    /// The device's side, `ADDR:PORT` (the server sees this as the client).
    pub local: String,
    /// The server's side, `ADDR:PORT`.
    pub remote: String,
}

/// Identity of a probe run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProbeStarted {
    /// `--name`, or the host name.
    pub name: String,
    /// Host name of the device, so reports can tell which connections share a clock.
    pub host: String,
    /// The WebSocket URL probed.
    pub url: String,
    /// Connections requested.
    pub connections: u32,
    /// skewscope version that wrote the log.
    pub version: String,
    /// When the probe started.
    pub at: Stamp,
}

/// A probe connection is up.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProbeConnectionOpened {
    /// Connection index within this probe, from 0.
    pub conn: u32,
    /// The agent's connection id from the `X-Skewscope-Conn` header; `None` for a
    /// server that is not a skewscope agent.
    pub agent_conn: Option<u64>,
    /// When the upgrade completed.
    pub at: Stamp,
}

/// A probe connection could not be made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProbeConnectionFailed {
    /// Connection index within this probe.
    pub conn: u32,
    /// When it failed.
    pub at: Stamp,
    /// The error, for people.
    pub error: String,
}

/// A probe connection ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProbeConnectionClosed {
    /// Connection index within this probe.
    pub conn: u32,
    /// When.
    pub at: Stamp,
    /// Why, for people ("count reached", "server closed", an error).
    pub reason: String,
}

/// One message received on one connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Receipt {
    /// Connection index within this probe.
    pub conn: u32,
    /// Which message.
    pub key: MessageKey,
    /// [`crate::identity::payload_hash`] of the payload.
    pub hash: u64,
    /// Payload size in bytes.
    pub len: u32,
    /// Userspace time the frame was complete.
    pub at: Stamp,
    /// How long before `at` the kernel received the frame's last segment
    /// (`SO_TIMESTAMPING` software RX stamp), measured on the kernel's own clock
    /// so it stays right even when the process clock is shifted; `None` when the
    /// kernel gave no stamp.
    pub kernel_delay_ns: Option<u64>,
}

/// One NTP-style exchange with the agent: the probe sent at `t1`, the agent
/// received at `t2` and answered at `t3`, the probe received at `t4`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TimeSample {
    /// Probe clocks when the request left.
    pub t1: Stamp,
    /// Agent wall clock when the request arrived.
    pub t2_wall_ns: u64,
    /// Agent wall clock when the reply left.
    pub t3_wall_ns: u64,
    /// Probe clocks when the reply arrived.
    pub t4: Stamp,
}
