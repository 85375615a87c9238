//! One headless Chromium showing one page, driven through the DevTools
//! protocol (for tests that read a page's state or measure its layout).

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use nix::sys::signal::Signal;
use tokio_tungstenite::tungstenite::Message;

/// Waits up to `secs` for `done`, polling; panics naming `what`.
pub fn wait_for(what: &str, secs: u64, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(secs),
            "{what} did not happen in {secs} s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One headless Chromium showing one page; the whole process group goes
/// when it is dropped.
pub struct Browser {
    child: Child,
    profile: PathBuf,
}

impl Browser {
    /// Opens `page` in a new headless Chromium with its own profile.
    pub fn open(profile: PathBuf, page: &str) -> Browser {
        Browser::open_with(profile, page, &[])
    }

    /// The same, with more of Chromium's flags (a window size).
    pub fn open_with(profile: PathBuf, page: &str, flags: &[&str]) -> Browser {
        std::fs::create_dir_all(&profile).unwrap();
        let child = Command::new(super::chromium())
            .args(super::CHROMIUM_QUIET)
            .args([
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
            ])
            .args(flags)
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(page)
            .env("HOME", &profile)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("chromium runs");
        Browser { child, profile }
    }

    /// The DevTools port Chromium chose.
    pub fn devtools_port(&self) -> u16 {
        let file = self.profile.join("DevToolsActivePort");
        let mut port = None;
        wait_for("chromium's DevTools port", 30, || {
            port = std::fs::read_to_string(&file)
                .ok()
                .and_then(|s| s.lines().next()?.trim().parse().ok());
            port.is_some()
        });
        port.unwrap()
    }

    /// Evaluates `expression` in the page; its value as JSON.
    pub fn evaluate(&self, expression: &str) -> serde_json::Value {
        let port = self.devtools_port();
        let list = http_get(port, "/json/list");
        let targets: serde_json::Value = serde_json::from_str(&list).unwrap();
        let page = targets
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["type"] == "page")
            .expect("a page target");
        let url = page["webSocketDebuggerUrl"].as_str().unwrap().to_owned();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
            let call = serde_json::json!({
                "id": 1,
                "method": "Runtime.evaluate",
                "params": {"expression": expression, "returnByValue": true},
            });
            ws.send(Message::Text(call.to_string().into()))
                .await
                .unwrap();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
            loop {
                let message = tokio::time::timeout_at(deadline, ws.next())
                    .await
                    .expect("DevTools answers")
                    .unwrap()
                    .unwrap();
                let Message::Text(text) = message else {
                    continue;
                };
                let reply: serde_json::Value = serde_json::from_str(&text).unwrap();
                if reply["id"] == 1 {
                    return reply["result"]["result"]["value"].clone();
                }
            }
        })
    }

    /// How far the page's clock (`performance.timeOrigin +
    /// performance.now()`, what the probe page and `skewscope-clock.js`
    /// stamp with) is ahead of this host's wall clock, ns. Chromium fixes
    /// the page clock's origin from two clock reads; a preemption between
    /// them (a loaded machine) leaves it off the wall clock for the page's
    /// life, so a test's truth about a page clock must be measured, not
    /// assumed. Read at nine ticks of `Date.now()` (the wall clock, whole
    /// ms): the page clock read between the last read before a tick and
    /// the first after it; their median. Good to the page clock's own
    /// resolution (5 µs cross-origin isolated) and a loop's turn.
    pub fn page_clock_ahead_of_wall_ns(&self) -> i64 {
        const AT_TICKS: &str = "(() => { \
            const ahead = []; \
            while (ahead.length < 9) { \
              const before = Date.now(); \
              let page, wall; \
              do { page = performance.timeOrigin + performance.now(); wall = Date.now(); } \
              while (wall === before); \
              if (wall === before + 1) ahead.push(page - wall); \
            } \
            ahead.sort((a, b) => a - b); \
            return ahead[4] * 1e6; \
          })()";
        let ahead = self.evaluate(AT_TICKS);
        ahead
            .as_f64()
            .unwrap_or_else(|| panic!("the page's clock against Date.now(): {ahead}"))
            .round() as i64
    }

    /// The text of the element with `id` (empty when there is none).
    pub fn text_of(&self, id: &str) -> String {
        self.evaluate(&format!(
            "document.getElementById('{id}')?.textContent ?? ''"
        ))
        .as_str()
        .unwrap_or("")
        .to_owned()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let group = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::killpg(group, Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// A plain HTTP GET on loopback; the body. Read by its Content-Length:
/// Chromium's DevTools server keeps the connection open.
pub fn http_get(port: u16, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reader = std::io::BufReader::new(s);
    let mut length = None;
    loop {
        let mut line = String::new();
        if std::io::BufRead::read_line(&mut reader, &mut line).unwrap() == 0 {
            return String::new();
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse::<usize>().ok();
        }
    }
    let mut body = Vec::new();
    match length {
        Some(n) => {
            body.resize(n, 0);
            reader.read_exact(&mut body).unwrap();
        }
        None => {
            reader.read_to_end(&mut body).unwrap();
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}
