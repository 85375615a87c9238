//! What the agent answers to a mistyped request: an unknown query
//! parameter, one given twice, a unit or a pointer that is not one. Each is
//! refused with 400 and what the endpoint takes, before anything is
//! broadcast; a real agent on 127.0.0.1:0.

use agent::http_client::request;
use agent::{AgentConfig, RunningAgent};

async fn agent() -> (RunningAgent, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let agent = RunningAgent::start(AgentConfig::local(dir.path().join("agent")))
        .await
        .unwrap();
    (agent, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typo_in_a_query_is_refused_with_what_the_endpoint_takes() {
    let (agent, _dir) = agent().await;
    let body = br#"{"type":"go"}"#;
    let publish = |query: &'static str| request(agent.addr, "POST", query, body, None);

    // The issue's typo: before, a 200 and a broadcast without its time.
    let r = publish("/publish?leed=30ms").await.unwrap();
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(
        r.body,
        "unknown parameter `leed` (did you mean lead?): /publish takes lead, pointer and unit; nothing was done\n"
    );
    let r = publish("/publish?lead=30ms&lead=auto").await.unwrap();
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.starts_with("lead= is given twice"), "{}", r.body);
    let r = publish("/publish?lead").await.unwrap();
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("give it as lead=VALUE"), "{}", r.body);

    // Units and pointers are checked before the body is read, in one wording.
    let r = publish("/publish?lead=30ms&unit=sec").await.unwrap();
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(
        r.body,
        "unit=sec: not a unit of time: give s, ms, us or ns\n"
    );
    let r = publish("/publish?lead=30ms&unit=auto").await.unwrap();
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.body.starts_with("unit=auto: ") && r.body.ends_with("give s, ms, us or ns\n"),
        "{}",
        r.body
    );
    let r = publish("/publish?lead=30ms&pointer=at").await.unwrap();
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.body
            .starts_with("pointer=at: a JSON pointer starts with /"),
        "{}",
        r.body
    );

    // Every other endpoint too, naming what it takes (or that it takes none).
    for (method, path, takes) in [
        ("GET", "/start_test?led=1s", "/start_test takes lead"),
        ("GET", "/healthz?verbose=1", "/healthz takes no parameters"),
        ("GET", "/metrics?x=1", "/metrics takes no parameters"),
        ("GET", "/ws?room=lobby", "/ws takes probe"),
        ("GET", "/audit/log?nme=x", "/audit/log takes name and from"),
    ] {
        let r = request(agent.addr, method, path, b"", None).await.unwrap();
        assert_eq!(r.status, 400, "{path}: {}", r.body);
        assert!(r.body.contains(takes), "{path}: {}", r.body);
    }

    // A GET where a POST is wanted says which.
    let r = request(agent.addr, "GET", "/publish", b"", None)
        .await
        .unwrap();
    assert_eq!(r.status, 405, "{}", r.body);
    assert_eq!(
        r.body,
        "method not allowed: /publish takes POST, with the message to broadcast as its body\n"
    );

    // Nothing of the above was broadcast: this is the first. And a pointer
    // as Python's urlencode sends it (`/` as %2F) is read as meant.
    let r = publish("/publish?lead=30ms&pointer=%2Fshow&unit=ms")
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let answer: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(answer["broadcast"], 1, "{answer}");
    assert_eq!(answer["pointer"], "/show", "{answer}");
    agent.shutdown().await.unwrap();
}
