//! Sealed payloads and results: the envelope an encrypted value travels in (docs/ENCRYPTION.md).
//!
//! The stores and the server keep and route a sealed value without any key; what they may
//! know of it is that it is sealed and under which key's name, so that `state`, the API and the
//! page can say "encrypted (key NAME)" instead of showing its bytes. The encryption itself is
//! `lease-seal`'s; these are the envelope's rules, which every layer reads.
//!
//! A sealed payload (bytes):
//!
//! ```text
//! 0xFF "lease" 0x01 | n (1 byte) | NAME (n bytes) | nonce (12 bytes) | ciphertext | tag (16 bytes)
//! ```
//!
//! A sealed result (text): `lease-sealed:v1:NAME:` followed by the standard base64 of
//! `nonce | ciphertext | tag`.
//!
//! A key's NAME is 1 to 64 of `A-Z a-z 0-9 - _ .`.

/// The first bytes of a sealed payload: 0xFF (never the first byte of UTF-8 text), `lease`,
/// and the format's version, 1.
pub const SEALED_MAGIC: [u8; 7] = [0xFF, b'l', b'e', b'a', b's', b'e', 1];

/// The start of a sealed result.
pub const SEALED_TEXT_PREFIX: &str = "lease-sealed:v1:";

/// The nonce's length (AES-256-GCM's 96 bits).
pub const SEALED_NONCE_LEN: usize = 12;

/// The authentication tag's length.
pub const SEALED_TAG_LEN: usize = 16;

/// The longest key name.
pub const KEY_NAME_MAX: usize = 64;

/// Whether `name` may name a key: 1 to 64 ASCII letters, digits, `-`, `_` or `.`.
#[must_use]
pub fn is_key_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= KEY_NAME_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// What a sealed value is: the name of its key, and the sealed bytes after its header
/// (`nonce | ciphertext | tag`; for a result, still in base64).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sealed<'a> {
    /// The key's name.
    pub key: &'a str,
    /// What follows the header.
    pub body: &'a [u8],
}

/// The sealed payload `bytes` is, or `None` when they are not one (a plain payload).
#[must_use]
pub fn sealed_payload(bytes: &[u8]) -> Option<Sealed<'_>> {
    let rest = bytes.strip_prefix(SEALED_MAGIC.as_slice())?;
    let (&n, rest) = rest.split_first()?;
    let n = usize::from(n);
    if rest.len() < n + SEALED_NONCE_LEN + SEALED_TAG_LEN {
        return None;
    }
    let (name, body) = rest.split_at(n);
    let key = std::str::from_utf8(name).ok().filter(|k| is_key_name(k))?;
    Some(Sealed { key, body })
}

/// The sealed result `text` is, or `None` when it is not one (a plain result). The body is the
/// base64 text after the name, not yet decoded.
#[must_use]
pub fn sealed_result(text: &str) -> Option<Sealed<'_>> {
    let rest = text.strip_prefix(SEALED_TEXT_PREFIX)?;
    let (key, body) = rest.split_once(':')?;
    if !is_key_name(key) || body.is_empty() {
        return None;
    }
    let is_base64 = body
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='));
    is_base64.then_some(Sealed {
        key,
        body: body.as_bytes(),
    })
}

/// The header of a sealed payload under `key` (which must be a key name): the magic, the
/// name's length, the name.
#[must_use]
pub fn sealed_payload_header(key: &str) -> Vec<u8> {
    let mut header = Vec::with_capacity(SEALED_MAGIC.len() + 1 + key.len());
    header.extend_from_slice(&SEALED_MAGIC);
    header.push(u8::try_from(key.len()).unwrap_or(u8::MAX));
    header.extend_from_slice(key.as_bytes());
    header
}

/// What a sealed value is bound to besides its key: its kind and its job. A ciphertext moved
/// to another job, or from a result to a payload, does not open.
#[must_use]
pub fn sealed_associated_data(key: &str, kind: SealedKind, job: &str) -> Vec<u8> {
    format!("{SEALED_TEXT_PREFIX}{key}:{}:{job}", kind.as_str()).into_bytes()
}

/// What a sealed value is of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SealedKind {
    /// The job's payload.
    Payload,
    /// The job's result.
    Result,
}

impl SealedKind {
    /// `payload` or `result`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            SealedKind::Payload => "payload",
            SealedKind::Result => "result",
        }
    }
}

/// How a value is shown where no key is: "encrypted (key NAME)".
#[must_use]
pub fn sealed_label(key: &str) -> String {
    format!("encrypted (key {key})")
}
