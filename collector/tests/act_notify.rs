//! `--act-notify`, on the real binaries: a native app beside the probe
//! gets one datagram per action, at the action's moment, over a Unix
//! datagram socket and over UDP; receipts that name no time send nothing;
//! an app that is not listening costs the probe nothing and is counted; an
//! app that never answers is counted; the documented readers answer, and
//! the report lists them as actors with their own actions, once each.

mod common;

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{
    Reaped, count_of, json_report, probe_records, request_ok, sibling_binary, signal, start_agent,
    trigger_with_lead, wait_until,
};
use nix::sys::signal::Signal;
use nix::time::{ClockId, clock_gettime};
use skewscope_core::act_notice::ActNotice;
use skewscope_core::record::ProbeRecord;

const BROADCASTS: usize = 5;

fn mono_ns() -> u64 {
    let t = clock_gettime(ClockId::CLOCK_MONOTONIC).unwrap();
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

fn notifying_probe(
    url: &str,
    name: &str,
    out: &Path,
    connections: u32,
    notify: &str,
    stderr: &Path,
) -> Reaped {
    Reaped(
        Command::new(sibling_binary("skewscope-probe"))
            .args(["--url", url, "--name", name])
            .args(["--connections", &connections.to_string()])
            .args(["--time-interval", "200ms", "--duration", "120s"])
            .args(["--act-at", "/at_ns", "--act-notify", notify])
            .args(["--out", out.to_str().unwrap()])
            .stderr(std::fs::File::create(stderr).unwrap())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// Reads datagrams until `stop`, each with the moment it was read.
fn read_notices(
    mut recv: impl FnMut(&mut [u8]) -> std::io::Result<usize> + Send + 'static,
    stop: mpsc::Receiver<()>,
) -> std::thread::JoinHandle<Vec<(u64, ActNotice)>> {
    std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match recv(&mut buf) {
                Ok(len) => {
                    let at = mono_ns();
                    got.push((at, serde_json::from_slice(&buf[..len]).unwrap()));
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    if stop.try_recv().is_ok() {
                        return got;
                    }
                }
                Err(e) => panic!("reading notices: {e}"),
            }
        }
    })
}

#[test]
fn each_action_reaches_the_app_at_its_moment_and_a_deaf_app_costs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (mut agent, addr, _agent_log) = start_agent(dir.path());
    let url = format!("ws://{addr}/ws");

    let unix_app = UnixDatagram::bind(dir.path().join("app.sock")).unwrap();
    unix_app
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let udp_app = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp_app
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let udp_port = udp_app.local_addr().unwrap().port();
    let (stop_unix, unix_stop) = mpsc::channel();
    let (stop_udp, udp_stop) = mpsc::channel();
    let unix_reader = read_notices(move |b| unix_app.recv(b), unix_stop);
    let udp_reader = read_notices(move |b| udp_app.recv(b), udp_stop);

    let logs = ["unix", "udp", "deaf", "closed"].map(|n| dir.path().join(format!("{n}.sklog")));
    let errs = ["unix", "udp", "deaf", "closed"].map(|n| dir.path().join(format!("{n}.stderr")));
    // A UDP port nobody listens on: the kernel answers notices with ICMP.
    let closed_port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let closed_target = format!("udp:127.0.0.1:{closed_port}");
    let unix_target = format!("unix:{}", dir.path().join("app.sock").display());
    let udp_target = format!("udp:127.0.0.1:{udp_port}");
    let deaf_target = format!("unix:{}", dir.path().join("nobody.sock").display());
    let mut probes = [
        notifying_probe(&url, "unix", &logs[0], 2, &unix_target, &errs[0]),
        notifying_probe(&url, "udp", &logs[1], 1, &udp_target, &errs[1]),
        notifying_probe(&url, "deaf", &logs[2], 1, &deaf_target, &errs[2]),
        notifying_probe(&url, "closed", &logs[3], 1, &closed_target, &errs[3]),
    ];
    let connections = [2usize, 1, 1, 1];
    for (log, n) in logs.iter().zip(connections) {
        wait_until("probe connected", || {
            count_of(log, |r| matches!(r, ProbeRecord::ConnectionOpened(_))) == n
        });
        wait_until("time exchanges answered", || {
            count_of(log, |r| matches!(r, ProbeRecord::TimeSample(_))) >= 4
        });
    }

    // Broadcasts with a time to act, and between them payloads that name
    // none (received, not acted on, nothing to tell).
    for _ in 0..BROADCASTS {
        trigger_with_lead(&addr, "300ms");
        request_ok(&addr, "POST", "/publish", br#"{"say":"hello"}"#, None);
    }
    for (log, n) in logs.iter().zip(connections) {
        wait_until("every action", || {
            count_of(log, |r| matches!(r, ProbeRecord::Action(_))) == BROADCASTS * n
        });
        wait_until("every receipt", || {
            count_of(log, |r| matches!(r, ProbeRecord::Receipt(_))) == 2 * BROADCASTS * n
        });
    }
    for p in &probes {
        signal(&p.0, Signal::SIGTERM);
    }
    for p in &mut probes {
        assert!(p.0.wait().unwrap().success());
    }
    stop_unix.send(()).unwrap();
    stop_udp.send(()).unwrap();
    let received = [unix_reader.join().unwrap(), udp_reader.join().unwrap()];
    signal(&agent.0, Signal::SIGTERM);
    assert!(agent.0.wait().unwrap().success());

    let mut delays = Vec::new();
    for (i, got) in received.iter().enumerate() {
        // One datagram per action, and each is exactly the recorded action,
        // numbered from 0.
        let actions: Vec<ActNotice> = probe_records(&logs[i])
            .iter()
            .filter_map(|r| match r {
                ProbeRecord::Action(a) => Some(ActNotice::of(0, a, 0)),
                _ => None,
            })
            .collect();
        assert_eq!(actions.len(), BROADCASTS * connections[i]);
        let mut numbers: Vec<u64> = got.iter().map(|(_, n)| n.notice).collect();
        numbers.sort_unstable();
        assert_eq!(numbers, (0..actions.len() as u64).collect::<Vec<_>>());
        let mut notices: Vec<ActNotice> = got
            .iter()
            .map(|(_, n)| ActNotice {
                notice: 0,
                ..n.clone()
            })
            .collect();
        let mut recorded = actions.clone();
        notices.sort_by_key(|n| (n.conn, n.seq));
        recorded.sort_by_key(|n| (n.conn, n.seq));
        // The datagrams speak the app's CLOCK_MONOTONIC, the records the
        // probe's raw clock: both moments of a notice are moved by one
        // difference, the two clocks' (as read here, give or take what
        // NTP's frequency parts them by over the run).
        let here = skewscope_os::clock::mono_minus_raw_ns();
        assert_eq!(notices.len(), recorded.len());
        for (n, r) in notices.iter_mut().zip(&recorded) {
            let moved = n.done_mono_ns as i64 - r.done_mono_ns as i64;
            assert_eq!(
                n.target_mono_ns as i64 - r.target_mono_ns as i64,
                moved,
                "{n:?} {r:?}"
            );
            assert!(
                (moved - here).abs() < 1_000_000,
                "moved {moved}, the clocks {here} apart"
            );
            n.target_mono_ns = r.target_mono_ns;
            n.done_mono_ns = r.done_mono_ns;
        }
        assert_eq!(notices, recorded, "probe {i}");
        for (read_at, n) in got {
            assert!(n.seq.is_some() && !n.late, "{n:?}");
            // Sent when the timer fired at (not before) the target, read
            // after that on the clock the app shares.
            assert!(n.done_mono_ns >= n.target_mono_ns, "{n:?}");
            assert!(*read_at >= n.done_mono_ns, "read at {read_at}: {n:?}");
            delays.push(read_at - n.done_mono_ns);
        }
    }
    delays.sort_unstable();
    eprintln!(
        "notice read after the timer fired: median {} µs, max {} µs",
        delays[delays.len() / 2] / 1000,
        delays[delays.len() - 1] / 1000
    );

    // The deaf app: every action done on time all the same, and counted.
    let deaf: Vec<_> = probe_records(&logs[2])
        .into_iter()
        .filter_map(|r| match r {
            ProbeRecord::Action(a) => Some(a),
            _ => None,
        })
        .collect();
    assert_eq!(deaf.len(), BROADCASTS);
    assert!(deaf.iter().all(|a| a.late_ns == 0), "{deaf:?}");
    let said = std::fs::read_to_string(&errs[2]).unwrap();
    assert!(
        said.contains(&format!(
            "0 notice(s) sent, 0 answered; {BROADCASTS} not delivered"
        )),
        "{said}"
    );
    // The listening apps here read but never answer: every notice sent is
    // counted never answered, said at the end and written in the log.
    let said = std::fs::read_to_string(&errs[0]).unwrap();
    assert!(
        said.contains(&format!(
            "{} notice(s) sent, 0 answered; 0 not delivered (the app was not listening, or not reading), {} never answered",
            2 * BROADCASTS,
            2 * BROADCASTS
        )),
        "{said}"
    );
    for (i, (sent, undelivered)) in [(2 * BROADCASTS, 0), (BROADCASTS, 0), (0, BROADCASTS)]
        .into_iter()
        .enumerate()
    {
        let totals: Vec<_> = probe_records(&logs[i])
            .into_iter()
            .filter_map(|r| match r {
                ProbeRecord::NoticeTotals(t) => Some(t),
                _ => None,
            })
            .collect();
        assert_eq!(totals.len(), 1, "probe {i}: {totals:?}");
        let t = &totals[0];
        assert_eq!(
            (t.sent, t.undelivered, t.answered, t.unanswered),
            (sent as u64, undelivered as u64, 0, sent as u64),
            "probe {i}: {t:?}"
        );
        assert_eq!(
            count_of(&logs[i], |r| matches!(r, ProbeRecord::AppAction(_))),
            0
        );
    }
    // A closed UDP port: never counted answered; what the kernel reported
    // refused is counted not delivered, the rest never answered (ICMP is
    // rate-limited, so not every refusal is reported).
    let closed: Vec<_> = probe_records(&logs[3])
        .into_iter()
        .filter_map(|r| match r {
            ProbeRecord::NoticeTotals(t) => Some(t),
            _ => None,
        })
        .collect();
    let t = &closed[0];
    assert_eq!(t.sent + t.undelivered, BROADCASTS as u64, "{t:?}");
    assert_eq!((t.answered, t.unanswered), (0, t.sent), "{t:?}");
    assert!(t.undelivered >= 1, "{t:?}");
    // The report lists each app beside its probe, with none of its actions
    // seen and its notices said.
    let (text, json) = json_report(&[&logs[0], &logs[1], &logs[2]]);
    let actors = json["actions"]["by_actor"].as_array().unwrap();
    let unix_app = actors.iter().find(|a| a["name"] == "unix/app").unwrap();
    assert_eq!(unix_app["kind"], "native-app");
    assert_eq!(unix_app["actions"], 0);
    assert_eq!(unix_app["notices"]["unanswered"], 2 * BROADCASTS);
    assert!(text.contains("NEVER ANSWERED"), "{text}");
}

/// A child's stdout lines, as they come.
fn lines_of(child: &mut std::process::Child) -> mpsc::Receiver<String> {
    use std::io::BufRead;
    let out = std::io::BufReader::new(child.stdout.take().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in out.lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// The readers docs/acting.md shows, in C over a Unix socket and in Python
/// over UDP, act on every action of the probe beside them.
#[test]
fn the_documented_readers_act_on_every_notice() {
    let dir = tempfile::tempdir().unwrap();
    let readers = Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/act-notify");
    let c_reader = dir.path().join("act_reader");
    let built = Command::new("cc")
        .arg("-o")
        .arg(&c_reader)
        .arg(readers.join("act_reader.c"))
        .status()
        .unwrap();
    assert!(built.success());
    let socket = dir.path().join("act.sock");
    let mut c_app = Reaped(
        Command::new(&c_reader)
            .arg(&socket)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut py_app = Reaped(
        Command::new("python3")
            .arg(readers.join("act_reader.py"))
            .arg("0")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let c_lines = lines_of(&mut c_app.0);
    let py_lines = lines_of(&mut py_app.0);
    let udp_target = py_lines
        .recv_timeout(Duration::from_secs(20))
        .unwrap()
        .trim_start_matches("listening on ")
        .to_owned();
    wait_until("the C reader bound its socket", || socket.exists());

    let (mut agent, addr, _agent_log) = start_agent(dir.path());
    let url = format!("ws://{addr}/ws");
    let logs = ["c", "py"].map(|n| dir.path().join(format!("{n}.sklog")));
    let errs = ["c", "py"].map(|n| dir.path().join(format!("{n}.stderr")));
    let mut probes = [
        notifying_probe(
            &url,
            "c",
            &logs[0],
            1,
            &format!("unix:{}", socket.display()),
            &errs[0],
        ),
        notifying_probe(&url, "py", &logs[1], 1, &udp_target, &errs[1]),
    ];
    for log in &logs {
        wait_until("time exchanges answered", || {
            count_of(log, |r| matches!(r, ProbeRecord::TimeSample(_))) >= 4
        });
    }
    for _ in 0..3 {
        trigger_with_lead(&addr, "200ms");
    }
    for (log, lines) in logs.iter().zip([&c_lines, &py_lines]) {
        for i in 0..3 {
            let line = lines.recv_timeout(Duration::from_secs(20)).unwrap();
            assert!(line.starts_with("act now: "), "{line}");
            assert!(
                !line.contains("late True") && !line.contains("\"late\":true"),
                "{line}"
            );
            if i == 0 {
                eprintln!("{line}");
            }
        }
        wait_until("three actions recorded", || {
            count_of(log, |r| matches!(r, ProbeRecord::Action(_))) == 3
        });
    }
    // Each reader answered each notice: the app's own action, recorded
    // once, after the probe's timer fired and on the clock they share.
    for log in &logs {
        wait_until("three answers recorded", || {
            count_of(log, |r| matches!(r, ProbeRecord::AppAction(_))) == 3
        });
    }
    for p in &probes {
        signal(&p.0, Signal::SIGTERM);
    }
    for p in &mut probes {
        assert!(p.0.wait().unwrap().success());
    }
    signal(&agent.0, Signal::SIGTERM);
    assert!(agent.0.wait().unwrap().success());
    for log in &logs {
        let records = probe_records(log);
        let probe_done: Vec<(u32, u64, u64)> = records
            .iter()
            .filter_map(|r| match r {
                ProbeRecord::Action(a) => Some((a.conn, a.act_at_ns, a.done.mono_ns)),
                _ => None,
            })
            .collect();
        let mut answered = 0;
        for r in &records {
            if let ProbeRecord::AppAction(app) = r {
                answered += 1;
                assert_eq!(app.app, "app");
                let (_, _, fired) = probe_done
                    .iter()
                    .find(|(c, at, _)| *c == app.action.conn && *at == app.action.act_at_ns)
                    .expect("the app's action is on a notice the probe sent");
                assert!(app.action.done.mono_ns >= *fired, "{app:?}");
            }
            if let ProbeRecord::NoticeTotals(t) = r {
                assert_eq!(
                    (t.sent, t.answered, t.unanswered, t.bad_answers),
                    (3, 3, 0, 0),
                    "{t:?}"
                );
            }
        }
        assert_eq!(answered, 3);
    }
    // The report: each app is an actor of its own beside its probe, its
    // three actions judged once each with the probe's clock.
    let (_, json) = json_report(&[&logs[0], &logs[1]]);
    let actions = &json["actions"];
    assert_eq!(actions["actions"], 12, "{actions}");
    for name in ["c/app", "py/app"] {
        let app = actions["by_actor"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {actions}"));
        assert_eq!(app["kind"], "native-app");
        assert_eq!(app["actions"], 3);
        assert_eq!(app["late"], 0);
    }
}
