//! The HTML report in a real browser: Debian's headless Chromium renders the
//! page that `skewscope report --html` wrote from an agent and three probes
//! run as separate processes. The screenshot is not blank, dark mode
//! differs from light, every plot has one mark per broadcast (or receipt,
//! or probe), and the page made no network request: Chromium is pointed at
//! a proxy on loopback that records every host asked for, and the hosts
//! Chromium asks for by itself on a blank page are set aside (a control
//! page that does fetch shows the record works).
//!
//! At 1280 px and at a phone's 390 px it reads as text: no U+FFFD, the
//! diagnosis on lines of its own, nothing wider than the window, no plot
//! label cut at its edge (measured through DevTools).
//!
//! `SKEWSCOPE_SCREENSHOT=docs/report.png` also keeps the light screenshot
//! (how the README's picture is made).

mod common;

use std::collections::BTreeSet;
use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use common::browser::Browser;
use common::{Reaped, SKEWSCOPE, signal, start_agent, wait_until};
use nix::sys::signal::Signal;
use skewscope_core::record::ProbeRecord;

const BROADCASTS: usize = 12;

/// Records the host of every request Chromium sends its proxy: any fetch
/// at all, the page's or the browser's own.
struct FetchCounter {
    port: u16,
    hosts: Arc<Mutex<Vec<String>>>,
}

impl FetchCounter {
    fn start() -> FetchCounter {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hosts = Arc::new(Mutex::new(Vec::new()));
        let seen = hosts.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                // Read the request line, then close: the fetch fails, as offline.
                let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
                let mut head = [0u8; 4096];
                let n = stream.read(&mut head).unwrap_or(0);
                let line = String::from_utf8_lossy(&head[..n]);
                // A connection that asks for nothing (Chromium preconnects
                // to its proxy, and may close before sending) is no fetch.
                if let Some(request) = line.lines().next().filter(|l| !l.trim().is_empty()) {
                    seen.lock().unwrap().push(host_of(request));
                }
            }
        });
        FetchCounter { port, hosts }
    }

    /// The hosts asked for since the last call.
    fn take(&self) -> BTreeSet<String> {
        std::mem::take(&mut *self.hosts.lock().unwrap())
            .into_iter()
            .collect()
    }
}

/// The host of a proxy request line: `CONNECT host:443 …` or `GET http://host/… …`.
fn host_of(request_line: &str) -> String {
    let target = request_line.split(' ').nth(1).unwrap_or(request_line);
    let target = target.split("://").last().unwrap_or(target);
    let authority = target.split('/').next().unwrap_or(target);
    authority
        .rsplit_once(':')
        .map_or(authority, |(h, _)| h)
        .to_owned()
}

/// Runs headless Chromium on `page` with `mode` (`--screenshot=…` or
/// `--dump-dom`), every fetch sent to `proxy`; returns its stdout.
fn browse(page: &Path, mode: &str, dark: bool, proxy: &FetchCounter, profile: &Path) -> String {
    let mut command = Command::new(common::chromium());
    command
        .args(common::CHROMIUM_QUIET)
        .args(["--hide-scrollbars", "--window-size=1000,3000"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--proxy-server=http://127.0.0.1:{}", proxy.port))
        // Loopback too goes through the proxy: nothing may bypass the count.
        .arg("--proxy-bypass-list=<-loopback>")
        .arg(mode)
        .env("HOME", profile);
    if dark {
        command.arg("--force-dark-mode");
    }
    let o = command
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs");
    assert!(
        o.status.success(),
        "chromium {mode} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// (the top-left pixel, share of pixels unlike it, distinct colours).
fn picture_facts(png_file: &Path) -> ([u8; 3], f64, usize) {
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(png_file).expect("a screenshot was written"),
    ));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.color_type.samples();
    assert!(channels >= 3, "{:?}", info.color_type);
    let pixels: Vec<[u8; 3]> = buf[..info.buffer_size()]
        .chunks(channels)
        .map(|p| [p[0], p[1], p[2]])
        .collect();
    let background = pixels[0];
    let unlike = pixels.iter().filter(|&&p| p != background).count();
    let distinct: std::collections::HashSet<[u8; 3]> = pixels.iter().copied().collect();
    (
        background,
        unlike as f64 / pixels.len() as f64,
        distinct.len(),
    )
}

/// A probe whose wall clock is `shift` seconds off (libfaketime's syntax).
fn run_probe(url: &str, name: &str, connections: usize, shift: &str, log: &Path) -> Reaped {
    Reaped(
        Command::new(common::sibling_binary("skewscope-probe"))
            .args(["--url", url, "--name", name])
            .args(["--connections", &connections.to_string()])
            .args([
                "--count",
                &BROADCASTS.to_string(),
                "--time-interval",
                "200ms",
            ])
            .args(["--out", log.to_str().unwrap()])
            .args(["--act-at", "/at_ns"])
            .env("LD_PRELOAD", common::faketime_lib())
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
            .env("FAKETIME", shift)
            .spawn()
            .unwrap(),
    )
}

fn count_in(log: &Path, what: fn(&ProbeRecord) -> bool) -> usize {
    match skewscope_os::log_files::read_file(log) {
        Ok(skewscope_core::log::AnyLog::Probe(d)) => d.records.iter().filter(|r| what(r)).count(),
        _ => 0,
    }
}

#[test]
fn the_html_report_renders_in_chromium_with_every_mark_and_no_fetch() {
    let dir = tempfile::tempdir().unwrap();
    let (mut agent, addr, agent_log) = start_agent(dir.path());
    let url = format!("ws://{addr}/ws");
    // Three devices' clocks: 2 ms ahead, 1 ms behind, true. The report
    // then corrects them to the agent's, with intervals.
    let probes = [
        ("lobby", 3usize, "+0.002"),
        ("stage", 2, "-0.001"),
        ("bar<&>", 1, "+0"),
    ];
    let mut running = Vec::new();
    let mut logs = Vec::new();
    for (name, connections, shift) in probes {
        let log = dir.path().join(format!("{}.sklog", logs.len()));
        running.push(run_probe(&url, name, connections, shift, &log));
        logs.push(log);
    }
    for (log, (_, connections, _)) in logs.iter().zip(probes) {
        wait_until("probe connected", || {
            count_in(log, |r| matches!(r, ProbeRecord::ConnectionOpened(_))) == connections
        });
        wait_until("time exchange answered", || {
            count_in(log, |r| matches!(r, ProbeRecord::TimeSample(_))) >= 4
        });
    }
    // Each broadcast carries a time to act 100 ms after it; the probes act then.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for _ in 0..BROADCASTS {
        let r = runtime
            .block_on(agent::http_client::request(
                addr.parse().unwrap(),
                "GET",
                "/start_test?lead=100ms",
                b"",
                None,
            ))
            .unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
        std::thread::sleep(Duration::from_millis(30));
    }
    for mut probe in running {
        assert!(
            probe.0.wait().unwrap().success(),
            "a probe ends after --count"
        );
    }
    signal(&agent.0, Signal::SIGTERM);
    assert!(agent.0.wait().unwrap().success());

    let page = dir.path().join("report.html");
    let o = Command::new(SKEWSCOPE)
        .arg("report")
        .arg(&agent_log)
        .args(&logs)
        .arg("--html")
        .arg(&page)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let connections: usize = probes.iter().map(|p| p.1).sum();

    let proxy = FetchCounter::start();
    let profile = dir.path().join("chromium");
    // Chromium contacts some services of its own at every start, whatever
    // the page: learn them from a blank page, so that only the report's
    // fetches count.
    let blank = dir.path().join("blank.html");
    std::fs::write(&blank, "<!DOCTYPE html><title>blank</title>").unwrap();
    for _ in 0..2 {
        browse(&blank, "--dump-dom", false, &proxy, &profile);
    }
    let browsers_own = proxy.take();
    // The DOM as Chromium parsed it: marks counted by class.
    let dom = browse(&page, "--dump-dom", false, &proxy, &profile);
    let count = |needle: &str| dom.matches(needle).count();
    assert_eq!(count(r#"<circle class="mark skew"#), BROADCASTS, "{dom}");
    assert_eq!(
        count(r#"<circle class="mark receipt"#),
        BROADCASTS * connections
    );
    assert_eq!(count(r#"<g class="mark offset">"#), probes.len());
    assert_eq!(count(r#"<rect class="cell""#), BROADCASTS * connections);
    assert_eq!(count(r#"<path class="cdf"#), 2, "estimate and upper bound");
    // Acting together: per broadcast, its receive skew beside its action skew.
    assert_eq!(
        count(r#"<circle class="mark received"#),
        BROADCASTS,
        "{dom}"
    );
    assert_eq!(count(r#"<circle class="mark acted"#), BROADCASTS, "{dom}");
    assert!(dom.contains("Acting together"), "{dom}");
    // The diagnosis and the reference, as the table words them.
    assert!(dom.contains(r#"<section id="why"><h2>Why</h2>"#), "{dom}");
    assert!(
        dom.contains("split into the server's order and the network"),
        "{dom}"
    );
    assert!(dom.contains("reference: the agent's hub ("), "{dom}");
    assert!(
        dom.contains("before its time to act"),
        "the time to spare: {dom}"
    );
    assert!(dom.contains("bar&lt;&amp;&gt;"), "a probe's name is text");
    assert!(!dom.contains("bar<&>"));

    let light = dir.path().join("light.png");
    let dark = dir.path().join("dark.png");
    browse(
        &page,
        &format!("--screenshot={}", light.display()),
        false,
        &proxy,
        &profile,
    );
    browse(
        &page,
        &format!("--screenshot={}", dark.display()),
        true,
        &proxy,
        &profile,
    );
    let (light_bg, light_ink, light_colours) = picture_facts(&light);
    let (dark_bg, dark_ink, _) = picture_facts(&dark);
    assert!(
        light_ink > 0.03 && light_colours > 50,
        "blank page? {light_ink} of pixels drawn, {light_colours} colours"
    );
    assert!(dark_ink > 0.03, "blank dark page? {dark_ink}");
    let luminance = |p: [u8; 3]| p.iter().map(|&c| u32::from(c)).sum::<u32>();
    assert!(
        luminance(light_bg) > 600 && luminance(dark_bg) < 150,
        "light {light_bg:?}, dark {dark_bg:?}"
    );
    let fetched: Vec<String> = proxy.take().difference(&browsers_own).cloned().collect();
    assert!(
        fetched.is_empty(),
        "the report made network requests: {fetched:?} (the browser's own: {browsers_own:?})"
    );

    // The counter does see a page that fetches.
    let control = dir.path().join("control.html");
    std::fs::write(
        &control,
        r#"<!DOCTYPE html><img src="http://skewscope-test.invalid/x.png">"#,
    )
    .unwrap();
    browse(&control, "--dump-dom", false, &proxy, &profile);
    assert!(
        proxy.take().contains("skewscope-test.invalid"),
        "the fetch counter missed a fetch"
    );

    if let Ok(keep) = std::env::var("SKEWSCOPE_SCREENSHOT") {
        std::fs::copy(&light, &keep).unwrap();
    }

    // Read by a person, on a desktop and on a phone: no character lost to
    // U+FFFD, the diagnosis on lines of its own, nothing wider than the
    // window, no label of a plot cut at its edge.
    for width in [1280, 390] {
        let browser = Browser::open_with(
            dir.path().join(format!("layout-{width}")),
            &format!("file://{}", page.display()),
            &[&format!("--window-size={width},2400")],
        );
        let mut layout = serde_json::Value::Null;
        for _ in 0..100 {
            layout = browser.evaluate(LAYOUT);
            if layout["ready"] == true {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(layout["ready"], true, "{layout}");
        assert_eq!(
            layout["replaced"], 0,
            "U+FFFD in the page at {width} px: {layout}"
        );
        assert!(layout["why_lines"].as_u64().unwrap() >= 4, "{layout}");
        assert!(
            layout["scroll_width"].as_u64().unwrap() <= layout["client_width"].as_u64().unwrap(),
            "wider than the window at {width} px: {layout}"
        );
        assert_eq!(
            layout["cut"],
            serde_json::json!([]),
            "labels cut at {width} px: {layout}"
        );
    }
}

/// What the page's layout says of itself (run through DevTools: the report
/// has no script of its own, and its CSP allows none).
const LAYOUT: &str = r#"(() => {
  const d = document.documentElement;
  if (document.readyState !== "complete" || !location.href.endsWith("report.html")) return { ready: false };
  const cut = [];
  for (const svg of document.querySelectorAll("svg")) {
    const box = svg.getBoundingClientRect();
    for (const t of svg.querySelectorAll("text")) {
      const r = t.getBoundingClientRect();
      if (r.width > 0 && (r.left < box.left - 1 || r.right > box.right + 1)) cut.push(t.textContent);
    }
  }
  return {
    ready: true,
    replaced: (d.outerHTML.match(/\uFFFD/g) || []).length,
    why_lines: (document.querySelector("pre.why")?.textContent ?? "").split("\n").length,
    scroll_width: d.scrollWidth,
    client_width: d.clientWidth,
    cut,
  };
})()"#;
