//! The `users` entries of the configuration: proxy-side ACL users, in Redis's ACL words,
//! and the [`Secret`] their passwords are kept in. Validated where they are turned into
//! users ([`super::Auth::new`]); the configuration holds them as they were written.

use serde::Deserialize;

/// A secret (password): shown as `"<redacted>"` by `Debug`, so it never reaches a log.
#[derive(Clone, Deserialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("\"<redacted>\"")
    }
}

/// An `on`/`off` switch; YAML `true`/`false` work too.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
enum OnOff {
    Bool(bool),
    Word(Switch),
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Switch {
    On,
    Off,
}

fn on_off<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    Ok(Option::<OnOff>::deserialize(d)?.map(|v| match v {
        OnOff::Bool(b) => b,
        OnOff::Word(w) => w == Switch::On,
    }))
}

/// One proxy-side ACL user, checked by the proxy before anything reaches the upstream.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(default, deny_unknown_fields)]
pub struct UserConfig {
    /// User name (`default` is the user of `AUTH password`).
    pub name: String,
    /// Clear-text password.
    pub password: Option<Secret>,
    /// SHA-256 of the password, 64 hex digits (instead of `password`).
    pub password_sha256: Option<Secret>,
    /// `on`/`off` (default on).
    #[serde(deserialize_with = "on_off")]
    pub enabled: Option<bool>,
    /// Same as `enabled`, in Redis's words (`on`/`off`).
    #[serde(deserialize_with = "on_off")]
    pub state: Option<bool>,
    /// Redis ACL command rules, applied in order: `+@all`, `-@dangerous`, `+get`, `-config|set`.
    pub commands: Vec<String>,
    /// Key patterns on the names clients send (`~app:*`, `allkeys`); none: no key access.
    pub keys: Vec<String>,
    /// Pub/Sub channel rules on the names clients send (`&news:*`, `allchannels`,
    /// `resetchannels`); none: no channel, as Redis 7's `acl-pubsub-default resetchannels`.
    pub channels: Vec<String>,
    /// Whether the user's scripts and functions run (EVAL, FCALL, FUNCTION LOAD...). They
    /// run as the proxy's backend user, where this user's rules do not hold; default:
    /// trusted only for a user with every command, key and channel.
    pub scripts: Option<ScriptTrust>,
}

/// Whether a user's scripts and functions may run (see [`UserConfig::scripts`]).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ScriptTrust {
    /// They run, with whatever keys and commands they reach.
    Trusted,
    /// EVAL, FCALL, FUNCTION LOAD and the like are refused with `-NOPERM`.
    Refused,
}

impl UserConfig {
    /// Whether the user may log in (`enabled`/`state`, default on).
    pub fn is_enabled(&self) -> bool {
        self.enabled.or(self.state).unwrap_or(true)
    }
}
