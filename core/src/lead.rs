//! A lead as people ask for it: a duration, or `auto` (the agent picks it
//! from what its live join measures, [`crate::analysis::auto_lead`]). One
//! parser for `/start_test?lead=`, `/publish?lead=`, `skewscope demo
//! --lead` and `skewscope audit --lead`, so each refuses the same things
//! in the same words.

use std::str::FromStr;
use std::time::Duration;

use crate::units::parse_duration;

/// The longest lead: a time to act an hour away is a mistake.
pub const MAX_LEAD: Duration = Duration::from_secs(3600);

/// A lead asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeadChoice {
    /// This long after the broadcast is built.
    Fixed(Duration),
    /// What the agent's measurements allow now.
    Auto,
}

impl FromStr for LeadChoice {
    type Err = String;

    fn from_str(text: &str) -> Result<LeadChoice, String> {
        let text = text.trim();
        if text == "auto" {
            return Ok(LeadChoice::Auto);
        }
        if text.starts_with('-') {
            return Err(format!(
                "`{text}`: a lead is how long after the broadcast to act, never negative (a duration like 30ms, or auto)"
            ));
        }
        let lead = parse_duration(text).map_err(|e| format!("{e} (or auto)"))?;
        if lead > MAX_LEAD {
            return Err(format!(
                "`{text}`: a lead is at most 1h (a time to act further away is a mistake), or auto"
            ));
        }
        Ok(LeadChoice::Fixed(lead))
    }
}

impl LeadChoice {
    /// As the agent's `?lead=` takes it.
    pub fn query_value(&self) -> String {
        match self {
            LeadChoice::Fixed(lead) => format!("{}ns", lead.as_nanos()),
            LeadChoice::Auto => "auto".to_owned(),
        }
    }
}

impl std::fmt::Display for LeadChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LeadChoice::Fixed(lead) => write!(f, "{lead:?}"),
            LeadChoice::Auto => f.write_str("auto"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_or_auto_and_nothing_else() {
        assert_eq!(
            "30ms".parse(),
            Ok(LeadChoice::Fixed(Duration::from_millis(30)))
        );
        assert_eq!(" auto ".parse(), Ok(LeadChoice::Auto));
        assert_eq!("1h".parse(), Ok(LeadChoice::Fixed(MAX_LEAD)));
        for (bad, says) in [
            ("-5ms", "never negative"),
            ("10h", "at most 1h"),
            ("30", "no unit"),
            ("soon", "auto"),
        ] {
            let e = bad.parse::<LeadChoice>().unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        assert_eq!(
            LeadChoice::Fixed(Duration::from_millis(3)).query_value(),
            "3000000ns"
        );
        assert_eq!(LeadChoice::Auto.query_value(), "auto");
    }
}
