//! Why a configuration could not be used: the file that could not be read or parsed, the
//! option set outside it that did not fit, or settings that do not make sense together.
//! Each message names what the operator must fix (file and line, option, field).

use std::path::PathBuf;

/// A configuration problem, with the file it came from when there is one.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why reading failed.
        source: std::io::Error,
    },
    /// The file is not valid YAML for the configuration.
    #[error("{path}: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's error, which names the line and the field.
        source: serde_yaml_ng::Error,
    },
    /// YAML text (no file) is not valid for the configuration.
    #[error(transparent)]
    Yaml(#[from] serde_yaml_ng::Error),
    /// A `--set` argument is not `PATH=VALUE`.
    #[error("--set {arg}: expected PATH=VALUE, e.g. maxclients=100")]
    SetSyntax {
        /// The argument as given.
        arg: String,
    },
    /// An option set outside the file (`--set`, `SLOTBRIDGE_*`) does not fit.
    #[error("{origin}: {reason}")]
    Override {
        /// Where it was set: `--set PATH=VALUE` or the variable's name.
        origin: String,
        /// What was wrong with it.
        #[source]
        reason: OverrideError,
    },
    /// The settings parse but do not make sense together.
    #[error("{0}")]
    Invalid(String),
}

/// Why an option set outside the file does not fit the configuration.
#[derive(Debug, thiserror::Error)]
pub enum OverrideError {
    /// The dotted path has an empty part.
    #[error("`{path}` is not an option path")]
    NotAPath {
        /// The path as given.
        path: String,
    },
    /// A part of the path below a plain value.
    #[error("`{path}`: the option above `{part}` is not a section")]
    NotASection {
        /// The path as given.
        path: String,
        /// The part that cannot be set.
        part: String,
    },
    /// The value does not type as the option (or the option does not exist).
    #[error(transparent)]
    Type(#[from] serde_yaml_ng::Error),
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, Override};

    #[test]
    fn a_file_error_names_the_file_and_a_parse_error_its_line() {
        let dir = std::env::temp_dir().join(format!("slotbridge-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing.yaml");
        let error = Config::from_file(&missing).unwrap_err().to_string();
        assert!(
            error.starts_with(&format!("{}: ", missing.display())),
            "{error}"
        );
        let bad = dir.join("bad.yaml");
        std::fs::write(&bad, "listen: 127.0.0.1:1\nlisen: x\n").unwrap();
        let error = Config::from_file(&bad).unwrap_err().to_string();
        assert!(
            error.starts_with(&format!("{}: ", bad.display()))
                && error.contains("lisen")
                && error.contains("line 2"),
            "{error}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_bad_set_flag_says_what_is_expected() {
        let error = Override::from_flag("maxclients").unwrap_err().to_string();
        assert_eq!(
            error,
            "--set maxclients: expected PATH=VALUE, e.g. maxclients=100"
        );
    }
}
