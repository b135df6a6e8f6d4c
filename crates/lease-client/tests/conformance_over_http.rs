//! The HTTP client passes the shared conformance suite against a live `lease serve` (the
//! service's router on a real socket), over the memory store and over SQLite: the API keeps
//! every rule of the port. The server trusts caller clocks here, since the suite scripts time.

use std::sync::Arc;

use lease_client::{ClientOptions, HttpLeaseStore};
use lease_domain::{Principal, Scope, Timestamp};
use lease_ports::control::Controlled;
use lease_ports::memory::MemoryLeaseStore;
use lease_server::{ServiceConfig, ServiceStore};

/// The server's task (aborted on drop) and whatever its store needs to live.
struct Running {
    server: tokio::task::JoinHandle<()>,
    _dir: Option<tempfile::TempDir>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn serve(
    store: Arc<dyn ServiceStore>,
    dir: Option<tempfile::TempDir>,
) -> (Arc<dyn Controlled>, Running) {
    let made = lease_server::secrets::new_key().expect("random");
    store
        .add_key(&made.record(
            Principal::new("conformance").expect("principal"),
            Scope::Admin,
            Timestamp::ZERO,
        ))
        .await
        .expect("the key is stored")
        .expect("the key is taken");
    let mut config = ServiceConfig::new(Arc::new(|| Timestamp::ZERO));
    config.client_clock = true;
    let app = lease_server::router(store, config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let client = HttpLeaseStore::new(
        &format!("http://{addr}"),
        &made.key,
        ClientOptions {
            send_caller_time: true,
            ..ClientOptions::default()
        },
    )
    .expect("client");
    (Arc::new(client), Running { server, _dir: dir })
}

mod over_memory {
    use super::*;

    async fn fresh_client() -> (Arc<dyn Controlled>, Running) {
        serve(Arc::new(MemoryLeaseStore::new()), None).await
    }

    lease_ports::conformance_tests!(lease_store async fresh_client);
    lease_ports::workflow_conformance_tests!(async fresh_client);
}

mod over_sqlite {
    use super::*;

    async fn fresh_client() -> (Arc<dyn Controlled>, Running) {
        let dir = tempfile::tempdir().expect("temp dir");
        let store =
            lease_sqlite::SqliteLeaseStore::open(dir.path().join("served.db")).expect("open store");
        serve(Arc::new(store), Some(dir)).await
    }

    lease_ports::conformance_tests!(lease_store async fresh_client);
    lease_ports::workflow_conformance_tests!(async fresh_client);
}
