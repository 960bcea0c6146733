//! The users and the ACL log one proxy process holds, across reloads.
//!
//! A reload keeps both as they are (ACL SETUSER changes included) unless it changes
//! `users`, `requirepass` or `aclfile`: the set is then built anew from the new
//! configuration (and users file), dropping changes made by ACL commands since, and each
//! session finds its user again by name in the new set (one gone: the session is no longer
//! authenticated). The log always survives.

use std::sync::Arc;

use super::log::AclLog;
use super::set::UserSet;
use crate::config::Config;

/// The live users and the ACL log, shared by every session and snapshot.
#[derive(Debug, Clone)]
pub struct Shared {
    /// The users AUTH, HELLO and the ACL commands act on.
    pub users: Arc<UserSet>,
    /// ACL LOG's entries.
    pub log: Arc<AclLog>,
}

impl Shared {
    /// The users of `config`, then of its `aclfile` if that exists.
    pub fn from_config(config: &Config) -> Result<Shared, String> {
        Ok(Shared {
            users: Arc::new(users_of(config)?),
            log: Arc::new(AclLog::default()),
        })
    }

    /// What a reload from `old` to `new` runs with (see the module docs).
    pub fn for_reload(&self, old: &Config, new: &Config) -> Result<Shared, String> {
        let same = old.users == new.users
            && old.requirepass == new.requirepass
            && old.aclfile == new.aclfile;
        if same {
            return Ok(self.clone());
        }
        Ok(Shared {
            users: Arc::new(users_of(new)?),
            log: self.log.clone(),
        })
    }
}

fn users_of(config: &Config) -> Result<UserSet, String> {
    let users = UserSet::from_config(config, config.aclfile.clone())?;
    if users.users_file.is_some() {
        super::commands::load_users_file(&users, true)
            .map_err(|e| format!("aclfile: {}", e.trim_start_matches("ERR ")))?;
    }
    Ok(users)
}
