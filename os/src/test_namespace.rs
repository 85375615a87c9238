//! For tests that need `CAP_NET_RAW` on a real loopback, or a file system
//! of their own (a full disk), without any privilege outside: run the test
//! again in a new user, network and mount namespace of its own, its
//! loopback brought up (`unshare` from util-linux, `ip` from iproute2).
//! Nothing outside the namespace is touched. Behind the `test-support`
//! feature.

use std::process::Command;

/// Set in the re-run, so it knows it is inside.
const INSIDE: &str = "SKEWSCOPE_TEST_IN_NETNS";

/// `true` when this already is the run inside the namespace (go on with the
/// test); otherwise runs test `name` of this test binary there, asserts it
/// passed, and returns `false` (the caller returns).
pub fn in_own_namespace(name: &str) -> bool {
    if std::env::var_os(INSIDE).is_some() {
        return true;
    }
    let me = std::env::current_exe().expect("the test binary's path");
    let out = Command::new("unshare")
        .args(["--user", "--map-root-user", "--net", "--mount", "sh", "-c"])
        .arg("ip link set lo up && exec \"$0\" \"$@\"")
        .arg(&me)
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(INSIDE, "1")
        .output()
        .expect("unshare (util-linux) runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "in the namespace: {text}");
    assert!(text.contains("1 passed"), "in the namespace: {text}");
    false
}

/// [`in_own_namespace`] for an async test: inside, runs `test` to its end
/// on a two-worker tokio runtime (as the 2-core server has).
pub fn run_in_own_namespace<F: std::future::Future<Output = ()>>(
    name: &str,
    test: impl FnOnce() -> F,
) {
    if in_own_namespace(name) {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime")
            .block_on(test());
    }
}

/// This side's address on the link to a [`PeerNamespace`].
pub const SERVER_ADDR: [u8; 4] = [192, 0, 2, 1];
/// The peer namespace's address on that link.
pub const PEER_ADDR: [u8; 4] = [192, 0, 2, 2];
/// The interface on this side of the link: what a tap on the server
/// captures on.
pub const SERVER_LINK: &str = "ssv-srv";

/// A second network namespace linked to the test's own by a veth pair, so
/// clients reach the server over a link rather than loopback: the test's
/// side is [`SERVER_ADDR`] on [`SERVER_LINK`], the peer's [`PEER_ADDR`]
/// (documentation addresses, reachable only inside these namespaces).
/// Closures given to [`PeerNamespace::run`] run on a thread inside it, and
/// every socket, thread and process they make is there too. The namespace
/// ends with the last thread in it and this value.
pub struct PeerNamespace {
    net: std::fs::File,
}

impl PeerNamespace {
    /// Makes the namespace and the link. Call it inside the test's own
    /// namespace ([`in_own_namespace`]), where the test is root.
    pub fn create() -> std::io::Result<PeerNamespace> {
        let me = std::process::id().to_string();
        let net = std::thread::spawn(move || -> std::io::Result<std::fs::File> {
            // A network namespace is a thread's own: only this one moves.
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)?;
            let net = std::fs::File::open("/proc/thread-self/ns/net")?;
            let peer = ip_addr(PEER_ADDR);
            ip(&["link", "set", "lo", "up"])?;
            ip(&[
                "link",
                "add",
                "ssv-peer",
                "type",
                "veth",
                "peer",
                "name",
                SERVER_LINK,
                "netns",
                &me,
            ])?;
            ip(&["addr", "add", &format!("{peer}/24"), "dev", "ssv-peer"])?;
            ip(&["link", "set", "ssv-peer", "up"])?;
            Ok(net)
        })
        .join()
        .map_err(|_| std::io::Error::other("the namespace's thread panicked"))??;
        let server = ip_addr(SERVER_ADDR);
        ip(&["addr", "add", &format!("{server}/24"), "dev", SERVER_LINK])?;
        ip(&["link", "set", SERVER_LINK, "up"])?;
        Ok(PeerNamespace { net })
    }

    /// Runs `f` on a new thread inside the peer namespace (the thread
    /// panics if it cannot enter it).
    pub fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::io::Result<std::thread::JoinHandle<T>> {
        let net = self.net.try_clone()?;
        Ok(std::thread::spawn(move || {
            nix::sched::setns(&net, nix::sched::CloneFlags::CLONE_NEWNET)
                .expect("enter the peer namespace");
            f()
        }))
    }
}

fn ip_addr(a: [u8; 4]) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::from(a)
}

fn ip(args: &[&str]) -> std::io::Result<()> {
    let out = Command::new("ip").args(args).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}
