//! The [`Proxy`] snapshot and the one way to make it: a [`Builder`] checks what the
//! configuration decides (users, command policy) before anything is connected, then puts
//! it together with the upstream, the layout rules and what the proxy keeps from start-up
//! ([`Fixed`]). Start-up (`server`) and every reload (`reload`) build their snapshot so.

use std::sync::Arc;
use std::time::Instant;

use crate::auth::Auth;
use crate::command::{CommandSet, CommandTable};
use crate::config::{Config, ConfigError};
use crate::policy::Policy;
use crate::topology::Topology;
use crate::upstream::Upstream;

use super::{layout, Forwardable, ScriptCache};

/// Everything a command needs, shared by every client session.
pub struct Proxy {
    /// The configuration the proxy runs with.
    pub config: Config,
    /// The slot map and node connections (the same as `upstream`'s).
    pub topology: Arc<Topology>,
    /// The concrete layer requests go through: redirects, retries, pinned connections.
    pub upstream: Upstream,
    /// Command names, arities, flags and key positions.
    pub commands: CommandTable,
    /// The backend's Redis version, read with the command table (HELLO reports it).
    pub server_version: Arc<str>,
    /// The address clients connect to, as bound (reported by CLUSTER SLOTS/NODES).
    pub listen_addr: String,
    /// Start time, for INFO's uptime.
    pub started: Instant,
    /// Lua script bodies seen, by SHA1, to load them where `-NOSCRIPT` says they are missing.
    pub scripts: Arc<ScriptCache>,
    /// The legacy key layout in force, if any.
    pub layout: Option<Arc<layout::ActiveLayout>>,
    /// Per-command metric handles (labels from `commands`).
    pub command_metrics: Arc<crate::metrics::CommandMetrics>,
    /// Which commands of `commands` a single-slot request forwards as is.
    pub forwardable: Arc<Forwardable>,
    /// The commands of `commands` that none of the client session's own checks concern
    /// (see `client::plain::plain_commands`): it routes them at once.
    pub plain_commands: Arc<CommandSet>,
    /// What `/readyz` reports; flip it when draining.
    pub readiness: Arc<crate::topology::Readiness>,
    /// Proxy users (AUTH, ACL).
    pub auth: crate::auth::Auth,
    /// The live users AUTH, HELLO and the ACL commands act on, and the ACL log.
    pub acl: crate::acl::Shared,
    /// Commands the proxy refuses.
    pub policy: crate::policy::Policy,
    /// The live migration this proxy takes part in, if one is configured.
    pub migration: Option<Arc<crate::live::Migration>>,
}

/// What every snapshot keeps from start-up through each reload: the command table and
/// what is built from it, the backend's version, the bound address, the script cache and
/// the readiness the admin endpoint reports.
#[derive(Clone)]
pub struct Fixed {
    /// Command names, arities, flags, key positions and shapes.
    pub commands: CommandTable,
    /// The backend's Redis version, read with the command table.
    pub server_version: Arc<str>,
    /// The address clients connect to, as bound.
    pub listen_addr: String,
    /// Start time, for INFO's uptime.
    pub started: Instant,
    /// Lua script bodies seen, by SHA1.
    pub scripts: Arc<ScriptCache>,
    /// Per-command metric handles (labels from `commands`).
    pub command_metrics: Arc<crate::metrics::CommandMetrics>,
    /// The commands of `commands` the client session routes at once.
    pub plain_commands: Arc<CommandSet>,
    /// What `/readyz` reports.
    pub readiness: Arc<crate::topology::Readiness>,
    /// The live users and the ACL log (a reload keeps them unless users change).
    pub acl: crate::acl::Shared,
    /// The live migration, kept with its walker and progress across reloads.
    pub migration: Option<Arc<crate::live::Migration>>,
}

/// A [`Proxy`] snapshot in the making: its configuration, with the users and the command
/// policy it names already checked.
pub struct Builder {
    config: Config,
    auth: Auth,
    policy: Policy,
}

impl Builder {
    /// Checks `config`'s users and command policy; nothing is connected yet.
    pub fn new(config: Config) -> Result<Builder, ConfigError> {
        let auth =
            Auth::new(&config.users, config.requirepass.as_ref()).map_err(ConfigError::Invalid)?;
        let policy = Policy::from_config(&config.commands).map_err(ConfigError::Invalid)?;
        Ok(Builder {
            config,
            auth,
            policy,
        })
    }

    /// The configuration the snapshot will run with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The snapshot over `topology`, with the `layout` rules in force and what `fixed` keeps.
    pub fn build(
        self,
        topology: Arc<Topology>,
        layout: Option<Arc<layout::ActiveLayout>>,
        fixed: Fixed,
    ) -> Proxy {
        let Fixed {
            commands,
            server_version,
            listen_addr,
            started,
            scripts,
            command_metrics,
            plain_commands,
            readiness,
            acl,
            migration,
        } = fixed;
        Proxy {
            upstream: Upstream::new(topology.clone(), self.config.retry.clone()),
            config: self.config,
            topology,
            forwardable: Arc::new(Forwardable::of(&commands, &self.policy)),
            commands,
            server_version,
            listen_addr,
            started,
            scripts,
            layout,
            command_metrics,
            plain_commands,
            readiness,
            auth: self.auth,
            acl,
            policy: self.policy,
            migration,
        }
    }
}

impl Proxy {
    /// What this snapshot keeps from start-up, for the next one.
    pub fn fixed(&self) -> Fixed {
        Fixed {
            commands: self.commands.clone(),
            server_version: self.server_version.clone(),
            listen_addr: self.listen_addr.clone(),
            started: self.started,
            scripts: self.scripts.clone(),
            command_metrics: self.command_metrics.clone(),
            plain_commands: self.plain_commands.clone(),
            readiness: self.readiness.clone(),
            acl: self.acl.clone(),
            migration: self.migration.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_the_configuration_gets_wrong_builds_nothing() {
        let mut config = Config::default();
        config.commands.allow = vec!["get".to_string()];
        config.commands.deny = vec!["GET".to_string()];
        let error = Builder::new(config).err().expect("refused").to_string();
        assert!(
            error.contains("'get' is both allowed and denied"),
            "{error}"
        );
    }

    #[test]
    fn the_builder_keeps_the_configuration_it_checked() {
        let mut config = Config::default();
        config.commands.deny = vec!["keys".to_string()];
        let builder = Builder::new(config).expect("valid");
        assert_eq!(builder.config().commands.deny, vec!["keys".to_string()]);
        assert!(builder.policy.refuses("keys"));
        assert!(!builder.policy.refuses("get"));
    }
}
