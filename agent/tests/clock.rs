//! `GET /clock`: the time exchange over WebSocket, against a real agent on
//! loopback. Real exchanges give an offset within their own bound; hostile
//! clients (not JSON, a flood, a huge frame, binary) are answered or closed
//! as documented and counted, and the hub's broadcasts to others go on.

use std::time::Duration;

use agent::http_client::request;
use agent::{AgentConfig, RunningAgent};
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

const WAIT: Duration = Duration::from_secs(20);

async fn clock(agent: &RunningAgent) -> Ws {
    let (ws, response) = tokio_tungstenite::connect_async(format!("ws://{}/clock", agent.addr))
        .await
        .unwrap();
    assert_eq!(response.status(), 101);
    ws
}

fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

async fn next_text(ws: &mut Ws) -> serde_json::Value {
    loop {
        match tokio::time::timeout(WAIT, ws.next()).await.unwrap() {
            Some(Ok(Message::Text(t))) => return serde_json::from_str(&t).unwrap(),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            other => panic!("expected a reply, got {other:?}"),
        }
    }
}

/// The close the agent sent (its code), after any replies.
async fn closed_with(ws: &mut Ws) -> CloseCode {
    loop {
        match tokio::time::timeout(WAIT, ws.next()).await.unwrap() {
            Some(Ok(Message::Close(Some(frame)))) => return frame.code,
            Some(Ok(Message::Text(_) | Message::Ping(_) | Message::Pong(_))) => continue,
            other => panic!("expected a close, got {other:?}"),
        }
    }
}

async fn health(agent: &RunningAgent) -> serde_json::Value {
    let r = request(agent.addr, "GET", "/healthz", b"", None)
        .await
        .unwrap();
    serde_json::from_str(&r.body).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exchange_gives_this_hosts_clock_within_its_bound() {
    let dir = tempfile::tempdir().unwrap();
    let agent = RunningAgent::start(AgentConfig::local(dir.path().into()))
        .await
        .unwrap();
    let mut ws = clock(&agent).await;
    let mut best: Option<(i64, i64)> = None;
    for id in 0..16 {
        let t1 = wall_ns();
        ws.send(Message::Text(format!(r#"{{"id":{id},"t1":{t1}}}"#).into()))
            .await
            .unwrap();
        let reply = next_text(&mut ws).await;
        let t4 = wall_ns() as i64;
        assert_eq!(reply["id"], id);
        assert_eq!(reply["t1"].as_u64(), Some(t1), "t1 echoed exactly");
        let t2 = reply["t2_ns"].as_i64().unwrap();
        let t3 = reply["t3_ns"].as_i64().unwrap();
        assert!(t2 <= t3, "{reply}");
        let ms = reply["t2"].as_f64().unwrap();
        assert!(
            (ms * 1e6 - t2 as f64).abs() < 2_000.0,
            "ms and ns agree: {reply}"
        );
        let t1 = t1 as i64;
        let offset = ((t2 - t1) + (t3 - t4)) / 2;
        let delay = (t4 - t1) - (t3 - t2);
        assert!(delay >= 0, "a round trip cannot be negative: {reply}");
        if best.is_none_or(|(_, d)| delay < d) {
            best = Some((offset, delay));
        }
    }
    // One host, one clock: the offset is zero within half the round trip.
    let (offset, delay) = best.unwrap();
    assert!(
        offset.abs() <= delay / 2 + 1,
        "offset {offset} ns outside its bound {} ns",
        delay / 2
    );
    assert_eq!(health(&agent).await["clock"]["answered"], 16);
    agent.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_clock_clients_are_answered_or_closed_and_broadcasts_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let agent = RunningAgent::start(AgentConfig::local(dir.path().into()))
        .await
        .unwrap();
    // A hub client that must keep getting broadcasts throughout.
    let (mut listener, _) = tokio_tungstenite::connect_async(format!("ws://{}/ws", agent.addr))
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    while agent.clients() < 1 {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // Not JSON, not a request: an error reply, and the session goes on.
    let mut ws = clock(&agent).await;
    for bad in ["hello", "{\"t1\":\"now\"}", "[1,2,3]"] {
        ws.send(Message::Text(bad.into())).await.unwrap();
        let reply = next_text(&mut ws).await;
        assert!(reply["error"].is_string(), "{bad}: {reply}");
    }
    ws.send(Message::Text(r#"{"t1":5}"#.into())).await.unwrap();
    assert_eq!(next_text(&mut ws).await["t1"], 5);

    // A flood: the burst is answered, then the session is closed with 1008.
    let mut flood = clock(&agent).await;
    for i in 0..200 {
        if flood
            .send(Message::Text(format!(r#"{{"t1":{i}}}"#).into()))
            .await
            .is_err()
        {
            break;
        }
    }
    assert_eq!(closed_with(&mut flood).await, CloseCode::Policy);

    // A frame over 1 KiB: 1009. Binary: 1003.
    let mut big = clock(&agent).await;
    let _ = big.send(Message::Text("x".repeat(4096).into())).await;
    assert_eq!(closed_with(&mut big).await, CloseCode::Size);
    let mut binary = clock(&agent).await;
    binary
        .send(Message::Binary(vec![1, 2, 3].into()))
        .await
        .unwrap();
    assert_eq!(closed_with(&mut binary).await, CloseCode::Unsupported);

    // The hub's client got every broadcast sent meanwhile and after.
    for _ in 0..3 {
        let r = request(agent.addr, "GET", "/start_test", b"", None)
            .await
            .unwrap();
        assert_eq!(r.status, 200);
        let got = tokio::time::timeout(WAIT, listener.next()).await.unwrap();
        assert!(matches!(got, Some(Ok(Message::Text(_)))), "{got:?}");
    }
    // Counted, and said.
    let h = health(&agent).await;
    let closed = &h["clock"]["closed"];
    assert_eq!(closed["rate"], 1, "{h}");
    assert_eq!(closed["too_big"], 1, "{h}");
    assert_eq!(closed["binary"], 1, "{h}");
    assert_eq!(h["clock"]["malformed"], 3, "{h}");
    let metrics = request(agent.addr, "GET", "/metrics", b"", None)
        .await
        .unwrap()
        .body;
    assert!(
        metrics.contains("skewscope_clock_sessions_refused_total{reason=\"rate\"} 1"),
        "{metrics}"
    );
    // The well-behaved session still answers.
    ws.send(Message::Text(r#"{"t1":6}"#.into())).await.unwrap();
    assert_eq!(next_text(&mut ws).await["t1"], 6);
    agent.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_every_clock_reply_carries_a_tag_that_binds_its_request() {
    use skewscope_core::time_exchange::json::check_reply;
    use skewscope_core::time_exchange::{Invalid, TimeKey};
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "site-secret\n").unwrap();
    let mut config = AgentConfig::local(dir.path().join("agent"));
    config.token_file = Some(token_file);
    let agent = RunningAgent::start(config).await.unwrap();
    let mut ws = clock(&agent).await;
    let key = TimeKey::from_token("site-secret");
    let t1 = wall_ns();
    let text = format!(r#"{{"id":1,"t1":{t1}}}"#);
    ws.send(Message::Text(text.clone().into())).await.unwrap();
    let reply = next_text(&mut ws).await;
    let t4 = wall_ns();
    let (t2, t3) = check_reply(&key, &text, &reply).unwrap();
    assert_eq!(
        (reply["t2_ns"].as_u64(), reply["t3_ns"].as_u64()),
        (Some(t2), Some(t3)),
        "the tagged times are the reply's"
    );
    assert!(t1 <= t2 && t2 <= t3 && t3 <= t4, "{t1} {t2} {t3} {t4}");
    // Checked against another request's text, or under another token: refused.
    let other = format!(r#"{{"id":2,"t1":{t1}}}"#);
    assert_eq!(check_reply(&key, &other, &reply), Err(Invalid::BadTag));
    let guess = TimeKey::from_token("guess");
    assert_eq!(check_reply(&guess, &text, &reply), Err(Invalid::BadTag));
    agent.shutdown().await.unwrap();
}
