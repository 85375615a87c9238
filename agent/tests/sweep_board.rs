//! The sweep board (`/sweep`, `/sweep/plan`, `/sweep/worker`) of a real
//! agent with a token on 127.0.0.1:0: a worker reads back the plan a
//! sweep pinned and the sweep sees the worker; without the token nothing
//! is read or pinned (each refusal counted); a body too large, not a JSON
//! object, or a status without a name is refused with the reason and
//! leaves the board as it was.

use agent::http_client::request;
use agent::{AgentConfig, RunningAgent};

const TOKEN: &str = "board-test-token";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_pinned_reaches_the_workers_and_only_with_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, TOKEN).unwrap();
    let mut config = AgentConfig::local(dir.path().join("agent"));
    config.token_file = Some(token_file);
    let agent = RunningAgent::start(config).await.unwrap();
    let call = |method: &'static str, path: &'static str, body: &'static [u8], token| {
        request(agent.addr, method, path, body, token)
    };

    // Nothing pinned yet: a worker hears `null` and is seen.
    let r = call(
        "POST",
        "/sweep/worker",
        br#"{"name":"rack-2","state":"idle"}"#,
        Some(TOKEN),
    )
    .await
    .unwrap();
    assert_eq!((r.status, r.body.as_str()), (200, "null\n"));
    let r = call(
        "PUT",
        "/sweep/plan",
        br#"{"sweep":"ab","seq":1}"#,
        Some(TOKEN),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let r = call(
        "POST",
        "/sweep/worker",
        br#"{"name":"rack-2","seq":1}"#,
        Some(TOKEN),
    )
    .await
    .unwrap();
    let plan: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(plan["seq"], 1, "{}", r.body);
    let r = call("GET", "/sweep", b"", Some(TOKEN)).await.unwrap();
    let view: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(view["plan"]["sweep"], "ab", "{view}");
    assert_eq!(view["workers"][0]["name"], "rack-2", "{view}");
    assert_eq!(view["workers"][0]["status"]["seq"], 1, "{view}");

    // Without the token (or with another) nothing is read or pinned.
    for (method, path, body) in [
        ("GET", "/sweep", &b""[..]),
        ("PUT", "/sweep/plan", br#"{"sweep":"evil","seq":9}"#),
        ("DELETE", "/sweep/plan", b""),
        ("POST", "/sweep/worker", br#"{"name":"spy"}"#),
    ] {
        for token in [None, Some("wrong")] {
            let r = request(agent.addr, method, path, body, token)
                .await
                .unwrap();
            assert_eq!(r.status, 401, "{method} {path}: {}", r.body);
            assert!(!r.body.contains("\"seq\""), "{}", r.body);
        }
    }

    // Bad bodies: refused with the reason.
    let big = vec![b' '; 64 * 1024 + 1];
    let r = request(agent.addr, "PUT", "/sweep/plan", &big, Some(TOKEN))
        .await
        .unwrap();
    assert_eq!(r.status, 413, "{}", r.body);
    assert!(r.body.contains("at most 65536 bytes"), "{}", r.body);
    for (method, path, body, status, says) in [
        ("PUT", "/sweep/plan", &b"[1,2]"[..], 422, "one JSON object"),
        ("POST", "/sweep/worker", br#"{"seq":3}"#, 422, "\"name\""),
        (
            "POST",
            "/sweep/plan",
            b"{}",
            405,
            "/sweep/plan takes PUT or DELETE",
        ),
    ] {
        let r = request(agent.addr, method, path, body, Some(TOKEN))
            .await
            .unwrap();
        assert_eq!(r.status, status, "{method} {path}: {}", r.body);
        assert!(r.body.contains(says), "{method} {path}: {}", r.body);
    }

    // None of it changed the board.
    let r = call("GET", "/sweep", b"", Some(TOKEN)).await.unwrap();
    let after: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(after["plan"], view["plan"]);
    assert_eq!(after["workers"].as_array().unwrap().len(), 1, "{after}");

    // Taken down: the workers hear `null` again.
    let r = call("DELETE", "/sweep/plan", b"", Some(TOKEN))
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let r = call(
        "POST",
        "/sweep/worker",
        br#"{"name":"rack-2"}"#,
        Some(TOKEN),
    )
    .await
    .unwrap();
    assert_eq!(r.body, "null\n");

    // The 8 refusals are counted where a scrape sees them.
    let metrics = call("GET", "/metrics", b"", None).await.unwrap().body;
    assert!(
        metrics.contains("skewscope_http_unauthorized_total{endpoint=\"sweep\"} 8"),
        "{metrics}"
    );
}
