//! Faults injected together, at random moments from a printed seed, into a
//! whole running audit path (Jepsen's nemesis, in small): an agent, three
//! uploading probes with shifted clocks (one behind a veth link in a
//! namespace of its own), and broadcasts every 150 ms; meanwhile the agent
//! and the probes are killed and restarted, the link is cut and throttled
//! to a trickle, the disks under the agent's data and the probes' logs are
//! filled, a probe's wall clock steps, a device "reboots" (a new boot id),
//! processes get SIGHUP, and audits run through it all. Then invariants,
//! not timings: every run a probe wrote is stored by the agent record for
//! record, once; every receipt is joined or counted unmatched; each clock
//! interval holds an offset that was applied; an audit clear of faults
//! passes and one among them says why it does not; nothing panicked.
//!
//! `SKEWSCOPE_FAULT_SEED=N` replays a seed; `SKEWSCOPE_FAULT_SECS=600` is the
//! soak variant (docs/bad-input.md). Runs in a user, network and mount
//! namespace of its own: nothing outside is touched.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Reaped, SKEWSCOPE, json_report, sibling_binary, signal};
use nix::sys::signal::Signal;
use skewscope_core::log::AnyLog;
use skewscope_core::record::ProbeRecord;
use skewscope_os::log_files::read_file;
use skewscope_os::test_namespace::{PeerNamespace, SERVER_ADDR, SERVER_LINK, in_own_namespace};

const NAME: &str = "faults_injected_together_lose_and_double_nothing";
const PROBES: usize = 3;
/// The probe behind the veth link (cut and throttled).
const LINKED: usize = 1;
/// The probe whose device reboots.
const REBOOTING: usize = 2;
/// The probe whose wall clock steps. libfaketime reads its shift from a
/// file on every clock read for it (`FAKETIME_NO_CACHE`), which makes
/// each wall-clock read cost tens of µs: its wall and monotonic readings
/// are that far apart, which a real clock's (20 ns) are not. The others
/// get a fixed shift, read once.
const STEPPED: usize = 0;
/// What that costs the stepped probe's offset, beyond its bound: the
/// time exchange's delay is measured on the monotonic clock, its offset on
/// the wall clock, and a slow wall read sits between them.
const STEPPED_READ_SLACK_NS: i64 = 100_000;
/// Each probe's wall clock at start, seconds off the real one.
const SHIFTS: [f64; PROBES] = [0.004, -0.003, 0.0];

#[test]
fn faults_injected_together_lose_and_double_nothing() {
    if in_own_namespace(NAME) {
        inside();
    }
}

/// What the nemesis did, with when: the audits are judged against it.
#[derive(Clone, Debug)]
struct Fault {
    what: String,
    from: Instant,
    until: Instant,
}

fn inside() {
    let seed: u64 = std::env::var("SKEWSCOPE_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..1_000_000));
    let secs: u64 = std::env::var("SKEWSCOPE_FAULT_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    println!("fault seed {seed}, {secs} s (rerun: SKEWSCOPE_FAULT_SEED={seed})");
    let mut rng = fastrand::Rng::with_seed(seed);

    let dir = tempfile::tempdir().unwrap();
    // Room for what the run writes (each probe restart keeps its run's log,
    // and the agent stores it), so the disks are full only when the
    // nemesis fills them: about 1.5 MiB of logs a minute here.
    let minutes = secs.div_ceil(60);
    let agent_fs = mounted_tmpfs(dir.path(), "agent-fs", &format!("{}m", 16 * minutes));
    let probe_fs = mounted_tmpfs(dir.path(), "probe-fs", &format!("{}m", 8 * minutes));
    let stderr_dir = dir.path().join("stderr");
    std::fs::create_dir_all(&stderr_dir).unwrap();
    let peer = PeerNamespace::create().expect("the peer namespace and its link");

    let mut world = World {
        agent_fs: agent_fs.clone(),
        probe_fs: probe_fs.clone(),
        stderr_dir,
        port: 0,
        agent: None,
        probes: (0..PROBES).map(|_| None).collect(),
        incarnations: 0,
        shift_files: (0..PROBES)
            .map(|i| dir.path().join(format!("shift-{i}")))
            .collect(),
        shifts: (0..PROBES).map(|i| vec![SHIFTS[i]]).collect(),
        boot_ids: 0,
        peer,
        dir: dir.path().to_owned(),
    };
    for (i, shift) in SHIFTS.into_iter().enumerate() {
        world.set_shift(i, shift);
    }
    assert!(world.start_agent(), "the agent starts");
    for i in 0..PROBES {
        world.start_probe(i, false);
    }

    // Broadcasts all along, whoever is up.
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let port = world.port;
    let broadcaster = {
        let (stop, sent) = (stop.clone(), sent.clone());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            // Bounded: at most ten a second for the run's length and the end.
            for _ in 0..(secs + 120) * 10 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let r = runtime.block_on(async {
                    tokio::time::timeout(
                        Duration::from_secs(2),
                        agent::http_client::start_test(addr, None),
                    )
                    .await
                });
                if matches!(r, Ok(Ok(ref r)) if r.status == 200) {
                    sent.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(150));
            }
        })
    };

    // The nemesis.
    let mut faults: Vec<Fault> = Vec::new();
    let mut audits: Vec<(Instant, Instant, i32, String)> = Vec::new();
    let mut pending_audit: Option<(Instant, Child, PathBuf)> = None;
    let mut undo: Vec<(Instant, Undo)> = Vec::new();
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(rng.u64(300..1500)));
        world.supervise();
        undo_due(&mut undo, Instant::now());
        if let Some((from, mut child, out)) = pending_audit.take() {
            match child.try_wait().unwrap() {
                Some(status) => {
                    let text = std::fs::read_to_string(&out).unwrap_or_default()
                        + &std::fs::read_to_string(out.with_extension("err")).unwrap_or_default();
                    audits.push((from, Instant::now(), status.code().unwrap_or(-1), text));
                }
                None => pending_audit = Some((from, child, out)),
            }
        }
        let now = Instant::now();
        let hold = Duration::from_millis(rng.u64(500..3000));
        let fault = |what: String, until: Instant| Fault {
            what,
            from: now,
            until,
        };
        match rng.u8(..10) {
            0 => {
                world.kill_agent();
                // On a full disk it may not start: supervise() retries.
                world.start_agent();
                faults.push(fault("agent killed and restarted".into(), Instant::now()));
            }
            1 => {
                let i = rng.usize(..PROBES);
                world.kill_probe(i);
                world.start_probe(i, false);
                faults.push(fault(format!("probe {i} killed and restarted"), now));
            }
            2 => {
                link(&["link", "set", SERVER_LINK, "down"]);
                undo.push((now + hold, Undo::LinkUp));
                faults.push(fault("link down".into(), now + hold));
            }
            3 => {
                let _ = link_status(&["qdisc", "del", "dev", SERVER_LINK, "root"]);
                link(&[
                    "qdisc",
                    "add",
                    "dev",
                    SERVER_LINK,
                    "root",
                    "tbf",
                    "rate",
                    "32kbit",
                    "burst",
                    "2kb",
                    "latency",
                    "500ms",
                ]);
                undo.push((now + hold, Undo::Untrickle));
                faults.push(fault("link throttled to 32 kbit/s".into(), now + hold));
            }
            4 => {
                let filler = fill(&world.agent_fs);
                undo.push((now + hold, Undo::Remove(filler)));
                faults.push(fault("agent's disk full".into(), now + hold));
            }
            5 => {
                let filler = fill(&world.probe_fs);
                undo.push((now + hold, Undo::Remove(filler)));
                faults.push(fault("probes' disk full".into(), now + hold));
            }
            6 => {
                let i = STEPPED;
                let step = if rng.bool() { 0.05 } else { -0.03 };
                let to = world.shifts[i].last().unwrap() + step;
                world.set_shift(i, to);
                faults.push(fault(
                    format!("probe {i}'s wall clock stepped {step} s"),
                    now,
                ));
            }
            7 => {
                world.kill_probe(REBOOTING);
                world.start_probe(REBOOTING, true);
                faults.push(fault(format!("probe {REBOOTING}'s device rebooted"), now));
            }
            8 => {
                let target = rng.usize(..=PROBES);
                world.hangup(target);
                faults.push(fault(format!("SIGHUP to process {target}"), now));
            }
            _ if pending_audit.is_none() => {
                let out = world.dir.join(format!("audit-{}.txt", audits.len()));
                let child = Command::new(SKEWSCOPE)
                    .args([
                        "audit",
                        "--agent",
                        &format!("http://127.0.0.1:{}", world.port),
                    ])
                    .args(["--broadcasts", "3", "--interval", "200ms", "--settle", "3s"])
                    .args(["--require-probes", &PROBES.to_string()])
                    .args(["--max-skew-p99", "1s"])
                    .stdout(std::fs::File::create(&out).unwrap())
                    .stderr(std::fs::File::create(out.with_extension("err")).unwrap())
                    .spawn()
                    .unwrap();
                pending_audit = Some((now, child, out));
            }
            _ => {}
        }
        if let Some(f) = faults.last().filter(|f| f.from == now) {
            println!(
                "{:>6.1} s  {}",
                secs as f64 - (end - now).as_secs_f64(),
                f.what
            );
        }
    }

    // Faults end: everything restored, every process up, then a clean audit.
    undo_due(&mut undo, Instant::now() + Duration::from_secs(3600));
    if let Some((from, mut child, out)) = pending_audit.take() {
        let status = child.wait().unwrap();
        let text = std::fs::read_to_string(&out).unwrap_or_default()
            + &std::fs::read_to_string(out.with_extension("err")).unwrap_or_default();
        audits.push((from, Instant::now(), status.code().unwrap_or(-1), text));
    }
    world.all_up();
    // Ready as an operator would wait for: each probe's live run has its
    // connections open and its clock measured (the audit refuses to judge
    // receipts from a clock it has no exchange for, and says so).
    let ready = Instant::now() + Duration::from_secs(30);
    while !(0..PROBES).all(|i| probe_ready(&probe_fs.join(format!("p{i}.sklog")))) {
        world.supervise();
        assert!(
            Instant::now() < ready,
            "seed {seed}: the probes never got ready: {:?}\n{}",
            (0..PROBES)
                .map(|i| readiness(&probe_fs.join(format!("p{i}.sklog"))))
                .collect::<Vec<_>>(),
            stderr_tails(&world.stderr_dir)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let clean = Command::new(SKEWSCOPE)
        .args([
            "audit",
            "--agent",
            &format!("http://127.0.0.1:{}", world.port),
        ])
        .args([
            "--broadcasts",
            "3",
            "--interval",
            "200ms",
            "--settle",
            "30s",
        ])
        .args(["--require-probes", &PROBES.to_string()])
        .args(["--max-skew-p99", "1s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Supervised while it runs, as systemd restarts a unit that stopped: a
    // probe that found its disk still full just before the faults were
    // undone stops its run (by design) and is started again.
    let clean = {
        let mut child = clean;
        let (out, err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
        let read = |mut r: Box<dyn std::io::Read + Send>| {
            std::thread::spawn(move || {
                let mut v = Vec::new();
                let _ = r.read_to_end(&mut v);
                v
            })
        };
        let (out, err) = (read(Box::new(out)), read(Box::new(err)));
        let deadline = Instant::now() + Duration::from_secs(120);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "seed {seed}: the clean audit never ended"
            );
            world.supervise();
            std::thread::sleep(Duration::from_millis(200));
        };
        std::process::Output {
            status,
            stdout: out.join().unwrap(),
            stderr: err.join().unwrap(),
        }
    };
    let clean_text = String::from_utf8_lossy(&clean.stdout).into_owned()
        + &String::from_utf8_lossy(&clean.stderr)
        + &String::from_utf8_lossy(
            &Command::new("sh")
                .arg("-c")
                .arg(format!(
                    "df -h {0} {1}; ls -la {0} {0}/agent {1}",
                    agent_fs.display(),
                    probe_fs.display()
                ))
                .output()
                .unwrap()
                .stdout,
        )
        + "\nthe agent's /healthz: "
        + &healthz(world.port)
        + "\n"
        + &stderr_tails(&world.stderr_dir);

    stop.store(true, Ordering::Relaxed);
    broadcaster.join().unwrap();
    // Every run the probes hold reaches the agent once its links work again
    // (a probe's upload back-off is at most 10 s); only then are they
    // stopped, with ten seconds to send their last records.
    let data = agent_fs.join("agent");
    let converged = Instant::now() + Duration::from_secs(60);
    while !uploads_lagging(&probe_fs, &data.join("probes")).is_empty() {
        if Instant::now() >= converged {
            keep_for_inspection(seed, &[&probe_fs, &data]);
        }
        assert!(
            Instant::now() < converged,
            "seed {seed}: uploads did not catch up within 60 s of the faults' end: {:#?}\n\
             the agent's /healthz: {}\n{}",
            uploads_lagging(&probe_fs, &data.join("probes")),
            healthz(world.port),
            stderr_tails(&world.stderr_dir)
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    for i in 0..PROBES {
        let Some(mut probe) = world.probes[i].take() else {
            continue;
        };
        signal(&probe.0, Signal::SIGTERM);
        probe.0.wait().unwrap();
    }
    if let Some(mut agent) = world.agent.take() {
        signal(&agent.0, Signal::SIGTERM);
        agent.0.wait().unwrap();
    }
    // Counts by kind: the figures docs/bad-input.md quotes.
    let mut by_kind: BTreeMap<String, usize> = BTreeMap::new();
    for f in &faults {
        let kind = [
            ("killed and restarted", "probe killed and restarted"),
            ("device rebooted", "device rebooted"),
            ("wall clock stepped", "wall clock stepped"),
            ("SIGHUP", "SIGHUP"),
        ]
        .into_iter()
        .find(|(part, _)| f.what.contains(part) && !f.what.starts_with("agent"))
        .map_or(f.what.as_str(), |(_, label)| label);
        *by_kind.entry(kind.to_owned()).or_default() += 1;
    }
    println!(
        "{} faults, {} audits during them, {} broadcasts; by kind: {by_kind:?}",
        faults.len(),
        audits.len(),
        sent.load(Ordering::Relaxed)
    );

    // Nothing panicked.
    for entry in std::fs::read_dir(&world.stderr_dir).unwrap().flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        assert!(
            !text.contains("panicked"),
            "seed {seed}: {} panicked:\n{text}",
            entry.path().display()
        );
    }

    // Every run a probe wrote is stored once, record for record.
    let stored = runs_in(&data.join("probes"));
    let local = runs_in(&probe_fs);
    assert!(
        local.len() > PROBES,
        "seed {seed}: no probe was ever restarted"
    );
    let mut receipts_written = 0u64;
    for (run_id, (path, records)) in &local {
        receipts_written += records
            .iter()
            .filter(|r| matches!(r, ProbeRecord::Receipt(_)))
            .count() as u64;
        let Some((_, kept)) = stored.get(run_id) else {
            panic!(
                "seed {seed}: run {run_id:032x} ({}) never stored",
                path.display()
            );
        };
        assert!(
            kept == records,
            "seed {seed}: run {run_id:032x} ({}): stored {} records ({}), the probe wrote {}",
            path.display(),
            kept.len(),
            if records.starts_with(kept) {
                "a prefix"
            } else {
                "not a prefix"
            },
            records.len()
        );
    }
    assert_eq!(
        stored.len(),
        local.len(),
        "seed {seed}: runs stored that no probe wrote"
    );

    // Every receipt is joined or counted unmatched; none twice.
    let (text, json) = json_report(&[&data]);
    let joined = json["receipts"].as_u64().unwrap();
    let unmatched = json["unmatched"].as_u64().unwrap();
    assert_eq!(json["duplicates"], 0, "seed {seed}: {text}");
    assert_eq!(
        joined + unmatched,
        receipts_written,
        "seed {seed}: receipts neither joined nor counted: {text}"
    );
    println!(
        "receipts: {receipts_written} written by the probes, all stored; {joined} joined, \
         {unmatched} unmatched (broadcasts the agent could not write: killed, or its disk \
         full), 0 lost; \
         {} probe runs; agent records lost to its full disk (counted, said): {}",
        local.len(),
        json["agent"]["records_lost"]
    );

    // Each probe run's clock interval holds a shift it ran with.
    let probes = json["probes"].as_array().unwrap();
    let mut judged = 0;
    for p in probes {
        let (Some(offset), Some(bound)) = (p["offset_ns"].as_i64(), p["offset_bound_ns"].as_i64())
        else {
            continue;
        };
        let name = p["name"].as_str().unwrap_or_default();
        let i: usize = name.trim_start_matches('p').parse().unwrap();
        let applied = &world.shifts[i];
        let slack = if i == STEPPED {
            STEPPED_READ_SLACK_NS
        } else {
            0
        };
        assert!(
            applied
                .iter()
                .any(|s| ((s * 1e9).round() as i64 - offset).abs() <= bound + slack),
            "seed {seed}: {name}: offset {offset} ± {bound} ns holds none of {applied:?} s: {text}"
        );
        judged += 1;
    }
    assert!(
        judged >= PROBES,
        "seed {seed}: too few offsets measured: {text}"
    );

    // Audits: one with no fault in it or in the 12 s before (a probe's
    // reconnect back-off) passes; one among faults may pass (what it judged
    // was clean), fail (1) or be unjudgeable (2), and then says why. (That
    // an agent restart between an audit's broadcasts is exit 2 is tested on
    // its own in collector/tests/audit.rs; one before its first broadcast
    // leaves a run it can judge.)
    for (from, until, code, out) in &audits {
        let near: Vec<&Fault> = faults
            .iter()
            .filter(|f| f.from <= *until && f.until + Duration::from_secs(12) >= *from)
            .collect();
        let expected: &[i32] = if near.is_empty() { &[0] } else { &[0, 1, 2] };
        assert!(
            expected.contains(code),
            "seed {seed}: an audit exited {code}, expected {expected:?} with {near:?}:\n{out}"
        );
        if *code != 0 {
            assert!(
                out.contains("FAIL") || out.contains("cannot audit"),
                "seed {seed}: an audit exited {code} without saying why:\n{out}"
            );
        }
    }
    // The audit after the faults can judge (never exit 2): every probe
    // uploads, every receipt is in, none missing. Its skew checks may fail
    // only when a probe's live run has a stepped clock, whose corrected
    // bound the report widens (by far too much today: see docs/bad-input.md).
    let code = clean.status.code();
    assert!(
        code == Some(0) || code == Some(1),
        "seed {seed}: the audit after the faults could not judge:\n{clean_text}"
    );
    for check in ["PASS  missing", "PASS  probes-reported"] {
        assert!(
            clean_text.contains(check),
            "seed {seed}: the audit after the faults: no '{check}':\n{clean_text}"
        );
    }
    let failed: Vec<&str> = clean_text
        .lines()
        .filter(|l| l.trim_start().starts_with("FAIL  "))
        .collect();
    assert!(
        failed
            .iter()
            .all(|l| l.trim_start().starts_with("FAIL  skew")),
        "seed {seed}: the audit after the faults failed {failed:?}:\n{clean_text}"
    );
    if !failed.is_empty() {
        assert!(
            clean_text.contains("CLOCK STEPPED"),
            "seed {seed}: skew failed with no stepped clock: {failed:?}:\n{clean_text}"
        );
    }
}

/// A supervisor's view of what runs: restarts what died, as systemd would.
struct World {
    agent_fs: PathBuf,
    probe_fs: PathBuf,
    stderr_dir: PathBuf,
    port: u16,
    agent: Option<Reaped>,
    /// Each probe's process.
    probes: Vec<Option<Reaped>>,
    incarnations: u32,
    shift_files: Vec<PathBuf>,
    /// Every wall clock shift each probe ran with, in order.
    shifts: Vec<Vec<f64>>,
    boot_ids: u32,
    peer: PeerNamespace,
    dir: PathBuf,
}

impl World {
    fn stderr_file(&mut self, what: &str) -> std::fs::File {
        self.incarnations += 1;
        std::fs::File::create(
            self.stderr_dir
                .join(format!("{what}-{}", self.incarnations)),
        )
        .unwrap()
    }

    /// Starts the agent on its port (one try: on a full disk it may fail to
    /// start, and [`World::supervise`] tries again, as systemd's Restart=
    /// would). Its stdout is drained by a thread, so it never blocks.
    fn start_agent(&mut self) -> bool {
        let listen = format!("0.0.0.0:{}", self.port);
        let stderr = self.stderr_file("agent");
        let mut child = Reaped(
            Command::new(sibling_binary("skewscope-agent"))
                .args(["--listen", &listen, "--data-dir"])
                .arg(self.agent_fs.join("agent"))
                .stdout(Stdio::piped())
                .stderr(stderr)
                .spawn()
                .unwrap(),
        );
        let (tx, rx) = std::sync::mpsc::channel();
        let stdout = child.0.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let first = rx.recv_timeout(Duration::from_secs(20)).ok();
        match first.and_then(|l| l.strip_prefix("listening on ").map(str::to_owned)) {
            Some(addr) => {
                self.port = addr.rsplit(':').next().unwrap().parse().unwrap();
                self.agent = Some(child);
                true
            }
            None => {
                let _ = child.0.kill();
                let _ = child.0.wait();
                false
            }
        }
    }

    fn kill_agent(&mut self) {
        if let Some(mut agent) = self.agent.take() {
            signal(&agent.0, Signal::SIGKILL);
            agent.0.wait().unwrap();
        }
    }

    fn set_shift(&mut self, i: usize, seconds: f64) {
        if self.shifts[i].last() != Some(&seconds) {
            self.shifts[i].push(seconds);
        }
        std::fs::write(&self.shift_files[i], format!("{seconds:+}\n")).unwrap();
    }

    /// Starts probe `i` on its log; `reboot`: under a new boot id, as after
    /// the device restarted.
    fn start_probe(&mut self, i: usize, reboot: bool) {
        let (host, name) = if i == LINKED {
            (SERVER_ADDR, format!("p{i}"))
        } else {
            ([127, 0, 0, 1], format!("p{i}"))
        };
        let addr = std::net::SocketAddr::from((host, self.port));
        let mut cmd = if reboot {
            self.boot_ids += 1;
            let boot_id = self.dir.join(format!("boot-id-{}", self.boot_ids));
            std::fs::write(
                &boot_id,
                format!("00000000-0000-4000-8000-{:012x}\n", self.boot_ids),
            )
            .unwrap();
            let mut c = Command::new("unshare");
            c.args(["--mount", "sh", "-c"])
                .arg(r#"mount --bind "$0" /proc/sys/kernel/random/boot_id && exec "$@""#)
                .arg(&boot_id)
                .arg(sibling_binary("skewscope-probe"));
            c
        } else {
            Command::new(sibling_binary("skewscope-probe"))
        };
        let stderr = self.stderr_file(&name);
        cmd.args(["--url", &format!("ws://{addr}/ws"), "--connections", "2"])
            .args(["--name", &name, "--reconnect", "--time-interval", "300ms"])
            .args(["--upload", &format!("http://{addr}")])
            .arg("--out")
            .arg(self.probe_fs.join(format!("{name}.sklog")))
            .env("LD_PRELOAD", common::faketime_lib())
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
            .stdout(Stdio::null())
            .stderr(stderr);
        if i == STEPPED {
            cmd.env("FAKETIME_TIMESTAMP_FILE", &self.shift_files[i])
                .env("FAKETIME_NO_CACHE", "1");
        } else {
            cmd.env("FAKETIME", format!("{:+}", SHIFTS[i]));
        }
        let child = if i == LINKED {
            self.peer
                .run(move || cmd.spawn())
                .unwrap()
                .join()
                .unwrap()
                .unwrap()
        } else {
            cmd.spawn().unwrap()
        };
        self.probes[i] = Some(Reaped(child));
    }

    fn kill_probe(&mut self, i: usize) {
        if let Some(mut probe) = self.probes[i].take() {
            signal(&probe.0, Signal::SIGKILL);
            probe.0.wait().unwrap();
        }
    }

    /// SIGHUP: the agent starts a new segment, a probe reopens its log.
    fn hangup(&mut self, target: usize) {
        let child = match target {
            PROBES => self.agent.as_ref().map(|a| &a.0),
            i => self.probes[i].as_ref().map(|p| &p.0),
        };
        if let Some(child) = child {
            signal(child, Signal::SIGHUP);
        }
    }

    /// Restarts whatever exited (a probe whose disk filled ends its run).
    fn supervise(&mut self) {
        if let Some(agent) = &mut self.agent
            && agent.0.try_wait().unwrap().is_some()
        {
            self.agent = None;
        }
        if self.agent.is_none() {
            self.start_agent();
        }
        for i in 0..PROBES {
            let exited = match &mut self.probes[i] {
                Some(p) => p.0.try_wait().unwrap().is_some(),
                None => true,
            };
            if exited {
                self.start_probe(i, false);
            }
        }
    }

    /// Supervises until the agent and every probe run (after the faults).
    fn all_up(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            self.supervise();
            std::thread::sleep(Duration::from_millis(500));
            let probes_up = self.probes.iter_mut().all(|p| {
                p.as_mut()
                    .is_some_and(|p| p.0.try_wait().unwrap().is_none())
            });
            if self.agent.is_some() && probes_up {
                return;
            }
            assert!(Instant::now() < deadline, "not everything came back up");
        }
    }
}

enum Undo {
    LinkUp,
    Untrickle,
    Remove(PathBuf),
}

/// Ends the faults whose time has come (all of them, given a late `now`).
fn undo_due(undo: &mut Vec<(Instant, Undo)>, now: Instant) {
    let (due, later): (Vec<_>, Vec<_>) = std::mem::take(undo)
        .into_iter()
        .partition(|(t, _)| *t <= now);
    *undo = later;
    for (_, u) in due {
        match u {
            Undo::LinkUp => link(&["link", "set", SERVER_LINK, "up"]),
            Undo::Untrickle => {
                let _ = link_status(&["qdisc", "del", "dev", SERVER_LINK, "root"]);
            }
            Undo::Remove(path) => {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

fn link(args: &[&str]) {
    assert!(link_status(args), "ip/tc {args:?}");
}

fn link_status(args: &[&str]) -> bool {
    let tool = if args[0] == "qdisc" { "tc" } else { "ip" };
    Command::new(tool)
        .args(args)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A tmpfs of `size` at `dir/name` (the test's own mount namespace).
fn mounted_tmpfs(dir: &Path, name: &str, size: &str) -> PathBuf {
    let at = dir.join(name);
    std::fs::create_dir_all(&at).unwrap();
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(&at)
        .status()
        .unwrap()
        .success();
    assert!(ok, "mount a tmpfs at {}", at.display());
    at
}

/// Fills the file system at `dir` until a write fails; returns the filler.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join(format!("filler-{}", fastrand::u32(..)));
    let mut f = std::fs::File::create(&path).unwrap();
    let chunk = vec![0u8; 16 * 1024];
    while f.write_all(&chunk).is_ok() {}
    let _ = f.sync_all();
    path
}

/// How old a live run's record must be before the agent is expected to
/// hold it: the recorder flushes every 100 ms and the uploader looks every
/// 200 ms, so the newest records are always on their way.
const UPLOAD_SETTLE_NS: u64 = 2_000_000_000;

/// The runs in the probes' logs whose records older than
/// [`UPLOAD_SETTLE_NS`] the agent does not store in full: each file, with
/// its records and the agent's. Live runs keep writing (a time exchange or
/// two a second, more on a jittery link): asking for every record would be
/// a race against the newest, which a loaded machine can lose for a minute.
/// The probes are stopped after this and every record is compared then.
fn uploads_lagging(local: &Path, stored: &Path) -> Vec<String> {
    let cutoff = skewscope_os::clock::now()
        .wall_ns
        .saturating_sub(UPLOAD_SETTLE_NS);
    let local = runs_in(local);
    let stored = runs_in(stored);
    local
        .iter()
        .filter_map(|(run_id, (path, records))| {
            let kept = stored.get(run_id).map_or(0, |(_, kept)| kept.len());
            let settled = records
                .iter()
                .position(|r| r.stamp().is_some_and(|s| s.wall_ns > cutoff))
                .unwrap_or(records.len());
            (kept < settled).then(|| {
                let damage = match read_file(path) {
                    Ok(AnyLog::Probe(d)) => format!("{} bytes skipped", d.skipped_bytes),
                    other => format!("{other:?}"),
                };
                format!(
                    "{} (run {run_id:032x}): {} records ({damage}), the agent has {kept}",
                    path.display(),
                    records.len()
                )
            })
        })
        .collect()
}

/// Copies the logs out of the test's tmpfs mounts (which end with its
/// namespace) to `$TMPDIR/skewscope-faults-SEED/`, for a failure to be read.
fn keep_for_inspection(seed: u64, dirs: &[&Path]) {
    let to = std::env::temp_dir().join(format!("skewscope-faults-{seed}"));
    for dir in dirs {
        let _ = Command::new("cp").arg("-a").arg(dir).arg(&to).status();
    }
    println!("logs kept in {}", to.display());
}

/// Whether a probe's live log shows both connections open and a time
/// exchange answered.
fn probe_ready(log: &Path) -> bool {
    matches!(readiness(log), Some((opened, samples)) if opened >= 2 && samples >= 1)
}

/// Connections opened and time exchanges answered in a probe's live log.
fn readiness(log: &Path) -> Option<(usize, usize)> {
    let Ok(AnyLog::Probe(decoded)) = read_file(log) else {
        return None;
    };
    let count = |what: fn(&ProbeRecord) -> bool| decoded.records.iter().filter(|r| what(r)).count();
    Some((
        count(|r| matches!(r, ProbeRecord::ConnectionOpened(_))),
        count(|r| matches!(r, ProbeRecord::TimeSample(_))),
    ))
}

/// The agent's `/healthz`, for a failure's message.
fn healthz(port: u16) -> String {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    runtime
        .block_on(agent::http_client::request(
            addr, "GET", "/healthz", b"", None,
        ))
        .map_or_else(|e| e.to_string(), |r| r.body)
}

/// The last lines each process wrote to stderr, for a failure's message.
fn stderr_tails(dir: &Path) -> String {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.sort();
    let mut out = String::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = &lines[lines.len().saturating_sub(4)..];
        out.push_str(&format!("--- {}\n{}\n", f.display(), tail.join("\n")));
    }
    out
}

/// Every probe run in the logs under `dir`, by run id: its file and records.
fn runs_in(dir: &Path) -> BTreeMap<u128, (PathBuf, Vec<ProbeRecord>)> {
    let mut runs = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return runs;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "sklog") {
            continue;
        }
        let Ok(AnyLog::Probe(decoded)) = read_file(&path) else {
            continue;
        };
        let run_id = decoded.records.iter().find_map(|r| match r {
            ProbeRecord::Identity(i) => Some(i.run_id),
            _ => None,
        });
        // A run killed before it wrote its identity has nothing to upload.
        if let Some(run_id) = run_id {
            runs.insert(run_id, (path, decoded.records));
        }
    }
    runs
}
