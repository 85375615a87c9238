//! The probe connecting the way real clients do, against real servers: a
//! Python `websockets` server (Debian's, which `./test` installs) that
//! wants a token and a subprotocol, and one that compresses (permessage-
//! deflate) as it does for browsers; a redirect in front of it; a TLS port;
//! and hand-written servers whose answers a client must refuse. Each failure
//! must say what the server answered.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use skewscope_core::log::AnyLog;
use skewscope_core::record::ProbeRecord;
use skewscope_os::log_files::read_file;

/// A server as its operators write them: it wants `Authorization` (a
/// bearer token or Basic `kiosk:pa ss`) and the `chat.v2` subprotocol,
/// then sends every client three messages.
const SERVER: &str = r#"
import asyncio, base64, sys
from websockets.asyncio.server import serve
from websockets.datastructures import Headers

BASIC = "Basic " + base64.b64encode(b"kiosk:pa ss").decode()

def check(connection, request):
    if request.path == "/old":
        response = connection.respond(302, "moved\n")
        response.headers["Location"] = "/ws"
        return response
    auth = request.headers.get("Authorization", "")
    if auth not in ("Bearer s3cret", BASIC):
        response = connection.respond(401, "token required\n")
        response.headers["WWW-Authenticate"] = 'Bearer realm="lobby"'
        return response
    offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",")]
    if "chat.v2" not in offered:
        return connection.respond(400, "subprotocol chat.v2 required\n")

async def handler(ws):
    for i in range(3):
        await ws.send(f"m{i}")
    await ws.wait_closed()

async def main():
    async with serve(handler, "127.0.0.1", 0, process_request=check,
                     subprotocols=["chat.v2"], compression=None) as server:
        print(server.sockets[0].getsockname()[1], flush=True)
        await asyncio.get_running_loop().create_future()

asyncio.run(main())
"#;

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the Python server; returns it and its port.
fn python_server(dir: &Path) -> (Server, u16) {
    run_python(dir, "server.py", SERVER, &[])
}

/// Runs `source` (saved as `file`) with `args`; it prints its port first.
fn run_python(dir: &Path, file: &str, source: &str, args: &[&Path]) -> (Server, u16) {
    let script = dir.join(file);
    std::fs::write(&script, source).unwrap();
    let mut child = Command::new("python3")
        .arg(&script)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 (./test installs python3-websockets)");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line.trim().parse().expect("the server prints its port");
    (Server(child), port)
}

fn probe(dir: &Path, url: &str, extra: &[&str]) -> (Output, Vec<ProbeRecord>) {
    probe_counting(dir, url, 3, extra)
}

/// A probe run that ends after `count` messages per connection.
fn probe_counting(dir: &Path, url: &str, count: u32, extra: &[&str]) -> (Output, Vec<ProbeRecord>) {
    let out = dir.join(format!("probe-{}.sklog", fastrand_name()));
    let o = Command::new(env!("CARGO_BIN_EXE_skewscope-probe"))
        .args([
            "--url",
            url,
            "--count",
            &count.to_string(),
            "--connect-timeout",
            "5s",
        ])
        .args(["--no-time-exchange", "--out"])
        .arg(&out)
        .args(extra)
        .output()
        .unwrap();
    let records = match read_file(&out) {
        Ok(AnyLog::Probe(d)) => d.records,
        _ => Vec::new(),
    };
    (o, records)
}

fn fastrand_name() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    N.fetch_add(1, Ordering::Relaxed).to_string()
}

fn receipts(records: &[ProbeRecord]) -> usize {
    records
        .iter()
        .filter(|r| matches!(r, ProbeRecord::Receipt(_)))
        .count()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A one-shot HTTP server on loopback that answers every connection with
/// `answer` (after reading the request), for as long as the test runs.
fn answering(answer: impl Fn(u16) -> Vec<u8> + Send + 'static) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(&answer(port));
        }
    });
    port
}

#[test]
fn headers_subprotocols_and_user_info_reach_a_server_that_wants_them() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, port) = python_server(dir.path());
    let url = format!("ws://127.0.0.1:{port}/ws");

    // No token: the error says what the server answered.
    let (o, _) = probe(dir.path(), &url, &["--subprotocol", "chat.v2"]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("HTTP 401 Unauthorized"), "{e}");
    assert!(
        e.contains(r#"www-authenticate: Bearer realm="lobby""#),
        "{e}"
    );
    assert!(e.contains("token required"), "{e}");

    // The token from a file, and the subprotocol: every message.
    let token = dir.path().join("token");
    std::fs::write(&token, "Bearer s3cret\n").unwrap();
    let header = format!("Authorization: @{}", token.display());
    let (o, records) = probe(
        dir.path(),
        &url,
        &[
            "--header",
            &header,
            "--subprotocol",
            "other",
            "--subprotocol",
            "chat.v2",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(receipts(&records), 3);

    // Without the subprotocol the server says why.
    let (o, _) = probe(dir.path(), &url, &["--header", &header]);
    assert!(
        stderr(&o).contains("HTTP 400 Bad Request"),
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("subprotocol chat.v2 required"));

    // User-info in the URL is Basic auth, and never reaches the log.
    let with_user = format!("ws://kiosk:pa%20ss@127.0.0.1:{port}/ws");
    let (o, records) = probe(dir.path(), &with_user, &["--subprotocol", "chat.v2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(receipts(&records), 3);
    let ProbeRecord::Started(started) = &records[0] else {
        panic!("{:?}", records[0])
    };
    assert_eq!(started.url, format!("ws://kiosk:***@127.0.0.1:{port}/ws"));

    // The server's own redirect is followed with the token.
    let (o, records) = probe(
        dir.path(),
        &format!("ws://127.0.0.1:{port}/old"),
        &["--header", &header, "--subprotocol", "chat.v2"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(receipts(&records), 3);

    // A redirect from another host is followed, like a browser's http URL,
    // but the token is not carried there, and the error says so.
    let redirect = answering(move |_| {
        format!(
            "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:{port}/ws\r\nContent-Length: 0\r\n\r\n"
        )
        .into_bytes()
    });
    let (o, _) = probe(
        dir.path(),
        &format!("ws://127.0.0.1:{redirect}/ws"),
        &["--header", &header, "--subprotocol", "chat.v2"],
    );
    let e = stderr(&o);
    assert!(e.contains("HTTP 401"), "{e}");
    assert!(
        e.contains("a redirect to another host dropped Authorization"),
        "{e}"
    );
}

#[test]
fn redirect_loops_tls_ports_and_unoffered_extensions_fail_with_what_was_answered() {
    let dir = tempfile::tempdir().unwrap();

    // A redirect to itself: bounded, and the error names where it pointed.
    let looping = answering(|port| {
        format!("HTTP/1.1 307 Temporary Redirect\r\nLocation: /again\r\nContent-Length: 0\r\n\r\nx{port}")
            .into_bytes()
    });
    let (o, _) = probe(dir.path(), &format!("ws://127.0.0.1:{looping}/ws"), &[]);
    assert!(
        stderr(&o).contains("more than 5 redirects; the last to /again"),
        "{}",
        stderr(&o)
    );

    // A TLS port (it answers a plain request with a TLS alert record).
    let tls = answering(|_| vec![0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x46]);
    let (o, _) = probe(dir.path(), &format!("ws://127.0.0.1:{tls}/ws"), &[]);
    assert!(stderr(&o).contains("answered in TLS"), "{}", stderr(&o));
    assert!(stderr(&o).contains("wss://"), "{}", stderr(&o));

    // A server that accepts permessage-deflate though nobody offered it
    // (--no-deflate): the probe fails the connection with a Close frame, 1002.
    let (port, server) = raw_server("Sec-WebSocket-Extensions: permessage-deflate\r\n", &[]);
    let url = format!("ws://127.0.0.1:{port}/ws");
    let (o, _) = probe(dir.path(), &url, &["--no-deflate"]);
    assert!(
        stderr(&o).contains("accepted an extension the client never offered: permessage-deflate"),
        "{}",
        stderr(&o)
    );
    let (code, request) = server.join().unwrap();
    assert_eq!(code, 1002);
    assert!(!request.contains("sec-websocket-extensions"), "{request}");

    // A frame with a reserved bit set (RSV1, as compression would without
    // having been agreed): a protocol error, answered with 1002, not a drop.
    // The message read before it, in the same bytes, is still recorded.
    let (port, server) = raw_server("", &[0x81, 0x02, b'o', b'k', 0xC1, 0x02, b'h', b'i']);
    let url = format!("ws://127.0.0.1:{port}/ws");
    let (_, records) = probe(dir.path(), &url, &["--no-deflate"]);
    assert_eq!(server.join().unwrap().0, 1002);
    assert_eq!(receipts(&records), 1, "the message before the bad frame");
    assert!(
        close_reason(&records).is_some_and(|r| r.contains("reserved bit")),
        "{:?}",
        close_reason(&records)
    );
}

/// Why the first connection closed, from its log.
fn close_reason(records: &[ProbeRecord]) -> Option<String> {
    records.iter().find_map(|r| match r {
        ProbeRecord::ConnectionClosed(c) => Some(c.reason.clone()),
        _ => None,
    })
}

/// "hi", compressed as a permessage-deflate server sends it (raw deflate,
/// the sync flush's `00 00 ff ff` tail taken off), in a final text frame
/// with RSV1 set.
const COMPRESSED_HI: &[u8] = &[0xC1, 0x04, 0xca, 0xc8, 0x04, 0x00];
/// 1,000 zero bytes, compressed to 11: a bomb for a probe taking 100.
const COMPRESSED_ZEROS: &[u8] = &[
    0xC2, 0x0b, 0x62, 0x60, 0x18, 0x05, 0xa3, 0x60, 0x14, 0x0c, 0x77, 0x00, 0x00,
];

#[test]
fn permessage_deflate_is_offered_as_browsers_do_and_its_answer_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    let accepted = "Sec-WebSocket-Extensions: permessage-deflate\r\n";

    // Offered by default; a compressed message is inflated and recorded.
    let (port, server) = raw_server(accepted, COMPRESSED_HI);
    let url = format!("ws://127.0.0.1:{port}/ws");
    let (o, records) = probe_counting(dir.path(), &url, 1, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (code, request) = server.join().unwrap();
    assert_eq!(code, 1000, "a normal close after --count");
    assert!(
        request.contains("sec-websocket-extensions: permessage-deflate; client_max_window_bits"),
        "{request}"
    );
    let lens: Vec<u32> = records
        .iter()
        .filter_map(|r| match r {
            ProbeRecord::Receipt(r) => Some(r.len),
            _ => None,
        })
        .collect();
    assert_eq!(lens, vec![2], "one receipt, of the inflated \"hi\"");
    assert!(
        records
            .iter()
            .any(|r| matches!(r, ProbeRecord::ConnectionDeflate(d) if d.conn == 0))
    );

    // Answers RFC 7692 says a client must fail: each with a Close, 1002.
    for answer in [
        "Sec-WebSocket-Extensions: permessage-deflate; mystery\r\n",
        "Sec-WebSocket-Extensions: permessage-deflate; server_max_window_bits=20\r\n",
        "Sec-WebSocket-Extensions: permessage-deflate, permessage-deflate\r\n",
    ] {
        let (port, server) = raw_server(answer, &[]);
        let (o, _) = probe(dir.path(), &format!("ws://127.0.0.1:{port}/ws"), &[]);
        assert!(!o.status.success());
        assert!(stderr(&o).contains("RFC 6455 §4.1"), "{}", stderr(&o));
        assert_eq!(server.join().unwrap().0, 1002, "{answer}");
    }

    // What does not inflate, or inflates past --max-message: 1002 and 1009.
    for (then, code, says) in [
        (&[0xC1, 0x02, 0xff, 0xff][..], 1002, "does not inflate"),
        (COMPRESSED_ZEROS, 1009, "inflates past 100 bytes"),
    ] {
        let (port, server) = raw_server(accepted, then);
        let url = format!("ws://127.0.0.1:{port}/ws");
        let (_, records) = probe(dir.path(), &url, &["--max-message", "100"]);
        assert_eq!(server.join().unwrap().0, code);
        let reason = close_reason(&records);
        assert!(
            reason.as_deref().is_some_and(|r| r.contains(says)),
            "{reason:?}"
        );
    }
}

/// A server as Python websockets serves by default: permessage-deflate on
/// for the clients that offer it, compressing each connection's messages
/// with context takeover. It notes what each connection negotiated.
const COMPRESSING_SERVER: &str = r#"
import asyncio, json, sys
from websockets.asyncio.server import serve

NOTES = sys.argv[1]

async def handler(ws):
    names = [e.name for e in ws.protocol.extensions]
    with open(NOTES, "a") as f:
        f.write(("deflate" if "permessage-deflate" in names else "plain") + "\n")
    for i in range(20):
        state = {"seq": i, "scene": "lobby", "cues": [{"light": n, "level": (i * 7 + n) % 100} for n in range(12)]}
        await ws.send(json.dumps(state))
    await ws.wait_closed()

async def main():
    async with serve(handler, "127.0.0.1", 0) as server:
        print(server.sockets[0].getsockname()[1], flush=True)
        await asyncio.get_running_loop().create_future()

asyncio.run(main())
"#;

#[test]
fn a_compressing_server_sends_the_probe_what_it_sends_browsers_and_it_inflates_alike() {
    let dir = tempfile::tempdir().unwrap();
    let notes = dir.path().join("negotiated.txt");
    let (_server, port) = run_python(dir.path(), "compressing.py", COMPRESSING_SERVER, &[&notes]);
    let url = format!("ws://127.0.0.1:{port}/ws");
    let two = ["--connections", "2"];
    let (o, deflated) = probe_counting(dir.path(), &url, 20, &two);
    assert!(o.status.success(), "{}", stderr(&o));
    let (o, plain) = probe_counting(
        dir.path(),
        &url,
        20,
        &[&two[..], &["--no-deflate"]].concat(),
    );
    assert!(o.status.success(), "{}", stderr(&o));

    let mut negotiated: Vec<String> = std::fs::read_to_string(&notes)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    negotiated.sort();
    assert_eq!(negotiated, ["deflate", "deflate", "plain", "plain"]);
    let deflate_records = |records: &[ProbeRecord]| {
        records
            .iter()
            .filter(|r| matches!(r, ProbeRecord::ConnectionDeflate(_)))
            .count()
    };
    assert_eq!(deflate_records(&deflated), 2);
    assert_eq!(deflate_records(&plain), 0);

    // Every connection got the same 20 messages: the inflated ones hash as
    // the plain ones do, so a report joins both kinds of client.
    let per_connection = |records: &[ProbeRecord], conn: u32| -> Vec<(u64, u32)> {
        records
            .iter()
            .filter_map(|r| match r {
                ProbeRecord::Receipt(r) if r.conn == conn => Some((r.hash, r.len)),
                _ => None,
            })
            .collect()
    };
    let reference = per_connection(&plain, 0);
    assert_eq!(reference.len(), 20);
    for (records, conn) in [(&plain, 1), (&deflated, 0), (&deflated, 1)] {
        assert_eq!(per_connection(records, conn), reference, "conn {conn}");
    }
}

/// A hand-written WebSocket server for one connection: it answers the
/// upgrade with `extra_headers`, sends `then`, and returns the close code of
/// the Close frame the probe sends back, and the probe's request (lower case).
fn raw_server(
    extra_headers: &'static str,
    then: &'static [u8],
) -> (u16, std::thread::JoinHandle<(u16, String)>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut request = Vec::new();
        let mut buf = [0u8; 1024];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = stream.read(&mut buf).unwrap();
            assert!(n > 0, "the probe closed before its request ended");
            request.extend_from_slice(&buf[..n]);
        }
        let text = String::from_utf8_lossy(&request).into_owned();
        let key = text
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .starts_with("sec-websocket-key:")
                    .then(|| l[18..].trim().to_owned())
            })
            .unwrap();
        let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
        write!(
            stream,
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Accept: {accept}\r\n{extra_headers}\r\n"
        )
        .unwrap();
        stream.write_all(then).unwrap();
        // The probe's Close frame: masked, opcode 8, then the code.
        let mut frame = [0u8; 8];
        stream.read_exact(&mut frame).unwrap();
        assert_eq!(frame[0], 0x88, "a final Close frame");
        let mask = [frame[2], frame[3], frame[4], frame[5]];
        let code = u16::from_be_bytes([frame[6] ^ mask[0], frame[7] ^ mask[1]]);
        (code, text.to_ascii_lowercase())
    });
    (port, server)
}

#[test]
fn bad_headers_and_subprotocols_are_refused_before_connecting() {
    let dir = tempfile::tempdir().unwrap();
    for (flag, value, says) in [
        ("--header", "no colon", "give it as 'Name: value'"),
        ("--header", "Host: evil", "sets this header itself"),
        ("--header", "Sec-WebSocket-Protocol: x", "use --subprotocol"),
        (
            "--header",
            "X-Token: @/nonexistent/file",
            "cannot read /nonexistent/file",
        ),
        ("--subprotocol", "has space", "not a valid subprotocol name"),
    ] {
        let (o, _) = probe(dir.path(), "ws://127.0.0.1:9/ws", &[flag, value]);
        assert!(!o.status.success());
        assert!(stderr(&o).contains(says), "{flag} {value}: {}", stderr(&o));
    }
}

/// A TLS server as its operators run them: Python websockets with the
/// standard library's ssl, sending every client three messages.
const TLS_SERVER: &str = r#"
import asyncio, ssl, sys
from websockets.asyncio.server import serve

async def handler(ws):
    for i in range(3):
        await ws.send(f"m{i}")
    await ws.wait_closed()

async def main():
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(sys.argv[1], sys.argv[2])
    async with serve(handler, "127.0.0.1", 0, ssl=context, compression=None) as server:
        print(server.sockets[0].getsockname()[1], flush=True)
        await asyncio.get_running_loop().create_future()

asyncio.run(main())
"#;

#[test]
fn wss_trusts_a_private_ca_refuses_an_unknown_one_and_warns_when_insecure() {
    let dir = tempfile::tempdir().unwrap();
    let skewscope_os::test_certs::PrivateCa { ca, cert, key } =
        skewscope_os::test_certs::private_ca(dir.path(), "site");
    let (_server, port) = run_python(dir.path(), "tls_server.py", TLS_SERVER, &[&cert, &key]);
    let url = format!("wss://127.0.0.1:{port}/ws");

    // Trusting the private CA: every message, over TLS, verified.
    let (o, records) = probe(dir.path(), &url, &["--ca-file", ca.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(receipts(&records), 3);
    let tls: Vec<_> = records
        .iter()
        .filter_map(|r| match r {
            ProbeRecord::ConnectionTls(t) => Some(t.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(tls.len(), 1);
    assert!(tls[0].verified);
    assert!(tls[0].version.starts_with("TLSv1_"), "{:?}", tls[0]);

    // The system roots do not know it: refused, with advice.
    let (o, _) = probe(dir.path(), &url, &[]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("TLS failed") && e.contains("--ca-file"), "{e}");

    // --insecure connects, warns, and the log says so for the report.
    let (o, records) = probe(dir.path(), &url, &["--insecure"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("WARN probe: --insecure"),
        "{}",
        stderr(&o)
    );
    assert_eq!(receipts(&records), 3);
    assert!(
        records
            .iter()
            .any(|r| matches!(r, ProbeRecord::ConnectionTls(t) if !t.verified))
    );

    // ws:// to the TLS port says to use wss://.
    let (o, _) = probe(dir.path(), &format!("ws://127.0.0.1:{port}/ws"), &[]);
    assert!(
        stderr(&o).contains("answered in TLS: use wss://"),
        "{}",
        stderr(&o)
    );

    // A --ca-file that holds no certificate fails the run before connecting.
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "not a certificate\n").unwrap();
    let (o, _) = probe(dir.path(), &url, &["--ca-file", empty.to_str().unwrap()]);
    assert!(
        stderr(&o).contains("no PEM certificate in it"),
        "{}",
        stderr(&o)
    );
}
