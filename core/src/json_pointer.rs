//! JSON pointers (RFC 6901) as `--act-at`, `/publish?pointer=` and
//! `--match` take them: one parser, strict where the RFC is, so a pointer
//! means the same to the probe, the hub and the report.
//!
//! A pointer is `""` (the whole document) or `/`-separated tokens; in a
//! token `~0` is `~` and `~1` is `/`, and any other `~` is an error. An
//! array index is `0` or digits without a leading zero (no `+`, no `-`, no
//! `00`).

use serde_json::Value;

/// A pointer, parsed into its unescaped tokens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsonPointer {
    tokens: Vec<String>,
}

impl std::str::FromStr for JsonPointer {
    type Err = String;

    fn from_str(text: &str) -> Result<JsonPointer, String> {
        if text.is_empty() {
            return Ok(JsonPointer { tokens: Vec::new() });
        }
        let Some(rest) = text.strip_prefix('/') else {
            return Err(format!(
                "{text}: a JSON pointer starts with / (like /at or /data/act_at)"
            ));
        };
        let tokens = rest
            .split('/')
            .map(|token| unescape(token).ok_or_else(|| {
                format!("{text}: in a JSON pointer ~ is written ~0 and / is written ~1 (RFC 6901); `{token}` is neither")
            }))
            .collect::<Result<_, _>>()?;
        Ok(JsonPointer { tokens })
    }
}

fn unescape(token: &str) -> Option<String> {
    let mut out = String::with_capacity(token.len());
    let mut chars = token.chars();
    while let Some(c) = chars.next() {
        match c {
            '~' => match chars.next()? {
                '0' => out.push('~'),
                '1' => out.push('/'),
                _ => return None,
            },
            c => out.push(c),
        }
    }
    Some(out)
}

/// An array index as RFC 6901 writes one.
fn index(token: &str) -> Option<usize> {
    let digits = !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit());
    if !digits || (token.len() > 1 && token.starts_with('0')) {
        return None;
    }
    token.parse().ok()
}

impl JsonPointer {
    /// The tokens, unescaped.
    pub fn tokens(&self) -> &[String] {
        &self.tokens
    }

    /// What the pointer names in `value`.
    pub fn get<'a>(&self, value: &'a Value) -> Option<&'a Value> {
        self.tokens.iter().try_fold(value, |at, token| match at {
            Value::Object(map) => map.get(token),
            Value::Array(items) => items.get(index(token)?),
            _ => None,
        })
    }

    /// The object the last token names a member of, and that member's
    /// name: where a value is written (`/publish?lead=`). `None` for the
    /// empty pointer or when the parent is not an object.
    pub fn parent_object_mut<'a>(
        &self,
        value: &'a mut Value,
    ) -> Option<(&'a mut serde_json::Map<String, Value>, &str)> {
        let (leaf, parents) = self.tokens.split_last()?;
        let mut at = value;
        for token in parents {
            at = match at {
                Value::Object(map) => map.get_mut(token),
                Value::Array(items) => items.get_mut(index(token)?),
                _ => None,
            }?;
        }
        match at {
            Value::Object(map) => Some((map, leaf.as_str())),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> JsonPointer {
        text.parse().unwrap()
    }

    #[test]
    fn tokens_are_unescaped_and_indices_are_strict() {
        let doc: Value = serde_json::json!({"a/b": {"~x": [10, 11]}, "arr": [{"at": 1}]});
        assert_eq!(p("/a~1b/~0x/1").get(&doc), Some(&Value::from(11)));
        assert_eq!(p("/arr/0/at").get(&doc), Some(&Value::from(1)));
        assert_eq!(p("").get(&doc), Some(&doc));
        for refused in ["/arr/00/at", "/arr/+0/at", "/arr/-1/at", "/arr//at"] {
            assert_eq!(p(refused).get(&doc), None, "{refused}");
        }
    }

    #[test]
    fn what_is_not_a_pointer_says_why() {
        for (bad, says) in [("at", "starts with /"), ("/~2", "~0"), ("/a~", "~1")] {
            let e = bad.parse::<JsonPointer>().unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn a_value_is_written_as_a_member_of_an_existing_object() {
        let mut doc: Value = serde_json::json!({"show": {"go": 1}, "list": [{}]});
        let at = p("/show/at");
        let (map, leaf) = at.parent_object_mut(&mut doc).unwrap();
        map.insert(leaf.to_owned(), Value::from(2));
        assert_eq!(doc["show"]["at"], 2);
        assert!(p("/list/0/at").parent_object_mut(&mut doc).is_some());
        assert!(p("/list/00/at").parent_object_mut(&mut doc).is_none());
        assert!(p("/show/go/at").parent_object_mut(&mut doc).is_none());
        assert!(p("").parent_object_mut(&mut doc).is_none());
    }
}
