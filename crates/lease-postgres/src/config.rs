//! Connection settings: a `postgres://` URL (or libpq's `key=value` form), with whatever it
//! leaves out taken from the usual `PG*` environment variables, as `psql` does.

use std::time::Duration;

use lease_ports::StoreError;
use tokio_postgres::config::Host;

use crate::tls::{Mode, Taken, Tls, split_settings};

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
/// TLS: `sslmode` and `sslrootcert` (or `PGSSLMODE` and `PGSSLROOTCERT`) as libpq reads them.
/// Without `sslmode`, no TLS; `prefer` encrypts when the server offers it; `require` insists,
/// checking the chain only when `sslrootcert` is given; `verify-ca` checks the chain and
/// `verify-full` the chain and the host name. `sslrootcert` is a PEM file or `system`.
///
/// # Errors
/// [`StoreError::Incompatible`] naming the problem when the string or a variable cannot be
/// parsed, or a verifying `sslmode` has no root certificate.
pub fn connection_config(target: &str) -> Result<tokio_postgres::Config, StoreError> {
    config_with(target, &ProcessEnv).map(|(config, _)| config)
}

/// As [`connection_config`], with the TLS settings the connector is built from.
pub(crate) fn connection_settings(
    target: &str,
) -> Result<(tokio_postgres::Config, Tls), StoreError> {
    config_with(target, &ProcessEnv)
}

fn bad(target: &str, reason: String) -> StoreError {
    StoreError::Incompatible {
        path: redact(target),
        reason: reason.into(),
    }
}

pub(crate) fn config_with(
    target: &str,
    env: &dyn Env,
) -> Result<(tokio_postgres::Config, Tls), StoreError> {
    let (rest, taken) = split_settings(target).map_err(|reason| bad(target, reason))?;
    let tls = tls_settings(taken, env).map_err(|reason| bad(target, reason))?;
    let mut config = parsed(target, &rest, env)?;
    config.ssl_mode(tls.mode.wire());
    Ok((config, tls))
}

fn tls_settings(taken: Taken, env: &dyn Env) -> Result<Tls, String> {
    let (mode, from) = match taken.sslmode {
        Some(mode) => (mode, "sslmode"),
        None => match env.var("PGSSLMODE") {
            Some(mode) => (mode, "PGSSLMODE"),
            None => ("disable".to_owned(), "sslmode"),
        },
    };
    let parsed = Mode::parse(&mode).ok_or_else(|| {
        format!(
            "{from} {mode:?} is not one of disable, allow, prefer, require, verify-ca, verify-full"
        )
    })?;
    let rootcert = taken.sslrootcert.or_else(|| env.var("PGSSLROOTCERT"));
    Tls::new(parsed, rootcert, env.var("HOME"))
}

/// The connection string without its TLS settings, parsed, with the environment's defaults.
fn parsed(
    original: &str,
    target: &str,
    env: &dyn Env,
) -> Result<tokio_postgres::Config, StoreError> {
    let bad = |reason: String| bad(original, reason);
    // PGPORT goes into the string itself: the parser has already put 5432 in the config
    // when the string names a host but no port, and ports cannot be replaced afterwards.
    let mut with_port = target.to_owned();
    if !names_a_port(target) {
        if let Some(port) = env.var("PGPORT") {
            port.parse::<u16>()
                .map_err(|_| bad(format!("PGPORT {port:?} is not a port number")))?;
            with_port = with_port_of(target, &port);
        }
    }
    let mut config: tokio_postgres::Config = with_port
        .parse()
        .map_err(|e| bad(format!("not a PostgreSQL connection string: {e}")))?;
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
                bad(format!(
                    "PGCONNECT_TIMEOUT {s:?} is not a number of seconds"
                ))
            })?,
            None => 10, // DEFAULT_CONNECT_TIMEOUT
        };
        config.connect_timeout(Duration::from_secs(timeout.max(1)));
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

/// The target as it can be shown: every host with its port, and the database, never the
/// password (`postgres://u@a:5432,b:5433/db` for a URL that names several hosts).
#[must_use]
pub fn describe(config: &tokio_postgres::Config) -> String {
    let ports = config.get_ports();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let name = match host {
                Host::Tcp(name) => name.clone(),
                Host::Unix(path) => path.display().to_string(),
            };
            // One port for every host, or one each.
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            format!("{name}:{port}")
        })
        .collect();
    let hosts = if hosts.is_empty() {
        "?:5432".to_owned()
    } else {
        hosts.join(",")
    };
    let user = config.get_user().unwrap_or("?");
    let db = config.get_dbname().unwrap_or(user);
    format!("postgres://{user}@{hosts}/{db}")
}

/// A connection string with any password removed, for error messages.
#[must_use]
pub fn redact(target: &str) -> String {
    let parsed = split_settings(target)
        .ok()
        .and_then(|(rest, _)| rest.parse::<tokio_postgres::Config>().ok());
    match parsed {
        Some(config) => describe(&config),
        None => "the PostgreSQL connection string".to_owned(),
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
    fn a_url_of_several_hosts_is_shown_with_each_host_and_port() {
        let config: tokio_postgres::Config =
            "postgres://u:secret@a:5433,b:5434/db?target_session_attrs=read-write"
                .parse()
                .unwrap();
        assert_eq!(describe(&config), "postgres://u@a:5433,b:5434/db");
        let one_port: tokio_postgres::Config =
            "host=a,b port=6000 user=u dbname=d".parse().unwrap();
        assert_eq!(describe(&one_port), "postgres://u@a:6000,b:6000/d");
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
        let (config, _) = config_with("postgres://urluser@127.0.0.1/urldb", &env).unwrap();
        assert_eq!(config.get_user(), Some("urluser"));
        assert_eq!(config.get_dbname(), Some("urldb"));
        assert_eq!(config.get_hosts(), &[Host::Tcp("127.0.0.1".into())]);
        assert_eq!(config.get_ports(), &[6543]);
        assert_eq!(config.get_password(), Some(&b"secret"[..]));
        let (bare, _) = config_with("postgres://", &env).unwrap();
        assert_eq!(describe(&bare), "postgres://envuser@db.example:6543/envdb");
    }

    #[test]
    fn a_bad_port_variable_and_a_bad_sslmode_are_named() {
        let env = Vars(HashMap::from([("PGPORT", "fifty")]));
        let err = config_with("postgres://", &env).unwrap_err().to_string();
        assert!(err.contains("PGPORT") && err.contains("fifty"), "{err}");
        let err = config_with("postgres://h/db?sslmode=always", &Vars(HashMap::new()))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("sslmode") && err.contains("verify-full"),
            "{err}"
        );
        let env = Vars(HashMap::from([("PGSSLMODE", "sometimes")]));
        let err = config_with("postgres://h/db", &env)
            .unwrap_err()
            .to_string();
        assert!(err.contains("PGSSLMODE"), "{err}");
    }

    #[test]
    fn the_sslmode_decides_what_tokio_postgres_is_told() {
        use tokio_postgres::config::SslMode;
        let none = Vars(HashMap::new());
        let mode = |target: &str, env: &Vars| config_with(target, env).unwrap().0.get_ssl_mode();
        // Nothing said: no TLS, as before TLS was supported.
        assert_eq!(mode("postgres://h/db", &none), SslMode::Disable);
        assert_eq!(
            mode("postgres://h/db?sslmode=prefer", &none),
            SslMode::Prefer
        );
        assert_eq!(mode("host=h sslmode=require", &none), SslMode::Require);
        let env = Vars(HashMap::from([
            ("PGSSLMODE", "verify-full"),
            ("PGSSLROOTCERT", "/etc/ca.pem"),
        ]));
        let (config, tls) = config_with("postgres://h/db", &env).unwrap();
        assert_eq!(config.get_ssl_mode(), SslMode::Require);
        assert_eq!(tls.mode, Mode::VerifyFull);
        // The string wins over the environment.
        assert_eq!(
            mode("postgres://h/db?sslmode=disable", &env),
            SslMode::Disable
        );
        // A root in a URL does not reach tokio-postgres, which would refuse the key.
        let shown = redact("postgres://u:pw@h/db?sslmode=verify-ca&sslrootcert=/ca.pem");
        assert_eq!(shown, "postgres://u@h:5432/db");
    }

    #[test]
    fn a_password_never_appears_in_what_is_shown() {
        let shown = redact("postgres://u:hunter2@h:1/d");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert_eq!(shown, "postgres://u@h:1/d");
        assert!(is_postgres_url("postgresql://x") && !is_postgres_url("/tmp/postgres://x"));
    }
}
