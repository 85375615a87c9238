//! The browser probe in a real browser: Debian's headless Chromium, several
//! instances (one user-data directory each), opening the agent's `/probe`
//! against the agent's own hub and against the FastAPI peer, uploading to
//! `/ingest`, one of them reloaded mid-run through the DevTools protocol.
//!
//! Whose clock is shifted: Chromium hangs under libfaketime (even at
//! +2 ms; measured, and libfaketime's maintainers say so of browsers), and a
//! time namespace shifts only the monotonic clocks, never the wall clock a
//! page's `performance.timeOrigin` comes from. So the *agent* runs under
//! libfaketime, its wall clock 5 ms ahead, and every page must measure an
//! offset to it within its own bound of that 5 ms.
//!
//! Chromium reaches loopback only: every other host name resolves to
//! nothing (`--host-resolver-rules`), and its background services are off.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::browser::{Browser, http_get, wait_for};
use common::{Reaped, fastapi, json_report, sibling_binary, signal};
use nix::sys::signal::Signal;
use skewscope_core::log::AnyLog;
use skewscope_core::record::{MessageKey, ProbeRecord};
use skewscope_os::log_files::read_file;

/// The agent's wall clock ahead of the real one (and of every page's).
const AGENT_AHEAD_NS: i64 = 5_000_000;

/// The agent (its hub, `/clock`, `/ingest` and `/probe`) with its wall
/// clock [`AGENT_AHEAD_NS`] ahead.
fn shifted_agent(dir: &Path) -> (Reaped, String) {
    let mut child = Command::new(sibling_binary("skewscope-agent"))
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.join("agent"))
        .env("LD_PRELOAD", common::faketime_lib())
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .env("FAKETIME", format!("+{}", AGENT_AHEAD_NS as f64 / 1e9))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Its two lines ("listening on", "recording to"), both read: a closed
    // pipe before the second would end it.
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut lines = [String::new(), String::new()];
    for line in &mut lines {
        std::io::BufRead::read_line(&mut out, line).unwrap();
    }
    let addr = lines[0]
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_owned();
    (Reaped(child), addr)
}

/// Every run the agent stores from pages, by name: its records.
fn stored_runs(agent_dir: &Path) -> Vec<(String, Vec<ProbeRecord>)> {
    let Ok(entries) = std::fs::read_dir(agent_dir.join("probes")) else {
        return Vec::new();
    };
    let mut runs = Vec::new();
    for entry in entries.flatten() {
        if let Ok(AnyLog::Probe(d)) = read_file(&entry.path()) {
            let name = d.records.iter().find_map(|r| match r {
                ProbeRecord::Started(s) => Some(s.name.clone()),
                _ => None,
            });
            runs.push((name.unwrap_or_default(), d.records));
        }
    }
    runs.sort_by(|a, b| a.0.cmp(&b.0));
    runs
}

fn count(records: &[ProbeRecord], what: fn(&ProbeRecord) -> bool) -> usize {
    records.iter().filter(|r| what(r)).count()
}

/// No connection of a run has two receipts of one message.
fn assert_no_duplicates(name: &str, records: &[ProbeRecord]) {
    let mut seen = std::collections::HashSet::new();
    for r in records {
        if let ProbeRecord::Receipt(r) = r {
            assert!(
                seen.insert((r.conn, r.key)),
                "{name}: receipt stored twice: {r:?}"
            );
        }
    }
}

/// A broadcast through `path` on loopback `addr`; its answer must name `says`.
fn trigger(addr: &str, path: &str, says: &str) {
    let body = http_get(addr_port(addr), path);
    assert!(body.contains(says), "{path}: {body}");
}

#[test]
fn pages_in_chromium_receive_act_and_upload_every_receipt_once_across_a_reload() {
    let dir = tempfile::tempdir().unwrap();
    let (mut agent, addr) = shifted_agent(dir.path());
    let agent_dir = dir.path().join("agent");
    let names = ["lobby-tv", "stage-left", "stage-right"];
    let browsers: Vec<Browser> = names
        .iter()
        .map(|name| {
            let page = format!(
                "http://{addr}/probe?url=ws://{addr}/ws&name={name}&act-at=/at_ns&connections=2"
            );
            Browser::open(dir.path().join(format!("profile-{name}")), &page)
        })
        .collect();
    let clients = || -> u64 {
        let health: serde_json::Value =
            serde_json::from_str(&http_get(addr_port(&addr), "/healthz")).unwrap_or_default();
        health["clients"].as_u64().unwrap_or(0)
    };
    // Every page connected and synced: three bursts of exchanges stored
    // (the first, while three browsers start on two cores, bounds loosely).
    wait_for("6 page connections on the hub", 60, || clients() == 6);
    wait_for("every page synced and uploading", 60, || {
        let runs = stored_runs(&agent_dir);
        runs.len() == 3
            && runs
                .iter()
                .all(|(_, r)| count(r, |r| matches!(r, ProbeRecord::TimeSample(_))) >= 24)
    });

    let lead = "/start_test?lead=300ms";
    for _ in 0..5 {
        trigger(&addr, lead, "at_ns");
        std::thread::sleep(Duration::from_millis(100));
    }
    let all_in = |per_run: usize| {
        let agent_dir = agent_dir.clone();
        move || {
            let runs = stored_runs(&agent_dir);
            runs.len() == 3
                && runs.iter().all(|(_, r)| {
                    count(r, |r| matches!(r, ProbeRecord::Receipt(_))) == per_run
                        && count(r, |r| matches!(r, ProbeRecord::Action(_))) == per_run
                })
        }
    };
    wait_for("5 broadcasts' receipts and actions stored", 60, all_in(10));

    // A reload mid-run: the page resumes its run from what the agent
    // acknowledged, on new connections.
    let before = browsers[1].text_of("run");
    browsers[1].evaluate("location.reload()");
    wait_for("the reloaded page back on the hub", 60, || {
        browsers[1].text_of("run").contains("(resumed)") && clients() == 6
    });
    assert!(before.starts_with(browsers[1].text_of("run").split(' ').next().unwrap()));
    for _ in 0..5 {
        trigger(&addr, lead, "at_ns");
        std::thread::sleep(Duration::from_millis(100));
    }
    wait_for("10 broadcasts' receipts and actions stored", 60, all_in(20));
    let shown_offsets: Vec<String> = browsers.iter().map(|b| b.text_of("offset")).collect();
    let page_ahead = page_clocks_ahead(&browsers);
    // The agent lists them as uploading: what `skewscope audit
    // --require-probes` counts.
    let status: serde_json::Value =
        serde_json::from_str(&http_get(addr_port(&addr), "/audit/status")).unwrap();
    let uploading = status["probes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["uploading"] == true)
        .count();
    assert_eq!(uploading, 3, "{status}");
    drop(browsers);
    signal(&agent.0, Signal::SIGTERM);
    assert!(agent.0.wait().unwrap().success());

    // Exactly once: 3 runs (the reloaded page's is one run), no receipt
    // stored twice, and the report finds none missing or unmatched.
    let runs = stored_runs(&agent_dir);
    assert_eq!(
        runs.len(),
        3,
        "{:?}",
        runs.iter().map(|r| &r.0).collect::<Vec<_>>()
    );
    for (name, records) in &runs {
        assert_no_duplicates(name, records);
    }
    let (text, json) = json_report(&[&agent_dir]);
    assert_eq!(json["reference"]["kind"], "hub", "{text}");
    assert_eq!(json["broadcasts"], 10, "{text}");
    assert_eq!(json["receipts"], 60, "{text}");
    assert_eq!(json["missing"], 0, "{text}");
    assert_eq!(json["duplicates"], 0, "{text}");
    assert_eq!(json["unmatched"], 0, "{text}");
    // The reloaded page's run: its first connections closed at the reload,
    // two new ones after.
    assert_eq!(json["connections"], 8, "{text}");

    // Browser probes are said to be such, and each measured the agent's
    // 5 ms lead within its own bound.
    let probes = json["probes"].as_array().unwrap();
    assert_eq!(probes.len(), 3, "{text}");
    for p in probes {
        assert!(
            p["page"]["user_agent"].as_str().unwrap().contains("Chrome"),
            "{p}"
        );
        // The report's offset is the device's clock minus the agent's:
        // the page clock's own distance from the wall clock (measured)
        // less the agent's shift.
        let offset = p["offset_ns"].as_i64().unwrap();
        let bound = p["offset_bound_ns"].as_i64().unwrap();
        let page = names.iter().position(|n| p["name"] == *n).unwrap();
        let truth = page_ahead[page] - AGENT_AHEAD_NS;
        assert!(
            (offset - truth).abs() <= bound + PAGE_CLOCK_READ_NS,
            "{}: offset {offset} ns ± {bound} ns, the truth {truth} ns (the agent {AGENT_AHEAD_NS} ns ahead, the page clock {} ns ahead of the wall clock; pages showed {shown_offsets:?}): {text}",
            p["name"],
            page_ahead[page]
        );
    }
    assert!(
        text.contains("a page in a browser: userspace stamps"),
        "{text}"
    );

    // Every action at its time to act, none late.
    let actions = &json["actions"];
    assert_eq!(actions["actions"], 60, "{text}");
    assert_eq!(actions["late"], 0, "{text}");
    // The pages share this machine's clock (Chromium's, unshifted), so
    // their stamps of one broadcast's actions show the true action skew.
    // Each page aimed within its offset bound of the agent's time and fired
    // within its measured timer error: no two can be further apart than
    // both bounds and the worst timer (and a clock step each). How close
    // that is depends on the load (docs/browser-probe.md#figures measures
    // it); the promise does not.
    let mut by_seq: std::collections::BTreeMap<u64, Vec<u64>> = Default::default();
    let (mut worst_bound, mut worst_timer) = (0u64, 0u64);
    for (name, records) in &runs {
        for r in records {
            if let ProbeRecord::Action(a) = r {
                let MessageKey::Seq(seq) = a.key else {
                    panic!("{name}: an action on a message that is not a test message: {a:?}");
                };
                by_seq.entry(seq).or_default().push(a.done.wall_ns);
                worst_bound = worst_bound.max(a.offset_bound_ns.expect("a bounded offset"));
                worst_timer = worst_timer.max(a.done.mono_ns.saturating_sub(a.target.mono_ns));
            }
        }
    }
    let true_skews: Vec<u64> = by_seq
        .values()
        .map(|d| d.iter().max().unwrap() - d.iter().min().unwrap())
        .collect();
    let truth_max = *true_skews.iter().max().unwrap();
    let promise = 2 * worst_bound + worst_timer + 2 * 5_000;
    assert!(
        truth_max <= promise,
        "true action skew {truth_max} ns over the pages' own bound {promise} ns: {text}"
    );
    // And the report's interval in the agent's clock holds it.
    let c = &actions["action_skew_corrected_ns"];
    let (lo, hi) = (
        c["lo"]["max"].as_u64().unwrap(),
        c["hi"]["max"].as_u64().unwrap(),
    );
    assert!(
        lo <= truth_max && truth_max <= hi,
        "max {truth_max} vs [{lo}, {hi}]: {text}"
    );
}

fn addr_port(addr: &str) -> u16 {
    addr.rsplit_once(':').unwrap().1.parse().unwrap()
}

#[test]
fn pages_beside_fastapi_act_on_the_apps_time_in_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let (mut agent, addr) = shifted_agent(dir.path());
    let agent_dir = dir.path().join("agent");
    let (_server, server) = fastapi();
    // The app writes "at": time.time() + lead, float seconds.
    let browsers: Vec<Browser> = ["kiosk-1", "kiosk-2"]
        .iter()
        .map(|name| {
            let page = format!(
                "http://{addr}/probe?url=ws://{server}/ws&name={name}&act-at=/at&act-unit=s"
            );
            Browser::open(dir.path().join(format!("profile-{name}")), &page)
        })
        .collect();
    wait_for("both pages connected and synced", 60, || {
        let runs = stored_runs(&agent_dir);
        runs.len() == 2
            && runs.iter().all(|(_, r)| {
                count(r, |r| matches!(r, ProbeRecord::ConnectionOpened(_))) == 1
                    && count(r, |r| matches!(r, ProbeRecord::TimeSample(_))) >= 8
            })
    });
    for _ in 0..5 {
        trigger(&server.to_string(), "/start_test?lead=0.3", "clients");
        std::thread::sleep(Duration::from_millis(100));
    }
    wait_for("5 receipts and actions stored per page", 60, || {
        let runs = stored_runs(&agent_dir);
        runs.iter().all(|(_, r)| {
            count(r, |r| matches!(r, ProbeRecord::Receipt(_))) == 5
                && count(r, |r| matches!(r, ProbeRecord::Action(_))) == 5
        })
    });
    // The audit of the FastAPI server, triggering through it: it counts
    // the pages among the probes it requires, and judges their actions.
    let audit_json = dir.path().join("audit.json");
    let audit = Command::new(common::SKEWSCOPE)
        .args(["audit", "--agent", &format!("http://{addr}")])
        .args(["--trigger", &format!("http://{server}/start_test?lead=0.3")])
        .args([
            "--broadcasts",
            "5",
            "--interval",
            "100ms",
            "--settle",
            "30s",
        ])
        .args(["--require-probes", "2", "--max-skew-p99", "1s"])
        .args(["--max-late", "0", "--max-action-skew-p99", "1s", "--json"])
        .arg(&audit_json)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&audit.stdout).into_owned()
        + &String::from_utf8_lossy(&audit.stderr);
    assert_eq!(audit.status.code(), Some(0), "{said}");
    assert!(said.contains("kiosk-1 (browser page)"), "{said}");
    let judged: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&audit_json).unwrap()).unwrap();
    assert_eq!(judged["report"]["actions"]["actions"], 10, "{said}");
    for p in judged["report"]["probes"].as_array().unwrap() {
        assert!(!p["page"].is_null(), "{p}");
    }
    let page_ahead = page_clocks_ahead(&browsers);
    drop(browsers);
    signal(&agent.0, Signal::SIGTERM);
    assert!(agent.0.wait().unwrap().success());

    for (name, records) in &stored_runs(&agent_dir) {
        assert_no_duplicates(name, records);
    }
    let (text, json) = json_report(&[&agent_dir]);
    // The agent is the clock reference only: broadcasts are what the pages
    // received, each joined across both.
    // (its own 5, then the audit's 5).
    assert_eq!(json["broadcasts"], 10, "{text}");
    assert_eq!(json["receipts"], 20, "{text}");
    assert_eq!(json["missing"], 0, "{text}");
    assert_eq!(json["actions"]["actions"], 20, "{text}");
    assert_eq!(json["actions"]["late"], 0, "{text}");
    // Each page's clock against the agent's: its own distance from this
    // host's wall clock (measured) less the agent's shift. Within the
    // bound, give or take the page clock's resolution the measurement has.
    for p in json["probes"].as_array().unwrap() {
        let offset = p["offset_ns"].as_i64().unwrap();
        let bound = p["offset_bound_ns"].as_i64().unwrap();
        let page = ["kiosk-1", "kiosk-2"]
            .iter()
            .position(|n| p["name"] == *n)
            .unwrap();
        let truth = page_ahead[page] - AGENT_AHEAD_NS;
        assert!(
            (offset - truth).abs() <= bound + PAGE_CLOCK_READ_NS,
            "{}: offset {offset} ns ± {bound} ns, the truth {truth} ns (the page clock {} ns ahead of the wall clock): {text}",
            p["name"],
            page_ahead[page]
        );
    }
}

/// Each page's clock against this host's wall clock (ns ahead), in the
/// order of `browsers`: the truth their offsets are checked against.
/// Printed, so a failing run shows it.
fn page_clocks_ahead(browsers: &[Browser]) -> Vec<i64> {
    let ahead: Vec<i64> = browsers
        .iter()
        .map(Browser::page_clock_ahead_of_wall_ns)
        .collect();
    eprintln!("page clocks ahead of the wall clock: {ahead:?} ns");
    ahead
}

/// How closely [`Browser::page_clock_ahead_of_wall_ns`] reads a page's
/// clock: its resolution cross-origin isolated (5 µs) and a loop's turn.
const PAGE_CLOCK_READ_NS: i64 = 10_000;

/// One HTTPS GET through Python's ssl trusting `ca` (the site's own CA):
/// the body, or the error.
fn https_get(ca: &Path, url: &str) -> String {
    const GET: &str = "import ssl, sys, urllib.request\n\
        c = ssl.create_default_context(cafile=sys.argv[1])\n\
        print(urllib.request.urlopen(sys.argv[2], context=c, timeout=30).read().decode())";
    let o = Command::new("python3")
        .args(["-c", GET])
        .arg(ca)
        .arg(url)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{url}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The base64 SHA-256 of a certificate's public key, the way Chromium's
/// `--ignore-certificate-errors-spki-list` names a key to trust (the
/// openssl recipe docs/deploying.md gives for a test bench).
fn spki_sha256(cert: &Path) -> String {
    let o = Command::new("sh")
        .arg("-c")
        .arg(
            "openssl x509 -in \"$1\" -pubkey -noout | openssl pkey -pubin -outform der \
             | openssl dgst -sha256 -binary | base64",
        )
        .arg("sh")
        .arg(cert)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

/// The page from an agent with `--tls-cert`: `https://…/probe`, the hub at
/// `wss://`, `/clock` and `/ingest` at `wss://` on its own origin. Chromium
/// trusts the agent's key as a site's managed browsers trust its CA; the
/// page is then cross-origin isolated (its clock in 5 µs steps, not
/// 100 µs), and every receipt and action arrives once.
#[test]
fn a_page_over_https_is_cross_origin_isolated_and_uploads_over_wss() {
    let dir = tempfile::tempdir().unwrap();
    let site = skewscope_os::test_certs::private_ca(dir.path(), "site");
    let (_agent, addr, _) = common::start_agent_with(
        dir.path(),
        "127.0.0.1:0",
        &[
            "--tls-cert",
            site.cert.to_str().unwrap(),
            "--tls-key",
            site.key.to_str().unwrap(),
        ],
    );
    let agent_dir = dir.path().join("agent");
    let origin = format!("https://{addr}");
    let page =
        format!("{origin}/probe?url=wss://{addr}/ws&name=secure-tv&act-at=/at_ns&connections=2");
    let trust = format!(
        "--ignore-certificate-errors-spki-list={}",
        spki_sha256(&site.cert)
    );
    let browser = Browser::open_with(dir.path().join("profile"), &page, &[&trust]);
    let clients = || -> u64 {
        let health: serde_json::Value =
            serde_json::from_str(&https_get(&site.ca, &format!("{origin}/healthz")))
                .unwrap_or_default();
        health["clients"].as_u64().unwrap_or(0)
    };
    wait_for("the page's 2 wss:// connections on the hub", 60, || {
        clients() == 2
    });
    wait_for("the page synced over wss:// and uploading", 60, || {
        stored_runs(&agent_dir)
            .first()
            .is_some_and(|(_, r)| count(r, |r| matches!(r, ProbeRecord::TimeSample(_))) >= 8)
    });
    for _ in 0..3 {
        let said = https_get(&site.ca, &format!("{origin}/start_test?lead=300ms"));
        assert!(said.contains("at_ns"), "{said}");
    }
    wait_for("3 broadcasts' receipts and actions stored", 60, || {
        stored_runs(&agent_dir).first().is_some_and(|(_, r)| {
            count(r, |r| matches!(r, ProbeRecord::Receipt(_))) == 6
                && count(r, |r| matches!(r, ProbeRecord::Action(_))) == 6
        })
    });
    drop(browser);
    let runs = stored_runs(&agent_dir);
    assert_eq!(runs.len(), 1);
    let (name, records) = &runs[0];
    assert_eq!(name, "secure-tv");
    assert_no_duplicates(name, records);
    let page = records
        .iter()
        .find_map(|r| match r {
            ProbeRecord::Page(p) => Some(p),
            _ => None,
        })
        .expect("the page's own record");
    assert!(page.isolated, "cross-origin isolated over https: {page:?}");
    assert!(
        page.clock_step_ns > 0 && page.clock_step_ns < 50_000,
        "an isolated page's clock steps 5 us, not 100 us: {page:?}"
    );
}

/// Pages of the site's own app (not the probe page): they import the
/// agent's clock module, listen to the hub through it and act on what the
/// app publishes (`POST /publish?lead=`), reporting their own actions and
/// the frames they were drawn in. One is reloaded mid-run: its run goes on,
/// and every action and frame is stored once; the report lists both pages
/// as apps and gives the frames' skew beside the actions'.
#[test]
fn a_sites_own_pages_report_their_actions_and_frames_once_across_a_reload() {
    let dir = tempfile::tempdir().unwrap();
    let (mut agent, addr) = shifted_agent(dir.path());
    let agent_dir = dir.path().join("agent");
    let agent_url = format!("http://{addr}");
    let (_app, app) = common::fastapi_app("hub_app:app", &[("SKEWSCOPE_AGENT", &agent_url)]);
    let names = ["lobby-tv", "stage"];
    let browsers: Vec<Browser> = names
        .iter()
        .map(|name| {
            let page = format!("http://{app}/kiosk?name={name}");
            Browser::open(dir.path().join(format!("profile-{name}")), &page)
        })
        .collect();
    let clients = || -> u64 {
        let health: serde_json::Value =
            serde_json::from_str(&http_get(addr_port(&addr), "/healthz")).unwrap_or_default();
        health["clients"].as_u64().unwrap_or(0)
    };
    wait_for("both pages on the hub and uploading", 60, || {
        clients() == 2
            && stored_runs(&agent_dir).len() == 2
            && browsers.iter().all(|b| b.text_of("state") == "ready")
    });
    let stored = |kind: fn(&ProbeRecord) -> bool, each: usize| {
        let agent_dir = agent_dir.clone();
        move || {
            let runs = stored_runs(&agent_dir);
            runs.len() == 2 && runs.iter().all(|(_, r)| count(r, kind) == each)
        }
    };
    let publish = |n: usize| {
        for _ in 0..n {
            trigger(&app.to_string(), "/start_test?lead=0.3", "published");
            std::thread::sleep(Duration::from_millis(150));
        }
    };
    publish(5);
    wait_for(
        "5 actions per page",
        60,
        stored(|r| matches!(r, ProbeRecord::Action(_)), 5),
    );
    wait_for(
        "5 frames per page",
        60,
        stored(|r| matches!(r, ProbeRecord::Frame(_)), 5),
    );
    let before = browsers[1].text_of("run");
    browsers[1].evaluate("location.reload()");
    wait_for("the reloaded page back on the hub", 60, || {
        browsers[1].text_of("run").contains("(resumed)")
            && browsers[1].text_of("state") == "ready"
            && clients() == 2
    });
    assert!(browsers[1].text_of("run").starts_with(&before[..32]));
    publish(5);
    wait_for(
        "10 actions per page",
        60,
        stored(|r| matches!(r, ProbeRecord::Action(_)), 10),
    );
    wait_for(
        "10 frames per page",
        60,
        stored(|r| matches!(r, ProbeRecord::Frame(_)), 10),
    );
    drop(browsers);
    signal(&agent.0, Signal::SIGTERM);
    assert!(agent.0.wait().unwrap().success());

    let runs = stored_runs(&agent_dir);
    for (name, records) in &runs {
        assert_no_duplicates(name, records);
        assert!(
            records.iter().any(|r| matches!(r, ProbeRecord::App(_))),
            "{name}: an app's own run"
        );
    }
    let (text, json) = json_report(&[&agent_dir]);
    assert_eq!(json["reference"]["kind"], "hub", "{text}");
    assert_eq!(json["broadcasts"], 10, "{text}");
    let actions = &json["actions"];
    assert_eq!(actions["actions"], 20, "{text}");
    assert_eq!(actions["late"], 0, "{text}");
    assert_eq!(actions["unmatched_actions"], 0, "{text}");
    assert_eq!(actions["frames"], 20, "{text}");
    assert_eq!(actions["frame_skew_ns"]["count"], 10, "{text}");
    for name in names {
        let row = actions["by_actor"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == name)
            .unwrap_or_else(|| panic!("{name} among the actors: {text}"));
        assert_eq!(row["kind"], "app", "{text}");
        assert_eq!(row["actions"], 10, "{text}");
        assert_eq!(row["frames"], 10, "{text}");
    }
    // Each frame is the one its action was drawn in, on the page's own
    // clock: the browser stamps a frame with the moment it began it (its
    // vsync), which can be up to one refresh (16.7 ms at 60 Hz) before the
    // action ran in it, and it comes within a second after.
    let refresh = 17_000_000u64;
    for (name, records) in &runs {
        let done: std::collections::HashMap<(u32, MessageKey), u64> = records
            .iter()
            .filter_map(|r| match r {
                ProbeRecord::Action(a) => Some(((a.conn, a.key), a.done.mono_ns)),
                _ => None,
            })
            .collect();
        for r in records {
            if let ProbeRecord::Frame(f) = r {
                let acted = done[&(f.conn, f.key)];
                assert!(
                    f.at.mono_ns + refresh >= acted && f.at.mono_ns < acted + 1_000_000_000,
                    "{name}: a frame {} ms from its action: {f:?}",
                    (f.at.mono_ns as f64 - acted as f64) / 1e6
                );
            }
        }
    }
    let c = &actions["frame_skew_corrected_ns"];
    assert_eq!(c["count"], 10, "{text}");
    assert!(text.contains("frame skew"), "{text}");
    assert!(text.contains("one frame is 16.7 ms at 60 Hz"), "{text}");
}
