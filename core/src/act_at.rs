//! The time to act a broadcast carries: where in its payload it is, in what
//! unit, and the wall time (the server's clock) it names.
//!
//! A server that wants its clients to act together puts a moment in the
//! server's wall clock into each broadcast (`time.time() + 0.03` in
//! FastAPI); a client that knows its offset to that clock acts at that
//! moment, whenever the copy arrived. The probe is told where the moment is
//! with a JSON pointer (RFC 6901), like `/at` or `/data/act_at`.
//!
//! Units: seconds, milliseconds, microseconds or nanoseconds since the Unix
//! epoch. With [`ActUnit::Auto`] the unit is read from the magnitude, which
//! tells them apart for any date between 1973 and 5138: below 10^11 it is
//! seconds, below 10^14 milliseconds, below 10^17 microseconds, else
//! nanoseconds. A number may be an integer or a float (a float of seconds
//! near today is exact to about 0.24 µs, the resolution of an `f64` there),
//! or a string holding one.

use crate::convert;
use std::fmt;

/// The unit a time to act is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActUnit {
    /// Read from the magnitude (see the module's documentation).
    Auto,
    /// Seconds since the epoch (Python's `time.time()`).
    S,
    /// Milliseconds (JavaScript's `Date.now()`).
    Ms,
    /// Microseconds.
    Us,
    /// Nanoseconds (Go's `time.Now().UnixNano()`, the agent's test message).
    Ns,
}

impl ActUnit {
    /// Nanoseconds per unit for a value of magnitude `x` (a finite number).
    fn scale(self, x: f64) -> f64 {
        let unit = match self {
            ActUnit::Auto => {
                let m = x.abs();
                if m < 1e11 {
                    ActUnit::S
                } else if m < 1e14 {
                    ActUnit::Ms
                } else if m < 1e17 {
                    ActUnit::Us
                } else {
                    ActUnit::Ns
                }
            }
            other => other,
        };
        match unit {
            ActUnit::S => 1e9,
            ActUnit::Ms => 1e6,
            ActUnit::Us => 1e3,
            ActUnit::Ns | ActUnit::Auto => 1.0,
        }
    }

    /// The unit as the flag spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ActUnit::Auto => "auto",
            ActUnit::S => "s",
            ActUnit::Ms => "ms",
            ActUnit::Us => "us",
            ActUnit::Ns => "ns",
        }
    }
}

/// The units a time to act is written in, as every message says them.
pub const UNITS: &str = "s, ms, us or ns";

impl ActUnit {
    /// A unit to *write* a time in (`/publish?unit=`): `auto` is refused,
    /// since a writer must choose. Errors start with the text given, so a
    /// caller puts its flag or parameter before them (`unit=sec: …`).
    pub fn written(text: &str) -> Result<ActUnit, String> {
        match text.parse::<ActUnit>() {
            Ok(ActUnit::Auto) => Err(format!(
                "{text}: auto reads a unit from a time's size, but a time written needs one: give {UNITS}"
            )),
            Ok(unit) => Ok(unit),
            Err(_) => Err(format!("{text}: not a unit of time: give {UNITS}")),
        }
    }
}

impl std::str::FromStr for ActUnit {
    type Err = String;

    /// A unit to *read* a time in (`--act-at`'s `--act-unit`): one of
    /// [`UNITS`], or `auto`. Errors start with the text given, as
    /// [`ActUnit::written`]'s do.
    fn from_str(s: &str) -> Result<ActUnit, String> {
        match s {
            "auto" => Ok(ActUnit::Auto),
            "s" => Ok(ActUnit::S),
            "ms" => Ok(ActUnit::Ms),
            "us" | "µs" => Ok(ActUnit::Us),
            "ns" => Ok(ActUnit::Ns),
            other => Err(format!(
                "{other}: not a unit of time: give {UNITS}, or auto to read it from the time's size"
            )),
        }
    }
}

/// Where a broadcast's time to act is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActAt {
    pointer: String,
    parsed: crate::json_pointer::JsonPointer,
    unit: ActUnit,
}

/// Why a message gave no time to act.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoTimeToAct {
    /// The payload is not JSON (or not text).
    NotJson,
    /// The pointer names nothing in it.
    Missing,
    /// What it names is not a number, or a string holding one.
    NotANumber,
    /// A number before the epoch or past what 64 bits of nanoseconds hold.
    OutOfRange,
}

impl fmt::Display for NoTimeToAct {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NoTimeToAct::NotJson => "the message is not JSON",
            NoTimeToAct::Missing => "the pointer names nothing in the message",
            NoTimeToAct::NotANumber => "the pointer names something that is not a number",
            NoTimeToAct::OutOfRange => "the time is before 1970 or past 2554",
        })
    }
}

impl ActAt {
    /// A JSON pointer (`""` for the whole message, else starting with `/`)
    /// and the unit of what it names.
    pub fn new(pointer: &str, unit: ActUnit) -> Result<ActAt, String> {
        let parsed = pointer
            .parse::<crate::json_pointer::JsonPointer>()
            .map_err(|e| format!("--act-at {e}"))?;
        Ok(ActAt {
            pointer: pointer.to_owned(),
            parsed,
            unit,
        })
    }

    /// The pointer as given.
    pub fn pointer(&self) -> &str {
        &self.pointer
    }

    /// The unit as given.
    pub fn unit(&self) -> ActUnit {
        self.unit
    }

    /// The time to act in `payload`, as nanoseconds of the server's wall clock.
    pub fn find(&self, payload: &[u8]) -> Result<u64, NoTimeToAct> {
        // Cheap refusal of what cannot be a JSON object or array.
        let first = payload.iter().find(|b| !b.is_ascii_whitespace());
        if !matches!(first, Some(b'{' | b'[')) {
            return Err(NoTimeToAct::NotJson);
        }
        let value: serde_json::Value =
            serde_json::from_slice(payload).map_err(|_| NoTimeToAct::NotJson)?;
        let named = self.parsed.get(&value).ok_or(NoTimeToAct::Missing)?;
        self.nanoseconds(named)
    }

    fn nanoseconds(&self, v: &serde_json::Value) -> Result<u64, NoTimeToAct> {
        use serde_json::Value;
        match v {
            Value::Number(n) => {
                if let Some(i) = n.as_u64() {
                    let scale = self.unit.scale(i as f64);
                    return if scale == 1.0 {
                        Ok(i)
                    } else {
                        i.checked_mul(convert::from_float(scale))
                            .ok_or(NoTimeToAct::OutOfRange)
                    };
                }
                let x = n.as_f64().ok_or(NoTimeToAct::NotANumber)?;
                self.float_nanoseconds(x)
            }
            Value::String(s) => {
                let s = s.trim();
                if let Ok(i) = s.parse::<u64>() {
                    return self.nanoseconds(&Value::from(i));
                }
                let x: f64 = s.parse().map_err(|_| NoTimeToAct::NotANumber)?;
                self.float_nanoseconds(x)
            }
            _ => Err(NoTimeToAct::NotANumber),
        }
    }

    fn float_nanoseconds(&self, x: f64) -> Result<u64, NoTimeToAct> {
        if !x.is_finite() {
            return Err(NoTimeToAct::NotANumber);
        }
        let ns = (x * self.unit.scale(x)).round();
        if ns < 0.0 || ns >= u64::MAX as f64 {
            return Err(NoTimeToAct::OutOfRange);
        }
        Ok(convert::from_float(ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(pointer: &str, unit: ActUnit, payload: &str) -> Result<u64, NoTimeToAct> {
        ActAt::new(pointer, unit).unwrap().find(payload.as_bytes())
    }

    #[test]
    fn units_are_refused_in_the_same_words_wherever_they_are_given() {
        assert_eq!("ms".parse::<ActUnit>(), Ok(ActUnit::Ms));
        assert_eq!(ActUnit::written("ns"), Ok(ActUnit::Ns));
        let read = "sec".parse::<ActUnit>().unwrap_err();
        assert_eq!(
            read,
            "sec: not a unit of time: give s, ms, us or ns, or auto to read it from the time's size"
        );
        let written = ActUnit::written("sec").unwrap_err();
        assert_eq!(written, "sec: not a unit of time: give s, ms, us or ns");
        let auto = ActUnit::written("auto").unwrap_err();
        assert!(
            auto.starts_with("auto: ") && auto.ends_with("give s, ms, us or ns"),
            "{auto}"
        );
    }

    #[test]
    fn each_unit_is_read_by_magnitude_or_as_told() {
        let want = 1_764_000_000_123_000_000u64;
        for (text, unit) in [
            ("1764000000.123", ActUnit::Auto),
            ("1764000000123", ActUnit::Auto),
            ("1764000000123000", ActUnit::Auto),
            ("1764000000123000000", ActUnit::Auto),
            ("1764000000.123", ActUnit::S),
            ("1764000000123", ActUnit::Ms),
            ("1764000000123000", ActUnit::Us),
            ("1764000000123000000", ActUnit::Ns),
            ("\"1764000000.123\"", ActUnit::Auto),
            ("\"1764000000123000000\"", ActUnit::Auto),
        ] {
            let got = at("/at", unit, &format!(r#"{{"type":"go","at":{text}}}"#)).unwrap();
            // A float of seconds is exact to its f64 resolution (0.24 µs here).
            assert!(got.abs_diff(want) < 500, "{text} as {unit:?}: {got}");
        }
    }

    #[test]
    fn nested_pointers_and_integers_are_exact() {
        assert_eq!(
            at(
                "/data/0/act",
                ActUnit::Ns,
                r#"{"data":[{"act":1764000000123456789}]}"#
            ),
            Ok(1_764_000_000_123_456_789)
        );
    }

    #[test]
    fn what_gives_no_time_says_why() {
        assert_eq!(at("/at", ActUnit::Auto, "hello"), Err(NoTimeToAct::NotJson));
        assert_eq!(
            at("/at", ActUnit::Auto, "{\"at\":"),
            Err(NoTimeToAct::NotJson)
        );
        assert_eq!(at("/at", ActUnit::Auto, "{}"), Err(NoTimeToAct::Missing));
        assert_eq!(
            at("/at", ActUnit::Auto, r#"{"at":"soon"}"#),
            Err(NoTimeToAct::NotANumber)
        );
        assert_eq!(
            at("/at", ActUnit::Auto, r#"{"at":-1.5}"#),
            Err(NoTimeToAct::OutOfRange)
        );
        assert_eq!(
            at("/at", ActUnit::S, r#"{"at":1e300}"#),
            Err(NoTimeToAct::OutOfRange)
        );
        assert!(ActAt::new("at", ActUnit::Auto).is_err());
    }
}
