//! The clock module for pages (`clients/js/skewscope-clock.js`): its own
//! tests under node's built-in runner (Debian's `nodejs`, which `./test`
//! installs), and the agent serving it byte for byte with the CORS header a
//! page on another origin needs to import it.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use agent::{AgentConfig, RunningAgent};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn module_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/js")
}

/// The module's tests take about 10 s; a run still going after this left
/// something running (a timer of a clock a failed test never closed), and
/// node waits for it forever: it is stopped and said, never a hang.
const NODE_LIMIT: Duration = Duration::from_secs(300);

#[test]
fn the_modules_own_tests_pass_under_node() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("node.log");
    let file = std::fs::File::create(&log).unwrap();
    let mut child = Command::new("node")
        .args(["--test", "test/"])
        .current_dir(module_dir())
        // The real-agent test drives the agent this test run built: it
        // never skips for want of one.
        .env("SKEWSCOPE_AGENT", env!("CARGO_BIN_EXE_skewscope-agent"))
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .expect("node (./test installs Debian's nodejs)");
    let deadline = Instant::now() + NODE_LIMIT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let status = status.unwrap_or_else(|| {
        panic!("node's tests had not ended after {NODE_LIMIT:?}: something a test left running kept node up\n{text}")
    });
    assert!(status.success(), "{text}");
    let passed = text
        .lines()
        .find_map(|l| l.strip_prefix("# pass "))
        .and_then(|n| n.trim().parse::<u32>().ok());
    assert!(passed.is_some_and(|n| n >= 40), "{text}");
    assert!(text.contains("# fail 0"), "{text}");
    assert!(text.contains("# skipped 0"), "{text}");
}

#[tokio::test]
async fn the_agent_serves_the_module_to_any_page() {
    let dir = tempfile::tempdir().unwrap();
    let agent = RunningAgent::start(AgentConfig::local(dir.path().join("agent")))
        .await
        .unwrap();
    let mut stream = tokio::net::TcpStream::connect(agent.addr).await.unwrap();
    stream
        .write_all(b"GET /skewscope-clock.js HTTP/1.1\r\nHost: x\r\nOrigin: http://kiosk.example\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    agent.shutdown().await.unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("content-type: text/javascript"), "{head}");
    assert!(head.contains("access-control-allow-origin: *"), "{head}");
    let file = std::fs::read(module_dir().join("skewscope-clock.js")).unwrap();
    assert_eq!(&raw[split + 4..], &file[..], "the bytes in the repository");
}
