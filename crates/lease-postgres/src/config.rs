//! Connection settings: a `postgres://` URL (or libpq's `key=value` form), with whatever it
//! leaves out taken from the usual `PG*` environment variables, as `psql` does.

use std::time::Duration;

use lease_ports::StoreError;
use tokio_postgres::config::Host;

/// Whether `target` names a PostgreSQL database rather than a file.
#[must_use]
pub fn is_postgres_url(target: &str) -> bool {
    target.starts_with("postgres://") || target.starts_with("postgresql://")
}

/// The environment a connection's defaults come from (the process's own, or a test's).
pub(crate) trait Env {
    fn var(&self, name: &str) -> Option<String>;
}

pub(crate) struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }
}

/// Parses `target` and fills what it leaves out from `PGHOST`, `PGPORT`, `PGUSER`,
/// `PGPASSWORD`, `PGDATABASE`, `PGAPPNAME` and `PGCONNECT_TIMEOUT`; without a host, the local
/// socket directory (`/var/run/postgresql`) if it exists, else `localhost`; without a user,
/// the login name (`USER`).
///
/// # Errors
/// [`StoreError::Incompatible`] naming the problem when the
/// string or a variable cannot be parsed, or TLS is required (this client does not speak it).
pub fn connection_config(target: &str) -> Result<tokio_postgres::Config, StoreError> {
    config_with(target, &ProcessEnv)
}

fn bad(target: &str, reason: String) -> StoreError {
    StoreError::Incompatible {
        path: redact(target),
        reason,
    }
}

pub(crate) fn config_with(
    target: &str,
    env: &dyn Env,
) -> Result<tokio_postgres::Config, StoreError> {
    // PGPORT goes into the string itself: the parser has already put 5432 in the config
    // when the string names a host but no port, and ports cannot be replaced afterwards.
    let mut with_port = target.to_owned();
    if !names_a_port(target) {
        if let Some(port) = env.var("PGPORT") {
            port.parse::<u16>()
                .map_err(|_| bad(target, format!("PGPORT {port:?} is not a port number")))?;
            with_port = with_port_of(target, &port);
        }
    }
    let mut config: tokio_postgres::Config = with_port
        .parse()
        .map_err(|e| bad(target, format!("not a PostgreSQL connection string: {e}")))?;
    if config.get_hosts().is_empty() {
        match env.var("PGHOST") {
            Some(hosts) => {
                for host in hosts.split(',') {
                    if host.starts_with('/') {
                        config.host_path(host);
                    } else {
                        config.host(host);
                    }
                }
            }
            None if std::path::Path::new("/var/run/postgresql").is_dir() => {
                config.host_path("/var/run/postgresql");
            }
            None => {
                config.host("localhost");
            }
        }
    }
    if config.get_user().is_none() {
        let user = env
            .var("PGUSER")
            .or_else(|| env.var("USER"))
            .unwrap_or_else(|| "postgres".to_owned());
        config.user(user);
    }
    if config.get_password().is_none() {
        if let Some(password) = env.var("PGPASSWORD") {
            config.password(password);
        }
    }
    if config.get_dbname().is_none() {
        if let Some(db) = env.var("PGDATABASE") {
            config.dbname(db);
        }
    }
    if config.get_application_name().is_none() {
        config.application_name(env.var("PGAPPNAME").unwrap_or_else(|| "lease".to_owned()));
    }
    if config.get_connect_timeout().is_none() {
        let timeout = match env.var("PGCONNECT_TIMEOUT") {
            Some(s) => s.parse::<u64>().map_err(|_| {
                bad(
                    target,
                    format!("PGCONNECT_TIMEOUT {s:?} is not a number of seconds"),
                )
            })?,
            None => 10, // DEFAULT_CONNECT_TIMEOUT
        };
        config.connect_timeout(Duration::from_secs(timeout.max(1)));
    }
    if let Some(mode) = env.var("PGSSLMODE") {
        if matches!(mode.as_str(), "require" | "verify-ca" | "verify-full") {
            return Err(bad(
                target,
                format!("PGSSLMODE={mode} asks for TLS, which this build does not support"),
            ));
        }
    }
    if config.get_ssl_mode() == tokio_postgres::config::SslMode::Require {
        return Err(bad(
            target,
            "sslmode=require asks for TLS, which this build does not support".to_owned(),
        ));
    }
    Ok(config)
}

/// `target` with `port` given to each of its hosts (or as a parameter when it names none).
fn with_port_of(target: &str, port: &str) -> String {
    let Some((scheme, rest)) = target.split_once("://") else {
        return format!("{target} port={port}");
    };
    let cut = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(cut);
    let (user, hosts) = match authority.rsplit_once('@') {
        Some((user, hosts)) => (format!("{user}@"), hosts),
        None => (String::new(), authority),
    };
    if hosts.is_empty() {
        let joiner = if tail.contains('?') { '&' } else { '?' };
        return format!("{target}{joiner}port={port}");
    }
    let hosts: Vec<String> = hosts.split(',').map(|h| format!("{h}:{port}")).collect();
    format!("{scheme}://{user}{}{tail}", hosts.join(","))
}

/// Whether the connection string itself gives a port (the parser fills in 5432 otherwise).
fn names_a_port(target: &str) -> bool {
    if !is_postgres_url(target) {
        return target.split_whitespace().any(|kv| kv.starts_with("port="));
    }
    let rest = target.split_once("://").map_or("", |(_, rest)| rest);
    let (authority, query) = match rest.find(['/', '?']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let hosts = authority
        .rsplit_once('@')
        .map_or(authority, |(_, hosts)| hosts);
    let in_hosts = hosts.split(',').any(|h| {
        h.rsplit_once(':')
            .is_some_and(|(_, p)| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    });
    in_hosts || query.contains("port=")
}

/// The target as it can be shown: host, port and database, never the password.
#[must_use]
pub fn describe(config: &tokio_postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(name)) => name.clone(),
        Some(Host::Unix(path)) => path.display().to_string(),
        None => "?".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().unwrap_or("?");
    let db = config.get_dbname().unwrap_or(user);
    format!("postgres://{user}@{host}:{port}/{db}")
}

/// A connection string with any password removed, for error messages.
#[must_use]
pub fn redact(target: &str) -> String {
    match target.parse::<tokio_postgres::Config>() {
        Ok(config) => describe(&config),
        Err(_) => "the PostgreSQL connection string".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct Vars(HashMap<&'static str, &'static str>);
    impl Env for Vars {
        fn var(&self, name: &str) -> Option<String> {
            self.0.get(name).map(|v| (*v).to_owned())
        }
    }

    #[test]
    fn the_url_wins_and_the_environment_fills_the_rest() {
        let env = Vars(HashMap::from([
            ("PGHOST", "db.example"),
            ("PGPORT", "6543"),
            ("PGUSER", "envuser"),
            ("PGDATABASE", "envdb"),
            ("PGPASSWORD", "secret"),
        ]));
        let config = config_with("postgres://urluser@127.0.0.1/urldb", &env).unwrap();
        assert_eq!(config.get_user(), Some("urluser"));
        assert_eq!(config.get_dbname(), Some("urldb"));
        assert_eq!(config.get_hosts(), &[Host::Tcp("127.0.0.1".into())]);
        assert_eq!(config.get_ports(), &[6543]);
        assert_eq!(config.get_password(), Some(&b"secret"[..]));
        let bare = config_with("postgres://", &env).unwrap();
        assert_eq!(describe(&bare), "postgres://envuser@db.example:6543/envdb");
    }

    #[test]
    fn a_bad_port_variable_and_required_tls_are_named() {
        let env = Vars(HashMap::from([("PGPORT", "fifty")]));
        let err = config_with("postgres://", &env).unwrap_err().to_string();
        assert!(err.contains("PGPORT") && err.contains("fifty"), "{err}");
        let err = config_with("postgres://h/db?sslmode=require", &Vars(HashMap::new()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("TLS"), "{err}");
    }

    #[test]
    fn a_password_never_appears_in_what_is_shown() {
        let shown = redact("postgres://u:hunter2@h:1/d");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert_eq!(shown, "postgres://u@h:1/d");
        assert!(is_postgres_url("postgresql://x") && !is_postgres_url("/tmp/postgres://x"));
    }
}
