//! The Python client (`clients/python`, `skewscope_clock`): its own pytest
//! suite, run here against this build's agent binary, so `./test` runs it
//! with everything else. It replays the clock model's shared vectors bit
//! for bit, checks the tag against the vector Rust and WebCrypto agree on,
//! and syncs to and acts against the real agent's `/clock` (keyed, and with
//! a wrong token refused).

use std::path::Path;
use std::process::Command;

#[test]
fn the_python_clients_own_tests_pass_against_this_agent() {
    let package = Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/python");
    let out = Command::new("python3")
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .current_dir(&package)
        .env("SKEWSCOPE_AGENT", env!("CARGO_BIN_EXE_skewscope-agent"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("python3 (./test installs pytest and websockets 13 or later)");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    // pytest's summary: "23 passed in 6.1s" — none skipped, none failed.
    let passed = text.lines().rev().find_map(|l| {
        l.split(" passed")
            .next()?
            .trim()
            .rsplit(' ')
            .next()?
            .parse::<u32>()
            .ok()
    });
    assert!(passed.is_some_and(|n| n >= 20), "{text}");
    assert!(
        !text.contains("skipped") && !text.contains("failed"),
        "{text}"
    );
}
