//! Texts of the replies to the commands about a client's own connection, which the proxy
//! answers itself (CLIENT, HELLO, subscribed mode), worded as Redis 7's.

/// CLIENT CACHING while tracking is off.
pub const CACHING_WITHOUT_TRACKING: &str = "ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled";
/// CLIENT PAUSE's timeout is not a number.
pub const TIMEOUT_NOT_INTEGER: &str = "ERR timeout is not an integer or out of range";
/// CLIENT PAUSE's timeout is negative.
pub const TIMEOUT_NEGATIVE: &str = "ERR timeout is negative";
/// CLIENT PAUSE's mode is neither WRITE nor ALL.
pub const PAUSE_MODE: &str = "ERR CLIENT PAUSE mode must be WRITE or ALL";
/// CLIENT PAUSE's timeout overflows.
pub const TIMEOUT_RANGE: &str = "ERR timeout is out of range";
/// CLIENT UNBLOCK's reason is neither TIMEOUT nor ERROR.
pub const UNBLOCK_REASON: &str = "ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR";
/// CLIENT KILL ID with an id that is not a number.
pub const INVALID_CLIENT_ID: &str = "ERR Invalid client ID";
/// CLIENT KILL that matched no client.
pub const NO_SUCH_CLIENT: &str = "ERR No such client";
/// A client id of 0 or less.
pub const CLIENT_ID_POSITIVE: &str = "ERR client-id should be greater than 0";
/// CLIENT TRACKING with several REDIRECT options.
pub const SINGLE_REDIRECT: &str = "ERR A client can only redirect to a single other client";
/// CLIENT TRACKING REDIRECT to an unknown client.
pub const REDIRECT_TARGET_MISSING: &str = "ERR The client ID you want redirect to does not exist";
/// CLIENT TRACKING ON refused by the configuration (`client_tracking: refuse`).
pub const TRACKING_REFUSED: &str = "ERR proxy: CLIENT TRACKING ON is refused by this proxy's configuration (client_tracking: refuse)";
/// CLIENT TRACKING ON with PREFIX but not BCAST.
pub const PREFIX_WITHOUT_BCAST: &str = "ERR PREFIX option requires BCAST mode to be enabled";
/// CLIENT TRACKING ON switching BCAST while tracking.
pub const BCAST_SWITCH: &str = "ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode.";
/// CLIENT TRACKING ON BCAST with OPTIN or OPTOUT.
pub const OPTIN_OPTOUT_WITH_BCAST: &str = "ERR OPTIN and OPTOUT are not compatible with BCAST";
/// CLIENT TRACKING ON OPTIN OPTOUT.
pub const OPTIN_AND_OPTOUT: &str = "ERR You can't specify both OPTIN mode and OPTOUT mode";
/// CLIENT TRACKING ON switching between OPTIN and OPTOUT while tracking.
pub const OPTIN_OPTOUT_SWITCH: &str = "ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode.";
/// CLIENT CACHING YES outside OPTIN.
pub const CACHING_YES_WITHOUT_OPTIN: &str =
    "ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.";
/// CLIENT CACHING NO outside OPTOUT.
pub const CACHING_NO_WITHOUT_OPTOUT: &str =
    "ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.";
/// A keyspace command from a client in MONITOR mode, as Redis 7 refuses it to a replica.
pub const MONITOR_KEYSPACE: &str = "ERR Replica can't interact with the keyspace";
/// HELLO's protocol version is not a number.
pub const PROTOVER_NOT_INTEGER: &str = "ERR Protocol version is not an integer or out of range";
/// CLIENT SETNAME (or HELLO SETNAME) with a name CLIENT LIST could not show.
pub const BAD_NAME: &str =
    "ERR Client names cannot contain spaces, newlines or special characters.";

/// A CLIENT subcommand with the wrong number of arguments.
pub fn client_subcommand(sub: &str) -> String {
    format!("ERR unknown subcommand or wrong number of arguments for '{sub}'. Try CLIENT HELP.")
}

/// CLIENT SETINFO of an attribute other than LIB-NAME and LIB-VER.
pub fn unrecognized_option(attr: &str) -> String {
    format!("ERR Unrecognized option '{attr}'")
}

/// CLIENT SETINFO with a value CLIENT LIST could not show.
pub fn unshowable_value(attr: &str) -> String {
    format!("ERR {attr} cannot contain spaces, newlines or special characters.")
}

/// CLIENT TRACKING ON BCAST with a prefix overlapping one the client holds.
pub fn prefix_overlaps_existing(prefix: &[u8], existing: &[u8]) -> String {
    format!(
        "ERR Prefix '{}' overlaps with an existing prefix '{}'. Prefixes for a single client must not overlap.",
        String::from_utf8_lossy(prefix),
        String::from_utf8_lossy(existing)
    )
}

/// CLIENT TRACKING ON BCAST with two overlapping prefixes.
pub fn prefix_overlaps_another(prefix: &[u8], other: &[u8]) -> String {
    format!(
        "ERR Prefix '{}' overlaps with another provided prefix '{}'. Prefixes for a single client must not overlap.",
        String::from_utf8_lossy(prefix),
        String::from_utf8_lossy(other)
    )
}

/// CLIENT LIST/KILL TYPE of an unknown type.
pub fn unknown_client_type(name: &str) -> String {
    format!("ERR Unknown client type '{name}'")
}

/// CLIENT KILL USER of an unknown user.
pub fn no_such_user(name: &str) -> String {
    format!("ERR No such user '{name}'")
}

/// HELLO with an option it does not know.
pub fn hello_syntax(option: &str) -> String {
    format!("ERR Syntax error in HELLO option '{option}'")
}

/// A command other than the subscription ones in RESP2 subscribed mode; `name` is the
/// command's full lower-case name (`get`, `client|id`).
pub fn subscribed_mode_refusal(name: &str) -> String {
    format!(
        "ERR Can't execute '{name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
    )
}
