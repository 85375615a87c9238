//! The hub writing a time to act into a payload (`POST /publish?lead=`):
//! an app hands the agent its broadcast, and the agent puts the moment to
//! act, in its own wall clock, where the app's clients read it.
//!
//! The payload must be a JSON object; the pointer (RFC 6901, default `/at`)
//! names a member of an object in it, added or replaced; its parent must
//! exist. The time is written in the unit asked, as the probe and the page
//! module read it back: seconds or milliseconds as a float (a float of
//! seconds today is exact to about 0.24 µs), microseconds or nanoseconds as
//! an integer. The key order of the app's object is kept.

use std::fmt;

use serde_json::Value;

use crate::act_at::ActUnit;

/// Why a payload could not carry a time to act.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StampError {
    /// Not JSON at all.
    NotJson,
    /// JSON, but not an object: nothing to add a member to.
    NotAnObject,
    /// The pointer's parent is not an object in the payload.
    NoPlace(String),
    /// The pointer is not one (RFC 6901), or names the whole body: why.
    BadPointer(String),
    /// `auto` names no unit to write in.
    NoUnit,
}

impl fmt::Display for StampError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StampError::NotJson => write!(
                f,
                "the body is not JSON: a time to act goes into a JSON object"
            ),
            StampError::NotAnObject => {
                write!(
                    f,
                    "the body is JSON but not an object: a time to act goes into a JSON object"
                )
            }
            StampError::NoPlace(p) => write!(
                f,
                "pointer={p}: its parent is not an object in the body (a time to act is added as a member of an existing object)"
            ),
            StampError::BadPointer(why) => write!(f, "pointer={why}"),
            StampError::NoUnit => write!(
                f,
                "unit=auto: auto reads a unit from a time's size, but a time written needs one: give s, ms, us or ns"
            ),
        }
    }
}

/// `payload` with the time to act `at_wall_ns` written at `pointer` in
/// `unit`.
pub fn stamp(
    payload: &[u8],
    pointer: &str,
    unit: ActUnit,
    at_wall_ns: u64,
) -> Result<Vec<u8>, StampError> {
    let parsed: crate::json_pointer::JsonPointer =
        pointer.parse().map_err(StampError::BadPointer)?;
    if parsed.tokens().is_empty() {
        return Err(StampError::BadPointer(
            ": name the member to write the time in, like /at".to_owned(),
        ));
    }
    let value = match unit {
        ActUnit::S => Value::from(at_wall_ns as f64 / 1e9),
        ActUnit::Ms => Value::from(at_wall_ns as f64 / 1e6),
        ActUnit::Us => Value::from(at_wall_ns / 1_000),
        ActUnit::Ns => Value::from(at_wall_ns),
        ActUnit::Auto => return Err(StampError::NoUnit),
    };
    let mut root: Value = serde_json::from_slice(payload).map_err(|_| StampError::NotJson)?;
    if !root.is_object() {
        return Err(StampError::NotAnObject);
    }
    let (map, leaf) = parsed
        .parent_object_mut(&mut root)
        .ok_or_else(|| StampError::NoPlace(pointer.to_owned()))?;
    map.insert(leaf.to_owned(), value);
    Ok(serde_json::to_vec(&root).expect("a JSON value serialises"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::act_at::ActAt;

    const AT: u64 = 1_764_000_000_123_456_789;

    fn read(payload: &[u8], pointer: &str, unit: ActUnit) -> u64 {
        ActAt::new(pointer, unit).unwrap().find(payload).unwrap()
    }

    #[test]
    fn the_time_is_written_where_and_as_the_probe_reads_it() {
        let app = br#"{"type":"go","scene":3}"#;
        for (unit, close) in [
            (ActUnit::S, 1_000),
            (ActUnit::Ms, 1_000),
            (ActUnit::Us, 1_000),
            (ActUnit::Ns, 0),
        ] {
            let out = stamp(app, "/at", unit, AT).unwrap();
            let back = read(&out, "/at", unit);
            assert!(back.abs_diff(AT) <= close, "{unit:?}: {back} vs {AT}");
            assert!(read(&out, "/at", ActUnit::Auto).abs_diff(AT) <= close);
        }
        // The app's own members, in its order, then the time.
        let out = String::from_utf8(stamp(app, "/at", ActUnit::Ns, AT).unwrap()).unwrap();
        assert_eq!(out, format!(r#"{{"type":"go","scene":3,"at":{AT}}}"#));
    }

    #[test]
    fn a_nested_pointer_replaces_or_adds_inside_an_existing_object() {
        let app = br#"{"data":{"act_at":0,"x":1},"a/b":{}}"#;
        let out = stamp(app, "/data/act_at", ActUnit::Ns, AT).unwrap();
        assert_eq!(read(&out, "/data/act_at", ActUnit::Ns), AT);
        let out = stamp(app, "/a~1b/t", ActUnit::Us, AT).unwrap();
        assert_eq!(read(&out, "/a~1b/t", ActUnit::Us), AT / 1_000 * 1_000);
    }

    #[test]
    fn what_cannot_carry_a_time_is_refused() {
        assert_eq!(
            stamp(b"hello", "/at", ActUnit::S, AT),
            Err(StampError::NotJson)
        );
        assert_eq!(
            stamp(b"[1,2]", "/at", ActUnit::S, AT),
            Err(StampError::NotAnObject)
        );
        assert_eq!(
            stamp(b"42", "/at", ActUnit::S, AT),
            Err(StampError::NotAnObject)
        );
        assert_eq!(
            stamp(br#"{"a":1}"#, "/missing/at", ActUnit::S, AT),
            Err(StampError::NoPlace("/missing/at".into()))
        );
        assert_eq!(
            stamp(br#"{"a":1}"#, "/a/at", ActUnit::S, AT),
            Err(StampError::NoPlace("/a/at".into()))
        );
        for (bad, says) in [
            ("at", "starts with /"),
            ("/~2", "~0"),
            ("", "name the member"),
        ] {
            let Err(StampError::BadPointer(why)) = stamp(br#"{}"#, bad, ActUnit::S, AT) else {
                panic!("{bad} taken");
            };
            assert!(why.contains(says), "{bad}: {why}");
        }
        // RFC 6901's array indices: no leading zero, no sign.
        for bad in ["/arr/00/at", "/arr/+0/at"] {
            assert_eq!(
                stamp(br#"{"arr":[{}]}"#, bad, ActUnit::S, AT),
                Err(StampError::NoPlace(bad.into())),
                "{bad}"
            );
        }
        assert!(stamp(br#"{"arr":[{}]}"#, "/arr/0/at", ActUnit::S, AT).is_ok());
        assert_eq!(
            stamp(br#"{}"#, "/at", ActUnit::Auto, AT),
            Err(StampError::NoUnit)
        );
    }
}
