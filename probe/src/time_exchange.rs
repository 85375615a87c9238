//! The probe's side of the time exchange with a skewscope agent: a burst at
//! start, then one exchange per interval, every answer recorded as a
//! [`TimeSample`]. A server that never answers the burst (not a skewscope agent)
//! is left alone: the report then says it has no offset estimate.

use std::net::SocketAddr;
use std::time::Duration;

use skewscope_core::record::{ProbeRecord, TimeSample};
use skewscope_core::time_exchange::{PACKET_LEN, Reply, Request};
use tokio::net::UdpSocket;

use crate::clock_estimate::ClockEstimate;
use crate::recorder::Recorder;
use crate::shutdown::Shutdown;

/// Exchanges at start, to have an estimate before the first broadcast.
pub const BURST: u32 = 8;
/// Pause between the burst's exchanges.
const BURST_GAP: Duration = Duration::from_millis(10);
/// How long to wait for one answer.
const ANSWER_WAIT: Duration = Duration::from_millis(300);

/// Runs the exchange until the run stops.
pub(crate) async fn run(
    target: SocketAddr,
    interval: Duration,
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
    // A burst first, for a good estimate at once; until one is answered
    // (the agent down or out of reach when the probe started), try again
    // at each interval: giving up would leave the whole run without
    // offsets (found by collector/tests/faults.rs, a probe started while
    // its link was cut).
    let mut unanswered_since_warned = false;
    loop {
        let mut answered = 0;
        for _ in 0..BURST {
            if let Some(sample) = exchange(&socket).await {
                recorder.record(ProbeRecord::TimeSample(sample));
                estimate.add(sample);
                answered += 1;
            }
            tokio::time::sleep(BURST_GAP).await;
        }
        if answered > 0 {
            if unanswered_since_warned {
                tracing::info!(target: "probe::time", "the time exchange at udp {target} answers");
            }
            break;
        }
        if !unanswered_since_warned {
            tracing::warn!(
                target: "probe::time",
                "no answer from a time exchange at udp {target} yet; offsets to the server's clock cannot be estimated until it answers (is it a skewscope agent?); trying again every {interval:?}"
            );
            unanswered_since_warned = true;
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = &mut stopped => return,
        }
    }
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {
                if let Some(sample) = exchange(&socket).await {
                    recorder.record(ProbeRecord::TimeSample(sample));
                    estimate.add(sample);
                }
            }
            _ = &mut stopped => return,
        }
    }
}

/// One request and its answer; `None` if none came in time.
async fn exchange(socket: &UdpSocket) -> Option<TimeSample> {
    let id = fastrand::u64(..);
    let t1 = skewscope_os::clock::now();
    let request = Request {
        id,
        t1_wall_ns: t1.wall_ns,
    };
    socket.send(&request.encode()).await.ok()?;
    let mut buf = [0u8; PACKET_LEN + 16];
    let answer = async {
        loop {
            let n = socket.recv(&mut buf).await.ok()?;
            let t4 = skewscope_os::clock::now();
            // A late answer to an earlier request, or junk: keep waiting.
            match Reply::decode(&buf[..n]) {
                Ok(r) if r.id == id && r.t1_wall_ns == t1.wall_ns => {
                    return Some(TimeSample {
                        t1,
                        t2_wall_ns: r.t2_wall_ns,
                        t3_wall_ns: r.t3_wall_ns,
                        t4,
                    });
                }
                _ => continue,
            }
        }
    };
    tokio::time::timeout(ANSWER_WAIT, answer)
        .await
        .ok()
        .flatten()
}
