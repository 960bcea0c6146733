//! Options set outside the configuration file: `--set PATH=VALUE` and the
//! `SLOTBRIDGE_<PATH>` variables (`__` between levels), each a dotted path into the YAML
//! tree and a value read as YAML, set over the file's tree before it is typed.

use serde_yaml_ng::Value;

use super::{ConfigError, OverrideError};

/// The top-level fields of [`super::Config`]: a `SLOTBRIDGE_*` variable sets an option only when
/// its name leads to one of them, so the variables of other tools sharing the prefix are
/// left alone. (A test keeps this list equal to the struct's fields.)
pub const TOP_LEVEL_FIELDS: &[&str] = &[
    "listen",
    "tls",
    "admin_listen",
    "admin",
    "cluster",
    "standalone",
    "sentinel",
    "backend",
    "address_map",
    "retry",
    "topology",
    "limits",
    "pubsub",
    "threads",
    "log_format",
    "log_level",
    "cross_slot_transactions",
    "cross_slot",
    "layout",
    "migration",
    "requirepass",
    "protected_mode",
    "users",
    "aclfile",
    "commands",
    "maxclients",
    "databases",
    "timeout",
    "client_output_buffer_limit_bytes",
    "client_output_buffer_soft_limit",
    "max_buffered_bytes",
    "tcp_keepalive",
    "tcp_backlog",
    "shutdown_timeout_ms",
    "pidfile",
    "client_tracking",
    "tracking_table_max_keys",
];

/// One option set outside the file: its dotted path (`backend.read_timeout_ms`) and its
/// value, read as YAML (`300`, `true`, `[flushdb, keys]`, or plain text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Override {
    pub path: String,
    pub value: String,
    /// Where it came from, for error messages (`--set ...`, `SLOTBRIDGE_...`).
    pub source: String,
}

impl Override {
    /// Sets this option in `tree`, the configuration as YAML.
    pub(super) fn apply(&self, tree: &mut Value) -> Result<(), OverrideError> {
        set_path(tree, &self.path, &self.value)
    }

    /// Parses a `--set PATH=VALUE` argument.
    pub fn from_flag(arg: &str) -> Result<Override, ConfigError> {
        let (path, value) = arg
            .split_once('=')
            .filter(|(path, _)| !path.is_empty())
            .ok_or_else(|| ConfigError::SetSyntax { arg: arg.into() })?;
        Ok(Override {
            path: path.trim().to_owned(),
            value: value.to_owned(),
            source: format!("--set {arg}"),
        })
    }

    /// The option a `SLOTBRIDGE_*` variable sets (`SLOTBRIDGE_RETRY__ATTEMPTS` sets
    /// `retry.attempts`), or `None` when its name leads to no option.
    pub fn from_env(name: &str, value: &str) -> Option<Override> {
        let path = name
            .strip_prefix("SLOTBRIDGE_")?
            .to_ascii_lowercase()
            .replace("__", ".");
        let top = path.split('.').next()?;
        TOP_LEVEL_FIELDS.contains(&top).then(|| Override {
            path,
            value: value.to_owned(),
            source: name.to_owned(),
        })
    }
}

/// Sets `value` (read as YAML) at the dotted `path` of `tree`, making the mappings on the
/// way.
fn set_path(tree: &mut Value, path: &str, value: &str) -> Result<(), OverrideError> {
    let parsed: Value =
        serde_yaml_ng::from_str(value).unwrap_or_else(|_| Value::String(value.to_owned()));
    let mut node = tree;
    let mut parts = path.split('.').peekable();
    while let Some(part) = parts.next() {
        if part.is_empty() {
            return Err(OverrideError::NotAPath { path: path.into() });
        }
        if node.is_null() {
            *node = Value::Mapping(Default::default());
        }
        let Value::Mapping(map) = node else {
            return Err(OverrideError::NotASection {
                path: path.into(),
                part: part.into(),
            });
        };
        let key = Value::String(part.to_owned());
        if parts.peek().is_none() {
            map.insert(key, parsed);
            return Ok(());
        }
        node = map.entry(key).or_insert(Value::Null);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn set(path: &str, value: &str) -> Override {
        Override {
            path: path.into(),
            value: value.into(),
            source: format!("--set {path}={value}"),
        }
    }

    #[test]
    fn overrides_set_any_option_over_the_file_later_ones_winning() {
        let file = "maxclients: 7\nbackend:\n  connect_timeout_ms: 123\n";
        let config = Config::from_yaml_with(
            file,
            &[
                set("backend.read_timeout_ms", "300"),
                set("commands.allow", "[flushdb, keys]"),
                set("protected_mode", "false"),
                set("log_level", "debug"),
                set("timeout", "5"),
                set("timeout", "9"),
            ],
        )
        .unwrap();
        assert_eq!(config.maxclients, 7, "the file's value stays");
        assert_eq!(config.backend.connect_timeout_ms, 123);
        assert_eq!(config.backend.read_timeout_ms, 300);
        assert_eq!(config.commands.allow, ["flushdb", "keys"]);
        assert!(!config.protected_mode);
        assert_eq!(config.log_level, "debug");
        assert_eq!(config.timeout, 9);
    }

    #[test]
    fn a_bad_override_is_an_error_that_names_it() {
        for (path, value, wanted) in [
            ("backend.read_timeout", "3", "unknown field `read_timeout`"),
            ("maxclients", "many", "maxclients"),
            ("maxclients.x", "1", "invalid type: map"),
            ("retry..attempts", "1", "not an option path"),
        ] {
            let error = Config::from_yaml_with("", &[set(path, value)])
                .unwrap_err()
                .to_string();
            assert!(
                error.starts_with(&format!("--set {path}={value}: ")) && error.contains(wanted),
                "{error}"
            );
        }
        assert!(Override::from_flag("no-equals").is_err());
        assert!(Override::from_flag("=1").is_err());
        assert_eq!(Override::from_flag("a.b=c=d").unwrap().value, "c=d");
    }

    #[test]
    fn variables_name_options_with_double_underscores_between_levels() {
        let over = Override::from_env("SLOTBRIDGE_BACKEND__READ_TIMEOUT_MS", "300").unwrap();
        assert_eq!(over.path, "backend.read_timeout_ms");
        assert_eq!(
            Override::from_env("SLOTBRIDGE_MAXCLIENTS", "5")
                .unwrap()
                .path,
            "maxclients"
        );
        // Other tools' variables with the same prefix are not options.
        for name in [
            "SLOTBRIDGE_PYTHON",
            "SLOTBRIDGE_TEST_ADDR",
            "OTHER_MAXCLIENTS",
        ] {
            assert_eq!(Override::from_env(name, "x"), None, "{name}");
        }
    }

    #[test]
    fn the_top_level_field_list_is_the_config_structs() {
        let error = Config::from_yaml("no_such_field: 1\n")
            .unwrap_err()
            .to_string();
        let expected: Vec<&str> = error
            .split("expected one of ")
            .nth(1)
            .expect("serde lists the fields")
            .split(", ")
            .map(|name| name.trim_matches(|c: char| c == '`' || !c.is_ascii() || c.is_whitespace()))
            .map(|name| name.split('`').next().unwrap_or(name))
            .collect();
        let mut listed: Vec<&str> = TOP_LEVEL_FIELDS.to_vec();
        let mut fields = expected.clone();
        listed.sort_unstable();
        fields.sort_unstable();
        assert_eq!(listed, fields, "{error}");
    }
}
