//! What machine this is, for a result that must say where it was measured:
//! the kernel, the CPU, the memory and the port range connections draw
//! from. A rerun elsewhere is then compared knowing what differed.

/// The kernel's release (`uname -r`), or `None` where it is not published.
pub fn kernel_release() -> Option<String> {
    first_line("/proc/sys/kernel/osrelease")
}

/// The CPU's model name as `/proc/cpuinfo` gives it (x86), or its
/// hardware and implementer lines where there is no model name (ARM).
pub fn cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    cpuinfo_model(&info)
}

/// Memory in total, in bytes (`MemTotal` of `/proc/meminfo`).
pub fn memory_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// The local ports outgoing connections are given
/// (`net.ipv4.ip_local_port_range`): one source address holds at most
/// that many connections to one server address and port.
pub fn local_port_range() -> Option<(u16, u16)> {
    let text = first_line("/proc/sys/net/ipv4/ip_local_port_range")?;
    let mut ports = text.split_whitespace().map(|p| p.parse::<u16>().ok());
    Some((ports.next()??, ports.next()??))
}

fn first_line(path: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let line = text.lines().next()?.trim();
    (!line.is_empty()).then(|| line.to_owned())
}

fn cpuinfo_model(info: &str) -> Option<String> {
    let value = |key: &str| {
        info.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == key && !v.trim().is_empty()).then(|| v.trim().to_owned())
        })
    };
    value("model name")
        .or_else(|| value("Hardware"))
        .or_else(|| value("CPU implementer").map(|i| format!("CPU implementer {i}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machine_says_what_it_is() {
        assert!(kernel_release().is_some_and(|r| r.chars().next().unwrap().is_ascii_digit()));
        assert!(memory_bytes().is_some_and(|b| b > 1 << 20));
        let (low, high) = local_port_range().unwrap();
        assert!(low < high);
    }

    #[test]
    fn a_model_is_found_on_x86_and_arm() {
        let x86 = "processor\t: 0\nmodel name\t: Intel(R) Celeron(R) N4505 @ 2.00GHz\n";
        assert_eq!(
            cpuinfo_model(x86).as_deref(),
            Some("Intel(R) Celeron(R) N4505 @ 2.00GHz")
        );
        let arm = "processor\t: 0\nBogoMIPS\t: 108.00\nCPU implementer\t: 0x41\n";
        assert_eq!(cpuinfo_model(arm).as_deref(), Some("CPU implementer 0x41"));
        assert_eq!(cpuinfo_model("processor\t: 0\n"), None);
    }
}
