//! Encrypted job payloads and results.
//!
//! A producer seals a job's payload before it leaves the process; the store and `lease serve`
//! keep and route the sealed bytes without any key; the worker that leases the job opens them.
//! The format is `lease_domain`'s envelope (docs/ENCRYPTION.md): AES-256-GCM with a random
//! 96-bit nonce, under a named key, its associated data binding the key's name, the kind of
//! value (payload or result) and the job's id, so a ciphertext moved to another job, or from a
//! result to a payload, does not open.
//!
//! Keys come from the environment ([`Keyring::from_env`]): `LEASE_PAYLOAD_KEY`, 32 bytes in
//! standard base64 (named `key-` and the first 8 hex digits of its SHA-256), or
//! `LEASE_PAYLOAD_KEY_FILE`, a file of `NAME=BASE64` lines for rotation: the last line's key
//! seals, any line's key opens. No error message ever holds a key or a plaintext.

// Library and binary code may not unwrap, expect or panic on what it meets, nor export what is
// unreachable (each exception allowed in place with its reason); tests may.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        unreachable_pub
    )
)]

use std::fmt;
use std::path::Path;

use aes_gcm::aead::{Aead, KeyInit, Payload as Message};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use lease_domain::{
    Envelope, JobId, Payload, SEALED_NONCE_LEN, SEALED_TAG_LEN, SEALED_TEXT_PREFIX, SealedKind,
    is_key_name, payload_envelope, result_envelope, sealed_associated_data, sealed_payload_header,
};
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

/// The environment variable holding one key, in standard base64.
pub const KEY_VAR: &str = "LEASE_PAYLOAD_KEY";

/// The environment variable naming a file of `NAME=BASE64` lines.
pub const KEY_FILE_VAR: &str = "LEASE_PAYLOAD_KEY_FILE";

/// The longest sealed progress text: the API's bound for any progress (256 characters, which is
/// what 1,024 bytes of any UTF-8 can be), which a sealed one, all ASCII, meets through every
/// door. About 140 bytes of text fit under a `key-xxxxxxxx` name, 100 under a 64-character one.
pub const SEALED_PROGRESS_MAX: usize = 256;

/// The environment variable that, set to `1` (or `true`, `yes`), requires sealed values:
/// producers refuse to enqueue a payload they cannot seal, and workers and readers refuse a
/// plain payload or result (a value swapped in by whoever can write the store or enqueue).
pub const REQUIRE_VAR: &str = "LEASE_REQUIRE_SEALED";

/// Why a value could not be sealed or opened, or keys not read. Never holds a key or a
/// plaintext.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// A key (from `source`) is not 32 bytes in standard base64, or is badly named.
    #[error("{origin} {reason}")]
    BadKey {
        /// Where the key came from: the variable, or the file and line.
        origin: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The key file cannot be read.
    #[error("{KEY_FILE_VAR} names {path}, which cannot be read: {reason}")]
    KeyFile {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// Both variables are set, so which keys count is unclear.
    #[error("both {KEY_VAR} and {KEY_FILE_VAR} are set: set one")]
    BothSet,
    /// The value is sealed and no key was given.
    #[error(
        "the {kind} of job {job} is encrypted with key {key}, and no key is given (set {KEY_VAR} or {KEY_FILE_VAR})"
    )]
    NoKey {
        /// The job.
        job: String,
        /// `payload` or `result`.
        kind: &'static str,
        /// The name of the key it was sealed with.
        key: String,
    },
    /// The value is sealed with a key that is not among those given.
    #[error(
        "the {kind} of job {job} is encrypted with key {key}, which is not among the keys given ({known})"
    )]
    UnknownKey {
        /// The job.
        job: String,
        /// `payload` or `result`.
        kind: &'static str,
        /// The name of the key it was sealed with.
        key: String,
        /// The names of the keys given.
        known: String,
    },
    /// The key of that name does not open the value: another key under the same name, or the
    /// value was changed or moved from another job.
    #[error(
        "the {kind} of job {job} does not open with key {key}: the key is not the one it was sealed with, or the value was changed or moved from another job"
    )]
    WontOpen {
        /// The job.
        job: String,
        /// `payload` or `result`.
        kind: &'static str,
        /// The key's name.
        key: String,
    },
    /// A value that begins with a sealed envelope's reserved start but is not one this
    /// version reads (another version, a cut body, a bad key name, a body that is not base64).
    #[error("the {kind} of job {job} is not a well-formed sealed {kind}: {why}")]
    Malformed {
        /// The job.
        job: String,
        /// `payload` or `result`.
        kind: &'static str,
        /// What is wrong with it.
        why: String,
    },
    /// A plain value where sealed values are required ([`REQUIRE_VAR`]).
    #[error(
        "the {kind} of job {job} is not sealed, and sealed values are required ({REQUIRE_VAR}): it is refused"
    )]
    NotSealed {
        /// The job.
        job: String,
        /// `payload` or `result`.
        kind: &'static str,
    },
    /// Sealed values are required and no key is given to seal with.
    #[error(
        "sealed values are required ({REQUIRE_VAR}) and no key is given: set {KEY_VAR} or {KEY_FILE_VAR}"
    )]
    NoSealingKey,
    /// A setting of the environment that cannot be read.
    #[error("{var} {reason}")]
    BadSetting {
        /// The variable.
        var: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The OS's random source failed, so no nonce could be made.
    #[error("no random nonce: the OS's random source failed: {0}")]
    Random(String),
    /// Sealed, a payload is over the size limit.
    #[error("the payload of job {job}, sealed, is over the {limit}-byte limit")]
    TooLarge {
        /// The job.
        job: String,
        /// The limit.
        limit: usize,
    },
}

/// One named key.
struct NamedKey {
    name: String,
    cipher: Aes256Gcm,
}

/// The keys a process seals and opens with: the last seals, any opens.
pub struct Keyring {
    keys: Vec<NamedKey>,
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Names only: never a key.
        f.debug_struct("Keyring")
            .field("keys", &self.names())
            .finish()
    }
}

/// A key from its base64 text; `source` says where it came from in errors. The decoded bytes
/// are cleared when dropped (here, and in the caller once the cipher holds the key).
fn decode_key(text: &str, source: &str) -> Result<Zeroizing<[u8; 32]>, SealError> {
    let bytes =
        Zeroizing::new(STANDARD.decode(text.trim()).map_err(|_| {
            SealError::BadKey {
                origin: source.to_owned(),
                reason:
                    "is not standard base64 (a key is 32 random bytes in base64, 44 characters)"
                        .to_owned(),
            }
        })?);
    <[u8; 32]>::try_from(bytes.as_slice())
        .map(Zeroizing::new)
        .map_err(|_| SealError::BadKey {
            origin: source.to_owned(),
            reason: format!(
                "is {} bytes, not 32 (a key is 32 random bytes in base64, 44 characters)",
                bytes.len()
            ),
        })
}

/// A cipher holding `key` (its expanded key is cleared when the cipher is dropped).
fn cipher(key: &[u8; 32]) -> Aes256Gcm {
    Aes256Gcm::new(key.into())
}

impl Keyring {
    /// The keys the environment gives: `LEASE_PAYLOAD_KEY` or `LEASE_PAYLOAD_KEY_FILE`;
    /// `None` when neither is set.
    ///
    /// # Errors
    /// Both set, an unreadable file, or a key that is not 32 bytes in base64.
    pub fn from_env() -> Result<Option<Self>, SealError> {
        // A key that is not text is refused, never taken for no key (which would seal nothing).
        let key = std::env::var_os(KEY_VAR).filter(|k| !k.is_empty());
        let file = std::env::var_os(KEY_FILE_VAR).filter(|f| !f.is_empty());
        match (key, file) {
            (Some(_), Some(_)) => Err(SealError::BothSet),
            (Some(key), None) => {
                let key = Zeroizing::new(key.into_string().map_err(|_| {
                    SealError::BadKey {
                        origin: KEY_VAR.to_owned(),
                        reason:
                            "is not valid text (a key is 32 random bytes in base64, 44 characters)"
                                .to_owned(),
                    }
                })?);
                Self::single(&key).map(Some)
            }
            (None, Some(file)) => Self::from_file(Path::new(&file)).map(Some),
            (None, None) => Ok(None),
        }
    }

    /// One key, from its base64 text; its name is `key-` and the first 8 hex digits of the
    /// key's SHA-256.
    ///
    /// # Errors
    /// A key that is not 32 bytes in base64.
    pub fn single(base64: &str) -> Result<Self, SealError> {
        let key = decode_key(base64, KEY_VAR)?;
        let digest = Sha256::digest(key.as_slice());
        let name = format!(
            "key-{}",
            digest[..4]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        );
        Ok(Self {
            keys: vec![NamedKey {
                name,
                cipher: cipher(&key),
            }],
        })
    }

    /// The keys of a key file.
    ///
    /// # Errors
    /// An unreadable file, or a line [`Keyring::parse`] refuses.
    pub fn from_file(path: &Path) -> Result<Self, SealError> {
        let text =
            Zeroizing::new(
                std::fs::read_to_string(path).map_err(|e| SealError::KeyFile {
                    path: path.display().to_string(),
                    reason: e.to_string(),
                })?,
            );
        Self::parse(&text, &path.display().to_string())
    }

    /// The keys of a key file's text: a `NAME=BASE64` line per key (blank lines and lines
    /// starting with `#` skipped); the last seals. `file` names it in errors.
    ///
    /// # Errors
    /// A line that is not `NAME=BASE64`, a name given twice or not a key name, a key that is
    /// not 32 bytes in base64, or no key at all.
    pub fn parse(text: &str, file: &str) -> Result<Self, SealError> {
        let mut keys: Vec<NamedKey> = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let source = format!("{KEY_FILE_VAR} ({file}, line {})", n + 1);
            let bad = |reason: &str| SealError::BadKey {
                origin: source.clone(),
                reason: reason.to_owned(),
            };
            let (name, key) = line
                .split_once('=')
                .ok_or_else(|| bad("is not NAME=BASE64"))?;
            let name = name.trim();
            if !is_key_name(name) {
                return Err(bad(
                    "names its key badly: a name is 1 to 64 of A-Z a-z 0-9 - _ .",
                ));
            }
            if keys.iter().any(|k| k.name == name) {
                return Err(bad(&format!("names key {name} a second time")));
            }
            let key = decode_key(key, &source)?;
            keys.push(NamedKey {
                name: name.to_owned(),
                cipher: cipher(&key),
            });
        }
        if keys.is_empty() {
            return Err(SealError::BadKey {
                origin: format!("{KEY_FILE_VAR} ({file})"),
                reason: "holds no key".to_owned(),
            });
        }
        Ok(Self { keys })
    }

    /// The names of the keys, the sealing one last.
    #[must_use]
    pub fn names(&self) -> Vec<&str> {
        self.keys.iter().map(|k| k.name.as_str()).collect()
    }

    /// The name of the key that seals.
    #[must_use]
    pub fn sealing_key(&self) -> &str {
        self.keys.last().map_or("", |k| k.name.as_str())
    }

    fn sealer(&self) -> Result<&NamedKey, SealError> {
        self.keys.last().ok_or_else(|| SealError::BadKey {
            origin: "the keyring".to_owned(),
            reason: "holds no key".to_owned(),
        })
    }

    /// `nonce | ciphertext | tag` of `plain` under the sealing key.
    fn seal(
        &self,
        kind: SealedKind,
        job: &str,
        plain: &[u8],
    ) -> Result<(&str, Vec<u8>), SealError> {
        let key = self.sealer()?;
        let mut nonce = [0u8; SEALED_NONCE_LEN];
        getrandom::fill(&mut nonce).map_err(|e| SealError::Random(e.to_string()))?;
        let aad = sealed_associated_data(&key.name, kind, job);
        let sealed = key
            .cipher
            .encrypt(
                Nonce::from_slice(&nonce),
                Message {
                    msg: plain,
                    aad: &aad,
                },
            )
            .map_err(|_| SealError::Random("the cipher refused the value".to_owned()))?;
        let mut body = Vec::with_capacity(SEALED_NONCE_LEN + sealed.len());
        body.extend_from_slice(&nonce);
        body.extend_from_slice(&sealed);
        Ok((&key.name, body))
    }

    /// The plaintext of `body` (`nonce | ciphertext | tag`) sealed under `key` for `binding`
    /// (the job, or a checkpoint's job and step); errors name `job`.
    fn open(
        &self,
        kind: SealedKind,
        job: &str,
        binding: &str,
        key: &str,
        body: &[u8],
    ) -> Result<Vec<u8>, SealError> {
        let named =
            self.keys
                .iter()
                .find(|k| k.name == key)
                .ok_or_else(|| SealError::UnknownKey {
                    job: job.to_owned(),
                    kind: kind.as_str(),
                    key: key.to_owned(),
                    known: self.names().join(", "),
                })?;
        let wont = || SealError::WontOpen {
            job: job.to_owned(),
            kind: kind.as_str(),
            key: key.to_owned(),
        };
        if body.len() < SEALED_NONCE_LEN {
            return Err(wont());
        }
        let (nonce, sealed) = body.split_at(SEALED_NONCE_LEN);
        let aad = sealed_associated_data(key, kind, binding);
        named
            .cipher
            .decrypt(
                Nonce::from_slice(nonce),
                Message {
                    msg: sealed,
                    aad: &aad,
                },
            )
            .map_err(|_| wont())
    }

    /// `plain` sealed as job `job`'s payload under the sealing key.
    ///
    /// # Errors
    /// [`SealError::Random`] when no nonce could be made.
    pub fn seal_payload(&self, job: &str, plain: &[u8]) -> Result<Vec<u8>, SealError> {
        let (name, body) = self.seal(SealedKind::Payload, job, plain)?;
        let mut bytes = sealed_payload_header(name);
        bytes.extend_from_slice(&body);
        Ok(bytes)
    }

    /// `plain` sealed as job `job`'s result under the sealing key (text).
    ///
    /// # Errors
    /// [`SealError::Random`] when no nonce could be made.
    pub fn seal_result(&self, job: &str, plain: &str) -> Result<String, SealError> {
        self.seal_text(SealedKind::Result, job, plain.as_bytes())
    }

    /// `value` sealed as job `job`'s checkpoint `name` (text): bound to the job and the name,
    /// so it opens for no other step.
    ///
    /// # Errors
    /// [`SealError::Random`] when no nonce could be made.
    pub fn seal_checkpoint(&self, job: &str, name: &str, value: &str) -> Result<String, SealError> {
        self.seal_text(
            SealedKind::Checkpoint,
            &checkpoint_binding(job, name),
            value.as_bytes(),
        )
    }

    /// `text` sealed as job `job`'s progress, cut (at a character's end) to what fits a
    /// progress report once sealed under this keyring's sealing key ([`Self::progress_room`]).
    ///
    /// # Errors
    /// [`SealError::Random`] when no nonce could be made.
    pub fn seal_progress(&self, job: &str, text: &str) -> Result<String, SealError> {
        let mut end = text.len().min(self.progress_room());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        self.seal_text(SealedKind::Progress, job, &text.as_bytes()[..end])
    }

    /// How many bytes of progress text fit a progress report once sealed under the sealing
    /// key ([`SEALED_PROGRESS_MAX`] characters, so that it passes every door): the envelope
    /// takes its prefix, the key's name, a nonce and a tag, and base64 a third.
    #[must_use]
    pub fn progress_room(&self) -> usize {
        let envelope = SEALED_TEXT_PREFIX.len() + self.sealing_key().len() + 1;
        let groups = SEALED_PROGRESS_MAX.saturating_sub(envelope) / 4;
        (groups * 3).saturating_sub(SEALED_NONCE_LEN + SEALED_TAG_LEN)
    }

    fn seal_text(
        &self,
        kind: SealedKind,
        binding: &str,
        plain: &[u8],
    ) -> Result<String, SealError> {
        let (name, body) = self.seal(kind, binding, plain)?;
        Ok(format!(
            "{SEALED_TEXT_PREFIX}{name}:{}",
            STANDARD.encode(body)
        ))
    }
}

/// What a checkpoint's value is bound to besides its kind: its job and its name (neither holds
/// a NUL, so the pair is read one way only).
fn checkpoint_binding(job: &str, name: &str) -> String {
    format!("{job}\0{name}")
}

/// Whether the environment requires sealed values ([`REQUIRE_VAR`]): `1`, `true` or `yes`
/// require them; unset, empty, `0`, `false` or `no` do not.
///
/// # Errors
/// [`SealError::BadSetting`] for any other value, so a typo never turns the requirement off.
pub fn require_sealed_from_env() -> Result<bool, SealError> {
    let Some(value) = std::env::var_os(REQUIRE_VAR) else {
        return Ok(false);
    };
    match value.to_str().map(str::to_ascii_lowercase).as_deref() {
        Some("1" | "true" | "yes") => Ok(true),
        Some("" | "0" | "false" | "no") => Ok(false),
        _ => Err(SealError::BadSetting {
            var: REQUIRE_VAR,
            reason:
                "must be 1, true or yes (or 0, false, no) to say whether sealed values are required"
                    .to_owned(),
        }),
    }
}

/// Job `job`'s payload as its worker reads it: a plain payload as it is (refused when
/// `require_sealed`), a sealed one opened with `keys`; one that begins with the reserved start
/// but is not a well-formed envelope is refused, never handed on as plain bytes.
///
/// # Errors
/// A sealed payload with no keys, under a key not given, or that does not open; a malformed
/// envelope; a plain payload where sealed ones are required.
pub fn open_payload(
    keys: Option<&Keyring>,
    require_sealed: bool,
    job: &str,
    bytes: &[u8],
) -> Result<Vec<u8>, SealError> {
    let kind = SealedKind::Payload;
    match to_open(keys, require_sealed, kind, job, payload_envelope(bytes))? {
        Some((keys, sealed)) => keys.open(kind, job, job, sealed.key, sealed.body),
        None => Ok(bytes.to_vec()),
    }
}

/// What reading a value in `envelope` comes to: `None` for a plain value that may be read as
/// it is; the keys and the sealed value to open; or why it is refused (a plain value where
/// sealed ones are required, a malformed envelope, no keys).
fn to_open<'k, 'v>(
    keys: Option<&'k Keyring>,
    require_sealed: bool,
    kind: SealedKind,
    job: &str,
    envelope: Envelope<'v>,
) -> Result<Option<(&'k Keyring, lease_domain::Sealed<'v>)>, SealError> {
    let sealed = match envelope {
        Envelope::Plain if require_sealed => return Err(not_sealed(job, kind)),
        Envelope::Plain => return Ok(None),
        Envelope::Malformed(why) => return Err(malformed(job, kind, why)),
        Envelope::Sealed(sealed) => sealed,
    };
    let keys = keys.ok_or_else(|| SealError::NoKey {
        job: job.to_owned(),
        kind: kind.as_str(),
        key: sealed.key.to_owned(),
    })?;
    Ok(Some((keys, sealed)))
}

fn not_sealed(job: &str, kind: SealedKind) -> SealError {
    SealError::NotSealed {
        job: job.to_owned(),
        kind: kind.as_str(),
    }
}

fn malformed(job: &str, kind: SealedKind, why: &str) -> SealError {
    SealError::Malformed {
        job: job.to_owned(),
        kind: kind.as_str(),
        why: why.to_owned(),
    }
}

/// Job `job`'s result as its reader reads it: a plain result as it is (refused when
/// `require_sealed`), a sealed one opened with `keys` (its plaintext must be UTF-8, as a
/// result is); a malformed envelope is refused.
///
/// # Errors
/// A sealed result with no keys, under a key not given, malformed, or that does not open; a
/// plain result where sealed ones are required.
pub fn open_result(
    keys: Option<&Keyring>,
    require_sealed: bool,
    job: &str,
    text: &str,
) -> Result<String, SealError> {
    open_text(keys, require_sealed, SealedKind::Result, job, job, text)
}

/// Job `job`'s checkpoint `name` as its worker reads it, as [`open_result`] reads a result.
///
/// # Errors
/// As [`open_result`].
pub fn open_checkpoint(
    keys: Option<&Keyring>,
    require_sealed: bool,
    job: &str,
    name: &str,
    value: &str,
) -> Result<String, SealError> {
    let binding = checkpoint_binding(job, name);
    open_text(
        keys,
        require_sealed,
        SealedKind::Checkpoint,
        job,
        &binding,
        value,
    )
}

/// Job `job`'s progress text opened, as [`open_result`] reads a result.
///
/// # Errors
/// As [`open_result`].
pub fn open_progress(
    keys: Option<&Keyring>,
    require_sealed: bool,
    job: &str,
    text: &str,
) -> Result<String, SealError> {
    open_text(keys, require_sealed, SealedKind::Progress, job, job, text)
}

/// A text value of `kind` of job `job` (bound to `binding`) opened.
fn open_text(
    keys: Option<&Keyring>,
    require_sealed: bool,
    kind: SealedKind,
    job: &str,
    binding: &str,
    text: &str,
) -> Result<String, SealError> {
    let Some((keys, sealed)) = to_open(keys, require_sealed, kind, job, result_envelope(text))?
    else {
        return Ok(text.to_owned());
    };
    let body = STANDARD
        .decode(sealed.body)
        .map_err(|_| malformed(job, kind, "its body is not standard base64"))?;
    let plain = keys.open(kind, job, binding, sealed.key, &body)?;
    String::from_utf8(plain).map_err(|_| SealError::WontOpen {
        job: job.to_owned(),
        kind: kind.as_str(),
        key: sealed.key.to_owned(),
    })
}

/// Seals each of `payloads` for its job with the keys the environment gives
/// ([`Keyring::from_env`]), when it gives any; the keys are read only when there is a payload
/// to seal. What producers (the command line, Python) do before a job leaves the process.
/// Where the environment requires sealed values ([`REQUIRE_VAR`]) and gives no key, nothing
/// is enqueued in the clear: the producer is refused.
///
/// # Errors
/// Bad keys or a bad [`REQUIRE_VAR`] in the environment, no key where sealed values are
/// required, or a payload over [`Payload::DEFAULT_LIMIT`] once sealed.
pub fn seal_payloads_from_env<'a>(
    payloads: impl IntoIterator<Item = (&'a JobId, &'a mut Option<Payload>)>,
) -> Result<(), SealError> {
    // Read first, so that a setting that cannot be read is refused whatever else is given.
    let require = require_sealed_from_env()?;
    let mut keys = None;
    for (job, payload) in payloads {
        let Some(plain) = payload.as_ref() else {
            continue;
        };
        let keys = match &keys {
            Some(keys) => keys,
            None => match Keyring::from_env()? {
                Some(found) => keys.insert(found),
                None if require => return Err(SealError::NoSealingKey),
                None => return Ok(()),
            },
        };
        let sealed = keys.seal_payload(job.as_str(), plain.as_bytes())?;
        let limit = Payload::DEFAULT_LIMIT;
        *payload = Some(
            Payload::new(sealed, limit).map_err(|_| SealError::TooLarge {
                job: job.as_str().to_owned(),
                limit,
            })?,
        );
    }
    Ok(())
}
