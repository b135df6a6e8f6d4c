//! The object-store guard (feature `object-store`): S3 and S3-compatible servers, GCS and
//! Azure through the `object_store` crate. The object is the value; its fence is the user
//! metadata `lease-fence` (and the writer's job `lease-job`); a write is a conditional put on
//! the object's ETag (`If-Match`, or `If-None-Match: *` for a new object), read and decided
//! again whenever the condition fails, so the check and the write are one atomic step.

use std::sync::Arc;

use async_trait::async_trait;
use lease_domain::{Fence, decide_guard};
use object_store::path::Path;
use object_store::{
    Attribute, AttributeValue, Attributes, GetOptions, ObjectStore, PutMode, PutOptions as Put,
    PutPayload, UpdateVersion,
};

use crate::value::{GuardKey, Guarded, PutOptions, ValueGuard, no_expiry};
use crate::{Admission, GuardError, counted_in};

/// The user metadata that holds an object's fence.
pub const FENCE_METADATA: &str = "lease-fence";
/// The user metadata that holds the job of the holder that wrote the object.
pub const JOB_METADATA: &str = "lease-job";
/// The user metadata that marks a deleted value: a zero-byte object that keeps the fence.
pub const DELETED_METADATA: &str = "lease-deleted";

/// How many times a write reads and decides again after another writer changed the object
/// between its read and its conditional put.
const ROUNDS: usize = 64;

/// The guard over an object store, under a prefix.
#[derive(Debug, Clone)]
pub struct ObjectGuard {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    resource: &'static str,
}

/// What the object at a key holds: its fence and how to update it, or nothing.
struct Seen {
    fence: Option<Fence>,
    mode: PutMode,
}

fn metadata(attributes: &Attributes, name: &'static str) -> Option<String> {
    attributes
        .get(&Attribute::Metadata(name.into()))
        .map(|v| v.as_ref().to_owned())
}

fn failure(what: &str, e: object_store::Error) -> GuardError {
    GuardError::unavailable(format!("the object store could not {what}: {e}"), e)
}

impl ObjectGuard {
    /// A guard over `store`, whose keys live under `prefix`; `resource` names it in metrics
    /// and messages (`s3`, `gcs`, `azure`).
    #[must_use]
    pub fn new(store: Arc<dyn ObjectStore>, prefix: Path, resource: &'static str) -> Self {
        Self {
            store,
            prefix,
            resource,
        }
    }

    /// Opens `s3://BUCKET[/PREFIX]` with the standard `AWS_*` variables (`AWS_ENDPOINT_URL`
    /// for a compatible server; plain `http://` endpoints are allowed), `gs://BUCKET[/PREFIX]`
    /// with `GOOGLE_*`, or `az://CONTAINER[/PREFIX]` with `AZURE_*`.
    ///
    /// # Errors
    /// [`GuardError::Unsupported`] for another scheme; [`GuardError::Unavailable`] when the
    /// store cannot be configured.
    pub fn open(url: &str) -> Result<Self, GuardError> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| GuardError::Unsupported(format!("{url} is not a URL")))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let bucket_url = format!("{scheme}://{bucket}");
        let prefix = Path::parse(prefix)
            .map_err(|e| GuardError::InvalidKey(format!("the prefix {prefix:?}: {e}")))?;
        let (store, resource): (Arc<dyn ObjectStore>, &'static str) = match scheme {
            "s3" => {
                let endpoint = std::env::var("AWS_ENDPOINT_URL").unwrap_or_default();
                let store = object_store::aws::AmazonS3Builder::from_env()
                    .with_url(bucket_url)
                    .with_allow_http(endpoint.starts_with("http://"))
                    .build()
                    .map_err(|e| failure("be configured", e))?;
                (Arc::new(store), "s3")
            }
            "gs" => {
                let store = object_store::gcp::GoogleCloudStorageBuilder::from_env()
                    .with_url(bucket_url)
                    .build()
                    .map_err(|e| failure("be configured", e))?;
                (Arc::new(store), "gcs")
            }
            "az" | "azure" => {
                let store = object_store::azure::MicrosoftAzureBuilder::from_env()
                    .with_url(bucket_url)
                    .build()
                    .map_err(|e| failure("be configured", e))?;
                (Arc::new(store), "azure")
            }
            other => {
                return Err(GuardError::Unsupported(format!(
                    "{other}:// is not an object store this guard knows (s3, gs, az)"
                )));
            }
        };
        Ok(Self::new(store, prefix, resource))
    }

    fn path(&self, key: &GuardKey) -> Result<Path, GuardError> {
        let relative = Path::parse(key.as_str()).map_err(|e| {
            GuardError::InvalidKey(format!("an object key must be a clean relative path: {e}"))
        })?;
        if relative.as_ref() != key.as_str() {
            return Err(GuardError::InvalidKey(format!(
                "an object key must be a clean relative path (it would be stored as {relative:?})"
            )));
        }
        Ok(self.prefix.parts().chain(relative.parts()).collect())
    }

    async fn seen(&self, path: &Path) -> Result<(Seen, Option<Attributes>), GuardError> {
        let head = GetOptions {
            head: true,
            ..GetOptions::default()
        };
        match self.store.get_opts(path, head).await {
            Ok(found) => {
                let fence = metadata(&found.attributes, FENCE_METADATA)
                    .map(|text| parse_fence(&text, path))
                    .transpose()?;
                let mode = PutMode::Update(UpdateVersion {
                    e_tag: found.meta.e_tag.clone(),
                    version: found.meta.version.clone(),
                });
                Ok((Seen { fence, mode }, Some(found.attributes)))
            }
            Err(object_store::Error::NotFound { .. }) => Ok((
                Seen {
                    fence: None,
                    mode: PutMode::Create,
                },
                None,
            )),
            Err(e) => Err(failure("read the object's metadata", e)),
        }
    }

    /// Writes `value` under `fence` as the rule decides, retrying the read and the decision
    /// whenever another writer got in between.
    async fn write(
        &self,
        key: &GuardKey,
        value: &[u8],
        fence: Fence,
        job: Option<&str>,
        deleted: bool,
    ) -> Result<Admission, GuardError> {
        let path = self.path(key)?;
        for _ in 0..ROUNDS {
            let (seen, _) = self.seen(&path).await?;
            if let Err(refused) = decide_guard(seen.fence, fence) {
                return Ok(counted_in(self.resource, Err(refused)));
            }
            let mut attributes = Attributes::new();
            attributes.insert(
                Attribute::Metadata(FENCE_METADATA.into()),
                AttributeValue::from(fence.get().to_string()),
            );
            if let Some(job) = job {
                attributes.insert(
                    Attribute::Metadata(JOB_METADATA.into()),
                    AttributeValue::from(job.to_owned()),
                );
            }
            if deleted {
                attributes.insert(
                    Attribute::Metadata(DELETED_METADATA.into()),
                    AttributeValue::from("true"),
                );
            }
            let put = Put {
                mode: seen.mode,
                attributes,
                ..Put::default()
            };
            match self
                .store
                .put_opts(&path, PutPayload::from(value.to_vec()), put)
                .await
            {
                Ok(_) => return Ok(Ok(())),
                // Another writer changed the object since it was read: read and decide again.
                Err(
                    object_store::Error::Precondition { .. }
                    | object_store::Error::AlreadyExists { .. },
                ) => {}
                Err(object_store::Error::NotImplemented { .. }) => {
                    return Err(GuardError::Unsupported(format!(
                        "this {} store has no conditional writes, so it cannot be guarded; the \
                         guard refuses to write rather than pretend",
                        self.resource
                    )));
                }
                Err(e) => {
                    return Err(GuardError::indeterminate(
                        format!("the object store did not take the write: {e}"),
                        e,
                    ));
                }
            }
        }
        Err(GuardError::Unavailable(
            format!("{path} changed under every one of {ROUNDS} tries to write it"),
            None,
        ))
    }
}

fn parse_fence(text: &str, path: &Path) -> Result<Fence, GuardError> {
    text.trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| Fence::new(n).ok())
        .ok_or_else(|| GuardError::Corrupt(format!("{path} has {FENCE_METADATA} {text:?}")))
}

#[async_trait]
impl ValueGuard for ObjectGuard {
    async fn put(
        &self,
        key: &GuardKey,
        value: &[u8],
        fence: Fence,
        options: &PutOptions,
    ) -> Result<Admission, GuardError> {
        no_expiry(self.resource, options)?;
        self.write(key, value, fence, options.job.as_deref(), false)
            .await
    }

    async fn get(&self, key: &GuardKey) -> Result<Option<Guarded>, GuardError> {
        let path = self.path(key)?;
        let found = match self.store.get_opts(&path, GetOptions::default()).await {
            Ok(found) => found,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(failure("read the object", e)),
        };
        let attributes = found.attributes.clone();
        if metadata(&attributes, DELETED_METADATA).is_some() {
            return Ok(None);
        }
        // An object written without the guard reads as fence 0.
        let fence = metadata(&attributes, FENCE_METADATA)
            .map(|text| parse_fence(&text, &path))
            .transpose()?
            .unwrap_or(Fence::ZERO);
        let value = found
            .bytes()
            .await
            .map_err(|e| failure("read the object's body", e))?;
        Ok(Some(Guarded {
            fence,
            value: value.to_vec(),
        }))
    }

    async fn delete(&self, key: &GuardKey, fence: Fence) -> Result<Admission, GuardError> {
        // An object store cannot delete on a condition here, and a deleted object would take
        // its fence with it: the value becomes a zero-byte object marked deleted, which keeps
        // the fence.
        self.write(key, b"", fence, None, true).await
    }

    fn resource(&self) -> &'static str {
        self.resource
    }
}
