//! The NATS JetStream key-value guard (feature `nats`). The value is the entry's value; its
//! fence travels with it as the message header `Lease-Fence`. A write is a publish to the
//! key's subject that JetStream takes only if the key's last revision is still the one read
//! (`Nats-Expected-Last-Subject-Sequence`, 0 for a new key), read and decided again on a
//! conflict. A delete is the bucket's own delete marker (`KV-Operation: DEL`), carrying the
//! fence, so a fence never goes down.

use async_nats::HeaderMap;
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::kv::{Config, Store};
use async_nats::jetstream::stream::LastRawMessageErrorKind;
use async_trait::async_trait;
use bytes::Bytes;
use lease_domain::{Fence, decide_guard};

use crate::value::{GuardKey, Guarded, PutOptions, ValueGuard, no_expiry};
use crate::{Admission, GuardError, counted_in};

/// The header that carries an entry's fence.
pub const FENCE_HEADER: &str = "Lease-Fence";
/// JetStream's header of the revision a publish expects the key to be at.
const EXPECTED: &str = "Nats-Expected-Last-Subject-Sequence";
/// The key-value bucket's header that marks a delete.
const OPERATION: &str = "KV-Operation";

/// How many times a write reads and decides again after another writer changed the key.
const ROUNDS: usize = 64;

/// The guard over one key-value bucket.
#[derive(Clone)]
pub struct NatsGuard {
    store: Store,
    js: async_nats::jetstream::Context,
}

impl std::fmt::Debug for NatsGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsGuard")
            .field("bucket", &self.store.name)
            .finish_non_exhaustive()
    }
}

fn unavailable<E: std::error::Error + Send + Sync + 'static>(
    what: &str,
) -> impl FnOnce(E) -> GuardError + '_ {
    move |e| GuardError::unavailable(format!("NATS {what}: {e}"), e)
}

/// What a key's last message says: the fence, whether it is a delete, and its revision.
struct Last {
    fence: Option<Fence>,
    deleted: bool,
    revision: u64,
    value: Bytes,
}

impl NatsGuard {
    /// Connects to `nats://HOST:PORT/BUCKET` and opens the bucket (made by `install`).
    ///
    /// # Errors
    /// [`GuardError::Unavailable`] when the server or the bucket cannot be reached.
    pub async fn connect(url: &str) -> Result<Self, GuardError> {
        Self::connect_with_timeout(url, std::time::Duration::from_secs(10)).await
    }

    /// [`NatsGuard::connect`], waiting at most `timeout` for each answer of the server
    /// (10 s by default); a write whose answer does not come is `Indeterminate`.
    ///
    /// # Errors
    /// As [`NatsGuard::connect`].
    pub async fn connect_with_timeout(
        url: &str,
        timeout: std::time::Duration,
    ) -> Result<Self, GuardError> {
        let (server, bucket) = split(url)?;
        let client = async_nats::ConnectOptions::new()
            .request_timeout(Some(timeout))
            .connect(&server)
            .await
            .map_err(unavailable("connection"))?;
        let mut js = async_nats::jetstream::new(client);
        js.set_timeout(timeout);
        let store = js.get_key_value(bucket.clone()).await.map_err(|e| {
            GuardError::unavailable(
                format!("NATS bucket {bucket}: {e}; make it with `lease guard install`"),
                e,
            )
        })?;
        Ok(Self { store, js })
    }

    /// Makes the bucket at `nats://HOST:PORT/BUCKET` if it does not exist (one revision of
    /// history per key, no expiry: a fence must never go away). Returns whether it made it.
    ///
    /// # Errors
    /// [`GuardError::Unavailable`] when the server cannot make it.
    pub async fn install(url: &str) -> Result<bool, GuardError> {
        let (server, bucket) = split(url)?;
        let client = async_nats::connect(&server)
            .await
            .map_err(unavailable("connection"))?;
        let js = async_nats::jetstream::new(client);
        if js.get_key_value(bucket.clone()).await.is_ok() {
            return Ok(false);
        }
        js.create_key_value(Config {
            bucket: bucket.clone(),
            description: "values guarded by lease fences".into(),
            history: 1,
            ..Config::default()
        })
        .await
        .map_err(unavailable("bucket"))?;
        Ok(true)
    }

    fn subject(&self, key: &GuardKey) -> Result<String, GuardError> {
        let k = key.as_str();
        let valid = !k.starts_with('.')
            && !k.ends_with('.')
            && k.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-/_=.".contains(&b));
        if !valid {
            return Err(GuardError::InvalidKey(
                "a NATS key is made of A-Z, a-z, 0-9 and -/_=. and does not start or end with \
                 a dot"
                    .into(),
            ));
        }
        Ok(format!("{}{k}", self.store.prefix))
    }

    async fn last(&self, subject: &str) -> Result<Option<Last>, GuardError> {
        match self
            .store
            .stream
            .get_last_raw_message_by_subject(subject)
            .await
        {
            Ok(message) => {
                let fence = message
                    .headers
                    .get(FENCE_HEADER)
                    .map(|v| parse_fence(v.as_str(), subject))
                    .transpose()?;
                let deleted = message
                    .headers
                    .get(OPERATION)
                    .is_some_and(|op| matches!(op.as_str(), "DEL" | "PURGE"));
                Ok(Some(Last {
                    fence,
                    deleted,
                    revision: message.sequence,
                    value: message.payload,
                }))
            }
            Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(None),
            Err(e) => Err(GuardError::unavailable(
                format!("NATS read of {subject}: {e}"),
                e,
            )),
        }
    }

    async fn write(
        &self,
        key: &GuardKey,
        value: Bytes,
        fence: Fence,
        delete: bool,
    ) -> Result<Admission, GuardError> {
        let subject = self.subject(key)?;
        for _ in 0..ROUNDS {
            let last = self.last(&subject).await?;
            let (current, revision) = last.as_ref().map_or((None, 0), |l| (l.fence, l.revision));
            if let Err(refused) = decide_guard(current, fence) {
                return Ok(counted_in("nats", Err(refused)));
            }
            let mut headers = HeaderMap::new();
            headers.insert(EXPECTED, revision.to_string().as_str());
            headers.insert(FENCE_HEADER, fence.get().to_string().as_str());
            if delete {
                headers.insert(OPERATION, "DEL");
            }
            let ack = match self
                .js
                .publish_with_headers(subject.clone(), headers, value.clone())
                .await
            {
                Ok(ack) => ack.await,
                Err(e) => return Err(GuardError::unavailable(format!("NATS publish: {e}"), e)),
            };
            match ack {
                Ok(_) => return Ok(Ok(())),
                Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => {}
                Err(e) if e.kind() == PublishErrorKind::TimedOut => {
                    return Err(GuardError::indeterminate(
                        format!("NATS did not acknowledge the write: {e}"),
                        e,
                    ));
                }
                Err(e) => {
                    return Err(GuardError::unavailable(
                        format!("NATS refused the write: {e}"),
                        e,
                    ));
                }
            }
        }
        Err(GuardError::Unavailable(
            format!("{subject} changed under every one of {ROUNDS} tries to write it"),
            None,
        ))
    }
}

/// `nats://HOST:PORT/BUCKET` as the server's address and the bucket's name.
fn split(url: &str) -> Result<(String, String), GuardError> {
    let rest = url
        .strip_prefix("nats://")
        .ok_or_else(|| GuardError::Unsupported(format!("{url} is not a nats:// URL")))?;
    match rest.split_once('/') {
        Some((server, bucket))
            if !server.is_empty() && !bucket.is_empty() && !bucket.contains('/') =>
        {
            Ok((format!("nats://{server}"), bucket.to_owned()))
        }
        _ => Err(GuardError::Unsupported(format!(
            "{url}: a NATS guard's URL is nats://HOST:PORT/BUCKET"
        ))),
    }
}

fn parse_fence(text: &str, subject: &str) -> Result<Fence, GuardError> {
    text.trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| Fence::new(n).ok())
        .ok_or_else(|| GuardError::Corrupt(format!("{subject} has {FENCE_HEADER} {text:?}")))
}

#[async_trait]
impl ValueGuard for NatsGuard {
    async fn put(
        &self,
        key: &GuardKey,
        value: &[u8],
        fence: Fence,
        options: &PutOptions,
    ) -> Result<Admission, GuardError> {
        no_expiry("nats", options)?;
        self.write(key, Bytes::copy_from_slice(value), fence, false)
            .await
    }

    async fn get(&self, key: &GuardKey) -> Result<Option<Guarded>, GuardError> {
        let subject = self.subject(key)?;
        Ok(self
            .last(&subject)
            .await?
            .filter(|l| !l.deleted)
            .map(|l| Guarded {
                // An entry written without the guard reads as fence 0.
                fence: l.fence.unwrap_or(Fence::ZERO),
                value: l.value.to_vec(),
            }))
    }

    async fn delete(&self, key: &GuardKey, fence: Fence) -> Result<Admission, GuardError> {
        self.write(key, Bytes::new(), fence, true).await
    }

    fn resource(&self) -> &'static str {
        "nats"
    }
}
