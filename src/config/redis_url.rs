//! Where a deployment is and how to log in, as the tools' flags and `migration.source` give
//! it.

/// A text that is not a `redis://[user:pass@]host:port` address (the credentials left out).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a redis://[user:pass@]host:port address: {0}")]
pub struct BadRedisUrl(pub String);

/// Where a deployment is and how to log in: parsed from `redis://[user:pass@]host:port`
/// (`rediss://` for TLS).
#[derive(Clone, PartialEq, Eq)]
pub struct RedisUrl {
    /// `host:port`.
    pub addr: String,
    /// ACL user, if any.
    pub username: Option<String>,
    /// Password, if any. Never printed.
    pub password: Option<String>,
    /// TLS settings, as `backend.tls`, for a `rediss://` URL; `None`: plain TCP.
    pub tls: Option<crate::config::BackendTlsConfig>,
}

impl std::fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisUrl")
            .field("addr", &self.addr)
            .field("username", &self.username)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

impl RedisUrl {
    /// Parses `redis://[user:pass@]host:port` (or a bare `host:port`). Credentials missing
    /// from the URL come from `env_user` / `env_password` (`REDIS_USERNAME`,
    /// `REDIS_PASSWORD`).
    pub fn parse(
        text: &str,
        env_user: Option<String>,
        env_password: Option<String>,
    ) -> Result<RedisUrl, BadRedisUrl> {
        let (rest, tls) = match text.strip_prefix("rediss://") {
            Some(rest) => (rest, true),
            None => (text.strip_prefix("redis://").unwrap_or(text), false),
        };
        let rest = rest.trim_end_matches('/');
        let (auth, addr) = match rest.rsplit_once('@') {
            Some((auth, addr)) => (Some(auth), addr),
            None => (None, rest),
        };
        let valid_port = addr
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if !valid_port || addr.contains('/') {
            return Err(BadRedisUrl(
                text.split('@').next_back().unwrap_or(text).to_owned(),
            ));
        }
        let (mut username, mut password) = (None, None);
        if let Some(auth) = auth {
            match auth.split_once(':') {
                Some((user, pass)) => {
                    username = (!user.is_empty()).then(|| user.to_owned());
                    password = Some(pass.to_owned());
                }
                None => password = Some(auth.to_owned()),
            }
        }
        Ok(RedisUrl {
            addr: addr.to_owned(),
            username: username.or(env_user),
            password: password.or(env_password),
            tls: tls.then(crate::config::BackendTlsConfig::enabled),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_with_and_without_credentials() {
        let url = RedisUrl::parse("redis://alice:s3cret@10.0.0.1:7000", None, None).unwrap();
        assert_eq!(url.addr, "10.0.0.1:7000");
        assert_eq!(url.username.as_deref(), Some("alice"));
        assert_eq!(url.password.as_deref(), Some("s3cret"));
        let url = RedisUrl::parse("redis://h:1", Some("u".into()), Some("p".into())).unwrap();
        assert_eq!(url.tls, None);
        let tls = RedisUrl::parse("rediss://h:1", None, None).unwrap().tls;
        assert!(tls.is_some_and(|tls| tls.enabled), "rediss:// is TLS");
        assert_eq!(url.username.as_deref(), Some("u"));
        assert_eq!(url.password.as_deref(), Some("p"));
        let url = RedisUrl::parse("redis://:pw@h:2", None, None).unwrap();
        assert_eq!((url.username, url.password.as_deref()), (None, Some("pw")));
        assert!(RedisUrl::parse("redis://nohost", None, None).is_err());
        assert!(RedisUrl::parse("redis://h:notaport", None, None).is_err());
        let shown = format!(
            "{:?}",
            RedisUrl::parse("redis://a:hidden@h:3", None, None).unwrap()
        );
        assert!(!shown.contains("hidden"));
    }
}
