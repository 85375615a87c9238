//! For tests that need `CAP_NET_RAW` on a real loopback without any
//! privilege outside: run the test again in a new user and network
//! namespace of its own, its loopback brought up (`unshare` from
//! util-linux, `ip` from iproute2). Nothing outside the namespace is
//! touched. Behind the `test-support` feature.

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
        .args(["--user", "--map-root-user", "--net", "sh", "-c"])
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
