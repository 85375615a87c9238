//! `POST /publish?lead=`: the hub writes the time to act into an app's
//! JSON broadcast, once, before it encodes the frame. Probes on
//! 127.0.0.1:0, one offering permessage-deflate (so it gets the compressed
//! frame) and one declining it (the plain frame), act on what they read.

mod common;

use common::wait_for_clients;

use std::time::{Duration, Instant};

use agent::http_client::request;
use agent::{AgentConfig, RunningAgent};
use probe::{ProbeConfig, RunningProbe};
use skewscope_core::act_at::{ActAt, ActUnit};
use skewscope_core::log::AnyLog;
use skewscope_core::record::ProbeRecord;
use skewscope_os::log_files::read_file;

const LIMIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_copy_carries_the_same_time_to_act_where_and_as_asked() {
    let dir = tempfile::tempdir().unwrap();
    let agent = RunningAgent::start(AgentConfig::local(dir.path().join("agent")))
        .await
        .unwrap();
    let mut probes = Vec::new();
    for (name, deflate) in [("compressed", true), ("plain", false)] {
        let mut config = ProbeConfig::new(
            format!("ws://{}/ws", agent.addr),
            dir.path().join(format!("{name}.sklog")),
        );
        config.name = name.into();
        config.connections = 2;
        config.count = Some(2);
        config.deflate = deflate;
        config.time_exchange = false;
        config.act_at = Some(ActAt::new("/show/go", ActUnit::Ms).unwrap());
        let probe = RunningProbe::start(config).await.unwrap();
        assert_eq!(probe.connected().await.opened, 2);
        probes.push(probe);
    }
    wait_for_clients(&agent, 4).await;

    // Not JSON, or JSON that is no object, or no place for the pointer:
    // refused, and nothing is broadcast.
    for (body, query) in [
        (&b"go now"[..], "lead=200ms"),
        (&b"[1, 2]"[..], "lead=200ms"),
        (&br#"{"show": 3}"#[..], "lead=200ms&pointer=/show/go"),
        (&br#"{"show": {}}"#[..], "lead=200ms&unit=auto"),
        (&br#"{"show": {}}"#[..], "pointer=/show/go"),
        (&br#"{"show": {}}"#[..], "lead=soon"),
    ] {
        let r = request(agent.addr, "POST", &format!("/publish?{query}"), body, None)
            .await
            .unwrap();
        assert!(
            (400..500).contains(&r.status),
            "{query}: {} {}",
            r.status,
            r.body
        );
        assert!(
            r.body.contains("nothing was broadcast") || r.status == 400,
            "{}",
            r.body
        );
    }

    // An app's state message, repeated enough to compress well.
    let app = format!(
        r#"{{"scene":"lobby","show":{{"cue":7}},"cues":[{}]}}"#,
        (0..60)
            .map(|n| format!(r#"{{"light":{n}}}"#))
            .collect::<Vec<_>>()
            .join(",")
    );
    let mut times = Vec::new();
    for _ in 0..2 {
        let r = request(
            agent.addr,
            "POST",
            "/publish?lead=300ms&pointer=/show/go&unit=ms",
            app.as_bytes(),
            None,
        )
        .await
        .unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
        let answer: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(answer["clients"], 4, "{answer}");
        assert_eq!(answer["lead_ns"], 300_000_000u64, "{answer}");
        assert_eq!(answer["pointer"], "/show/go");
        assert_eq!(answer["unit"], "ms");
        times.push(answer["at_ns"].as_u64().unwrap());
    }

    let mut acted: Vec<Vec<u64>> = Vec::new();
    for probe in probes {
        let summary = tokio::time::timeout(LIMIT, probe.finish())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            summary.receipts, 4,
            "the two broadcasts on both connections, and no other"
        );
        let AnyLog::Probe(log) = read_file(&summary.out).unwrap() else {
            panic!("a probe log");
        };
        acted.push(
            log.records
                .iter()
                .filter_map(|r| match r {
                    ProbeRecord::Action(a) => Some(a.act_at_ns),
                    _ => None,
                })
                .collect(),
        );
    }
    // The compressed and the plain copies name the same moments, the ones
    // the hub answered (written as float ms: within a microsecond).
    for a in &acted {
        assert_eq!(a.len(), 4, "{acted:?}");
        for (got, want) in a.chunks(2).zip(&times) {
            for &g in got {
                assert!(g.abs_diff(*want) < 1_000, "{g} vs {want}");
            }
        }
    }
    assert_eq!(acted[0], acted[1], "one encoding for every client");
    agent.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lead_auto_without_probes_rests_on_the_fanout_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let agent = RunningAgent::start(AgentConfig::local(dir.path().join("agent")))
        .await
        .unwrap();
    let auto = |r: &agent::http_client::Response| {
        assert_eq!(r.status, 200, "{}", r.body);
        let answer: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(answer["lead"], "auto", "{answer}");
        let lead = answer["lead_ns"].as_u64().unwrap();
        // The time to act is the lead after the moment it was built.
        assert!(answer["at_ns"].as_u64().unwrap() > lead);
        (lead, answer["lead_basis"].as_str().unwrap().to_owned())
    };
    // Nothing measured: the network allowance and the margin.
    let first = request(agent.addr, "GET", "/start_test?lead=auto", b"", None)
        .await
        .unwrap();
    let (lead, basis) = auto(&first);
    use skewscope_core::analysis::auto_lead::NETWORK_ALLOWANCE_NS;
    use skewscope_core::analysis::lead_rule::MARGIN_NS;
    assert_eq!(lead, NETWORK_ALLOWANCE_NS + MARGIN_NS);
    assert!(basis.contains("nothing measured"), "{basis}");

    // A plain client (no probe): broadcasts' fan-out spans settle, and the
    // lead rests on them plus the allowance, said in the answer.
    let mut config = ProbeConfig::new(
        format!("ws://{}/ws", agent.addr),
        dir.path().join("plain.sklog"),
    );
    config.time_exchange = false;
    let probe = RunningProbe::start(config).await.unwrap();
    assert_eq!(probe.connected().await.opened, 1);
    wait_for_clients(&agent, 1).await;
    let deadline = Instant::now() + LIMIT;
    let (lead, basis) = loop {
        let r = request(
            agent.addr,
            "POST",
            "/publish?lead=auto",
            br#"{"type": "go"}"#,
            None,
        )
        .await
        .unwrap();
        let (lead, basis) = auto(&r);
        if basis.contains("fan-out") {
            break (lead, basis);
        }
        assert!(Instant::now() < deadline, "still {basis}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(lead > NETWORK_ALLOWANCE_NS + MARGIN_NS, "{lead} {basis}");
    assert!(lead < NETWORK_ALLOWANCE_NS + MARGIN_NS + LIMIT.as_nanos() as u64);
    let metrics = request(agent.addr, "GET", "/metrics", b"", None)
        .await
        .unwrap()
        .body;
    assert!(
        metrics.contains("skewscope_auto_lead_copies 0"),
        "no probe reads under it"
    );
    probe.stop_handle().stop();
    let _ = tokio::time::timeout(LIMIT, probe.finish()).await;
    // Every lead given is in the log, auto or not.
    let log = agent.log_path.clone();
    agent.shutdown().await.unwrap();
    let AnyLog::Agent(records) = read_file(&log).unwrap() else {
        panic!("an agent log");
    };
    let chosen: Vec<_> = records
        .records
        .iter()
        .filter_map(|r| match r {
            skewscope_core::record::AgentRecord::LeadChosen(l) => Some(*l),
            _ => None,
        })
        .collect();
    assert!(chosen.len() >= 2 && chosen.iter().all(|l| l.auto && l.basis_copies == 0));
}

/// Forty 1 MB bodies to `/publish?lead=` at once are stamped one at a time
/// off the threads that serve requests: a `/clock` exchange made once the
/// first of them is answered comes back while most are still waiting,
/// where it once waited behind every one of them (40 × 1 MiB held /clock
/// at 1.1 s). And a stamped body is held to `--max-publish` with its time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_stamped_bodies_never_hold_up_the_clock() {
    use futures_util::{SinkExt, StreamExt};
    let dir = tempfile::tempdir().unwrap();
    let agent = RunningAgent::start(AgentConfig::local(dir.path().join("agent")))
        .await
        .unwrap();
    let body = format!(r#"{{"type":"go","pad":"{}"}}"#, "x".repeat(1_000_000));
    let done = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut publishes = Vec::new();
    for _ in 0..40 {
        let (addr, body, done) = (agent.addr, body.clone(), done.clone());
        publishes.push(tokio::spawn(async move {
            let r = request(addr, "POST", "/publish?lead=1s", body.as_bytes(), None)
                .await
                .unwrap();
            done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            r.status
        }));
    }
    let deadline = Instant::now() + LIMIT;
    while done.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "no publish answered");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let (mut clock, _) = tokio_tungstenite::connect_async(format!("ws://{}/clock", agent.addr))
        .await
        .unwrap();
    clock
        .send(tokio_tungstenite::tungstenite::Message::Text(
            r#"{"id": 1, "t1": 1}"#.into(),
        ))
        .await
        .unwrap();
    let reply = tokio::time::timeout(LIMIT, clock.next()).await.unwrap();
    let waiting = 40 - done.load(std::sync::atomic::Ordering::SeqCst);
    assert!(matches!(reply, Some(Ok(_))), "{reply:?}");
    assert!(
        waiting >= 10,
        "the /clock reply came when only {waiting} of 40 publishes were still waiting"
    );
    for p in publishes {
        assert_eq!(p.await.unwrap(), 200);
    }
    // A body of exactly --max-publish bytes has no room for its time.
    let at_the_limit = format!(
        r#"{{"pad":"{}"}}"#,
        "x".repeat(1024 * 1024 - r#"{"pad":""}"#.len())
    );
    assert_eq!(at_the_limit.len(), 1024 * 1024);
    let r = request(
        agent.addr,
        "POST",
        "/publish?lead=1s",
        at_the_limit.as_bytes(),
        None,
    )
    .await
    .unwrap();
    assert_eq!(r.status, 413, "{}", r.body);
    assert!(r.body.contains("with its time to act"), "{}", r.body);
    agent.shutdown().await.unwrap();
}
