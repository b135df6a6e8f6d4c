//! TLS to the server, as libpq's `sslmode` and `sslrootcert` ask for it, through rustls.
//!
//! tokio-postgres itself knows `disable`, `prefer` and `require` and leaves verifying the
//! certificate to the connector; this module takes the two settings out of the connection
//! string (or `PGSSLMODE` / `PGSSLROOTCERT`) and builds a connector that verifies what each
//! mode promises:
//! - `disable`, or no `sslmode` at all: no TLS (libpq's default is `prefer`; here a connection
//!   is encrypted only when asked, so nothing changes for a string that says nothing);
//! - `prefer` and `allow`: TLS when the server offers it, the certificate not checked;
//! - `require`: TLS or no connection; the certificate checked against `sslrootcert` when one is
//!   given (as `verify-ca`), else not checked (encryption against a passive listener only);
//! - `verify-ca`: the certificate must chain to `sslrootcert`;
//! - `verify-full`: that, and it must name the host connected to.
//!
//! `sslrootcert` is a PEM file of CA certificates, or `system` for the operating system's
//! roots; without it the verifying modes read `~/.postgresql/root.crt`, as libpq does.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{WebPkiServerVerifier, verify_server_cert_signed_by_trust_anchor};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore};
use rustls_pki_types::pem::PemObject;
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

/// What the connection string asks of TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl Mode {
    pub(crate) fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "disable" => Self::Disable,
            "allow" | "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            _ => return None,
        })
    }

    /// The mode tokio-postgres is told: whether to ask for TLS and whether to insist.
    pub(crate) fn wire(self) -> SslMode {
        match self {
            Self::Disable => SslMode::Disable,
            Self::Prefer => SslMode::Prefer,
            Self::Require | Self::VerifyCa | Self::VerifyFull => SslMode::Require,
        }
    }
}

/// Where the trusted CA certificates come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Roots {
    /// Trust any certificate (`prefer`, or `require` without `sslrootcert`).
    None,
    /// The operating system's roots (`sslrootcert=system`).
    System,
    /// A PEM file of CA certificates.
    File(PathBuf),
}

/// The TLS half of a connection's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tls {
    pub(crate) mode: Mode,
    pub(crate) roots: Roots,
}

impl Tls {
    /// Decides the roots for `mode` from `sslrootcert` (the string's, else the environment's)
    /// and the home directory.
    ///
    /// # Errors
    /// The reason, when a verifying mode has no root certificate to verify with.
    pub(crate) fn new(
        mode: Mode,
        rootcert: Option<String>,
        home: Option<String>,
    ) -> Result<Self, String> {
        let named = match rootcert.as_deref() {
            Some("system") => Some(Roots::System),
            Some(path) => Some(Roots::File(PathBuf::from(path))),
            None => None,
        };
        let roots = match (mode, named) {
            (Mode::Disable | Mode::Prefer, _) | (Mode::Require, None) => Roots::None,
            (_, Some(roots)) => roots,
            (Mode::VerifyCa | Mode::VerifyFull, None) => {
                let default = home.map(|h| PathBuf::from(h).join(".postgresql/root.crt"));
                match default {
                    Some(path) if path.is_file() => Roots::File(path),
                    _ => {
                        let mode = if mode == Mode::VerifyCa {
                            "verify-ca"
                        } else {
                            "verify-full"
                        };
                        return Err(format!(
                            "sslmode={mode} needs the certificate of the CA that signed the \
                             server's: give sslrootcert=PATH (a PEM file) or sslrootcert=system \
                             (~/.postgresql/root.crt, libpq's default, does not exist)"
                        ));
                    }
                }
            }
        };
        // `require` with a root given checks the chain, as libpq does.
        let mode = if mode == Mode::Require && roots != Roots::None {
            Mode::VerifyCa
        } else {
            mode
        };
        Ok(Self { mode, roots })
    }

    /// The connector for a pool and the signal listener (never used with `disable`).
    ///
    /// # Errors
    /// The reason, when the root certificates cannot be read.
    pub(crate) fn connector(&self) -> Result<MakeRustlsConnect, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS cannot be set up: {e}"))?;
        let roots = match &self.roots {
            Roots::None => None,
            roots => Some(Arc::new(root_store(roots)?)),
        };
        let builder = match roots {
            Some(roots) if self.mode == Mode::VerifyFull => builder.with_webpki_verifier(
                WebPkiServerVerifier::builder_with_provider(roots, provider)
                    .build()
                    .map_err(|e| format!("TLS cannot be set up: {e}"))?,
            ),
            roots => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(NameUnchecked { roots, provider })),
        };
        Ok(MakeRustlsConnect::new(builder.with_no_client_auth()))
    }
}

fn root_store(roots: &Roots) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    match roots {
        Roots::None => {}
        Roots::System => {
            let found = rustls_native_certs::load_native_certs();
            for cert in found.certs {
                // A system root rustls cannot parse is skipped, as browsers do.
                let _ = store.add(cert);
            }
            if store.is_empty() {
                return Err("sslrootcert=system: the system has no usable CA certificates".into());
            }
        }
        Roots::File(path) => {
            let shown = path.display();
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| format!("sslrootcert {shown}: cannot read it: {e}"))?;
            for cert in certs {
                let cert = cert.map_err(|e| format!("sslrootcert {shown}: not PEM: {e}"))?;
                store
                    .add(cert)
                    .map_err(|e| format!("sslrootcert {shown}: not a CA certificate: {e}"))?;
            }
            if store.is_empty() {
                return Err(format!("sslrootcert {shown}: holds no certificate"));
            }
        }
    }
    Ok(store)
}

/// The verifier of the modes that do not compare names: `verify-ca` (with roots: the chain
/// must end at one of them) and `prefer` or a bare `require` (without: any certificate). The
/// handshake is checked either way: the server proves it holds the key of the certificate it
/// sent.
#[derive(Debug)]
struct NameUnchecked {
    roots: Option<Arc<RootCertStore>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for NameUnchecked {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(roots) = &self.roots {
            verify_server_cert_signed_by_trust_anchor(
                &ParsedCertificate::try_from(end_entity)?,
                roots,
                intermediates,
                now,
                self.provider.signature_verification_algorithms.all,
            )?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        let algorithms = &self.provider.signature_verification_algorithms;
        algorithms.supported_schemes()
    }
}

/// Takes `sslmode` and `sslrootcert` out of a connection string (tokio-postgres parses
/// neither `verify-*` nor a root), returning the rest and the two values.
///
/// # Errors
/// The reason, for a client-certificate setting (not supported) or a malformed string.
pub(crate) fn split_settings(target: &str) -> Result<(String, Taken), String> {
    let mut taken = Taken::default();
    let rest = if let Some((head, query)) = target.split_once('?') {
        let mut kept = Vec::new();
        for pair in query.split('&') {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            if !taken.take(key, percent_decoded(value)?)? {
                kept.push(pair);
            }
        }
        if kept.is_empty() {
            head.to_owned()
        } else {
            format!("{head}?{}", kept.join("&"))
        }
    } else if target.contains("://") {
        target.to_owned()
    } else {
        let mut kept = Vec::new();
        for (key, value) in key_values(target)? {
            if !taken.take(&key, value.clone())? {
                kept.push(format!(
                    "{key}='{}'",
                    value.replace('\\', "\\\\").replace('\'', "\\'")
                ));
            }
        }
        kept.join(" ")
    };
    Ok((rest, taken))
}

/// The TLS settings a connection string gave.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Taken {
    pub(crate) sslmode: Option<String>,
    pub(crate) sslrootcert: Option<String>,
}

impl Taken {
    /// Keeps `key`'s value if it is one of ours; says whether it was.
    fn take(&mut self, key: &str, value: String) -> Result<bool, String> {
        match key {
            "sslmode" => self.sslmode = Some(value),
            "sslrootcert" => self.sslrootcert = Some(value),
            "sslcert" | "sslkey" | "sslpassword" | "sslcrl" | "sslcrldir" => {
                return Err(format!(
                    "{key} is not supported (client certificates and revocation lists are \
                     not; the server's certificate is verified with sslrootcert)"
                ));
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

fn percent_decoded(value: &str) -> Result<String, String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = value
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| "a malformed %-escape in the connection string".to_owned())?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "a %-escape that is not UTF-8".to_owned())
}

/// libpq's `key=value` form: values bare or single-quoted with `\` escapes.
fn key_values(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut pairs = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(pairs);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(format!("`{key}` has no value in the connection string"));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    Some('\'') => break,
                    Some('\\') => value.extend(chars.next()),
                    Some(c) => value.push(c),
                    None => return Err("an unclosed quote in the connection string".into()),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                value.push(c);
            }
        }
        pairs.push((key, value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_come_out_of_both_forms_and_the_rest_is_kept() {
        let (rest, taken) = split_settings(
            "postgres://u@h/db?application_name=a&sslmode=verify-full&sslrootcert=%2Fca%20dir%2Fca.pem",
        )
        .unwrap();
        assert_eq!(rest, "postgres://u@h/db?application_name=a");
        assert_eq!(taken.sslmode.as_deref(), Some("verify-full"));
        assert_eq!(taken.sslrootcert.as_deref(), Some("/ca dir/ca.pem"));

        let (rest, taken) =
            split_settings("host=h  sslrootcert = '/a b/it\\'s.pem' dbname=d sslmode=require")
                .unwrap();
        assert_eq!(rest, "host='h' dbname='d'");
        assert_eq!(taken.sslrootcert.as_deref(), Some("/a b/it's.pem"));
        assert_eq!(taken.sslmode.as_deref(), Some("require"));

        let (rest, taken) = split_settings("postgres://u@h/db").unwrap();
        assert_eq!(
            (rest.as_str(), taken),
            ("postgres://u@h/db", Taken::default())
        );
    }

    #[test]
    fn client_certificates_and_malformed_strings_are_named() {
        let err = split_settings("postgres://h/d?sslcert=/c.pem").unwrap_err();
        assert!(err.contains("sslcert is not supported"), "{err}");
        let err = split_settings("host=h sslkey=/k").unwrap_err();
        assert!(err.contains("sslkey"), "{err}");
        let err = split_settings("host=h sslmode='re").unwrap_err();
        assert!(err.contains("unclosed quote"), "{err}");
        let err = split_settings("postgres://h/d?sslrootcert=%zz").unwrap_err();
        assert!(err.contains("%-escape"), "{err}");
    }

    #[test]
    fn the_verifying_modes_need_a_root_and_require_with_one_checks_the_chain() {
        let err = Tls::new(Mode::VerifyFull, None, Some("/nonexistent-home".into())).unwrap_err();
        assert!(
            err.contains("sslmode=verify-full") && err.contains("sslrootcert"),
            "{err}"
        );
        let tls = Tls::new(Mode::Require, None, None).unwrap();
        assert_eq!(tls.roots, Roots::None);
        let tls = Tls::new(Mode::Require, Some("/ca.pem".into()), None).unwrap();
        assert_eq!(
            (tls.mode, tls.roots),
            (Mode::VerifyCa, Roots::File("/ca.pem".into()))
        );
        let tls = Tls::new(Mode::VerifyFull, Some("system".into()), None).unwrap();
        assert_eq!(tls.roots, Roots::System);
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir(home.path().join(".postgresql")).unwrap();
        std::fs::write(home.path().join(".postgresql/root.crt"), "x").unwrap();
        let tls = Tls::new(
            Mode::VerifyCa,
            None,
            Some(home.path().display().to_string()),
        )
        .unwrap();
        assert_eq!(
            tls.roots,
            Roots::File(home.path().join(".postgresql/root.crt"))
        );
    }

    #[test]
    fn an_unreadable_or_empty_root_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let tls = Tls::new(Mode::VerifyFull, Some(missing.display().to_string()), None).unwrap();
        let err = tls.connector().err().unwrap();
        assert!(
            err.contains("missing.pem") && err.contains("cannot read"),
            "{err}"
        );
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "no certificate here\n").unwrap();
        let tls = Tls::new(Mode::VerifyCa, Some(empty.display().to_string()), None).unwrap();
        let err = tls.connector().err().unwrap();
        assert!(err.contains("holds no certificate"), "{err}");
    }
}
