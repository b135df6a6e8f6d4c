//! The lease store port over HTTP: [`HttpLeaseStore`] is one more `LeaseStore`, talking to
//! `lease serve` with an API key, so a worker (the `lease` command, `lease work`, or any code
//! written against the port) runs against a remote queue with a URL and a key.
//!
//! Every lease this client is granted comes with a secret lease token; the client keeps it
//! (by job and fence) and sends it with that lease's writes. A lease granted to another
//! process has no token here, and its writes are refused by the server.

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

mod answers;
mod gather;
mod queues;
mod writes;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use lease_domain::{
    Command, EnqueueSpec, Fence, JobId, KeptCheckpoint, Outcome, Owner, QueueName, Status,
    Timestamp,
};
use lease_ports::{
    Applied, ClaimNext, JobRecord, Lease, LeaseStore, ListFilter, StatsRow, StoreError,
};
use serde_json::{Value, json};

use crate::answers::{Answer, path, write_refused};

/// An error and every error under it, as one line (a TLS failure is three levels down).
fn chain(err: &dyn std::error::Error) -> String {
    let mut line = err.to_string();
    let mut cause = err.source();
    while let Some(e) = cause {
        line.push_str(": ");
        line.push_str(&e.to_string());
        cause = e.source();
    }
    line
}

/// How the client talks to the server.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Send the caller's `now` with every request (the server must be started to trust
    /// caller clocks, `lease serve --client-clock`); off by default: the server's clock decides.
    pub send_caller_time: bool,
    /// How long one request may take, beyond any long poll (default 30 s).
    pub timeout: Duration,
    /// A CA certificate (PEM) to trust for an `https://` server besides the system's.
    pub ca_cert: Option<Vec<u8>>,
    /// The W3C `traceparent` to send with each request: given the current `tracing` span (a
    /// worker's store call inside its attempt), the context the server's span of the request
    /// joins; `lease-otel`'s `traceparent` in a process that exports its spans (default none:
    /// no header).
    pub traceparent: Option<Traceparent>,
}

/// How a request learns the trace it is sent in ([`ClientOptions::traceparent`]).
#[derive(Clone)]
pub struct Traceparent(pub std::sync::Arc<TraceparentFn>);

/// What a [`Traceparent`] calls: the current span's `traceparent`, if it is exported.
pub type TraceparentFn = dyn Fn(&tracing::Span) -> Option<String> + Send + Sync;

impl std::fmt::Debug for Traceparent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Traceparent(..)")
    }
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            send_caller_time: false,
            timeout: Duration::from_secs(30),
            ca_cert: None,
            traceparent: None,
        }
    }
}

/// A lease store reached through `lease serve`.
pub struct HttpLeaseStore {
    link: Arc<Link>,
    /// The holders' writes on their way, many to a request.
    gather: Arc<gather::Gather>,
    /// The token of each lease this client holds: per job, its newest fence's (an older
    /// fence's token can never be used again), until that lease is completed, failed or
    /// released through this client.
    tokens: Mutex<HashMap<String, (u64, String)>>,
}

impl std::fmt::Debug for HttpLeaseStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpLeaseStore")
            .field("base", &self.link.base)
            .field("options", &self.link.options)
            .finish_non_exhaustive()
    }
}

impl HttpLeaseStore {
    /// A client of the server at `base` (`http://host:port`), authenticating with `key`.
    ///
    /// # Errors
    /// [`StoreError::Incompatible`] for a URL that is not `http://`, or a key that cannot be a
    /// header value.
    pub fn new(base: &str, key: &str, options: ClientOptions) -> Result<Self, StoreError> {
        let base = base.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(StoreError::Incompatible {
                path: base,
                reason: "the server URL must start with http:// or https://"
                    .to_owned()
                    .into(),
            });
        }
        if key.is_empty() || key.bytes().any(|b| !b.is_ascii_graphic()) {
            return Err(StoreError::Incompatible {
                path: base,
                reason: "the API key is empty or holds characters a key never has"
                    .to_owned()
                    .into(),
            });
        }
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .https_only(base.starts_with("https://"))
            .timeout(options.timeout + Duration::from_secs(25));
        if let Some(pem) = &options.ca_cert {
            let ca = reqwest::Certificate::from_pem(pem).map_err(|e| StoreError::Incompatible {
                path: base.clone(),
                reason: lease_ports::Detail::caused_by(
                    format!("the CA certificate is not a PEM certificate: {e}"),
                    e,
                ),
            })?;
            builder = builder.add_root_certificate(ca);
        }
        let http = builder.build().map_err(|e| {
            StoreError::Unavailable(lease_ports::Detail::caused_by(
                format!("no HTTP client: {e}"),
                e,
            ))
        })?;
        Ok(Self {
            link: Arc::new(Link {
                base,
                authorization: format!("Bearer {key}"),
                http,
                options,
            }),
            gather: Arc::default(),
            tokens: Mutex::default(),
        })
    }

    fn now(&self, now: Timestamp) -> Option<f64> {
        self.link.options.send_caller_time.then(|| now.get())
    }

    fn token(&self, job: &JobId, fence: Fence) -> Option<String> {
        self.tokens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(job.as_str())
            .filter(|(held, _)| *held == fence.get())
            .map(|(_, token)| token.clone())
    }

    fn keep_token(&self, job: &JobId, fence: Fence, token: &str) {
        let mut tokens = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        match tokens.get_mut(job.as_str()) {
            // A newer fence of the job makes the older token useless: it is replaced.
            Some(held) if held.0 <= fence.get() => *held = (fence.get(), token.to_owned()),
            Some(_) => {}
            None => {
                tokens.insert(job.as_str().to_owned(), (fence.get(), token.to_owned()));
            }
        }
    }

    /// Forgets the token of a lease that ended through this client.
    fn forget_token(&self, job: &JobId, fence: Fence) {
        let mut tokens = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        if tokens
            .get(job.as_str())
            .is_some_and(|(held, _)| *held == fence.get())
        {
            tokens.remove(job.as_str());
        }
    }

    /// Sends one request, in the trace of the current span (see [`Link::send`]).
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
        token: Option<&str>,
        writes: bool,
    ) -> Result<Answer, StoreError> {
        let traceparent = self.traceparent();
        let body = body.map(|body| body.to_string());
        self.link
            .send(method, path, body, token, writes, traceparent.as_deref())
            .await
    }

    /// The `traceparent` of the current span, when the options say how to read it.
    fn traceparent(&self) -> Option<String> {
        self.link
            .options
            .traceparent
            .as_ref()
            .and_then(|traced| (traced.0)(&tracing::Span::current()))
    }

    async fn post(
        &self,
        path: &str,
        body: Value,
        token: Option<&str>,
    ) -> Result<Answer, StoreError> {
        self.send(reqwest::Method::POST, path, Some(body), token, true)
            .await
    }

    async fn get(&self, path: &str) -> Result<Answer, StoreError> {
        self.send(reqwest::Method::GET, path, None, None, false)
            .await
    }

    /// One `PUT {base}/limits` with what `limits` gives (a limit set to `None` is sent as 0,
    /// a removed timeout as `no_timeout`): the server applies it as one change. The write is
    /// idempotent, so it may be sent again.
    async fn put_limits(
        &self,
        base: &str,
        limits: lease_domain::Limits,
    ) -> Result<Answer, StoreError> {
        let count = |limit: Option<lease_domain::Concurrency>| {
            json!(limit.map_or(0, lease_domain::Concurrency::get))
        };
        let mut body = serde_json::Map::new();
        if let Some(limit) = limits.concurrency {
            body.insert("concurrency".to_owned(), count(limit));
        }
        match limits.timeout {
            Some(Some(t)) => body.insert("timeout".to_owned(), json!(t.get())),
            Some(None) => body.insert("no_timeout".to_owned(), json!(true)),
            None => None,
        };
        if let Some(limit) = limits.per_group {
            body.insert("per_group".to_owned(), count(limit));
        }
        if let Some(ordered) = limits.ordered {
            body.insert("ordered".to_owned(), json!(ordered));
        }
        if let Some(fair) = limits.fair {
            body.insert("fair".to_owned(), json!(fair));
        }
        let rate = |rate: Option<lease_domain::Rate>| {
            json!(rate.map_or_else(|| "none".to_owned(), |r| r.to_string()))
        };
        if let Some(r) = limits.rate {
            body.insert("rate".to_owned(), rate(r));
        }
        if let Some(r) = limits.rate_per_group {
            body.insert("rate_per_group".to_owned(), rate(r));
        }
        self.send(
            reqwest::Method::PUT,
            &format!("{base}/limits"),
            Some(Value::Object(body)),
            None,
            true,
        )
        .await
    }

    /// A `GET` of `path` answered with an array under `field`, each item read by `read`.
    async fn list_of<T>(
        &self,
        path: &str,
        field: &str,
        read: fn(&Value) -> Result<T, StoreError>,
    ) -> Result<Vec<T>, StoreError> {
        let answer = self.get(path).await?;
        if answer.status != 200 {
            return Err(answer.error());
        }
        answer.body[field]
            .as_array()
            .ok_or_else(|| answers::corrupt(&answer, field))?
            .iter()
            .map(read)
            .collect()
    }

    fn lease_of(&self, value: &Value, now: Timestamp) -> Result<Lease, StoreError> {
        let (lease, token) = answers::lease(value, now)?;
        self.keep_token(&lease.job, lease.fence, &token);
        Ok(lease)
    }

    /// A holder's write: sends the lease's token when this client holds it.
    async fn holder_write(
        &self,
        op: &str,
        job: &JobId,
        owner: &Owner,
        fence: Fence,
        mut body: Value,
        now: Option<Timestamp>,
    ) -> Result<Result<Answer, lease_domain::WriteRefused>, StoreError> {
        body["fence"] = json!(fence.get());
        body["owner"] = json!(owner.as_str());
        if let Some(now) = now.and_then(|n| self.now(n)) {
            body["now"] = json!(now);
        }
        let token = self.token(job, fence);
        let answer = self
            .post(
                &format!("/v1/jobs/{}/{op}", path(job.as_str())),
                body,
                token.as_deref(),
            )
            .await?;
        match answer.status {
            200 => Ok(Ok(answer)),
            404 | 409 => Ok(Err(write_refused(&answer, owner, fence, now)?)),
            _ => Err(answer.error()),
        }
    }

    /// A job as the API takes it; its enqueue time only when this client sends its clock
    /// (a server that does not trust caller clocks takes no `enqueued_at` and keeps its own).
    fn spec_json(&self, id: &JobId, spec: &EnqueueSpec) -> Value {
        let mut body = json!({ "id": id.as_str(), "priority": spec.priority });
        if let Some(run_at) = spec.run_at {
            body["run_at"] = json!(run_at.get());
        }
        if let Some(at) = spec.enqueued_at.and_then(|at| self.now(at)) {
            body["enqueued_at"] = json!(at);
        }
        if let Some(max) = spec.max_attempts {
            body["max_attempts"] = json!(max);
        }
        if let Some(timeout) = spec.timeout {
            body["timeout"] = json!(timeout.get());
        }
        if spec.replace_finished {
            body["replace"] = json!("finished");
        }
        if let Some(group) = &spec.group {
            body["group"] = json!(group.as_str());
        }
        if let Some(debounce) = spec.debounce {
            body["debounce"] = json!(debounce.get());
        }
        if !spec.after.is_empty() {
            let after: Vec<&str> = spec.after.iter().map(lease_domain::JobId::as_str).collect();
            body["after"] = json!(after);
            body["on_parent_failure"] = json!(spec.on_parent_failure.as_str());
        }
        if let Some(trace) = &spec.trace {
            body["traceparent"] = json!(trace.traceparent());
            if let Some(state) = trace.tracestate() {
                body["tracestate"] = json!(state);
            }
        }
        if let Some(payload) = &spec.payload {
            match std::str::from_utf8(payload.as_bytes()) {
                Ok(text) => body["payload"] = json!(text),
                Err(_) => {
                    use base64::Engine as _;
                    body["payload_base64"] =
                        json!(base64::engine::general_purpose::STANDARD.encode(payload.as_bytes()));
                }
            }
        }
        body
    }
}

/// The server and how to reach it: what every request needs, shared with the task that sends
/// gathered writes.
struct Link {
    base: String,
    authorization: String,
    http: reqwest::Client,
    options: ClientOptions,
}

impl Link {
    /// Sends one request (its JSON `body` as text), with `traceparent` as its W3C header. `writes` says whether a
    /// request that may have reached the server but lost its answer is `Indeterminate` (a
    /// write) or `Unavailable` (a read).
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<String>,
        token: Option<&str>,
        writes: bool,
        traceparent: Option<&str>,
    ) -> Result<Answer, StoreError> {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("authorization", &self.authorization);
        if let Some(token) = token {
            request = request.header("lease-token", token);
        }
        if let Some(parent) = traceparent {
            request = request.header("traceparent", parent);
        }
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body);
        }
        let response = request.send().await.map_err(|e| {
            let lost = writes && !e.is_connect();
            let detail = format!("{} did not answer: {}", self.base, chain(&e));
            let detail = lease_ports::Detail::caused_by(detail, e);
            if lost {
                StoreError::Indeterminate(detail)
            } else {
                StoreError::Unavailable(detail)
            }
        })?;
        let status = response.status().as_u16();
        let bytes = response.bytes().await.map_err(|e| {
            let detail = format!("{} broke off its answer: {e}", self.base);
            let detail = lease_ports::Detail::caused_by(detail, e);
            if writes {
                StoreError::Indeterminate(detail)
            } else {
                StoreError::Unavailable(detail)
            }
        })?;
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok(Answer {
            status,
            body,
            server: self.base.clone(),
        })
    }
}

#[async_trait]
impl LeaseStore for HttpLeaseStore {
    async fn apply(
        &self,
        job: &JobId,
        command: Command,
        then: Option<ClaimNext>,
    ) -> Result<Applied, StoreError> {
        lease_ports::claim_may_follow(&command, then.as_ref())?;
        if let (Command::Complete(owner, fence, _, result), Some(claim)) = (&command, &then) {
            let (completed, claimed) = self
                .http_complete_and_claim_next(job, owner, *fence, result, claim)
                .await?;
            return Ok(Applied {
                outcome: Outcome::Wrote(completed),
                claimed: Some(claimed),
            });
        }
        let outcome = match command {
            Command::Enqueue => {
                Outcome::Enqueued(self.http_enqueue_with(job, &EnqueueSpec::default()).await?)
            }
            Command::EnqueueWith(spec) => {
                Outcome::Enqueued(self.http_enqueue_with(job, &spec).await?)
            }
            Command::Claim(owner, term) => {
                Outcome::Claimed(self.http_claim(job, &owner, term).await?)
            }
            Command::Renew(owner, fence, term) => {
                Outcome::Wrote(self.http_renew(job, &owner, fence, term).await?)
            }
            Command::Progress(owner, fence, renewal, text) => {
                let mut body = json!({ "progress": text.as_str() });
                if let Some(term) = renewal.term() {
                    body["ttl"] = json!(term.until().get() - term.now().get());
                }
                let written = self
                    .holder_write("progress", job, &owner, fence, body, Some(renewal.now()))
                    .await?;
                Outcome::Wrote(written.map(drop))
            }
            Command::HoldGroup(owner, fence, now, until) => {
                let body = json!({ "until": until.get() });
                let written = self
                    .holder_write("hold-group", job, &owner, fence, body, Some(now))
                    .await?;
                Outcome::Wrote(written.map(drop))
            }
            Command::Checkpoint(owner, fence, now, checkpoint) => {
                let body = json!({
                    "name": checkpoint.name.as_str(),
                    "value": checkpoint.value.as_str(),
                });
                let written = self
                    .holder_write("checkpoints", job, &owner, fence, body, Some(now))
                    .await?;
                Outcome::Wrote(written.map(drop))
            }
            Command::Complete(owner, fence, now, result) => {
                Outcome::Wrote(self.http_complete(job, &owner, fence, now, &result).await?)
            }
            Command::Release(owner, fence) => {
                Outcome::Wrote(self.http_release(job, &owner, fence, false).await?)
            }
            Command::GiveBack(owner, fence) => {
                Outcome::Wrote(self.http_release(job, &owner, fence, true).await?)
            }
            Command::Fail(owner, fence, now, error, retry) => Outcome::Failed(
                self.http_fail(job, &owner, fence, now, &error, retry)
                    .await?,
            ),
            Command::Cancel(now) => Outcome::Wrote(self.http_cancel(job, now).await?),
            Command::Retry(now) => Outcome::Wrote(self.http_retry(job, now).await?),
            // A credential is what the server makes of a request; a client sends the lease's
            // token with the plain write instead.
            Command::AsHolder(..) => {
                return Err(StoreError::Incompatible {
                    path: self.link.base.clone(),
                    reason: "a holder's credential is judged by the server; send the write \
                             itself, with the lease's token"
                        .into(),
                });
            }
        };
        Ok(Applied {
            outcome,
            claimed: None,
        })
    }

    async fn claim_next_with(&self, claim: &ClaimNext) -> Result<Vec<Lease>, StoreError> {
        // The server gives each lease a token of its own; tokens asked for here are its.
        self.http_claim_next(&claim.queue, &claim.owner, claim.term, claim.limit)
            .await
    }
    async fn enqueue_many(&self, jobs: &[(JobId, EnqueueSpec)]) -> Result<Vec<bool>, StoreError> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let items: Vec<Value> = jobs
            .iter()
            .map(|(id, spec)| {
                let mut item = self.spec_json(id, spec);
                item["queue"] = json!(spec.queue.as_str());
                item
            })
            .collect();
        let answer = self
            .post(
                &format!("/v1/queues/{}/jobs/batch", path(QueueName::DEFAULT)),
                json!({ "jobs": items }),
                None,
            )
            .await?;
        if answer.status != 200 {
            return Err(answer.error());
        }
        answer.body["inserted"]
            .as_array()
            .filter(|a| a.len() == jobs.len())
            .ok_or_else(|| answers::corrupt(&answer, "inserted"))?
            .iter()
            .map(|v| answers::boolean(v, "inserted"))
            .collect()
    }

    async fn record(&self, job: &JobId) -> Result<Option<JobRecord>, StoreError> {
        let answer = self
            .get(&format!("/v1/jobs/{}", path(job.as_str())))
            .await?;
        match answer.status {
            200 => answers::record(&answer.body).map(Some),
            404 if answer.body["reason"] == "not_found" => Ok(None),
            _ => Err(answer.error()),
        }
    }

    async fn children(
        &self,
        job: &JobId,
        after: Option<&JobId>,
        limit: usize,
    ) -> Result<Vec<JobId>, StoreError> {
        // Pages of at most 1,000 (the route's limit), each after the last id read.
        let mut found: Vec<JobId> = Vec::new();
        let mut from = after.cloned();
        while found.len() < limit {
            let page = (limit - found.len()).min(1000);
            let mut route = format!("/v1/jobs/{}/children?limit={page}", path(job.as_str()));
            if let Some(from) = &from {
                route.push_str(&format!("&after={}", path(from.as_str())));
            }
            let answer = self.get(&route).await?;
            let (read, more) = match answer.status {
                200 => (answers::children(&answer)?, answer.body["more"] == true),
                404 if answer.body["reason"] == "not_found" => return Ok(Vec::new()),
                _ => return Err(answer.error()),
            };
            from = read.last().cloned();
            found.extend(read);
            if !more || from.is_none() {
                break;
            }
        }
        Ok(found)
    }

    async fn attempts(&self, job: &JobId) -> Result<lease_domain::Attempts, StoreError> {
        let answer = self
            .get(&format!("/v1/jobs/{}/attempts", path(job.as_str())))
            .await?;
        match answer.status {
            200 => answers::attempts(&answer, job),
            404 if answer.body["reason"] == "not_found" => Ok(lease_domain::Attempts::default()),
            _ => Err(answer.error()),
        }
    }

    async fn checkpoints(&self, job: &JobId) -> Result<Vec<KeptCheckpoint>, StoreError> {
        let answer = self
            .get(&format!("/v1/jobs/{}/checkpoints", path(job.as_str())))
            .await?;
        match answer.status {
            200 => answers::checkpoints(&answer, job),
            404 if answer.body["reason"] == "not_found" => Ok(Vec::new()),
            _ => Err(answer.error()),
        }
    }

    async fn trace(&self, job: &JobId) -> Result<Option<lease_domain::TraceContext>, StoreError> {
        let answer = self
            .get(&format!("/v1/jobs/{}", path(job.as_str())))
            .await?;
        match answer.status {
            200 => answers::trace(&answer, job),
            404 if answer.body["reason"] == "not_found" => Ok(None),
            _ => Err(answer.error()),
        }
    }

    async fn purge(&self, before: Timestamp, statuses: &[Status]) -> Result<u64, StoreError> {
        let statuses: Vec<&str> = statuses.iter().map(|s| s.as_str()).collect();
        let answer = self
            .post(
                "/v1/purge",
                json!({ "before": before.get(), "statuses": statuses }),
                None,
            )
            .await?;
        match answer.status {
            200 => answer.body["purged"]
                .as_u64()
                .ok_or_else(|| answers::corrupt(&answer, "purged")),
            _ => Err(answer.error()),
        }
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<JobRecord>, StoreError> {
        let mut found = Vec::new();
        let mut after = filter.after.clone();
        while found.len() < filter.limit {
            let page = (filter.limit - found.len()).min(1000);
            let mut query = vec![format!("limit={page}")];
            if let Some(queue) = &filter.queue {
                query.push(format!("queue={}", path(queue.as_str())));
            }
            if let Some(status) = filter.status {
                query.push(format!("status={}", status.as_str()));
            }
            if let Some(after) = &after {
                query.push(format!("after={}", path(after.as_str())));
            }
            if let Some(now) = self.now(filter.now) {
                query.push(format!("now={now}"));
            }
            if let Some(group) = &filter.group {
                query.push(format!("group={}", path(group.as_str())));
            }
            if let Some(prefix) = &filter.prefix {
                query.push(format!("prefix={}", path(prefix)));
            }
            let answer = self.get(&format!("/v1/jobs?{}", query.join("&"))).await?;
            if answer.status != 200 {
                return Err(answer.error());
            }
            let jobs = answer.body["jobs"]
                .as_array()
                .ok_or_else(|| answers::corrupt(&answer, "jobs"))?;
            for job in jobs {
                found.push(answers::record(job)?);
            }
            match answer.body["next"].as_str() {
                Some(next) if jobs.len() == page => {
                    after = Some(JobId::stored(next).map_err(|e| {
                        StoreError::Corrupt(format!("the server's next id: {e}").into())
                    })?);
                }
                _ => break,
            }
        }
        Ok(found)
    }

    async fn stats(&self, now: Timestamp) -> Result<Vec<StatsRow>, StoreError> {
        let path = match self.now(now) {
            Some(now) => format!("/v1/stats?now={now}"),
            None => "/v1/stats".to_owned(),
        };
        let answer = self.get(&path).await?;
        if answer.status != 200 {
            return Err(answer.error());
        }
        answers::stats(&answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that cannot be reached is `Unavailable`, and reqwest's own error stays the
    /// source (it used to be flattened into the message).
    #[tokio::test]
    async fn a_failed_request_keeps_the_http_library_s_error_as_its_source() {
        // A port nothing listens on: bound, then closed.
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap();
        let store = HttpLeaseStore::new(
            &format!("http://{addr}"),
            "lk_0000_secret",
            ClientOptions::default(),
        )
        .unwrap();
        let err = store.stats(Timestamp::ZERO).await.unwrap_err();
        assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
        let cause = std::error::Error::source(&err).expect("the HTTP error as the source");
        assert!(cause.downcast_ref::<reqwest::Error>().is_some(), "{cause}");
    }

    /// The client keeps one token per job, its newest fence's, and none once the lease ended
    /// through it: it used to keep every token it was ever given, and scan them all per lease.
    #[test]
    fn a_job_s_token_is_kept_for_its_newest_fence_only_and_forgotten_when_the_lease_ends() {
        let store = HttpLeaseStore::new(
            "http://127.0.0.1:9",
            "lk_0000_secret",
            ClientOptions::default(),
        )
        .unwrap();
        let (a, b) = (JobId::new("a").unwrap(), JobId::new("b").unwrap());
        let fence = |n| Fence::new(n).unwrap();
        store.keep_token(&a, fence(1), "one");
        store.keep_token(&b, fence(1), "b-one");
        store.keep_token(&a, fence(2), "two");
        assert_eq!(store.token(&a, fence(1)), None);
        assert_eq!(store.token(&a, fence(2)).as_deref(), Some("two"));
        // A token of an older fence, learnt late, does not replace the newer one.
        store.keep_token(&a, fence(1), "late");
        assert_eq!(store.token(&a, fence(2)).as_deref(), Some("two"));
        assert_eq!(store.tokens.lock().unwrap().len(), 2);
        // Ending an older lease forgets nothing; ending the held one forgets its token.
        store.forget_token(&a, fence(1));
        assert_eq!(store.token(&a, fence(2)).as_deref(), Some("two"));
        store.forget_token(&a, fence(2));
        assert_eq!(store.token(&a, fence(2)), None);
        assert_eq!(store.token(&b, fence(1)).as_deref(), Some("b-one"));
        assert_eq!(store.tokens.lock().unwrap().len(), 1);
    }
}
