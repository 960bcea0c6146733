//! The proxy's command policy: which commands it refuses before anything reaches the
//! upstream. Pure.
//!
//! Invariants: a command is refused when it (or its container, for subcommands) is on the
//! deny list (the built-in [`DEFAULT_DENY`] plus `commands.deny`) and not on
//! `commands.allow`; a name on both configured lists is a configuration error. CLUSTER
//! subcommands that address real nodes are refused by emulation, not here, so their error
//! stays the one that explains why.

use std::collections::HashSet;
use std::hash::BuildHasherDefault;

use bytes::Bytes;
use serde::Deserialize;

use crate::command::NameHasher;

/// Which commands the proxy refuses, on top of its built-in list of dangerous ones.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(default, deny_unknown_fields)]
pub struct CommandsConfig {
    /// Commands (`flushall`) or subcommands (`config|set`) allowed despite the default policy.
    pub allow: Vec<String>,
    /// Commands or subcommands refused as well.
    pub deny: Vec<String>,
}

/// A set of command names, hashed like the command table's (checked for every command).
type NameSet = HashSet<String, BuildHasherDefault<NameHasher>>;
use crate::reply;

/// Commands refused unless allowed: they lose data, change or stop a node, hand out the
/// replication stream, or act on one arbitrary node behind the proxy's back.
pub const DEFAULT_DENY: &[&str] = &[
    "flushall",
    "flushdb",
    "config|set",
    "config|rewrite",
    "config|resetstat",
    "debug",
    // A self-test of the HyperLogLog code that holds its master for a fifth of a second
    // or more, every client of that master waiting: a debugging command, as DEBUG is.
    "pfselftest",
    "shutdown",
    "migrate",
    "module",
    "save",
    "bgsave",
    "bgrewriteaof",
    "replicaof",
    "slaveof",
    "acl|setuser",
    "acl|deluser",
    "acl|save",
    "acl|load",
    "failover",
    "swapdb",
    "move",
    "sync",
    "psync",
    // Sent to every master, these kill whatever script or function runs there, other
    // clients' included: an operator's tool, not a client's.
    "script|kill",
    "function|kill",
];

/// The command policy of one configuration.
#[derive(Debug, Clone)]
pub struct Policy {
    deny: NameSet,
    allow: NameSet,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            deny: DEFAULT_DENY.iter().map(|s| s.to_string()).collect(),
            allow: NameSet::default(),
        }
    }
}

impl Policy {
    /// The default policy changed by `config`'s allow and deny lists.
    pub fn from_config(config: &CommandsConfig) -> Result<Policy, String> {
        let mut policy = Policy::default();
        let names = |list: &[String], field: &str| -> Result<NameSet, String> {
            list.iter()
                .map(|name| {
                    let name = name.trim().to_ascii_lowercase();
                    let valid = !name.is_empty()
                        && name.bytes().all(|b| b.is_ascii_graphic())
                        && !name.starts_with('|')
                        && !name.ends_with('|');
                    if valid {
                        Ok(name)
                    } else {
                        Err(format!("commands.{field}: invalid command name '{name}'"))
                    }
                })
                .collect()
        };
        let allow = names(&config.allow, "allow")?;
        let deny = names(&config.deny, "deny")?;
        if let Some(both) = allow.intersection(&deny).next() {
            return Err(format!(
                "commands: '{both}' is both allowed and denied; keep one"
            ));
        }
        policy.deny.extend(deny);
        policy.allow = allow;
        Ok(policy)
    }

    /// Whether the policy refuses the command named `name` (`flushall`, `config|set`).
    pub fn refuses(&self, name: &str) -> bool {
        let container = name.split_once('|').map(|(container, _)| container);
        let listed =
            |set: &NameSet| set.contains(name) || container.is_some_and(|c| set.contains(c));
        listed(&self.deny) && !listed(&self.allow)
    }

    /// The error reply refusing the command named `name`, or `None` when the policy lets
    /// it through.
    pub fn refusal(&self, name: &str) -> Option<Bytes> {
        self.refuses(name)
            .then(|| reply::error(&reply::access::policy_refusal(name)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow: &[&str], deny: &[&str]) -> Policy {
        Policy::from_config(&CommandsConfig {
            allow: allow.iter().map(|s| s.to_string()).collect(),
            deny: deny.iter().map(|s| s.to_string()).collect(),
        })
        .unwrap()
    }

    #[test]
    fn dangerous_commands_are_refused_by_default() {
        let p = Policy::default();
        let reply = p.refusal("flushall").unwrap();
        assert_eq!(
            &reply[..],
            &b"-ERR proxy: 'flushall' is disabled by the proxy's command policy (allow it with commands.allow: [flushall])\r\n"[..]
        );
        assert!(p.refusal("config|set").is_some());
        assert!(
            p.refusal("module|load").is_some(),
            "a denied container covers its subcommands"
        );
        assert!(p.refusal("config|get").is_none());
        assert!(p.refusal("get").is_none());
    }

    #[test]
    fn allow_and_deny_lists() {
        let p = policy(&["FLUSHALL", "config"], &["keys"]);
        assert!(p.refusal("flushall").is_none());
        assert!(
            p.refusal("config|set").is_none(),
            "allowing a container allows its subcommands"
        );
        assert!(p.refusal("keys").is_some());
        assert!(p.refusal("flushdb").is_some());
    }

    #[test]
    fn contradictions_and_bad_names_are_errors() {
        let both = CommandsConfig {
            allow: vec!["keys".into()],
            deny: vec!["keys".into()],
        };
        assert!(Policy::from_config(&both).is_err());
        let bad = CommandsConfig {
            allow: vec!["flush all".into()],
            deny: vec![],
        };
        assert!(Policy::from_config(&bad).is_err());
    }
}
