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
        let started = Instant::now();
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
        assert!(started.elapsed() < Duration::from_secs(5));
        // Nothing started: no data directory was created.
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
        let skewscope_core::log::AnyLog::Agent(d) = skewscope_core::log::read_file(path).unwrap()
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
