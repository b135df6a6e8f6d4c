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
//!
//! The envelopes' starts are reserved: a payload that begins with `0xFF "lease"`, or a result
//! that begins with `lease-sealed:`, is a sealed value or is malformed ([`Envelope`]), never
//! plain data. So an envelope of an unknown version or a cut body is refused with a reason in
//! every language, instead of being handed to a handler as plaintext, and a plain value can
//! never be taken for a sealed one (the boundary refuses one that would be).

/// The first bytes of a sealed payload: 0xFF (never the first byte of UTF-8 text), `lease`,
/// and the format's version, 1.
pub const SEALED_MAGIC: [u8; 7] = [0xFF, b'l', b'e', b'a', b's', b'e', 1];

/// The start of a sealed result.
pub const SEALED_TEXT_PREFIX: &str = "lease-sealed:v1:";

/// The reserved start of a payload: `0xFF "lease"`, which only a sealed payload may begin with
/// (its version byte follows).
pub const SEALED_PAYLOAD_RESERVED: [u8; 6] = [0xFF, b'l', b'e', b'a', b's', b'e'];

/// The reserved start of a result: `lease-sealed:`, which only a sealed result may begin with
/// (its version follows).
pub const SEALED_TEXT_RESERVED: &str = "lease-sealed:";

/// What a stored payload or result is, read by its envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Envelope<'a> {
    /// A plain value: it does not begin with the reserved start.
    Plain,
    /// A sealed value of version 1, well formed.
    Sealed(Sealed<'a>),
    /// It begins with the reserved start but is not a sealed value this version reads: why.
    Malformed(&'static str),
}

/// The envelope a payload's `bytes` are in.
#[must_use]
pub fn payload_envelope(bytes: &[u8]) -> Envelope<'_> {
    let Some(rest) = bytes.strip_prefix(SEALED_PAYLOAD_RESERVED.as_slice()) else {
        return Envelope::Plain;
    };
    let Some((&version, rest)) = rest.split_first() else {
        return Envelope::Malformed("it has no version");
    };
    if version != SEALED_MAGIC[6] {
        return Envelope::Malformed("its version is not 1, the only one this version reads");
    }
    let Some((&n, rest)) = rest.split_first() else {
        return Envelope::Malformed("it has no key name");
    };
    let n = usize::from(n);
    if rest.len() < n {
        return Envelope::Malformed("it is cut short in its key name");
    }
    let (name, body) = rest.split_at(n);
    let Some(key) = std::str::from_utf8(name).ok().filter(|k| is_key_name(k)) else {
        return Envelope::Malformed("its key name is not one (1 to 64 of A-Z a-z 0-9 - _ .)");
    };
    if body.len() < SEALED_NONCE_LEN + SEALED_TAG_LEN {
        return Envelope::Malformed("it is shorter than a nonce and a tag");
    }
    Envelope::Sealed(Sealed { key, body })
}

/// The envelope a result's `text` is in. A sealed result's body is the base64 text after the
/// name, not yet decoded.
#[must_use]
pub fn result_envelope(text: &str) -> Envelope<'_> {
    let Some(rest) = text.strip_prefix(SEALED_TEXT_RESERVED) else {
        return Envelope::Plain;
    };
    let Some(rest) = rest.strip_prefix("v1:") else {
        return Envelope::Malformed("its version is not v1, the only one this version reads");
    };
    let Some((key, body)) = rest.split_once(':') else {
        return Envelope::Malformed("it has no key name");
    };
    if !is_key_name(key) {
        return Envelope::Malformed("its key name is not one (1 to 64 of A-Z a-z 0-9 - _ .)");
    }
    let is_base64 = !body.is_empty()
        && body.len() % 4 == 0
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='));
    if !is_base64 {
        return Envelope::Malformed("its body is not standard base64");
    }
    // Base64 of a nonce and a tag, and of nothing shorter.
    if body.len() / 4 * 3 < SEALED_NONCE_LEN + SEALED_TAG_LEN {
        return Envelope::Malformed("it is shorter than a nonce and a tag");
    }
    Envelope::Sealed(Sealed {
        key,
        body: body.as_bytes(),
    })
}

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

/// The sealed payload `bytes` is, or `None` when they are not a well-formed one (plain, or
/// malformed: see [`payload_envelope`]).
#[must_use]
pub fn sealed_payload(bytes: &[u8]) -> Option<Sealed<'_>> {
    match payload_envelope(bytes) {
        Envelope::Sealed(sealed) => Some(sealed),
        Envelope::Plain | Envelope::Malformed(_) => None,
    }
}

/// The sealed result `text` is, or `None` when it is not a well-formed one (plain, or
/// malformed: see [`result_envelope`]).
#[must_use]
pub fn sealed_result(text: &str) -> Option<Sealed<'_>> {
    match result_envelope(text) {
        Envelope::Sealed(sealed) => Some(sealed),
        Envelope::Plain | Envelope::Malformed(_) => None,
    }
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
    /// A checkpoint's value: its associated data's job part is the job's id, a NUL and the
    /// checkpoint's name, so a value moved to another step does not open.
    Checkpoint,
    /// The job's progress text.
    Progress,
}

impl SealedKind {
    /// `payload`, `result`, `checkpoint` or `progress`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            SealedKind::Payload => "payload",
            SealedKind::Result => "result",
            SealedKind::Checkpoint => "checkpoint",
            SealedKind::Progress => "progress",
        }
    }
}

/// How a value is shown where no key is: "encrypted (key NAME)".
#[must_use]
pub fn sealed_label(key: &str) -> String {
    format!("encrypted (key {key})")
}
