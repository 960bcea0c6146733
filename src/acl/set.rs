//! The proxy's users as one live set: readers take a snapshot without locking
//! (`ArcSwap`), the ACL commands replace it whole. A session keeps the [`LiveUser`] it
//! authenticated as and asks [`UserSet::refresh`] before each command whether that user
//! changed (it then runs with the new rules, as Redis applies `ACL SETUSER` at a
//! connected client's next command) or was deleted (the session closes, as Redis's
//! `ACL DELUSER` disconnects the user's clients).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use bytes::{Bytes, BytesMut};

use super::catalog::Catalog;
use super::user::AclUser;
use crate::auth::User;
use crate::config::{Config, ScriptTrust, UserConfig};
use crate::protocol::{encode, Proto};

const CURRENT: u8 = 0;
const CHANGED: u8 = 1;
const DELETED: u8 = 2;

/// One user as the set holds it: its ACL description and the checks the proxy runs.
#[derive(Debug)]
pub struct LiveUser {
    /// The user in Redis's model (what ACL GETUSER and ACL LIST describe).
    pub acl: AclUser,
    /// The proxy's checks for this user (command, key, channel and script rules).
    pub user: Arc<User>,
    /// The proxy-only script trust of a configured user, kept across ACL SETUSER.
    pub scripts: Option<ScriptTrust>,
    /// Bumped by every change to the set: a newer user has a larger number.
    pub generation: u64,
    state: AtomicU8,
}

impl LiveUser {
    fn build(
        acl: AclUser,
        scripts: Option<ScriptTrust>,
        generation: u64,
        catalog: &Catalog,
    ) -> Result<LiveUser, String> {
        let mut keys = Vec::new();
        if acl.allkeys {
            keys.push("allkeys".to_string());
        }
        keys.extend(
            acl.keys
                .iter()
                .map(|(p, _)| format!("~{}", String::from_utf8_lossy(p))),
        );
        let mut channels = Vec::new();
        if acl.allchannels {
            channels.push("allchannels".to_string());
        }
        channels.extend(
            acl.channels
                .iter()
                .map(|c| format!("&{}", String::from_utf8_lossy(c))),
        );
        let commands = super::describe::command_rules(&acl, catalog)
            .split(' ')
            .map(str::to_string)
            .collect();
        let config = UserConfig {
            name: acl.name.clone(),
            state: Some(acl.enabled),
            commands,
            keys,
            channels,
            scripts,
            ..UserConfig::default()
        };
        let user = User::from_acl(&config, acl.digests(), acl.nopass)?;
        Ok(LiveUser {
            acl,
            user: Arc::new(user),
            scripts,
            generation,
            state: AtomicU8::new(CURRENT),
        })
    }

    /// Whether the user was deleted (ACL DELUSER, or gone after ACL LOAD).
    pub fn is_deleted(&self) -> bool {
        self.state.load(Ordering::Acquire) == DELETED
    }

    /// Whether `self`, the same user after a change, may no longer use some channel
    /// `before` allowed: every channel rule `before` had is gone unless `self` keeps it or
    /// has `allchannels` (Redis's `ACLKillPubsubClientsIfNeeded` shortcut). A subscribed
    /// session then closes; unlike Redis, it does not first check whether its own
    /// subscriptions are among those still allowed.
    pub fn narrows_channels_of(&self, before: &LiveUser) -> bool {
        let (old, new) = (&before.acl, &self.acl);
        if new.allchannels {
            return false;
        }
        old.allchannels || old.channels.iter().any(|c| !new.channels.contains(c))
    }
}

/// What a session's held user has become (see [`UserSet::refresh`]).
#[derive(Debug)]
pub enum Freshness {
    /// Unchanged: keep it.
    Current,
    /// Changed: run the next command with this one.
    Changed(Arc<LiveUser>),
    /// Deleted: close the connection.
    Deleted,
}

/// Every user by name, in name order (ACL USERS and ACL LIST order, as Redis's radix tree).
pub type Users = BTreeMap<String, Arc<LiveUser>>;

/// The live users, the users file they are saved to, and `requirepass`.
#[derive(Debug)]
pub struct UserSet {
    users: ArcSwap<Users>,
    /// Serializes the ACL commands that change the set (readers never wait).
    writer: Mutex<()>,
    generation: AtomicU64,
    /// The users file of ACL SAVE and ACL LOAD.
    pub users_file: Option<PathBuf>,
    requirepass: ArcSwap<Option<Vec<u8>>>,
    catalog: &'static Catalog,
}

impl UserSet {
    /// The users of `config` (`users`, `requirepass`), saved to `users_file` if set.
    pub fn from_config(config: &Config, users_file: Option<PathBuf>) -> Result<UserSet, String> {
        UserSet::with_catalog(config, users_file, Catalog::builtin())
    }

    /// [`UserSet::from_config`] over another command catalog (tests build one from a
    /// server's own `COMMAND` reply, to list commands in that server's order).
    pub fn with_catalog(
        config: &Config,
        users_file: Option<PathBuf>,
        catalog: &'static Catalog,
    ) -> Result<UserSet, String> {
        let mut users = Users::new();
        for entry in &config.users {
            let acl = super::file::user_from_config(entry, catalog)?;
            if users.contains_key(&acl.name) {
                return Err(format!("users: user '{}' is defined twice", acl.name));
            }
            let live = LiveUser::build(acl, entry.scripts, 0, catalog)?;
            users.insert(live.acl.name.clone(), Arc::new(live));
        }
        let requirepass = config.requirepass.as_ref().map(|p| p.0.as_bytes().to_vec());
        if !users.contains_key("default") {
            let mut default = AclUser::default_user(catalog);
            if requirepass.is_some() || !users.is_empty() {
                // Closed unless requirepass opens it, as the proxy's `Auth` does.
                default.nopass = false;
            }
            if let Some(password) = &requirepass {
                let _ = default.apply(&[b">", &password[..]].concat(), catalog);
            }
            let live = LiveUser::build(default, None, 0, catalog)?;
            users.insert("default".into(), Arc::new(live));
        }
        Ok(UserSet {
            users: ArcSwap::from_pointee(users),
            writer: Mutex::new(()),
            generation: AtomicU64::new(1),
            users_file,
            requirepass: ArcSwap::from_pointee(requirepass),
            catalog,
        })
    }

    /// The command catalog rules are applied against.
    pub fn catalog(&self) -> &'static Catalog {
        self.catalog
    }

    /// The current snapshot of every user.
    pub fn snapshot(&self) -> Arc<Users> {
        self.users.load_full()
    }

    /// The user `name`, enabled or not.
    pub fn get(&self, name: &str) -> Option<Arc<LiveUser>> {
        self.users.load().get(name).cloned()
    }

    /// Checks a username/password pair as AUTH does: `None` for an unknown or disabled
    /// user or a wrong password (all answered with `-WRONGPASS`).
    pub fn check(&self, name: &[u8], password: &[u8]) -> Option<Arc<LiveUser>> {
        let live = std::str::from_utf8(name)
            .ok()
            .and_then(|name| self.get(name));
        let Some(live) = live else {
            // Same work as a known user, so timing does not tell which names exist.
            let _ = super::user::sha256_hex(password);
            return None;
        };
        (live.acl.password_matches(password) && live.acl.enabled).then_some(live)
    }

    /// The `default` user when it takes any password (new connections start as it).
    pub fn open_default(&self) -> Option<Arc<LiveUser>> {
        self.get("default")
            .filter(|live| live.acl.enabled && live.acl.nopass)
    }

    /// What the user a session holds has become: one atomic load when nothing changed.
    pub fn refresh(&self, held: &LiveUser) -> Freshness {
        match held.state.load(Ordering::Acquire) {
            CURRENT => Freshness::Current,
            DELETED => Freshness::Deleted,
            _ => match self.get(&held.acl.name) {
                Some(live) => Freshness::Changed(live),
                None => Freshness::Deleted,
            },
        }
    }

    /// Replaces the whole set with `next` (already validated), marking the users it
    /// replaces changed and those it drops deleted; with `end_sessions` (ACL LOAD, which
    /// in Redis frees every old user but `default` and so closes their clients) every
    /// user but `default` is marked deleted.
    fn install(&self, next: Users, end_sessions: bool) {
        let previous = self.users.swap(Arc::new(next));
        let current = self.users.load();
        for (name, old) in previous.iter() {
            let state = match current.get(name) {
                None => DELETED,
                Some(_) if end_sessions && name != "default" => DELETED,
                Some(new) if !Arc::ptr_eq(new, old) => CHANGED,
                Some(_) => continue,
            };
            old.state.store(state, Ordering::Release);
        }
    }

    /// Runs `change` on a copy of the set with the writer lock held, and installs the
    /// copy when `change` succeeds (see [`UserSet::install`] for `end_sessions`).
    pub(crate) fn update<T>(
        &self,
        end_sessions: bool,
        change: impl FnOnce(&mut Users, u64) -> Result<T, String>,
    ) -> Result<T, String> {
        let _writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let mut next = Users::clone(&self.users.load());
        let generation = self.generation.fetch_add(1, Ordering::Relaxed);
        let out = change(&mut next, generation)?;
        self.install(next, end_sessions);
        Ok(out)
    }

    /// A user built from `acl` (keeping `scripts`), at `generation`.
    pub(crate) fn live(
        &self,
        acl: AclUser,
        scripts: Option<ScriptTrust>,
        generation: u64,
    ) -> Result<Arc<LiveUser>, String> {
        LiveUser::build(acl, scripts, generation, self.catalog).map(Arc::new)
    }

    /// `CONFIG SET requirepass <password>`: `default` gets `resetpass` then `><password>`
    /// (an empty password: `nopass`), as Redis's `ACLUpdateDefaultUserPassword`.
    pub fn set_requirepass(&self, password: &[u8]) -> Result<(), String> {
        let catalog = self.catalog;
        self.update(false, |users, generation| {
            let old = users.get("default").ok_or("no default user")?;
            let mut acl = old.acl.clone();
            let _ = acl.apply(b"resetpass", catalog);
            if password.is_empty() {
                let _ = acl.apply(b"nopass", catalog);
            } else {
                let _ = acl.apply(&[b">", password].concat(), catalog);
            }
            let live = self.live(acl, old.scripts, generation)?;
            users.insert("default".into(), live);
            Ok(())
        })?;
        let value = (!password.is_empty()).then(|| password.to_vec());
        self.requirepass.store(Arc::new(value));
        Ok(())
    }

    /// `CONFIG GET requirepass`'s value: the last password set (empty: none).
    pub fn requirepass(&self) -> Vec<u8> {
        self.requirepass.load().as_ref().clone().unwrap_or_default()
    }

    /// The reply to `CONFIG GET requirepass`: `requirepass` and its value, an array
    /// (RESP2) or a map (RESP3), as Redis.
    pub fn config_get_requirepass(&self, proto: Proto) -> Bytes {
        let mut out = BytesMut::new();
        encode::map_header(&mut out, proto, 1);
        encode::bulk(&mut out, b"requirepass");
        encode::bulk(&mut out, &self.requirepass());
        out.freeze()
    }
}
