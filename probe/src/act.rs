//! Acting at a broadcast's time to act (`--act-at`).
//!
//! A message that names a time in the server's wall clock is mapped into
//! this device's clocks with the probe's clock estimate, and handed to one
//! timer thread, the **actor**. The actor sleeps until just before the
//! earliest target (coarse sleeps, with the thread's timer slack at 1 ns),
//! then reads the clock in a loop until the target has come, and records
//! the action: the moment read right after the loop, on both clocks.
//!
//! Targets are on the probe's clock, `CLOCK_MONOTONIC_RAW` (see
//! `skewscope_os::clock`), while the kernel sleeps on `CLOCK_MONOTONIC`,
//! which NTP may slew against it (chrony: at most 1/12 faster or slower).
//! So a coarse sleep is asked for 1/[`SLEW_SHARE`] less than the raw time
//! left ([`coarse`]) and the actor looks again when it wakes: it never
//! wakes past its moment, at the cost of a few more wake-ups per action. A message whose time has already passed when
//! it arrives is acted on at once and recorded late, by how much.
//!
//! The actor is its own thread, so its wait never holds up the connections'
//! reads and receipt stamps; its last [`SPIN`] before a target reads the
//! clock in a loop that keeps the core. It does not yield it: a yield hands
//! the core to whatever else is runnable (another app's busy wait, a page
//! spinning to the same moment) until that is preempted, milliseconds on a
//! busy device, while a thread that just woke keeps it for the few hundred
//! microseconds left. Nothing is lost meanwhile: kernel-stamped receipts
//! keep their arrival; on a one-core device, userspace stamps (a read's
//! time, a time reply's `t4`) may come up to [`SPIN`] later (a wider
//! exchange, not a biased one).
//!
//! Connections of one probe that act on one message share the device's
//! timer: everything due when it fires is recorded at that one moment (a
//! device acts when its timer fires; the per-connection work after it is
//! the app's, not the clock's).

use std::collections::BinaryHeap;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use skewscope_core::Stamp;
use skewscope_core::act_at::ActAt;
use skewscope_core::record::{Action, MessageKey, ProbeRecord};

use crate::act_notify::Notifier;
use crate::clock_estimate::ClockEstimate;
use crate::recorder::Recorder;

/// How long before a target the actor stops sleeping and starts reading
/// the clock: more than the sleep overruns on a loaded device, little
/// enough to cost one core that long per target.
pub const SPIN: Duration = Duration::from_micros(300);

/// How long before a target the actor plans it again, with the exchanges
/// that came during the lead: enough to sleep the rest precisely.
pub const LOOK_AGAIN: Duration = Duration::from_millis(2);

/// Once the run ends, how far ahead an action is still waited for: one
/// further off (a server that named a time hours away) is not done, and
/// the log line says how many.
pub const FINISH_WAIT: Duration = Duration::from_secs(10);

/// What a connection hands the actor: a message to act on.
#[derive(Clone, Copy, Debug)]
struct Planned {
    conn: u32,
    key: MessageKey,
    hash: u64,
    act_at_ns: u64,
    offset_ns: Option<i64>,
    offset_bound_ns: Option<u64>,
    target: Stamp,
    /// When the message reached the probe (its read), on the monotonic clock.
    arrived_mono_ns: u64,
    /// Planned again with the latest exchanges, [`LOOK_AGAIN`] before it.
    looked_again: bool,
}

impl PartialEq for Planned {
    fn eq(&self, other: &Self) -> bool {
        self.target.mono_ns == other.target.mono_ns
    }
}
impl Eq for Planned {}
impl PartialOrd for Planned {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Planned {
    /// Earliest target first (a max-heap of reversed order).
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.target.mono_ns.cmp(&self.target.mono_ns)
    }
}

/// Where connections find a message's time to act and hand it over.
#[derive(Clone, Debug)]
pub struct Acting {
    act_at: ActAt,
    clock: ClockEstimate,
    actor: Sender<Planned>,
}

/// Why a message was not acted on (counted by the probe).
pub use skewscope_core::act_at::NoTimeToAct;

impl Acting {
    /// Plans the action on a message the probe read on connection `conn`
    /// at `arrived`: its time to act, mapped into this device's clocks.
    pub fn plan(
        &self,
        conn: u32,
        key: MessageKey,
        hash: u64,
        payload: &[u8],
        arrived: Stamp,
    ) -> Result<(), NoTimeToAct> {
        let act_at_ns = self.act_at.find(payload)?;
        let now = skewscope_os::clock::now_raw();
        let planned = plan_at(&self.clock, act_at_ns, now);
        // A bound wider than the time left cannot tell in time from late:
        // ask for a burst, so the actor's last look may find it narrower.
        if is_wide(&planned, arrived.mono_ns) {
            self.clock.hurry();
        }
        let _ = self.actor.send(Planned {
            conn,
            key,
            hash,
            act_at_ns,
            offset_ns: planned.correction.map(|c| c.theta_ns),
            offset_bound_ns: planned.correction.map(|c| c.bound_ns),
            target: planned.target,
            arrived_mono_ns: arrived.mono_ns,
            looked_again: false,
        });
        Ok(())
    }
}

/// Where an action lands on this device's clocks, and the correction it
/// rests on (`None` before any exchange: then this clock is taken for the
/// server's).
struct Plan {
    target: Stamp,
    correction: Option<skewscope_core::clock::Correction>,
}

fn plan_at(clock: &ClockEstimate, act_at_ns: u64, now: Stamp) -> Plan {
    match clock.moment_of(act_at_ns, now) {
        Some((target, correction)) => Plan {
            target,
            correction: Some(correction),
        },
        None => Plan {
            target: Stamp {
                wall_ns: act_at_ns,
                mono_ns: now.mono_at(act_at_ns),
            },
            correction: None,
        },
    }
}

/// Whether a plan in time rests on a clock bound wider than the time it
/// leaves after the message came (or on no bound at all): the device
/// cannot tell whether it acts in time. (A late plan is counted as late.)
fn is_wide(plan: &Plan, arrived_mono_ns: u64) -> bool {
    let Some(spare) = plan.target.mono_ns.checked_sub(arrived_mono_ns) else {
        return false;
    };
    plan.correction.is_none_or(|c| c.bound_ns > spare)
}

/// The running actor; it ends when every [`Acting`] is gone and what was
/// planned has been done.
pub struct Actor {
    /// Gives back the notifier (`--act-notify`), for its counts.
    thread: Option<JoinHandle<Option<Notifier>>>,
    clock: ClockEstimate,
}

impl Actor {
    /// Starts the actor thread, recording into `recorder` and telling
    /// `notifier`'s app at each action's moment; a real-time thread when
    /// `realtime` and allowed.
    pub fn start(
        act_at: ActAt,
        clock: ClockEstimate,
        recorder: Recorder,
        realtime: bool,
        mut notifier: Option<Notifier>,
    ) -> std::io::Result<(Actor, Acting)> {
        let (actor, planned) = mpsc::channel();
        let clock_for_plans = clock.clone();
        let thread = std::thread::Builder::new()
            .name("actor".into())
            .spawn(move || {
                if let Err(e) = skewscope_os::priority::precise_timers_this_thread() {
                    tracing::warn!(target: "probe::act", "timer slack left as it is: {e}");
                }
                if realtime {
                    match skewscope_os::priority::realtime_this_thread(1) {
                        Ok(()) => tracing::info!(target: "probe::act", "the actor runs real-time (SCHED_FIFO 1)"),
                        Err(e) => tracing::warn!(
                            target: "probe::act",
                            "--act-realtime: the actor runs at normal priority: {e} (it needs CAP_SYS_NICE or LimitRTPRIO=1, and no RestrictRealtime=yes)"
                        ),
                    }
                }
                run(&planned, &recorder, &clock, notifier.as_mut());
                notifier
            })?;
        Ok((
            Actor {
                thread: Some(thread),
                clock: clock_for_plans.clone(),
            },
            Acting {
                act_at,
                clock: clock_for_plans,
                actor,
            },
        ))
    }

    /// Waits for the actions still planned (the [`Acting`] handles must be
    /// gone, or this waits for them).
    pub fn finish(mut self) {
        if let Some(t) = self.thread.take()
            && let Ok(Some(notifier)) = t.join()
        {
            let target = notifier.target().clone();
            let n = notifier.finish();
            let said = format!(
                "--act-notify {target} ({}): {} notice(s) sent, {} answered",
                n.app, n.sent, n.answered
            );
            if n.undelivered > 0 || n.unanswered > 0 || n.bad_answers > 0 {
                tracing::warn!(
                    target: "probe::act",
                    "{said}; {} not delivered (the app was not listening, or not reading), {} never answered (the app did not say it acted: those actions are not audited), {} answer(s) refused",
                    n.undelivered,
                    n.unanswered,
                    n.bad_answers
                );
            } else {
                tracing::info!(target: "probe::act", "{said}");
            }
        }
        let wide = self.clock.wide_actions();
        if wide > 0 {
            tracing::warn!(
                target: "probe::act",
                "{wide} action(s) taken on a clock bound wider than the time their message left (or before any time exchange): they may be early or late by that much; the report counts them"
            );
        }
        let sleeps = self.clock.sleeps_seen();
        if sleeps > 0 {
            tracing::warn!(
                target: "probe::act",
                "this device was suspended {sleeps} time(s) during the run; after each wake, actions before the next time exchange were taken on this device's own clock"
            );
        }
    }
}

fn run(
    planned: &Receiver<Planned>,
    recorder: &Recorder,
    clock: &ClockEstimate,
    mut notifier: Option<&mut Notifier>,
) {
    let mut due: BinaryHeap<Planned> = BinaryHeap::new();
    let mut fired: Vec<Planned> = Vec::new();
    let mut senders_gone = false;
    loop {
        let Some(next) = due.peek().map(|p| p.target.mono_ns) else {
            if senders_gone {
                return;
            }
            match planned.recv() {
                Ok(p) => due.push(p),
                Err(_) => return,
            }
            continue;
        };
        let now = skewscope_os::clock::raw_ns();
        let spin = SPIN.as_nanos() as u64;
        if senders_gone && next > now + FINISH_WAIT.as_nanos() as u64 {
            tracing::warn!(
                target: "probe::act",
                "the run ended with {} action(s) planned more than {FINISH_WAIT:?} ahead: not done",
                due.len()
            );
            return;
        }
        let look = LOOK_AGAIN.as_nanos() as u64;
        if next <= now + look && due.peek().is_some_and(|p| !p.looked_again) {
            // The last look: exchanges that came during the lead count.
            let mut p = due.pop().expect("just looked");
            let plan = plan_at(clock, p.act_at_ns, skewscope_os::clock::now_raw());
            if plan.correction.is_some() {
                p.target = plan.target;
                p.offset_ns = plan.correction.map(|c| c.theta_ns);
                p.offset_bound_ns = plan.correction.map(|c| c.bound_ns);
            }
            p.looked_again = true;
            due.push(p);
            continue;
        }
        let wake = if due.peek().is_some_and(|p| !p.looked_again) {
            look
        } else {
            spin
        };
        if next > now + wake && !senders_gone {
            // Sleep, but wake for a message planned sooner.
            match planned.recv_timeout(coarse(next - now - wake)) {
                Ok(p) => {
                    due.push(p);
                    continue;
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => senders_gone = true,
            }
            continue;
        }
        if next > now + wake {
            std::thread::sleep(coarse(next - now - wake));
            continue;
        }
        // The last stretch: read the clock until the target has come,
        // keeping the core (see the module's doc: why not yield it).
        while skewscope_os::clock::raw_ns() < next {
            std::hint::spin_loop();
        }
        // One moment for everything due: connections that act on one
        // message share this device's timer, and act when it fires.
        let done = skewscope_os::clock::now_raw();
        fired.clear();
        while due.peek().is_some_and(|p| p.target.mono_ns <= done.mono_ns) {
            fired.push(due.pop().expect("just looked"));
        }
        // The app beside the probe acts now: its notices go first.
        if let Some(notifier) = notifier.as_deref_mut() {
            for p in &fired {
                notifier.notify(&action(p, done));
            }
        }
        // Writing the records down can wait for anything else due this
        // moment (on one core, another probe's timer) to fire first.
        std::thread::yield_now();
        for p in fired.drain(..) {
            let plan = Plan {
                target: p.target,
                correction: p
                    .offset_bound_ns
                    .map(|bound_ns| skewscope_core::clock::Correction {
                        theta_ns: p.offset_ns.unwrap_or(0),
                        bound_ns,
                    }),
            };
            if is_wide(&plan, p.arrived_mono_ns) {
                clock.count_wide_action();
            }
            recorder.record(ProbeRecord::Action(action(&p, done)));
        }
        // Messages planned meanwhile.
        while let Ok(p) = planned.try_recv() {
            due.push(p);
        }
    }
}

/// The share of a coarse sleep held back: more than NTP slews
/// `CLOCK_MONOTONIC` (which sleeps count) against the raw clock (which
/// targets are on): chrony slews at most 83,333 ppm, 1/12.
const SLEW_SHARE: u64 = 8;

/// The sleep to ask for when `raw_left_ns` of the raw clock are left
/// before the spin: that less [`SLEW_SHARE`]'s part of it, so a slewed
/// monotonic clock cannot carry the sleep past the moment.
fn coarse(raw_left_ns: u64) -> Duration {
    Duration::from_nanos(raw_left_ns - raw_left_ns / SLEW_SHARE)
}

/// The record of a planned action done at `done`.
fn action(p: &Planned, done: Stamp) -> Action {
    Action {
        conn: p.conn,
        key: p.key,
        hash: p.hash,
        act_at_ns: p.act_at_ns,
        offset_ns: p.offset_ns,
        offset_bound_ns: p.offset_bound_ns,
        target: p.target,
        done,
        late_ns: p.arrived_mono_ns.saturating_sub(p.target.mono_ns),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_coarse_sleep_ends_before_its_moment_on_a_slewed_clock() {
        for left in [1u64, 299_999, 1_000_000, 300_000_000, 5_000_000_000] {
            let asked = coarse(left).as_nanos() as u64;
            assert!(asked <= left);
            // CLOCK_MONOTONIC slewed 1/12 slow against the raw clock (chrony's
            // fastest slew): the sleep lasts 12/11 of what was asked, in raw
            // time, and still ends before the moment.
            assert!(asked as u128 * 12 / 11 <= left as u128, "{left}: {asked}");
        }
    }
}
