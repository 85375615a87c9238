//! The agent on a full disk: it keeps serving, counts every record it could
//! not write, says so in `/healthz`, writes the count into the log once
//! writing works again, and ends its run with an error that says records
//! were lost. On a 1 MiB tmpfs of the test's own, in a user and mount
//! namespace of its own (nothing outside is touched).

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use agent::http_client::request;
use agent::{AgentConfig, RunningAgent};
use futures_util::StreamExt;
use skewscope_core::log::AnyLog;
use skewscope_core::record::AgentRecord;
use skewscope_os::log_files::read_file;
use skewscope_os::test_namespace::run_in_own_namespace;

const LIMIT: Duration = Duration::from_secs(20);

#[test]
fn a_full_disk_loses_records_counted_and_said_and_serving_goes_on() {
    run_in_own_namespace(
        "a_full_disk_loses_records_counted_and_said_and_serving_goes_on",
        inside,
    );
}

/// Fills the file system at `dir` with one file until it is full.
fn fill(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let chunk = vec![0u8; 4096];
    while f.write_all(&chunk).is_ok() {}
    let _ = f.sync_all();
    path
}

async fn healthz_lost(agent: &RunningAgent) -> u64 {
    let r = request(agent.addr, "GET", "/healthz", b"", None)
        .await
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    v["records_lost"]
        .as_u64()
        .expect("records_lost in /healthz")
}

async fn inside() {
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("disk");
    std::fs::create_dir(&disk).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(&disk)
        .status()
        .expect("mount (util-linux)");
    assert!(mounted.success(), "a tmpfs in the test's own namespace");

    let agent = RunningAgent::start(AgentConfig::local(disk.join("data")))
        .await
        .expect("the agent starts");
    let (mut client, _) = tokio_tungstenite::connect_async(format!("ws://{}/ws", agent.addr))
        .await
        .unwrap();
    // The upgrade is done on the client's side before the hub counts the
    // client: a broadcast before that reaches nobody, and the wait below
    // for it would fail (seen once in ten soak runs on a loaded machine).
    agent
        .wait_for_clients(1, LIMIT)
        .await
        .unwrap_or_else(|seen| panic!("the hub serves {seen} clients, not the test's one"));
    let log = agent.log_path.clone();
    let filler = fill(&disk);

    // The disk is full: broadcasts go on, and their records are lost.
    let deadline = Instant::now() + LIMIT;
    let mut sent = 0;
    while healthz_lost(&agent).await == 0 {
        assert!(Instant::now() < deadline, "no loss counted on a full disk");
        let body = format!("while full {sent} {}", "x".repeat(300));
        let r = request(agent.addr, "POST", "/publish", body.as_bytes(), None)
            .await
            .unwrap();
        assert_eq!(r.status, 200, "serving goes on: {}", r.body);
        tokio::time::timeout(LIMIT, client.next())
            .await
            .expect("the client still gets every broadcast")
            .unwrap()
            .unwrap();
        sent += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Space again: the next flush works, and the loss is written down.
    std::fs::remove_file(&filler).unwrap();
    let r = request(agent.addr, "POST", "/publish", b"after", None)
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    let deadline = Instant::now() + LIMIT;
    let said = loop {
        if let Ok(AnyLog::Agent(d)) = read_file(&log)
            && let Some(count) = d.records.iter().find_map(|r| match r {
                AgentRecord::RecordsLost(l) => Some(l.count),
                _ => None,
            })
        {
            break count;
        }
        assert!(Instant::now() < deadline, "the loss never reached the log");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let counted = healthz_lost(&agent).await;
    assert!(
        said > 0 && said <= counted,
        "said {said}, counted {counted}"
    );

    // The run ends with an error that says records were lost.
    let ended = agent.shutdown().await;
    let err = ended.expect_err("a run that lost records does not end cleanly");
    assert!(err.to_string().contains("records were lost"), "{err:#}");
    let AnyLog::Agent(d) = read_file(&log).unwrap() else {
        panic!("an agent log");
    };
    assert!(
        matches!(d.records.last(), Some(AgentRecord::Stopped(_))),
        "written to the end once there was space"
    );
    let _ = Command::new("umount").arg(&disk).status();
}
