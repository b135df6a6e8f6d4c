//! Many holders' writes to a request: completions (with the claims they carry), failures and
//! releases made at about the same time by one client (a worker's slots) go to the server
//! together, as one `POST /v1/leases/settle`, and each caller gets its own write's answer.
//!
//! Nothing waits to fill a request: a write is sent at once when fewer than [`IN_FLIGHT`]
//! requests are out; otherwise it waits for one of them to come back and goes with every
//! write that arrived meanwhile (the store's group commit, on the client's side). A write is
//! answered only once the server answered it, so only after the store committed it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use lease_ports::StoreError;
use serde_json::Value;
use tokio::sync::oneshot;

use crate::Link;

/// The most writes one request carries (the server takes 100).
pub(crate) const MAX_WRITES: usize = 100;

/// The most bytes of writes one request carries, well under the server's default body limit
/// (2 MiB); a larger write goes alone.
const MAX_BYTES: usize = 1 << 20;

/// How many requests of gathered writes may be out at once: while some are answered, others
/// are read by the server, so the server and the network both stay busy (four and two measured
/// about alike in docs/PERFORMANCE.md, four a little ahead at 64 workers).
pub(crate) const IN_FLIGHT: usize = 4;

/// One write waiting to be sent, and where its answer goes.
struct Waiting {
    /// The write as JSON text, serialized once: its size decides the request it goes in.
    write: String,
    traceparent: Option<String>,
    reply: oneshot::Sender<Result<Value, StoreError>>,
}

#[derive(Default)]
struct State {
    waiting: VecDeque<Waiting>,
    sending: usize,
}

/// The writes on their way, shared by every call of one client.
#[derive(Default)]
pub(crate) struct Gather {
    state: Mutex<State>,
    /// Requests sent (each of one or more writes), for the tests that show writes gathered.
    requests: std::sync::atomic::AtomicU64,
}

impl Gather {
    /// Sends `write` (one item of the request's `writes`), with others when others are
    /// waiting; its answer (the matching item of the answer's `writes`).
    ///
    /// # Errors
    /// What the request met: `Indeterminate` for one that may have reached the server, else
    /// `Unavailable`, or the error the server answered for the whole request.
    pub(crate) async fn send(
        self: &Arc<Self>,
        link: &Arc<Link>,
        write: Value,
        traceparent: Option<String>,
    ) -> Result<Value, StoreError> {
        let (reply, answer) = oneshot::channel();
        let write = write.to_string();
        let start = {
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            state.waiting.push_back(Waiting {
                write,
                traceparent,
                reply,
            });
            let start = state.sending < IN_FLIGHT;
            if start {
                state.sending += 1;
            }
            start
        };
        if start {
            // A task of its own: the request goes (and its writes are answered) whether or not
            // the caller that started it is still waiting.
            let (gather, link) = (Arc::clone(self), Arc::clone(link));
            tokio::spawn(async move { gather.flush(&link).await });
        }
        answer.await.unwrap_or_else(|_| {
            Err(StoreError::Indeterminate(
                "the request carrying this write ended without its answer".into(),
            ))
        })
    }

    /// How many requests were sent.
    #[cfg(test)]
    pub(crate) fn requests(&self) -> u64 {
        self.requests.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The next writes to send together, or none (and one sender fewer) when none wait.
    fn next_batch(&self) -> Vec<Waiting> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut batch = Vec::new();
        let mut bytes = 0;
        while let Some(next) = state.waiting.front() {
            let full = batch.len() == MAX_WRITES || bytes + next.write.len() > MAX_BYTES;
            if !batch.is_empty() && full {
                break;
            }
            bytes += next.write.len();
            batch.extend(state.waiting.pop_front());
        }
        if batch.is_empty() {
            state.sending -= 1;
        }
        batch
    }

    /// Sends what waits, a request at a time, until nothing does.
    async fn flush(&self, link: &Link) {
        loop {
            let batch = self.next_batch();
            if batch.is_empty() {
                return;
            }
            self.requests
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            // A write alone is sent in its caller's trace; writes of many traces in none.
            let traceparent = match batch.as_slice() {
                [only] => only.traceparent.clone(),
                _ => None,
            };
            let (writes, replies): (Vec<String>, Vec<_>) =
                batch.into_iter().map(|w| (w.write, w.reply)).unzip();
            let count = writes.len();
            let body = format!("{{\"writes\": [{}]}}", writes.join(","));
            let sent = link
                .send(
                    reqwest::Method::POST,
                    "/v1/leases/settle",
                    Some(body),
                    None,
                    true,
                    traceparent.as_deref(),
                )
                .await;
            match sent {
                Ok(answer) if answer.status == 200 => match answer.body["writes"].as_array() {
                    Some(items) if items.len() == count => {
                        for (reply, item) in replies.into_iter().zip(items) {
                            let _ = reply.send(Ok(item.clone()));
                        }
                    }
                    _ => {
                        for reply in replies {
                            let _ = reply.send(Err(crate::answers::corrupt(&answer, "writes")));
                        }
                    }
                },
                Ok(answer) => {
                    for reply in replies {
                        let _ = reply.send(Err(answer.error()));
                    }
                }
                Err(err) => {
                    for reply in replies {
                        let _ = reply.send(Err(each(&err)));
                    }
                }
            }
        }
    }
}

/// A request's error as each of its writes' own: the same kind (not applied, or unknown), the
/// same words.
fn each(err: &StoreError) -> StoreError {
    let said = crate::chain(err).into();
    match err {
        StoreError::Unavailable(_) => StoreError::Unavailable(said),
        _ => StoreError::Indeterminate(said),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ClientOptions, HttpLeaseStore};
    use lease_domain::{Fence, JobId, JobResult, Owner, Timestamp};
    use lease_ports::LeaseStore;
    use serde_json::json;

    /// A stand-in server: answers every write of a settle request as applied, holds the
    /// requests back until `open` is notified, and keeps how many writes each request carried.
    struct Fake {
        sizes: Mutex<Vec<usize>>,
        open: tokio::sync::Semaphore,
        status: u16,
    }

    async fn fake(status: u16) -> (Arc<Fake>, HttpLeaseStore) {
        let state = Arc::new(Fake {
            sizes: Mutex::default(),
            open: tokio::sync::Semaphore::new(0),
            status,
        });
        let shared = Arc::clone(&state);
        let app = axum::Router::new().route(
            "/v1/leases/settle",
            axum::routing::post(move |body: String| {
                let state = Arc::clone(&shared);
                async move {
                    let body: Value = serde_json::from_str(&body).unwrap();
                    let writes = body["writes"].as_array().unwrap();
                    state.sizes.lock().unwrap().push(writes.len());
                    state.open.acquire().await.unwrap().forget();
                    let answers: Vec<Value> = writes
                        .iter()
                        .map(|w| json!({"ok": true, "result_fence": w["fence"]}))
                        .collect();
                    let code = axum::http::StatusCode::from_u16(state.status).unwrap();
                    let body = if state.status == 200 {
                        json!({ "writes": answers })
                    } else {
                        json!({"status": state.status, "reason": "outcome_unknown", "detail": "lost"})
                    };
                    (code, body.to_string())
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let client = HttpLeaseStore::new(
            &format!("http://{addr}"),
            "lk_0000_secret",
            ClientOptions::default(),
        )
        .unwrap();
        (state, client)
    }

    fn waiting(client: &HttpLeaseStore) -> usize {
        client.gather.state.lock().unwrap().waiting.len()
    }

    async fn complete(client: Arc<HttpLeaseStore>, n: u64) -> Result<(), StoreError> {
        let job = JobId::new(format!("j{n}")).unwrap();
        let owner = Owner::new("w").unwrap();
        let result = JobResult::new("ok").unwrap();
        let at = Timestamp::new(1.0).unwrap();
        client
            .complete(&job, &owner, Fence::new(n + 1).unwrap(), at, &result)
            .await?
            .map_err(|refused| StoreError::Corrupt(format!("{refused:?}").into()))
    }

    /// Writes made while the client's requests are out wait, and then go together in one
    /// request; each caller gets its own answer.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_made_while_requests_are_out_go_together_in_the_next_request() {
        let (server, client) = fake(200).await;
        let client = Arc::new(client);
        let mut calls = Vec::new();
        for n in 0..IN_FLIGHT + 5 {
            calls.push(tokio::spawn(complete(Arc::clone(&client), n as u64)));
            if n < IN_FLIGHT {
                // Each of the first writes is at the server, alone, before the next is made.
                while server.sizes.lock().unwrap().len() <= n {
                    tokio::task::yield_now().await;
                }
            }
        }
        while waiting(&client) < 5 {
            tokio::task::yield_now().await;
        }
        server.open.add_permits(IN_FLIGHT + 5);
        for call in calls {
            call.await.unwrap().unwrap();
        }
        let mut sizes = server.sizes.lock().unwrap().clone();
        sizes.sort_unstable();
        let mut expected = vec![1; IN_FLIGHT];
        expected.push(5);
        assert_eq!(sizes, expected);
        assert_eq!(client.gather.requests(), IN_FLIGHT as u64 + 1);
        // With nothing out, a write goes at once and alone.
        server.open.add_permits(1);
        complete(Arc::clone(&client), 99).await.unwrap();
        assert_eq!(server.sizes.lock().unwrap().last(), Some(&1));
    }

    /// A request whose outcome the server could not tell is, for each of its writes, an
    /// outcome unknown: never a plain failure that a caller would retry blindly.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_write_of_a_request_with_an_unknown_outcome_is_told_its_outcome_is_unknown() {
        let (server, client) = fake(500).await;
        let client = Arc::new(client);
        server.open.add_permits(100);
        let calls: Vec<_> = (0..8)
            .map(|n| tokio::spawn(complete(Arc::clone(&client), n)))
            .collect();
        for call in calls {
            let err = call.await.unwrap().unwrap_err();
            assert!(matches!(err, StoreError::Indeterminate(_)), "{err}");
        }
    }
}
