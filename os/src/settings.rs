//! Settings files for the binaries: a TOML file supplies settings, flags given
//! on the command line override them, and a bad key or value stops the program
//! with an error naming it before anything starts.
//!
//! The binaries keep one settings struct (also their clap parser); this module
//! merges a parsed command line with a file generically, through TOML tables.

use std::path::Path;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Why a config file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// Not TOML, an unknown key, or a value of the wrong kind; the message
    /// names the key and shows the line.
    #[error("config file {path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong, naming the key.
        message: String,
    },
}

/// Merges `cli` (every setting, defaults filled in by the parser) with the file
/// at `file`: a key set in the file wins over a default, and a flag given on
/// the command line (`given(key)`) wins over the file. Keys are the settings'
/// field names; `skip` names settings that cannot come from a file.
pub fn merge<T: Serialize + DeserializeOwned>(
    cli: &T,
    given: impl Fn(&str) -> bool,
    file: Option<&Path>,
    skip: &[&str],
) -> Result<T, ConfigError> {
    let Some(path) = file else {
        return Ok(clone_via_toml(cli));
    };
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: shown.clone(),
        source,
    })?;
    let invalid = |message: String| ConfigError::Invalid {
        path: shown.clone(),
        message,
    };
    let from_file: toml::Table = toml::from_str(&text).map_err(|e| invalid(e.to_string()))?;
    let mut merged = toml::Table::try_from(cli).map_err(|e| invalid(e.to_string()))?;
    for (key, value) in from_file {
        if skip.contains(&key.as_str()) || !merged.contains_key(&key) && !is_optional_key::<T>(&key)
        {
            return Err(invalid(format!("unknown key `{key}`")));
        }
        if !given(&key) {
            merged.insert(key, value);
        }
    }
    // Deserialising checks every value's kind and names the key that is wrong.
    T::deserialize(merged).map_err(|e| invalid(e.to_string()))
}

/// Whether `key` is a setting that is simply unset (an `Option` left `None`,
/// which TOML tables omit): probe it by deserialising a table holding only it.
fn is_optional_key<T: DeserializeOwned>(key: &str) -> bool {
    let mut probe = toml::Table::new();
    probe.insert(key.to_owned(), toml::Value::Boolean(false));
    match T::deserialize(probe) {
        Ok(_) => true,
        Err(e) => !e.to_string().contains("unknown field"),
    }
}

fn clone_via_toml<T: Serialize + DeserializeOwned>(value: &T) -> T {
    let table = toml::Table::try_from(value).expect("settings serialise to TOML");
    T::deserialize(table).expect("settings round-trip through TOML")
}

/// Settings that are also a clap parser with a `--config FILE` flag.
#[cfg(feature = "cli")]
pub trait FileSettings: clap::Parser + Serialize + DeserializeOwned {
    /// The `--config` file, if given.
    fn config_file(&self) -> Option<&Path>;
    /// Copies the command-line-only settings (`--config`, `--print-config`)
    /// from `cli`, since a file cannot hold them.
    fn keep_command_line_only(&mut self, cli: &Self);
    /// The keys of those settings, which a file may not set.
    const COMMAND_LINE_ONLY: &'static [&'static str] = &["config", "print_config"];
}

/// Parses the command line and merges it over `--config`'s file: what a
/// binary's `main` runs with. Flags given on the command line win; the
/// command-line-only keys cannot come from the file.
#[cfg(feature = "cli")]
pub fn from_command_line<T: FileSettings>() -> Result<T, ConfigError> {
    use clap::parser::ValueSource;
    let matches = T::command().get_matches();
    let cli = T::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let given = |key: &str| matches.value_source(key) == Some(ValueSource::CommandLine);
    let mut merged = merge(&cli, given, cli.config_file(), T::COMMAND_LINE_ONLY)?;
    merged.keep_command_line_only(&cli);
    Ok(merged)
}

/// The settings as a TOML document, for `--print-config`.
pub fn print<T: Serialize>(settings: &T) -> String {
    toml::to_string_pretty(settings).unwrap_or_else(|e| format!("# cannot print: {e}\n"))
}

/// Durations in settings files, written as on the command line ("10s",
/// "500ms"): one spelling for a setting wherever it is given.
pub mod duration_text {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes a duration as `NNNms`.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{}ms", d.as_millis()))
    }

    /// Reads a duration as the command line takes it.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        skewscope_core::units::parse_duration(&text).map_err(serde::de::Error::custom)
    }

    /// The same for an optional duration.
    pub mod option {
        use std::time::Duration;

        use serde::{Deserialize, Deserializer, Serializer};

        /// Writes it, or nothing.
        pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
            match d {
                Some(d) => super::serialize(d, s),
                None => s.serialize_none(),
            }
        }

        /// Reads it.
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
            let text = String::deserialize(d)?;
            skewscope_core::units::parse_duration(&text)
                .map(Some)
                .map_err(serde::de::Error::custom)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    struct Settings {
        listen: String,
        max_frame: u32,
        token_file: Option<String>,
        #[serde(skip)]
        config: Option<String>,
    }

    impl Default for Settings {
        fn default() -> Self {
            Settings {
                listen: "127.0.0.1:8080".into(),
                max_frame: 65536,
                token_file: None,
                config: None,
            }
        }
    }

    fn file(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), text).unwrap();
        f
    }

    #[test]
    fn file_overrides_defaults_and_flags_override_the_file() {
        let f = file("listen = \"0.0.0.0:9000\"\nmax_frame = 1000\ntoken_file = \"/etc/t\"\n");
        let cli = Settings {
            max_frame: 2000,
            ..Default::default()
        };
        let merged = merge(&cli, |k| k == "max_frame", Some(f.path()), &["config"]).unwrap();
        assert_eq!(merged.listen, "0.0.0.0:9000");
        assert_eq!(merged.max_frame, 2000);
        assert_eq!(merged.token_file.as_deref(), Some("/etc/t"));
    }

    #[test]
    fn bad_keys_and_values_are_named() {
        let cli = Settings::default();
        let f = file("lisen = \"x\"\n");
        let e = merge(&cli, |_| false, Some(f.path()), &["config"]).unwrap_err();
        assert!(e.to_string().contains("lisen"), "{e}");
        let f = file("max_frame = \"big\"\n");
        let e = merge(&cli, |_| false, Some(f.path()), &["config"]).unwrap_err();
        assert!(e.to_string().contains("max_frame"), "{e}");
        let f = file("config = \"x\"\n");
        assert!(merge(&cli, |_| false, Some(f.path()), &["config"]).is_err());
        let f = file("not toml [");
        assert!(merge(&cli, |_| false, Some(f.path()), &["config"]).is_err());
    }

    #[test]
    fn printing_round_trips() {
        let s = Settings::default();
        let printed = print(&s);
        assert!(printed.contains("listen = \"127.0.0.1:8080\""), "{printed}");
        let back: Settings = toml::from_str(&printed).unwrap();
        assert_eq!(back, s);
    }
}
