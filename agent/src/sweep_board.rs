//! The meeting point of a sweep run from several machines
//! (`skewscope sweep --workers N` and `skewscope sweep-worker`): the sweep
//! pins its plan here, each worker says how it is doing and reads the plan
//! back. The probes of every machine already upload to this agent and
//! exchange time with it, so it is the one place all of them reach; the
//! board adds no connection between the machines themselves.
//!
//! The agent does not read the plan or the statuses: both are JSON objects
//! it keeps in memory as they came, bounded in size and number, so a
//! sweep's own format can change without the agent's. A plan may hold the
//! connections' credentials (a header, a STOMP passcode): it is served only
//! with the agent's token, and forgotten when the sweep takes it down or
//! when no sweep has renewed it for [`PLAN_KEPT_FOR`].

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Largest plan: a sweep's stage, its workers' shares and the connection
/// settings are a few KiB.
pub const MAX_PLAN_BYTES: usize = 64 * 1024;
/// Largest status a worker posts.
pub const MAX_STATUS_BYTES: usize = 4 * 1024;
/// Most workers kept: a site's probe machines, with room to spare.
pub const MAX_WORKERS: usize = 256;
/// A worker not heard from for this long is forgotten (it polls every
/// 200 ms while it waits).
pub const WORKER_FORGOTTEN_AFTER: Duration = Duration::from_secs(600);
/// A plan not renewed for this long is taken down (a sweep whose machine
/// died must not leave its workers' connections open, nor its credentials
/// here).
pub const PLAN_KEPT_FOR: Duration = Duration::from_secs(3600);

/// Why the board refused a request.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum BoardError {
    /// The body is not one JSON object.
    #[error("the body must be one JSON object: {0}")]
    NotAnObject(String),
    /// A status without a usable `name`.
    #[error("a worker's status needs \"name\": 1 to 64 printable ASCII characters")]
    BadName,
    /// Already [`MAX_WORKERS`] other workers.
    #[error(
        "the board already holds {MAX_WORKERS} workers; a new one waits until one is forgotten"
    )]
    Full,
}

/// The plan and the workers, behind one lock (each request holds it for a
/// copy of a few KiB).
#[derive(Default)]
pub struct SweepBoard {
    inner: Mutex<Board>,
}

#[derive(Default)]
struct Board {
    plan: Option<(serde_json::Value, Instant)>,
    workers: BTreeMap<String, (serde_json::Value, Instant)>,
}

impl Board {
    fn forget_stale(&mut self, now: Instant) {
        self.workers
            .retain(|_, (_, seen)| now.saturating_duration_since(*seen) < WORKER_FORGOTTEN_AFTER);
        if self
            .plan
            .as_ref()
            .is_some_and(|(_, at)| now.saturating_duration_since(*at) >= PLAN_KEPT_FOR)
        {
            self.plan = None;
        }
    }
}

/// One JSON object, or why not.
fn object(body: &[u8]) -> Result<serde_json::Value, BoardError> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| BoardError::NotAnObject(e.to_string()))?;
    if value.is_object() {
        Ok(value)
    } else {
        Err(BoardError::NotAnObject("it is not an object".into()))
    }
}

impl SweepBoard {
    fn lock(&self) -> std::sync::MutexGuard<'_, Board> {
        // A panic while holding it leaves only JSON values behind: still whole.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `PUT /sweep/plan`: pins `body` (checked to be one JSON object) as
    /// the plan every worker reads next.
    pub fn pin_plan(&self, body: &[u8], now: Instant) -> Result<(), BoardError> {
        let plan = object(body)?;
        let mut board = self.lock();
        board.forget_stale(now);
        board.plan = Some((plan, now));
        Ok(())
    }

    /// `DELETE /sweep/plan`: the sweep is over; workers go idle.
    pub fn take_down_plan(&self) {
        self.lock().plan = None;
    }

    /// `POST /sweep/worker`: keeps a worker's status (its `name` names it)
    /// and answers the plan (`null` when there is none).
    pub fn report(&self, body: &[u8], now: Instant) -> Result<serde_json::Value, BoardError> {
        let status = object(body)?;
        let name = status
            .get("name")
            .and_then(serde_json::Value::as_str)
            .filter(|n| (1..=64).contains(&n.len()) && n.bytes().all(|b| b.is_ascii_graphic()))
            .ok_or(BoardError::BadName)?
            .to_owned();
        let mut board = self.lock();
        board.forget_stale(now);
        if !board.workers.contains_key(&name) && board.workers.len() >= MAX_WORKERS {
            return Err(BoardError::Full);
        }
        board.workers.insert(name, (status, now));
        Ok(board
            .plan
            .as_ref()
            .map_or(serde_json::Value::Null, |(p, _)| p.clone()))
    }

    /// `GET /sweep`: the plan and every worker heard from, with how long
    /// ago.
    pub fn view(&self, now: Instant) -> serde_json::Value {
        let mut board = self.lock();
        board.forget_stale(now);
        let workers: Vec<serde_json::Value> = board
            .workers
            .iter()
            .map(|(name, (status, seen))| {
                serde_json::json!({
                    "name": name,
                    "seen_ms_ago": now.saturating_duration_since(*seen).as_millis() as u64,
                    "status": status,
                })
            })
            .collect();
        serde_json::json!({
            "plan": board.plan.as_ref().map(|(p, _)| p.clone()),
            "workers": workers,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_reads_the_plan_pinned_and_the_sweep_sees_the_worker() {
        let board = SweepBoard::default();
        let t = Instant::now();
        assert_eq!(
            board.report(br#"{"name":"rack-2","seq":0}"#, t).unwrap(),
            serde_json::Value::Null
        );
        board.pin_plan(br#"{"seq":1,"step":"open"}"#, t).unwrap();
        let plan = board.report(br#"{"name":"rack-2","seq":1}"#, t).unwrap();
        assert_eq!(plan["step"], "open");
        let view = board.view(t + Duration::from_millis(250));
        assert_eq!(view["plan"]["seq"], 1);
        assert_eq!(view["workers"][0]["name"], "rack-2");
        assert_eq!(view["workers"][0]["seen_ms_ago"], 250);
        assert_eq!(view["workers"][0]["status"]["seq"], 1);
        board.take_down_plan();
        assert!(board.view(t).get("plan").unwrap().is_null());
    }

    #[test]
    fn what_is_not_a_named_object_is_refused_and_the_board_stays_bounded() {
        let board = SweepBoard::default();
        let t = Instant::now();
        for bad in [&b"[1]"[..], b"nul", b"\"x\"", b"{\"a\":"] {
            assert!(matches!(
                board.pin_plan(bad, t),
                Err(BoardError::NotAnObject(_))
            ));
            assert!(matches!(
                board.report(bad, t),
                Err(BoardError::NotAnObject(_))
            ));
        }
        for bad in [
            &br#"{"seq":1}"#[..],
            br#"{"name":""}"#,
            br#"{"name":"a b"}"#,
            br#"{"name":7}"#,
        ] {
            assert_eq!(board.report(bad, t), Err(BoardError::BadName));
        }
        let long = format!(r#"{{"name":"{}"}}"#, "x".repeat(65));
        assert_eq!(board.report(long.as_bytes(), t), Err(BoardError::BadName));
        for i in 0..MAX_WORKERS {
            board
                .report(format!(r#"{{"name":"w{i}"}}"#).as_bytes(), t)
                .unwrap();
        }
        assert_eq!(
            board.report(br#"{"name":"one-more"}"#, t),
            Err(BoardError::Full)
        );
        // One already known still reports; once the others are forgotten a
        // new one has room.
        board.report(br#"{"name":"w0"}"#, t).unwrap();
        let later = t + WORKER_FORGOTTEN_AFTER + Duration::from_secs(1);
        board.report(br#"{"name":"one-more"}"#, later).unwrap();
        assert_eq!(board.view(later)["workers"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn a_plan_nobody_renews_is_taken_down() {
        let board = SweepBoard::default();
        let t = Instant::now();
        board.pin_plan(br#"{"seq":1}"#, t).unwrap();
        assert!(!board.view(t + PLAN_KEPT_FOR / 2)["plan"].is_null());
        assert!(board.view(t + PLAN_KEPT_FOR)["plan"].is_null());
    }
}
