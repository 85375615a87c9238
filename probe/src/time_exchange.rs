//! The probe's side of the time exchange with a skewscope agent, on the
//! core's [`Schedule`]: bursts of pairs until the clock bound stops
//! improving, then a pair per interval, a burst again when the bound
//! degrades or an action asks. Every answer is recorded as a
//! [`TimeSample`] and fed to the clock estimate. A server that never answers
//! (not a skewscope agent) is left alone after a warning: the report then
//! says it has no offset estimate.
//!
//! With a key (the token the probe uploads with), only replies tagged under
//! it are taken: one untagged or altered is refused, counted in a
//! [`ClockTags`] record (one an exchange at most), and never reaches the
//! estimate; the exchange waits on for the real answer within its window.

use std::net::SocketAddr;
use std::time::Duration;

use skewscope_core::clock::schedule::Schedule;
use skewscope_core::record::{ClockTags, ProbeRecord, TimeSample};
use skewscope_core::time_exchange::{Invalid, PACKET_LEN, Reply, Request, TimeKey};
use tokio::net::UdpSocket;

use crate::clock_estimate::ClockEstimate;
use crate::recorder::Recorder;
use crate::shutdown::Shutdown;

/// How long to wait for one answer: past a radio's longest power-save hold.
const ANSWER_WAIT: Duration = Duration::from_millis(300);

/// Runs the exchange until the run stops.
pub(crate) async fn run(
    target: SocketAddr,
    interval: Duration,
    key: Option<TimeKey>,
    recorder: Recorder,
    estimate: ClockEstimate,
    mut shutdown: Shutdown,
) {
    let bind: SocketAddr = if target.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        ([0u16; 8], 0).into()
    };
    let socket = match UdpSocket::bind(bind).await {
        Ok(s) if s.connect(target).await.is_ok() => s,
        _ => {
            tracing::warn!(target: "probe::time", "cannot reach the time exchange at udp {target}");
            return;
        }
    };
    let stopped = shutdown.wait();
    tokio::pin!(stopped);
    let start = skewscope_os::clock::raw_ns();
    let mut schedule = Schedule::new(start, interval.as_nanos() as u64);
    let mut answered_ever = false;
    let mut unanswered = 0u32;
    let mut refused = 0u64;
    let tags = |refused| {
        ProbeRecord::ClockTags(ClockTags {
            at: skewscope_os::clock::now_raw(),
            keyed: key.is_some(),
            refused,
        })
    };
    recorder.record(tags(0));
    loop {
        let due = schedule.next_request_at();
        let wait = Duration::from_nanos(due.saturating_sub(skewscope_os::clock::raw_ns()));
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = estimate.hurried() => {
                schedule.hurry(skewscope_os::clock::raw_ns());
                continue;
            }
            _ = &mut stopped => return,
        }
        // Before the request: an exchange in flight across a sleep began
        // before it (ClockEstimate).
        let suspended_at_start = skewscope_os::clock::suspended_ns();
        let (answer, refused_now) = exchange(&socket, key.as_ref()).await;
        if refused_now > 0 {
            if refused == 0 {
                tracing::warn!(
                    target: "probe::time",
                    "refused a time reply from udp {target} whose tag did not verify (altered on the way, or the agent has another token or none); refused replies are never used and are counted in the log"
                );
            }
            refused += refused_now;
            recorder.record(tags(refused));
        }
        if let Some(sample) = answer {
            recorder.record(ProbeRecord::TimeSample(sample));
            estimate.add(&sample, suspended_at_start);
            if !answered_ever && unanswered >= 2 * skewscope_core::clock::schedule::MAX_BURST_ROUNDS
            {
                tracing::info!(target: "probe::time", "the time exchange at udp {target} answers");
            }
            answered_ever = true;
        } else {
            unanswered += 1;
            // A start that found nothing answering (the agent down or out of
            // reach when the probe started): say so once, and keep trying at
            // the schedule's pace (found by collector/tests/faults.rs, a
            // probe started while its link was cut).
            if !answered_ever && unanswered == 2 * skewscope_core::clock::schedule::MAX_BURST_ROUNDS
            {
                tracing::warn!(
                    target: "probe::time",
                    "no answer from a time exchange at udp {target} yet; offsets to the server's clock cannot be estimated until it answers (is it a skewscope agent?); trying again every {interval:?}"
                );
            }
        }
        let now = skewscope_os::clock::raw_ns();
        schedule.done(now, estimate.estimate_at(now).as_ref());
    }
}

/// One request and its answer (`None` if none came in time), and how many
/// replies were refused meanwhile for their tag.
async fn exchange(socket: &UdpSocket, key: Option<&TimeKey>) -> (Option<TimeSample>, u64) {
    let id = fastrand::u64(..);
    let t1 = skewscope_os::clock::now_raw();
    let request = Request::new(id, t1.wall_ns);
    if socket.send(&request.encode()).await.is_err() {
        return (None, 0);
    }
    let mut buf = [0u8; PACKET_LEN + 16];
    let mut refused = 0u64;
    let answer = async {
        loop {
            let Ok(n) = socket.recv(&mut buf).await else {
                return None;
            };
            let t4 = skewscope_os::clock::now_raw();
            // A late answer to an earlier request, or junk: keep waiting.
            match Reply::decode(&buf[..n], key) {
                Ok(r) if r.id == id && r.t1_wall_ns == t1.wall_ns => {
                    return Some(TimeSample {
                        t1,
                        t2_wall_ns: r.t2_wall_ns,
                        t3_wall_ns: r.t3_wall_ns,
                        t4,
                    });
                }
                Err(Invalid::Untagged | Invalid::BadTag) => refused += 1,
                _ => continue,
            }
        }
    };
    let sample = tokio::time::timeout(ANSWER_WAIT, answer)
        .await
        .ok()
        .flatten();
    (sample, refused)
}
