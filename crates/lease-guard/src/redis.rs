//! The Redis guard (feature `redis`, Redis 7.0 and later): a function library (`redis.lua`,
//! loaded with `FUNCTION LOAD`) holds the check and the write in one atomic call, callable from
//! any language's client with `FCALL`. The value stays a plain Redis value at its key; its
//! fence lives beside it at a key of the same hash slot, so it works on Redis Cluster.

use async_trait::async_trait;
use lease_domain::{Fence, GuardRefused};
use redis::aio::MultiplexedConnection;

use crate::value::{GuardKey, Guarded, PutOptions, ValueGuard};
use crate::{Admission, GuardError, counted_in};

/// The function library, as `FUNCTION LOAD` takes it.
pub const LIBRARY: &str = include_str!("redis.lua");

/// The library's version, as `FCALL lease_version 0` answers it; `install` replaces an older
/// one.
pub const VERSION: i64 = 1;

/// The key of `key`'s fence: in `key`'s hash slot, so one call may use both on a cluster.
/// A key with a hash tag (`{user-7}:report`) keeps its tag: `lease-fence:{user-7}:report`;
/// any other is wrapped in one: `{report}:lease-fence`.
///
/// # Errors
/// [`GuardError::InvalidKey`] for a key holding `}` outside a hash tag, whose slot no other
/// key can be sure to share.
pub fn fence_key(key: &str) -> Result<String, GuardError> {
    if hash_tag(key).is_some() {
        return Ok(format!("lease-fence:{key}"));
    }
    if key.contains('}') {
        return Err(GuardError::InvalidKey(
            "a Redis key holding '}' outside a hash tag cannot have its fence in its slot; \
             put the part that picks the slot in braces, as {tag}"
                .into(),
        ));
    }
    Ok(format!("{{{key}}}:lease-fence"))
}

/// The hash tag of a key as Redis Cluster reads it: the text between the first `{` and the
/// first `}` after it, when that text is not empty.
fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let rest = &key[open + 1..];
    let close = rest.find('}')?;
    (close > 0).then(|| &rest[..close])
}

/// The Redis guard over one connection (multiplexed: cheap to clone, shared by every call).
#[derive(Clone)]
pub struct RedisGuard {
    connection: MultiplexedConnection,
}

impl std::fmt::Debug for RedisGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisGuard").finish_non_exhaustive()
    }
}

fn unavailable(what: &str) -> impl FnOnce(redis::RedisError) -> GuardError + '_ {
    move |e| GuardError::unavailable(format!("Redis {what}: {e}"), e)
}

/// A write's error: lost on the way back (the write may have run) or refused before it ran.
fn write_failed(e: redis::RedisError) -> GuardError {
    if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() {
        GuardError::indeterminate(format!("Redis did not answer the write: {e}"), e)
    } else {
        GuardError::unavailable(format!("Redis refused the write: {e}"), e)
    }
}

impl RedisGuard {
    /// Connects to `url` (`redis://HOST:PORT[/DB]`, `rediss://` for TLS).
    ///
    /// # Errors
    /// [`GuardError::Unavailable`] when the URL is malformed or the server cannot be reached.
    pub async fn connect(url: &str) -> Result<Self, GuardError> {
        let client = redis::Client::open(url).map_err(unavailable("URL"))?;
        let connection = client
            .get_multiplexed_async_connection()
            .await
            .map_err(unavailable("connection"))?;
        Ok(Self { connection })
    }

    /// Loads the function library, replacing an older version of it; does nothing when this
    /// version is loaded already. Returns whether it loaded.
    ///
    /// # Errors
    /// [`GuardError::Unavailable`] when the server cannot take it (Redis before 7.0 has no
    /// functions).
    pub async fn install(&self) -> Result<bool, GuardError> {
        let mut conn = self.connection.clone();
        let loaded: Result<i64, _> = redis::cmd("FCALL")
            .arg("lease_version")
            .arg(0)
            .query_async(&mut conn)
            .await;
        if loaded.is_ok_and(|v| v >= VERSION) {
            return Ok(false);
        }
        redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(LIBRARY)
            .query_async::<String>(&mut conn)
            .await
            .map_err(unavailable("FUNCTION LOAD"))?;
        Ok(true)
    }

    /// Calls one of the library's functions on `key` and its fence key.
    async fn call(
        &self,
        function: &str,
        key: &GuardKey,
        fence: Fence,
        args: &[&[u8]],
    ) -> Result<Admission, GuardError> {
        let fence_key = fence_key(key.as_str())?;
        let mut command = redis::cmd("FCALL");
        command
            .arg(function)
            .arg(2)
            .arg(key.as_str())
            .arg(&fence_key)
            .arg(fence.get());
        for arg in args {
            command.arg(*arg);
        }
        let mut conn = self.connection.clone();
        let (admitted, fence_text): (i64, String) =
            command
                .query_async(&mut conn)
                .await
                .map_err(|e| match e.kind() {
                    redis::ErrorKind::Server(_) if e.to_string().contains("Function not found") => {
                        GuardError::Unavailable(
                            "the lease function library is not loaded: run `lease guard install` \
                         with this URL"
                                .into(),
                            Some(Box::new(e)),
                        )
                    }
                    _ => write_failed(e),
                })?;
        let current = parse_fence(&fence_text)?;
        let admission = if admitted == 1 {
            Ok(())
        } else {
            Err(GuardRefused {
                presented: fence,
                current,
            })
        };
        Ok(counted_in("redis", admission))
    }

    /// `HSET key field value ...` under `fence`, in one atomic call.
    ///
    /// # Errors
    /// As [`ValueGuard::put`].
    pub async fn hset(
        &self,
        key: &GuardKey,
        fields: &[(&str, &[u8])],
        fence: Fence,
    ) -> Result<Admission, GuardError> {
        if fields.is_empty() {
            return Err(GuardError::Unsupported(
                "HSET needs at least one field".into(),
            ));
        }
        let mut args: Vec<&[u8]> = Vec::with_capacity(fields.len() * 2);
        for (field, value) in fields {
            args.push(field.as_bytes());
            args.push(value);
        }
        self.call("lease_hset", key, fence, &args).await
    }

    /// The fence recorded for `key`, if any (whatever its value holds).
    ///
    /// # Errors
    /// [`GuardError::Unavailable`] when Redis cannot be read.
    pub async fn fence(&self, key: &GuardKey) -> Result<Option<Fence>, GuardError> {
        let mut conn = self.connection.clone();
        let text: Option<String> = redis::cmd("GET")
            .arg(fence_key(key.as_str())?)
            .query_async(&mut conn)
            .await
            .map_err(unavailable("GET"))?;
        text.as_deref().map(parse_fence).transpose()
    }
}

fn parse_fence(text: &str) -> Result<Fence, GuardError> {
    text.parse::<u64>()
        .ok()
        .and_then(|n| Fence::new(n).ok())
        .ok_or_else(|| GuardError::Corrupt(format!("a Redis fence key holds {text:?}")))
}

#[async_trait]
impl ValueGuard for RedisGuard {
    async fn put(
        &self,
        key: &GuardKey,
        value: &[u8],
        fence: Fence,
        options: &PutOptions,
    ) -> Result<Admission, GuardError> {
        let expiry = options
            .expiry
            .map(|d| {
                let ms = d.as_millis();
                if ms == 0 {
                    Err(GuardError::Unsupported(
                        "an expiry must be at least a millisecond".into(),
                    ))
                } else {
                    Ok(ms.to_string())
                }
            })
            .transpose()?;
        let mut args: Vec<&[u8]> = vec![value];
        if let Some(ms) = &expiry {
            args.push(ms.as_bytes());
        }
        self.call("lease_set", key, fence, &args).await
    }

    async fn get(&self, key: &GuardKey) -> Result<Option<Guarded>, GuardError> {
        let mut conn = self.connection.clone();
        // One command reads both keys at one instant.
        let (value, fence): (Option<Vec<u8>>, Option<String>) = redis::cmd("MGET")
            .arg(key.as_str())
            .arg(fence_key(key.as_str())?)
            .query_async(&mut conn)
            .await
            .map_err(unavailable("MGET"))?;
        let Some(value) = value else {
            return Ok(None);
        };
        // A value another client wrote without a fence reads as fence 0.
        let fence = fence.as_deref().map(parse_fence).transpose()?;
        Ok(Some(Guarded {
            fence: fence.unwrap_or(Fence::ZERO),
            value,
        }))
    }

    async fn delete(&self, key: &GuardKey, fence: Fence) -> Result<Admission, GuardError> {
        self.call("lease_del", key, fence, &[]).await
    }

    fn resource(&self) -> &'static str {
        "redis"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_key_shares_its_value_key_s_hash_slot() {
        assert_eq!(fence_key("report").unwrap(), "{report}:lease-fence");
        assert_eq!(
            fence_key("{user-7}:report").unwrap(),
            "lease-fence:{user-7}:report"
        );
        assert_eq!(fence_key("a{b").unwrap(), "{a{b}:lease-fence");
        assert_eq!(hash_tag("{a{b}:lease-fence"), Some("a{b"));
        // An empty tag is no tag: the whole key picks the slot.
        assert!(fence_key("{}x").is_err());
        assert!(fence_key("a}b").is_err());
        for key in ["report", "{user-7}:report", "a{b", "x{y}z{w}"] {
            let fenced = fence_key(key).unwrap();
            assert_eq!(
                hash_tag(&fenced).unwrap_or(&fenced),
                hash_tag(key).unwrap_or(key),
                "{key} -> {fenced}"
            );
        }
    }
}
