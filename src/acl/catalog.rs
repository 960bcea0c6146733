//! The command catalog ACL rules are written against: every command and subcommand of the
//! proxy's command table (a Redis 7 `COMMAND` reply), with its categories, its container
//! and its subcommands, in table order. Redis applies `+cmd`, `-@cat` to the same set of
//! commands (`server.orig_commands`), so a rule sets the same permissions here as there.

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::command::{CommandFlags, CommandTable};

/// Every command of the table, indexed like [`CommandTable::iter`].
#[derive(Debug)]
pub struct Catalog {
    /// Lower-case names (`get`, `config|get`).
    pub names: Vec<String>,
    /// ACL categories (bits of `command::ACL_CATEGORIES`).
    pub categories: Vec<u64>,
    /// The container of a subcommand.
    pub parent: Vec<Option<usize>>,
    /// The subcommands of a container.
    pub children: Vec<Vec<usize>>,
    /// `AUTH`, `HELLO`: run by every user, as Redis's `CMD_NO_AUTH`.
    pub no_auth: Vec<bool>,
    by_name: HashMap<String, usize>,
}

impl Catalog {
    /// The catalog of the built-in command table, built once.
    pub fn builtin() -> &'static Catalog {
        static CATALOG: OnceLock<Catalog> = OnceLock::new();
        CATALOG.get_or_init(|| Catalog::new(&CommandTable::builtin()))
    }

    /// The catalog of `table`.
    pub fn new(table: &CommandTable) -> Catalog {
        let mut catalog = Catalog {
            names: Vec::new(),
            categories: Vec::new(),
            parent: Vec::new(),
            children: Vec::new(),
            no_auth: Vec::new(),
            by_name: HashMap::new(),
        };
        for (index, spec) in table.iter().enumerate() {
            let parent = spec
                .name
                .split_once('|')
                .and_then(|(container, _)| catalog.by_name.get(container).copied());
            if let Some(parent) = parent {
                catalog.children[parent].push(index);
            }
            catalog.names.push(spec.name.clone());
            catalog.categories.push(spec.acl_categories);
            catalog.parent.push(parent);
            catalog.children.push(Vec::new());
            catalog.no_auth.push(spec.flags.has(CommandFlags::NO_AUTH));
            catalog.by_name.insert(spec.name.clone(), index);
        }
        catalog
    }

    /// Number of commands (subcommands included).
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether the catalog is empty.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The command `name` as Redis's `ACLLookupCommand` finds it: a command, or
    /// `container|sub` for a container's subcommand (one level; any case).
    pub fn lookup(&self, name: &[u8]) -> Option<usize> {
        let name = std::str::from_utf8(name).ok()?.to_ascii_lowercase();
        let mut parts = name.split('|');
        let first = parts.next()?;
        let base = *self.by_name.get(first)?;
        match (parts.next(), parts.next()) {
            (None, _) => Some(base),
            (Some(_), Some(_)) => None,
            // A command without subcommands is not found with one (`select|0`).
            (Some(_), None) if self.children[base].is_empty() => None,
            (Some(_), None) => self.by_name.get(&name).copied(),
        }
    }
}
