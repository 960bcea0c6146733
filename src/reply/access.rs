//! Texts of the replies about who a client is and what it may run: authentication, ACL
//! denials (worded as Redis 7's) and the proxy's command policy.

/// `-WRONGPASS` text, as Redis 7.
pub const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";
/// `-NOAUTH` text, as Redis 7.
pub const NOAUTH: &str = "NOAUTH Authentication required.";
/// HELLO without AUTH from a client that is not authenticated, as Redis 7.
pub const NOAUTH_HELLO: &str = "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time";
/// Key ACL denial text, as Redis 7.
pub const NOPERM_KEYS: &str =
    "NOPERM this user has no permissions to access one of the keys used as arguments";

/// Channel ACL denial text, as Redis 7.
pub const NOPERM_CHANNELS: &str =
    "NOPERM this user has no permissions to access one of the channels used as arguments";

/// The command ACL denial text for `name` (`get`, `config|set`), as Redis 7.
pub fn noperm_command(name: &str) -> String {
    format!("NOPERM this user has no permissions to run the '{name}' command")
}

/// The denial of a script command `name` to a user whose scripts are not trusted: Redis's
/// command denial, then why and the setting that allows it.
pub fn noperm_script(name: &str) -> String {
    format!(
        "{}: scripts and functions run as the proxy's backend user, where this user's command, key and channel rules do not hold (allow them with 'scripts: trusted' in the user's entry)",
        noperm_command(name)
    )
}

/// The proxy's command policy refusing the command named `name`.
pub fn policy_refusal(name: &str) -> String {
    format!(
        "ERR proxy: '{name}' is disabled by the proxy's command policy (allow it with commands.allow: [{name}])"
    )
}
