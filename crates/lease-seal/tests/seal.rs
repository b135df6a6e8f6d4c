//! Sealing and opening payloads and results: a round trip under one key and under a key file's
//! keys, a ciphertext bound to its job and kind, and every way a value does not open told by
//! name, never with a key or a plaintext in the message.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use lease_domain::{sealed_payload, sealed_result};
use lease_seal::{Keyring, SealError, open_payload, open_result};

const SECRET: &[u8] = b"{\"to\": \"alice@example.com\", \"token\": \"s3cr3t\"}";

fn key(byte: u8) -> String {
    STANDARD.encode([byte; 32])
}

fn keyring(lines: &[(&str, u8)]) -> Keyring {
    let text: String = lines
        .iter()
        .map(|(name, byte)| format!("{name}={}\n", key(*byte)))
        .collect();
    Keyring::parse(&text, "keys.txt").unwrap()
}

/// The message of `e`, checked to hold no key and no plaintext.
fn told(e: &SealError) -> String {
    let text = e.to_string();
    for byte in [1u8, 2, 3] {
        assert!(!text.contains(&key(byte)), "{text}");
    }
    assert!(!text.contains("alice"), "{text}");
    text
}

#[test]
fn a_payload_sealed_under_one_key_opens_with_it_and_shows_no_plaintext() {
    let keys = Keyring::single(&key(1)).unwrap();
    assert!(keys.sealing_key().starts_with("key-"));
    assert_eq!(keys.sealing_key().len(), "key-".len() + 8);
    let sealed = keys.seal_payload("job-1", SECRET).unwrap();
    assert!(
        !sealed.windows(5).any(|w| w == b"alice"),
        "no plaintext in the sealed bytes"
    );
    assert_eq!(sealed_payload(&sealed).unwrap().key, keys.sealing_key());
    assert_eq!(
        open_payload(Some(&keys), false, "job-1", &sealed).unwrap(),
        SECRET
    );
    // Two seals of one value differ (a fresh nonce each).
    assert_ne!(sealed, keys.seal_payload("job-1", SECRET).unwrap());
}

#[test]
fn a_plain_payload_or_result_passes_through_with_or_without_keys() {
    let keys = Keyring::single(&key(1)).unwrap();
    assert_eq!(open_payload(None, false, "j", b"plain").unwrap(), b"plain");
    assert_eq!(
        open_payload(Some(&keys), false, "j", b"plain").unwrap(),
        b"plain"
    );
    assert_eq!(open_result(None, false, "j", "done").unwrap(), "done");
}

#[test]
fn a_result_sealed_is_text_and_opens_with_its_key() {
    let keys = keyring(&[("ops", 2)]);
    let sealed = keys.seal_result("job-1", "alice's report").unwrap();
    assert!(sealed.starts_with("lease-sealed:v1:ops:"), "{sealed}");
    assert!(!sealed.contains("alice"));
    assert_eq!(sealed_result(&sealed).unwrap().key, "ops");
    assert_eq!(
        open_result(Some(&keys), false, "job-1", &sealed).unwrap(),
        "alice's report"
    );
}

#[test]
fn rotation_seals_with_the_last_key_and_opens_with_any() {
    let old = keyring(&[("2025", 1)]);
    let sealed_before = old.seal_payload("j", SECRET).unwrap();
    let rotated = keyring(&[("2025", 1), ("2026", 2)]);
    assert_eq!(rotated.sealing_key(), "2026");
    assert_eq!(rotated.names(), ["2025", "2026"]);
    let sealed_after = rotated.seal_payload("j", SECRET).unwrap();
    assert_eq!(sealed_payload(&sealed_after).unwrap().key, "2026");
    assert_eq!(
        open_payload(Some(&rotated), false, "j", &sealed_before).unwrap(),
        SECRET
    );
    assert_eq!(
        open_payload(Some(&rotated), false, "j", &sealed_after).unwrap(),
        SECRET
    );
}

#[test]
fn a_ciphertext_moved_to_another_job_or_kind_does_not_open() {
    let keys = keyring(&[("k", 1)]);
    let sealed = keys.seal_payload("job-1", SECRET).unwrap();
    let moved = open_payload(Some(&keys), false, "job-2", &sealed).unwrap_err();
    assert!(matches!(moved, SealError::WontOpen { .. }), "{moved:?}");
    assert!(told(&moved).contains("job job-2"));
    // A result's body put in a payload's envelope.
    let result = keys.seal_result("job-1", "alice").unwrap();
    let body = STANDARD
        .decode(sealed_result(&result).unwrap().body)
        .unwrap();
    let mut as_payload = lease_domain::sealed_payload_header("k");
    as_payload.extend_from_slice(&body);
    let e = open_payload(Some(&keys), false, "job-1", &as_payload).unwrap_err();
    assert!(matches!(e, SealError::WontOpen { .. }), "{e:?}");
}

#[test]
fn a_changed_byte_does_not_open() {
    let keys = keyring(&[("k", 1)]);
    let mut sealed = keys.seal_payload("j", SECRET).unwrap();
    let last = sealed.len() - 1;
    sealed[last] ^= 1;
    let e = open_payload(Some(&keys), false, "j", &sealed).unwrap_err();
    assert!(matches!(e, SealError::WontOpen { .. }), "{e:?}");
}

#[test]
fn a_sealed_value_without_its_key_is_an_error_naming_the_key() {
    let keys = keyring(&[("k2026", 1)]);
    let sealed = keys.seal_payload("j", SECRET).unwrap();
    let none = open_payload(None, false, "j", &sealed).unwrap_err();
    assert!(told(&none).contains("key k2026"), "{none}");
    assert!(told(&none).contains("LEASE_PAYLOAD_KEY"), "{none}");
    let other = keyring(&[("other", 2)]);
    let unknown = open_payload(Some(&other), false, "j", &sealed).unwrap_err();
    assert!(matches!(unknown, SealError::UnknownKey { .. }));
    assert!(told(&unknown).contains("k2026") && told(&unknown).contains("other"));
    // Another key under the same name.
    let impostor = keyring(&[("k2026", 3)]);
    let wrong = open_payload(Some(&impostor), false, "j", &sealed).unwrap_err();
    assert!(matches!(wrong, SealError::WontOpen { .. }), "{wrong:?}");
    told(&wrong);
}

#[test]
fn bad_keys_are_refused_by_where_they_came_from_without_showing_them() {
    let short = STANDARD.encode([1u8; 16]);
    let e = Keyring::single(&short).unwrap_err();
    assert!(
        told(&e).contains("LEASE_PAYLOAD_KEY is 16 bytes, not 32"),
        "{e}"
    );
    assert!(!e.to_string().contains(&short));
    let e = Keyring::single("not base64 at all!").unwrap_err();
    assert!(told(&e).contains("not standard base64"), "{e}");
    let e = Keyring::parse(&format!("# keys\n\nok={}\nbroken\n", key(1)), "k.txt").unwrap_err();
    assert!(
        told(&e).contains("k.txt, line 4) is not NAME=BASE64"),
        "{e}"
    );
    let e = Keyring::parse(&format!("a={}\na={}\n", key(1), key(2)), "k.txt").unwrap_err();
    assert!(told(&e).contains("names key a a second time"), "{e}");
    let e = Keyring::parse(&format!("bad name={}\n", key(1)), "k.txt").unwrap_err();
    assert!(told(&e).contains("names its key badly"), "{e}");
    let e = Keyring::parse("# nothing\n", "k.txt").unwrap_err();
    assert!(told(&e).contains("holds no key"), "{e}");
    assert!(!format!("{:?}", keyring(&[("k", 1)])).contains(&key(1)));
}

#[test]
fn a_malformed_sealed_result_is_told_so() {
    let keys = keyring(&[("k", 1)]);
    let e = open_result(Some(&keys), false, "j", "lease-sealed:v1:k:AAA").unwrap_err();
    assert!(matches!(e, SealError::Malformed { .. }), "{e:?}");
}

/// The envelopes' starts are reserved: a payload that begins with `0xFF "lease"` or a result
/// that begins with `lease-sealed:` but is not a well-formed envelope of version 1 is refused
/// saying why, never handed on as plain data (with or without keys).
#[test]
fn a_crafted_envelope_of_an_unknown_version_or_cut_short_fails_clearly() {
    let keys = keyring(&[("k", 1)]);
    let sealed = keys.seal_payload("j", SECRET).unwrap();
    let mut later = sealed.clone();
    later[6] = 2;
    // The header (magic, length, the one-letter name) and 20 bytes: less than a nonce and a tag.
    let cut = &sealed[..9 + 20];
    let bare = b"\xFFlease".to_vec();
    for (crafted, why) in [
        (later.as_slice(), "version"),
        (cut, "shorter than a nonce and a tag"),
        (bare.as_slice(), "no version"),
    ] {
        for given in [None, Some(&keys)] {
            let e = open_payload(given, false, "j", crafted).unwrap_err();
            assert!(
                matches!(e, SealError::Malformed { .. }) && told(&e).contains(why),
                "{e}"
            );
        }
    }
    let result = keys.seal_result("j", "done").unwrap();
    let v2 = result.replacen("lease-sealed:v1:", "lease-sealed:v2:", 1);
    for crafted in [v2.as_str(), "lease-sealed:", "lease-sealed:v1:k:AAAA"] {
        let e = open_result(Some(&keys), false, "j", crafted).unwrap_err();
        assert!(matches!(e, SealError::Malformed { .. }), "{crafted}: {e:?}");
    }
}

/// Where sealed values are required, a plain payload or result (one swapped in by whoever can
/// enqueue or write the store) is refused naming the job, and sealed ones still open.
#[test]
fn a_plain_value_is_refused_where_sealed_values_are_required() {
    let keys = keyring(&[("k", 1)]);
    let e = open_payload(Some(&keys), true, "swapped", b"to=mallory").unwrap_err();
    assert!(matches!(e, SealError::NotSealed { .. }), "{e:?}");
    let said = told(&e);
    assert!(
        said.contains("swapped") && said.contains("LEASE_REQUIRE_SEALED"),
        "{said}"
    );
    let e = open_result(Some(&keys), true, "swapped", "forged").unwrap_err();
    assert!(matches!(e, SealError::NotSealed { .. }), "{e:?}");
    let sealed = keys.seal_payload("j", SECRET).unwrap();
    assert_eq!(
        open_payload(Some(&keys), true, "j", &sealed).unwrap(),
        SECRET
    );
    let result = keys.seal_result("j", "done").unwrap();
    assert_eq!(
        open_result(Some(&keys), true, "j", &result).unwrap(),
        "done"
    );
}

/// Node's own `crypto`, following docs/ENCRYPTION.md and nothing of this crate: opens
/// `sealed` (base64) as job `job`'s payload under `key` (base64) and prints the plaintext;
/// then seals `plain` as the same job's payload under key name `name` and prints it (base64).
const NODE_FOLLOWS_THE_FORMAT: &str = r#"
const crypto = require('node:crypto');
const [sealedB64, keyB64, job, name, plain] = process.argv.slice(1);
const key = Buffer.from(keyB64, 'base64');
const magic = Buffer.from([0xff, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x01]);
const aad = (k) => Buffer.from(`lease-sealed:v1:${k}:payload:${job}`);
// Open.
const sealed = Buffer.from(sealedB64, 'base64');
if (!sealed.subarray(0, 7).equals(magic)) throw new Error('not sealed');
const n = sealed[7];
const keyName = sealed.subarray(8, 8 + n).toString('ascii');
const nonce = sealed.subarray(8 + n, 20 + n);
const tag = sealed.subarray(sealed.length - 16);
const ct = sealed.subarray(20 + n, sealed.length - 16);
const d = crypto.createDecipheriv('aes-256-gcm', key, nonce);
d.setAAD(aad(keyName));
d.setAuthTag(tag);
process.stdout.write(Buffer.concat([d.update(ct), d.final()]).toString() + '\n');
// Seal.
const iv = crypto.randomBytes(12);
const c = crypto.createCipheriv('aes-256-gcm', key, iv);
c.setAAD(aad(name));
const body = Buffer.concat([c.update(Buffer.from(plain)), c.final(), c.getAuthTag()]);
const header = Buffer.concat([magic, Buffer.from([name.length]), Buffer.from(name, 'ascii')]);
process.stdout.write(Buffer.concat([header, iv, body]).toString('base64') + '\n');
"#;

#[test]
fn the_documented_format_is_followed_by_another_language() {
    let keys = keyring(&[("node", 1)]);
    let sealed = keys.seal_payload("job-7", SECRET).unwrap();
    let out = std::process::Command::new("node")
        .args(["-e", NODE_FOLLOWS_THE_FORMAT, "--"])
        .arg(STANDARD.encode(&sealed))
        .arg(key(1))
        .args(["job-7", "node", "sealed by node"])
        .output()
        .expect("node runs (the TypeScript client's tests need it too)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = String::from_utf8(out.stdout).unwrap();
    let mut lines = out.lines();
    assert_eq!(
        lines.next().unwrap().as_bytes(),
        SECRET,
        "node opened Rust's seal"
    );
    let from_node = STANDARD.decode(lines.next().unwrap()).unwrap();
    assert_eq!(
        open_payload(Some(&keys), false, "job-7", &from_node).unwrap(),
        b"sealed by node",
        "Rust opened node's seal"
    );
}
