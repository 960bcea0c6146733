//! Client-visible texts of ACL management: Redis 7.0's own wording (`acl.c`), and the
//! proxy's refusals of what its users cannot express.

/// `ACLSetUserStringError` for `ENOENT`.
pub const RULE_UNKNOWN: &str = "Unknown command or category name in ACL";
/// `ACLSetUserStringError` for `EINVAL`.
pub const RULE_SYNTAX: &str = "Syntax error";
/// `ACLSetUserStringError` for `EEXIST`.
pub const RULE_KEY_AFTER_ALL: &str = "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any effect. Try 'resetkeys' to start with an empty list of patterns";
/// `ACLSetUserStringError` for `EISDIR`.
pub const RULE_CHANNEL_AFTER_ALL: &str = "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does not have any effect. Try 'resetchannels' to start with an empty list of channels";
/// `ACLSetUserStringError` for `ENODEV`.
pub const RULE_NO_SUCH_PASSWORD: &str =
    "The password you are trying to remove from the user does not exist";
/// `ACLSetUserStringError` for `EBADMSG`.
pub const RULE_BAD_HASH: &str =
    "The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters";
/// `ACLSetUserStringError` for `ECHILD`.
pub const RULE_FIRST_ARG_OF_SUBCOMMAND: &str =
    "Allowing first-arg of a subcommand is not supported";
/// `ACLSetUserStringError` for `EALREADY` (a user twice in one file).
pub const RULE_DUPLICATE_USER: &str =
    "Duplicate user found. A user can only be defined once in config files";

/// Selectors `(...)`: the proxy's users have one set of rules.
pub const SELECTORS_UNSUPPORTED: &str = "Selectors are not supported by this proxy: its users have a single set of command, key and channel rules";
/// `%R~` / `%W~`.
pub const KEY_PERMISSIONS_UNSUPPORTED: &str = "Read-only and write-only key patterns are not supported by this proxy: its key patterns allow reading and writing alike (use ~pattern)";
/// `+select|0`-style grants.
pub const FIRST_ARGS_UNSUPPORTED: &str = "Allowing a first-arg of a command is not supported by this proxy: allow the whole command or one of its subcommands";
/// A key or channel pattern that is not UTF-8 text.
pub const BINARY_PATTERN_UNSUPPORTED: &str =
    "Key and channel patterns must be UTF-8 text in this proxy";
/// `skip-sanitize-payload`.
pub const SKIP_SANITIZE_UNSUPPORTED: &str = "skip-sanitize-payload is not supported by this proxy: RESTORE payloads are checked by the masters' own settings";

/// ACL SETUSER with a user name Redis refuses.
pub const USERNAME_SPACES: &str = "ERR Usernames can't contain spaces or null characters";
/// ACL DELUSER default.
pub const DELETE_DEFAULT: &str = "ERR The 'default' user cannot be removed";
/// ACL LOAD / SAVE without a users file.
pub const NO_ACL_FILE: &str = "ERR This Redis instance is not configured to use an ACL file. You may want to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration file set) in order to store users in the Redis configuration.";
/// ACL SAVE that could not write the file.
pub const SAVE_FAILED: &str = "ERR There was an error trying to save the ACLs. Please check the server logs for more information";

/// ACL GENPASS with a number of bits out of range.
pub const GENPASS_BITS: &str = "ERR ACL GENPASS argument must be the number of bits for the output password, a positive number up to 4096";

/// The lines of ACL HELP, as Redis 7.0 (each sent as a status reply).
pub const HELP: &[&str] = &[
    "ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CAT [<category>]",
    "    List all commands that belong to <category>, or all command categories",
    "    when no category is specified.",
    "DELUSER <username> [<username> ...]",
    "    Delete a list of users.",
    "DRYRUN <username> <command> [<arg> ...]",
    "    Returns whether the user can execute the given command without executing the command.",
    "GETUSER <username>",
    "    Get the user's details.",
    "GENPASS [<bits>]",
    "    Generate a secure 256-bit user password. The optional `bits` argument can",
    "    be used to specify a different size.",
    "LIST",
    "    Show users details in config file format.",
    "LOAD",
    "    Reload users from the ACL file.",
    "LOG [<count> | RESET]",
    "    Show the ACL log entries.",
    "SAVE",
    "    Save the current config to the ACL file.",
    "SETUSER <username> <attribute> [<attribute> ...]",
    "    Create or modify a user with the specified attributes.",
    "USERS",
    "    List all the registered usernames.",
    "WHOAMI",
    "    Return the current connection username.",
    "HELP",
    "    Prints this help.",
];

/// `ERR Error in ACL SETUSER modifier '<op>': <reason>`, as Redis (line breaks become spaces).
pub fn setuser_error(op: &[u8], reason: &str) -> String {
    safe(&format!(
        "ERR Error in ACL SETUSER modifier '{}': {reason}",
        String::from_utf8_lossy(op)
    ))
}

/// `ERR Unmatched parenthesis in acl selector starting at '<arg>'.`
pub fn unmatched_parenthesis(arg: &[u8]) -> String {
    safe(&format!(
        "ERR Unmatched parenthesis in acl selector starting at '{}'.",
        String::from_utf8_lossy(arg)
    ))
}

/// Redis's `addReplyErrorSdsSafe`: an error text stays on one line.
pub fn safe(text: &str) -> String {
    text.replace(['\r', '\n'], " ")
}

/// CONFIG SET naming `requirepass` and other parameters: `requirepass` is the proxy's own
/// (its `default` user's password), the others the masters'; one command cannot set both
/// atomically, so it is refused rather than half applied.
pub const CONFIG_SET_REQUIREPASS_ALONE: &str =
    "ERR CONFIG SET requirepass sets the proxy's default password: send it alone, without other parameters";
/// CONFIG GET naming `requirepass` and other parameters.
pub const CONFIG_GET_REQUIREPASS_ALONE: &str =
    "ERR CONFIG GET requirepass is answered by the proxy: send it alone, without other parameters";
