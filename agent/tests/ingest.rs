//! `/ingest` against hostile and broken uploaders on 127.0.0.1:0: each bad
//! input is refused, counted in `/healthz` and costs only its own
//! connection; a full data budget stops acknowledgements without writing
//! half a batch, and uploads resume when space returns.

use std::time::Duration;

use agent::http_client::request;
use agent::{AgentConfig, RunningAgent};
use futures_util::{SinkExt, StreamExt};
use skewscope_core::Stamp;
use skewscope_core::ingest::{INGEST_VERSION, ToAgent, ToProbe, decode_to_probe, encode};
use skewscope_core::log::{AnyLog, HEADER_LEN, LogKind, LogWriter};
use skewscope_core::record::{ProbeRecord, RunIdentity};
use skewscope_os::log_files::read_file;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream, connect_async};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

const WAIT: Duration = Duration::from_secs(10);

fn stamp(i: u64) -> Stamp {
    Stamp {
        wall_ns: 1_764_000_000_000_000_000 + i,
        mono_ns: i,
    }
}

/// Frames of records `first..first+n` of run `run_id`: its `Started` and
/// `Identity` at 0 and 1, then `Stopped` records of `pad` bytes of name.
fn frames(run_id: u128, first: u64, n: u64, pad: usize) -> Vec<u8> {
    let mut log = LogWriter::new(Vec::new(), LogKind::Probe).unwrap();
    for seq in first..first + n {
        let record = match seq {
            0 => skewscope_core::fixtures::probe_started_on(
                &format!("probe-{run_id}"),
                "device",
                1,
                stamp(0),
            ),
            1 => ProbeRecord::Identity(RunIdentity {
                run_id,
                boot_id: Some("x".repeat(pad)),
            }),
            _ => ProbeRecord::Stopped(stamp(seq)),
        };
        log.append(&record).unwrap();
    }
    log.into_inner()[HEADER_LEN..].to_vec()
}

async fn open(agent: &RunningAgent, token: Option<&str>) -> Result<Ws, WsError> {
    let mut request = format!("ws://{}/ingest", agent.addr)
        .into_client_request()
        .unwrap();
    if let Some(token) = token {
        request
            .headers_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    connect_async(request).await.map(|(ws, _)| ws)
}

/// Sends `message` and returns the agent's answer, or the close reason
/// when it closed the connection instead.
async fn ask(ws: &mut Ws, message: &ToAgent) -> Result<ToProbe, String> {
    ws.send(Message::Binary(encode(message).into()))
        .await
        .map_err(|e| e.to_string())?;
    next_answer(ws).await
}

async fn next_answer(ws: &mut Ws) -> Result<ToProbe, String> {
    loop {
        match tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("an answer")
        {
            Some(Ok(Message::Binary(b))) => return Ok(decode_to_probe(&b).expect("an answer")),
            Some(Ok(Message::Close(frame))) => {
                return Err(frame.map(|f| f.reason.to_string()).unwrap_or_default());
            }
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(e.to_string()),
            None => return Err("closed".into()),
        }
    }
}

fn hello(run_id: u128) -> ToAgent {
    ToAgent::Hello {
        version: INGEST_VERSION,
        run_id,
    }
}

/// A hello with the run's owner secret, as every probe since sends.
fn owned(run_id: u128, secret: u128) -> ToAgent {
    ToAgent::HelloOwned {
        version: INGEST_VERSION,
        run_id,
        secret,
    }
}

fn records(first_seq: u64, frames: Vec<u8>) -> ToAgent {
    ToAgent::Records { first_seq, frames }
}

async fn health(agent: &RunningAgent) -> serde_json::Value {
    let r = request(agent.addr, "GET", "/healthz", b"", None)
        .await
        .unwrap();
    serde_json::from_str(&r.body).unwrap()
}

fn stored(dir: &std::path::Path, run_id: u128) -> Vec<ProbeRecord> {
    let path = dir
        .join("probes")
        .join(format!("probe-{run_id:032x}.sklog"));
    match read_file(&path).unwrap() {
        AnyLog::Probe(d) => {
            assert_eq!(d.skipped_bytes, 0, "nothing half-written");
            assert!(!d.torn_tail);
            d.records
        }
        AnyLog::Agent(_) => panic!("not a probe log"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_uploads_are_refused_counted_and_harm_no_other_probe() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "t0k").unwrap();
    let mut config = AgentConfig::local(dir.path().join("data"));
    config.token_file = Some(token);
    let agent = RunningAgent::start(config).await.unwrap();
    let tok = Some("t0k");

    // A good probe, whose upload stays open throughout.
    let mut good = open(&agent, tok).await.unwrap();
    assert_eq!(
        ask(&mut good, &hello(1)).await,
        Ok(ToProbe::Ack { next_seq: 0 })
    );
    assert_eq!(
        ask(&mut good, &records(0, frames(1, 0, 7, 0))).await,
        Ok(ToProbe::Ack { next_seq: 7 })
    );

    // No token, a wrong token: refused before the upgrade.
    for wrong in [None, Some("guess")] {
        match open(&agent, wrong).await {
            Err(WsError::Http(response)) => assert_eq!(response.status(), 401),
            other => panic!("expected 401, got {other:?}"),
        }
    }
    // Another protocol version.
    let mut ws = open(&agent, tok).await.unwrap();
    let refused = ask(
        &mut ws,
        &ToAgent::Hello {
            version: 99,
            run_id: 2,
        },
    )
    .await;
    assert!(refused.unwrap_err().contains("version 99"));
    // A corrupt frame.
    let mut ws = open(&agent, tok).await.unwrap();
    ask(&mut ws, &hello(3)).await.unwrap();
    let mut bad = frames(3, 0, 4, 0);
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    assert!(
        ask(&mut ws, &records(0, bad))
            .await
            .unwrap_err()
            .contains("corrupt")
    );
    // Skipped sequence numbers: records would be missing.
    let mut ws = open(&agent, tok).await.unwrap();
    ask(&mut ws, &hello(4)).await.unwrap();
    let skipped = ask(&mut ws, &records(5, frames(4, 5, 2, 0))).await;
    assert!(skipped.unwrap_err().contains("sequence 5"));
    // A message over the size limit.
    let mut ws = open(&agent, tok).await.unwrap();
    ask(&mut ws, &hello(5)).await.unwrap();
    let huge = records(0, vec![0u8; 2 << 20]);
    let _ = ws.send(Message::Binary(encode(&huge).into())).await;
    assert!(next_answer(&mut ws).await.is_err());
    // A run whose first records are someone else's.
    let mut ws = open(&agent, tok).await.unwrap();
    ask(&mut ws, &hello(6)).await.unwrap();
    let foreign = ask(&mut ws, &records(0, frames(7, 0, 3, 0))).await;
    assert!(foreign.unwrap_err().contains("Started and Identity"));
    // Not an ingest message at all.
    let mut ws = open(&agent, tok).await.unwrap();
    ws.send(Message::Binary(vec![0xff, 0xff, 0xff].into()))
        .await
        .unwrap();
    assert!(next_answer(&mut ws).await.is_err());

    // The good probe was never disturbed. A replay after a lost ack is
    // trimmed to what is new: counted as duplicates, stored once.
    assert_eq!(
        ask(&mut good, &records(0, frames(1, 0, 10, 0))).await,
        Ok(ToProbe::Ack { next_seq: 10 })
    );
    let h = health(&agent).await;
    let ingest = &h["ingest"];
    assert_eq!(ingest["records"], 10, "{h}");
    assert_eq!(ingest["duplicates"], 7, "{h}");
    let rejected = &ingest["rejected"];
    for (reason, count) in [
        ("token", 2),
        ("version", 1),
        ("corrupt_frame", 1),
        ("sequence_gap", 1),
        ("oversized", 1),
        ("wrong_run", 1),
        ("malformed", 1),
    ] {
        assert_eq!(rejected[reason], count, "{reason}: {h}");
    }
    drop(good);
    agent.shutdown().await.unwrap();
    let run = stored(&dir.path().join("data"), 1);
    assert_eq!(run.len(), 10);
    assert!(matches!(run[9], ProbeRecord::Stopped(s) if s == stamp(9)));
}

/// A probe that reconnects (or a page that reloads) says hello before the
/// agent has seen its old connection end: the new connection takes the run
/// over at once, the old one can store nothing more, and every record is
/// stored exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_takes_its_run_over_from_the_old_connection() {
    let dir = tempfile::tempdir().unwrap();
    let agent = RunningAgent::start(AgentConfig::local(dir.path().join("data")))
        .await
        .unwrap();
    let mut old = open(&agent, None).await.unwrap();
    ask(&mut old, &owned(1, 0x0123)).await.unwrap();
    assert_eq!(
        ask(&mut old, &records(0, frames(1, 0, 4, 0))).await,
        Ok(ToProbe::Ack { next_seq: 4 })
    );
    // The old connection is still open (its end not yet seen).
    let mut new = open(&agent, None).await.unwrap();
    assert_eq!(
        ask(&mut new, &owned(1, 0x0123)).await,
        Ok(ToProbe::Ack { next_seq: 4 })
    );
    assert_eq!(health(&agent).await["ingest"]["takeovers"], 1);
    // The old connection's next batch is refused, nothing of it stored.
    let refused = ask(&mut old, &records(4, frames(1, 4, 2, 0))).await;
    assert!(refused.unwrap_err().contains("taken"), "closed with why");
    drop(old);
    // Its end does not free the run under the new connection.
    assert_eq!(
        ask(&mut new, &records(2, frames(1, 2, 6, 0))).await,
        Ok(ToProbe::Ack { next_seq: 8 })
    );
    let h = health(&agent).await;
    assert_eq!(h["ingest"]["duplicates"], 2, "{h}");
    assert_eq!(h["ingest"]["rejected"], serde_json::json!({}), "{h}");
    drop(new);
    agent.shutdown().await.unwrap();
    let run = stored(&dir.path().join("data"), 1);
    assert_eq!(run.len(), 8, "every record once");
    for (seq, record) in run.iter().enumerate().skip(2) {
        assert!(matches!(record, ProbeRecord::Stopped(s) if *s == stamp(seq as u64)));
    }
}

/// A run belongs to the device that started it: a client that read the
/// victim's run id (`/audit/status` lists it) and says hello with it, with
/// no secret or another one, is refused and counted, appends nothing, and
/// takes nothing from the victim, whose every record is stored once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hijacker_with_the_run_id_but_not_its_secret_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let agent = RunningAgent::start(AgentConfig::local(dir.path().join("data")))
        .await
        .unwrap();
    let victim_secret = 0x5ec2e7_u128;
    let mut victim = open(&agent, None).await.unwrap();
    ask(&mut victim, &owned(7, victim_secret)).await.unwrap();
    assert_eq!(
        ask(&mut victim, &records(0, frames(7, 0, 10, 0))).await,
        Ok(ToProbe::Ack { next_seq: 10 })
    );
    for attempt in [hello(7), owned(7, 0xbad)] {
        let mut hijacker = open(&agent, None).await.unwrap();
        let refused = ask(&mut hijacker, &attempt).await.unwrap_err();
        assert!(refused.contains("belongs to the device"), "{refused}");
    }
    // Even once the victim's connection is gone, and after a restart of
    // the agent, the run stays the victim's.
    drop(victim);
    agent.shutdown().await.unwrap();
    let agent = RunningAgent::start(AgentConfig::local(dir.path().join("data")))
        .await
        .unwrap();
    let mut hijacker = open(&agent, None).await.unwrap();
    let refused = ask(&mut hijacker, &owned(7, 0xbad)).await.unwrap_err();
    assert!(refused.contains("belongs to the device"), "{refused}");
    let h = health(&agent).await;
    assert_eq!(h["ingest"]["rejected"]["not_owner"], 1, "{h}");
    let mut victim = open(&agent, None).await.unwrap();
    assert_eq!(
        ask(&mut victim, &owned(7, victim_secret)).await,
        Ok(ToProbe::Ack { next_seq: 10 })
    );
    assert_eq!(
        ask(&mut victim, &records(10, frames(7, 10, 5, 0))).await,
        Ok(ToProbe::Ack { next_seq: 15 })
    );
    drop(victim);
    agent.shutdown().await.unwrap();
    let run = stored(&dir.path().join("data"), 7);
    assert_eq!(run.len(), 15, "the victim's records, every one once");
    for (seq, record) in run.iter().enumerate().skip(2) {
        assert!(matches!(record, ProbeRecord::Stopped(s) if *s == stamp(seq as u64)));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_data_budget_stops_acks_until_space_returns() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut config = AgentConfig::local(data.clone());
    config.segment_bytes = 64 * 1024;
    config.max_data_bytes = 256 * 1024;
    let agent = RunningAgent::start(config).await.unwrap();

    // Run 1 takes most of the budget.
    let mut first = open(&agent, None).await.unwrap();
    ask(&mut first, &hello(1)).await.unwrap();
    assert_eq!(
        ask(&mut first, &records(0, frames(1, 0, 2, 180 * 1024))).await,
        Ok(ToProbe::Ack { next_seq: 2 })
    );
    drop(first);
    // Run 2's batch does not fit: nothing stored, nothing acknowledged.
    let mut second = open(&agent, None).await.unwrap();
    ask(&mut second, &hello(2)).await.unwrap();
    let batch = frames(2, 0, 2, 100 * 1024);
    let path = data
        .join("probes")
        .join(format!("probe-{:032x}.sklog", 2u128));
    let before = std::fs::metadata(&path).unwrap().len();
    match ask(&mut second, &records(0, batch.clone())).await {
        Ok(ToProbe::Busy {
            next_seq: 0,
            reason,
        }) => {
            assert!(reason.contains("--max-data-bytes"), "{reason}")
        }
        other => panic!("expected busy, got {other:?}"),
    }
    assert_eq!(std::fs::metadata(&path).unwrap().len(), before);
    assert_eq!(health(&agent).await["ingest"]["busy"], 1);
    // The operator frees space; the same batch is now stored.
    std::fs::remove_file(
        data.join("probes")
            .join(format!("probe-{:032x}.sklog", 1u128)),
    )
    .unwrap();
    assert_eq!(
        ask(&mut second, &records(0, batch)).await,
        Ok(ToProbe::Ack { next_seq: 2 })
    );
    drop(second);
    agent.shutdown().await.unwrap();
    assert_eq!(stored(&data, 2).len(), 2);
}

/// Sends a page's JSON message and returns the agent's JSON answer, or the
/// close reason.
async fn ask_text(ws: &mut Ws, message: &str) -> Result<serde_json::Value, String> {
    ws.send(Message::Text(message.to_owned().into()))
        .await
        .map_err(|e| e.to_string())?;
    loop {
        match tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("an answer")
        {
            Some(Ok(Message::Text(t))) => return Ok(serde_json::from_str(&t).unwrap()),
            Some(Ok(Message::Close(frame))) => {
                return Err(frame.map(|f| f.reason.to_string()).unwrap_or_default());
            }
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(e.to_string()),
            None => return Err("closed".into()),
        }
    }
}

/// A page's upload: its token as a subprotocol (a browser cannot set
/// `Authorization` on a WebSocket), the subprotocol it offered answered.
async fn open_as_page(agent: &RunningAgent, token: &str) -> Result<Ws, WsError> {
    let mut request = format!("ws://{}/ingest", agent.addr)
        .into_client_request()
        .unwrap();
    request.headers_mut().insert(
        "sec-websocket-protocol",
        format!("skewscope-ingest, skewscope-bearer.{token}")
            .parse()
            .unwrap(),
    );
    let (ws, response) = connect_async(request).await?;
    assert_eq!(
        response.headers()["sec-websocket-protocol"],
        "skewscope-ingest",
        "a browser fails a handshake whose offered protocols get no answer"
    );
    Ok(ws)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_uploads_json_events_exactly_once_with_its_token_as_a_subprotocol() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "t0k").unwrap();
    let mut config = AgentConfig::local(dir.path().join("agent"));
    config.token_file = Some(token);
    let agent = RunningAgent::start(config).await.unwrap();

    // A wrong token is refused before the upgrade, as a header's is.
    assert!(open_as_page(&agent, "nope").await.is_err());

    let run = "0000000000000000000000000000beef";
    let page_hello = format!(r#"{{"hello": {{"version": {INGEST_VERSION}, "run_id": "{run}"}}}}"#);
    let head = format!(
        r#"{{"kind": "started", "name": "lobby-tv", "url": "ws://h:1/ws", "connections": 1, "version": "page 1", "at_ms": 1764000000000.0}},
           {{"kind": "identity", "run_id": "{run}", "clock_id": "page-1"}},
           {{"kind": "page", "user_agent": "test", "clock_step_ms": 0.005, "isolated": true}}"#
    );
    let receipt =
        r#"{"kind": "receipt", "conn": 0, "message": {"text": "go"}, "at_ms": 1764000000001.5}"#;
    let batch = |first: u64, events: &str| {
        format!(r#"{{"events": {{"first_seq": {first}, "events": [{events}]}}}}"#)
    };

    let mut ws = open_as_page(&agent, "t0k").await.unwrap();
    assert_eq!(
        ask_text(&mut ws, &page_hello).await.unwrap()["ack"]["next_seq"],
        0
    );
    let first = batch(0, &format!("{head}, {receipt}"));
    assert_eq!(
        ask_text(&mut ws, &first).await.unwrap()["ack"]["next_seq"],
        4
    );
    // The ack was lost, the page reloaded: the resend is trimmed. The
    // reload can reach the agent before it has seen the old connection
    // end; then the run is still in use (a page has no owner secret to
    // take it over), and the page tries again, as the page probe does.
    drop(ws);
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut ws = loop {
        let mut ws = open_as_page(&agent, "t0k").await.unwrap();
        match ask_text(&mut ws, &page_hello).await {
            Ok(answer) => {
                assert_eq!(answer["ack"]["next_seq"], 4);
                break ws;
            }
            Err(why)
                if why.contains("another connection uploads it")
                    && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(why) => panic!("the reloaded page's hello: {why}"),
        }
    };
    let again = batch(3, &format!("{receipt}, {receipt}"));
    assert_eq!(
        ask_text(&mut ws, &again).await.unwrap()["ack"]["next_seq"],
        5
    );
    // A binary message in a page's session ends only that session.
    ws.send(Message::Binary(encode(&hello(0xbeef)).into()))
        .await
        .unwrap();
    let closed = next_answer(&mut ws).await.unwrap_err();
    assert!(closed.contains("all binary, or all text"), "{closed}");

    let records = stored(&dir.path().join("agent"), 0xbeef);
    assert_eq!(records.len(), 5);
    assert!(matches!(&records[2], ProbeRecord::Page(p) if p.isolated));
    let receipts = records
        .iter()
        .filter(
            |r| matches!(r, ProbeRecord::Receipt(r) if r.at.wall_ns == 1_764_000_000_001_500_000),
        )
        .count();
    assert_eq!(receipts, 2, "one per event sent, the resent one once");
    let h = health(&agent).await;
    assert_eq!(h["ingest"]["duplicates"], 1, "{h}");
    assert_eq!(h["ingest"]["rejected"]["malformed"], 1, "{h}");
    assert_eq!(h["ingest"]["rejected"]["token"], 1, "{h}");
}
