//! The agent binary as systemd runs it: config file and flags, SIGHUP, SIGTERM.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const AGENT: &str = env!("CARGO_BIN_EXE_skewscope-agent");

#[test]
fn a_bad_config_key_or_value_fails_fast_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    for (text, key) in [
        ("listen = \"127.0.0.1:0\"\nshrads = 2\n", "shrads"),
        ("max_frame = \"large\"\n", "max_frame"),
        ("order = \"random\"\n", "order"),
        ("listen = \"not an address\"\n", "listen"),
    ] {
        let file = dir.path().join("agent.toml");
        std::fs::write(&file, text).unwrap();
        let o = Command::new(AGENT)
            .args(["--config", file.to_str().unwrap(), "--data-dir"])
            .arg(dir.path().join("data"))
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{text}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(key) && err.contains("agent.toml"),
            "{text}: {err}"
        );
        // Nothing started: no data directory was created. (How fast it
        // fails is a speed, not a behaviour: not asserted.)
        assert!(!dir.path().join("data").exists());
    }
}

#[test]
fn print_config_shows_the_file_merged_with_flags() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agent.toml");
    std::fs::write(
        &file,
        "listen = \"0.0.0.0:9000\"\norder = \"fixed\"\nmax_frame = 1000\n",
    )
    .unwrap();
    let o = Command::new(AGENT)
        .args([
            "--config",
            file.to_str().unwrap(),
            "--order",
            "shuffle",
            "--print-config",
        ])
        .output()
        .unwrap();
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("listen = \"0.0.0.0:9000\""), "{text}");
    assert!(text.contains("order = \"shuffle\""), "flag wins: {text}");
    assert!(text.contains("max_frame = 1000"), "{text}");
}

#[test]
fn sighup_starts_a_new_segment_and_sigterm_flushes() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut child = Command::new(AGENT)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            data.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let _listening = lines.next().unwrap().unwrap();
    let first = lines.next().unwrap().unwrap();
    assert!(first.ends_with("-0000.sklog"), "{first}");
    let pid = Pid::from_raw(child.id() as i32);
    kill(pid, Signal::SIGHUP).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    // Record segments only: the data directory also holds probes/ (uploads).
    let is_segment = |p: &std::path::Path| p.extension().is_some_and(|x| x == "sklog");
    let segments = || {
        std::fs::read_dir(&data)
            .unwrap()
            .filter(|e| is_segment(&e.as_ref().unwrap().path()))
            .count()
    };
    while segments() < 2 {
        assert!(Instant::now() < deadline, "no second segment after SIGHUP");
        std::thread::sleep(Duration::from_millis(20));
    }
    kill(pid, Signal::SIGTERM).unwrap();
    assert!(child.wait().unwrap().success());
    let mut names: Vec<_> = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| is_segment(p))
        .collect();
    names.sort();
    assert_eq!(names.len(), 2);
    for (i, path) in names.iter().enumerate() {
        let skewscope_core::log::AnyLog::Agent(d) =
            skewscope_os::log_files::read_file(path).unwrap()
        else {
            panic!()
        };
        assert!(
            matches!(
                d.records.first(),
                Some(skewscope_core::record::AgentRecord::Started(_))
            ),
            "{path:?}"
        );
        if i == 1 {
            assert!(matches!(
                d.records.last(),
                Some(skewscope_core::record::AgentRecord::Stopped(_))
            ));
        }
    }
}

/// Times every thread of `pid` has been run (schedstat's third field).
fn runs_of(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().nth(2)?.parse::<u64>().ok())
        .sum()
}

#[test]
fn an_idle_agent_wakes_at_most_once_a_second() {
    // A daemon with nothing to do on a low-power box should sleep: no
    // thread polls. What still wakes it is its clock watch (every 10 s)
    // and the recorder writing what that records.
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(AGENT)
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    while !lines.next().unwrap().unwrap().starts_with("recording to") {}
    // Start-up is over once its records (the clock watch's first claim
    // among them) are on disk: from there on, only timers wake it.
    wait_for_a_clock_claim_in(dir.path());
    let pid = child.id();
    let before = runs_of(pid);
    let window = Duration::from_secs(10);
    std::thread::sleep(window);
    let runs = runs_of(pid) - before;
    kill(Pid::from_raw(pid as i32), Signal::SIGTERM).unwrap();
    assert!(child.wait().unwrap().success());
    assert!(
        runs <= window.as_secs(),
        "{runs} wake-ups in {window:?} with no client and no broadcast"
    );
}

/// Waits (at most 30 s) until the agent's log in `data` holds a clock claim.
fn wait_for_a_clock_claim_in(data: &std::path::Path) {
    let started = Instant::now();
    loop {
        let claimed = std::fs::read_dir(data).into_iter().flatten().flatten().any(|e| {
            matches!(
                skewscope_os::log_files::read_file(&e.path()),
                Ok(skewscope_core::log::AnyLog::Agent(d))
                    if d.records.iter().any(|r| matches!(r, skewscope_core::record::AgentRecord::ClockState(_)))
            )
        });
        if claimed {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no clock claim recorded in 30 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts the agent with `args`, waits until it records, stops it, and
/// returns what it logged.
fn logged_at_start(args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(AGENT)
        .args(args)
        .arg("--data-dir")
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    while !lines.next().unwrap().unwrap().starts_with("recording to") {}
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn without_a_token_on_the_network_the_agent_says_what_is_open() {
    // Listening on every address, so in a network namespace of the test's
    // own, whose only interface is its loopback: nothing outside can reach it.
    if !skewscope_os::test_namespace::in_own_namespace(
        "without_a_token_on_the_network_the_agent_says_what_is_open",
    ) {
        return;
    }
    let open = logged_at_start(&["--listen", "0.0.0.0:0", "--time-port", "0"]);
    assert!(
        open.contains("no --token-file")
            && open.contains("/publish, /start_test, /ingest and /audit/*"),
        "{open}"
    );
    // With a token, or on loopback only, nothing to say.
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "secret\n").unwrap();
    let guarded = logged_at_start(&[
        "--listen",
        "0.0.0.0:0",
        "--time-port",
        "0",
        "--token-file",
        token.to_str().unwrap(),
    ]);
    assert!(!guarded.contains("no --token-file"), "{guarded}");
    let local = logged_at_start(&["--listen", "127.0.0.1:0", "--time-port", "0"]);
    assert!(!local.contains("no --token-file"), "{local}");
}

#[test]
fn on_loopback_the_agent_says_how_devices_reach_it() {
    let local = logged_at_start(&["--listen", "127.0.0.1:0", "--time-port", "0"]);
    assert!(
        local.contains("answers on this host only") && local.contains("--listen 0.0.0.0:"),
        "{local}"
    );
}

#[test]
fn help_is_grouped_by_task_names_every_endpoint_and_takes_sizes_as_typed() {
    let o = Command::new(AGENT).arg("--help").output().unwrap();
    assert!(o.status.success());
    let help = String::from_utf8_lossy(&o.stdout);
    for endpoint in [
        "/ws",
        "/publish",
        "/start_test",
        "/ingest",
        "/audit/status",
        "/metrics",
        "/clock",
        "/healthz",
    ] {
        assert!(help.contains(endpoint), "{endpoint}: {help}");
    }
    for said in [
        "[token]: with --token-file",
        "[--metrics-token-file]",
        "--listen 0.0.0.0:8080",
        "Where clients reach it, and who may use it:",
        "What it records:",
        "Recording a server it does not run (the tap):",
        "Limits against misbehaving clients:",
        "[default: 64KiB]",
        "[default: 1GiB]",
    ] {
        assert!(help.contains(said), "{said}: {help}");
    }
    // Sizes as people type them, on the command line and in a file.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agent.toml");
    std::fs::write(
        &file,
        "max_queue_bytes = \"2MiB\"\nsegment_bytes = 1048576\n",
    )
    .unwrap();
    let o = Command::new(AGENT)
        .args([
            "--max-frame",
            "32KiB",
            "--max-data-bytes",
            "2GiB",
            "--config",
        ])
        .arg(&file)
        .arg("--print-config")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let printed = String::from_utf8_lossy(&o.stdout);
    for line in [
        "max_frame = 32768",
        "max_data_bytes = 2147483648",
        "max_queue_bytes = 2097152",
        "segment_bytes = 1048576",
    ] {
        assert!(printed.contains(line), "{line}: {printed}");
    }
    let o = Command::new(AGENT)
        .args(["--max-frame", "12MB"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("12MB") && err.contains("KiB, MiB or GiB"),
        "{err}"
    );
}

#[test]
fn a_failure_at_start_says_the_os_error_once() {
    let dir = tempfile::tempdir().unwrap();
    // A data directory that is a file cannot hold the record log.
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, "").unwrap();
    let o = Command::new(AGENT)
        .args(["--listen", "127.0.0.1:0", "--time-port", "0", "--data-dir"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    let os_errors = err.matches("(os error").count();
    assert_eq!(os_errors, 1, "{err}");
}

#[test]
fn a_tapping_agent_says_the_tap_is_running() {
    // Capturing needs CAP_NET_RAW: the test's own user and network namespace
    // give it, and nothing outside is captured.
    if !skewscope_os::test_namespace::in_own_namespace("a_tapping_agent_says_the_tap_is_running") {
        return;
    }
    let tapping = logged_at_start(&["--listen", "127.0.0.1:0", "--tap-port", "8000"]);
    assert!(
        tapping.contains("tap running") && tapping.contains("local TCP port 8000"),
        "{tapping}"
    );
    // Nothing listens on 8000 in this namespace: said, with what to check.
    assert!(
        tapping.contains("nothing on this host listens on TCP port 8000"),
        "{tapping}"
    );
    // A server that listens: nothing to say.
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = server.local_addr().unwrap().port().to_string();
    let tapping = logged_at_start(&["--listen", "127.0.0.1:0", "--tap-port", &port]);
    assert!(tapping.contains("tap running"), "{tapping}");
    assert!(
        !tapping.contains("nothing on this host listens"),
        "{tapping}"
    );
}
