//! What the command line names a window of broadcasts with: a file of
//! trigger times, or `--between` as people write times.

use std::path::Path;

use anyhow::{Context, bail};

/// Reads a triggers file (see [`skewscope_core::analysis::triggers::parse`]); errors name the file
/// and line.
pub fn read_triggers(path: &Path) -> anyhow::Result<Vec<u64>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read triggers file {}", path.display()))?;
    let times = skewscope_core::analysis::triggers::parse(&text)
        .with_context(|| format!("{}", path.display()))?;
    if times.is_empty() {
        bail!("{}: no trigger times in it", path.display());
    }
    Ok(times)
}

/// `report --between FROM-TO` (or `FROM` alone: until now), each end a
/// wall-clock time as people have it: ns since 1970 (`date +%s%N`, what
/// an audit prints), an RFC 3339 time (`2026-12-06T17:00:00Z`, with a
/// fraction or an offset like `+01:00`), `now`, or a duration before now
/// (`-10m`, `-90s`). `now_ns` is the wall clock now.
pub fn parse_between(text: &str, now_ns: u64) -> Result<(u64, u64), String> {
    const HINT: &str = "give FROM-TO or FROM (until now), each as ns since 1970, an RFC 3339 time like 2026-12-06T17:00:00Z, now, or a time before now like -10m";
    let text = text.trim();
    let time = |t: &str| parse_wall_time(t, now_ns);
    // Dates and offsets hold dashes too: the split is the dash with a time
    // on either side.
    let split = text
        .char_indices()
        .filter(|&(i, c)| c == '-' && i > 0)
        .find_map(|(i, _)| Some((time(&text[..i]).ok()?, time(&text[i + 1..]).ok()?)));
    let (from, to) = match split {
        Some(range) => range,
        None => (
            time(text).map_err(|e| format!("--between {text}: {e}; {HINT}"))?,
            now_ns,
        ),
    };
    if from > to {
        return Err(format!("--between {text}: FROM is after TO; {HINT}"));
    }
    Ok((from, to))
}

/// One end of `--between`: see [`parse_between`].
fn parse_wall_time(text: &str, now_ns: u64) -> Result<u64, String> {
    let text = text.trim();
    if text == "now" {
        return Ok(now_ns);
    }
    if let Some(before) = text.strip_prefix('-') {
        let d = skewscope_core::units::parse_duration(before)?;
        return Ok(now_ns.saturating_sub(d.as_nanos() as u64));
    }
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse()
            .map_err(|_| format!("`{text}` is too large for ns since 1970"));
    }
    // RFC 3339: humantime reads UTC (`Z`, or none); an offset is applied here.
    let (local, offset_s) = match text.len().checked_sub(6).map(|i| text.split_at(i)) {
        Some((local, off))
            if (off.starts_with('+') || off.starts_with('-')) && off.as_bytes()[3] == b':' =>
        {
            let hours: i64 = off[1..3]
                .parse()
                .map_err(|_| format!("`{off}` is no offset"))?;
            let minutes: i64 = off[4..]
                .parse()
                .map_err(|_| format!("`{off}` is no offset"))?;
            let sign = if off.starts_with('-') { -1 } else { 1 };
            (local, sign * (hours * 3600 + minutes * 60))
        }
        _ => (text, 0),
    };
    let at = humantime::parse_rfc3339_weak(local)
        .map_err(|e| format!("`{text}` is not a time ({e})"))?;
    let ns = at
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| format!("`{text}` is before 1970"))?
        .as_nanos() as i128
        - i128::from(offset_s) * 1_000_000_000;
    u64::try_from(ns).map_err(|_| format!("`{text}` is before 1970"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn between_takes_times_as_people_have_them() {
        let now = 1_796_578_418_000_000_000;
        // What an audit prints: ns since 1970.
        assert_eq!(parse_between("5-9", now), Ok((5, 9)));
        // RFC 3339, with a fraction, an offset, or none.
        let z = "2026-12-06T17:15:00Z";
        let (from, to) = parse_between(&format!("{z}-now"), now).unwrap();
        assert_eq!(to, now);
        let stamp = |s: &str| parse_wall_time(s, now).unwrap();
        assert_eq!(from, stamp(z));
        assert_eq!(stamp("2026-12-06T18:15:00+01:00"), stamp(z));
        assert_eq!(stamp("2026-12-06T17:15:00.5Z"), stamp(z) + 500_000_000);
        let both = format!("{z}-2026-12-06T17:25:00Z");
        assert_eq!(
            parse_between(&both, now).unwrap(),
            (stamp(z), stamp(z) + 600_000_000_000)
        );
        // Before now: one end, or both.
        assert_eq!(parse_between("-10m", now), Ok((now - 600_000_000_000, now)));
        assert_eq!(
            parse_between("-10m--1m", now),
            Ok((now - 600_000_000_000, now - 60_000_000_000))
        );
        for bad in ["yesterday", "9-5", "-10", "2026-13-40T00:00:00Z"] {
            let e = parse_between(bad, now).unwrap_err();
            assert!(e.contains("give FROM-TO"), "{bad}: {e}");
        }
    }
}
