//! Durations and byte sizes as people write them in flags and settings files
//! (`500ms`, `16MiB`): one parser for every binary, so a unit means the same
//! everywhere.

use std::time::Duration;

/// Parses a duration written as a number and a unit: `500ms`, `30s`, `1.5s`,
/// `2m`, `1h` (also `ns`, `us`). A bare number is refused: `--duration 30`
/// could mean seconds or minutes.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    const HINT: &str = "use a number and a unit, like 500ms, 30s or 2m";
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("`{text}` has no unit; {HINT}"))?;
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration; {HINT}"))?;
    let seconds_per_unit = match unit.trim() {
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        other => return Err(format!("`{other}` is not a time unit; {HINT}")),
    };
    Duration::try_from_secs_f64(value * seconds_per_unit)
        .map_err(|_| format!("`{text}` is out of range; {HINT}"))
}

/// Parses a size in bytes, optionally with a binary suffix: `65536`, `64KiB`,
/// `16MiB`, `1GiB` (`K`, `M`, `G` mean the same).
pub fn parse_size(text: &str) -> Result<usize, String> {
    const HINT: &str = "use a byte count, optionally with KiB, MiB or GiB, like 16MiB";
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a size; {HINT}"))?;
    let multiplier: u64 = match unit.trim() {
        "" | "B" => 1,
        "K" | "KiB" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        other => return Err(format!("`{other}` is not a size unit; {HINT}")),
    };
    value
        .checked_mul(multiplier)
        .and_then(|bytes| usize::try_from(bytes).ok())
        .filter(|&bytes| bytes > 0)
        .ok_or_else(|| format!("`{text}` is zero or too large; {HINT}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_the_usual_units() {
        let cases = [
            ("30s", Duration::from_secs(30)),
            ("500ms", Duration::from_millis(500)),
            ("2m", Duration::from_secs(120)),
            ("1h", Duration::from_secs(3600)),
            ("1.5s", Duration::from_millis(1500)),
            ("250us", Duration::from_micros(250)),
        ];
        for (text, want) in cases {
            assert_eq!(parse_duration(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn bad_durations_explain_the_format() {
        for text in ["30", "s", "3x", "", "1..2s", "-1s"] {
            let err = parse_duration(text).unwrap_err();
            assert!(err.contains("like 500ms"), "{text}: {err}");
        }
    }

    #[test]
    fn sizes_take_binary_suffixes() {
        assert_eq!(parse_size("65536"), Ok(65536));
        assert_eq!(parse_size("64KiB"), Ok(64 * 1024));
        assert_eq!(parse_size("16MiB"), Ok(16 * 1024 * 1024));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        for text in ["", "0", "16TB", "MiB", "99999999999999999999"] {
            assert!(parse_size(text).is_err(), "{text}");
        }
    }
}
