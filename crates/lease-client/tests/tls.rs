//! HTTPS: `lease serve` with a certificate and key, and a client that verifies the server's
//! certificate against the CA it is given (and refuses one it cannot verify).

use std::sync::Arc;

use lease_client::{ClientOptions, HttpLeaseStore};
use lease_domain::{JobId, Principal, Scope, Timestamp};
use lease_ports::LeaseStore;
use lease_ports::memory::MemoryLeaseStore;
use lease_server::tls::{TlsListener, server_config};
use lease_server::{ServiceConfig, ServiceStore};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_server_is_reached_with_its_ca_and_refused_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let made =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, made.cert.pem()).unwrap();
    std::fs::write(&key, made.key_pair.serialize_pem()).unwrap();

    let store: Arc<dyn ServiceStore> = Arc::new(MemoryLeaseStore::new());
    let api_key = lease_server::secrets::new_key().unwrap();
    store
        .add_key(&api_key.record(
            Principal::new("ci").unwrap(),
            Scope::Worker,
            Timestamp::ZERO,
        ))
        .await
        .unwrap()
        .unwrap();
    let app = lease_server::router(store, ServiceConfig::new(Arc::new(|| Timestamp::ZERO)));
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let listener = TlsListener::new(tcp, server_config(&cert, &key).unwrap()).unwrap();
    let addr = axum::serve::Listener::local_addr(&listener).unwrap();
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });

    let job = JobId::new("over-tls").unwrap();
    let trusted = HttpLeaseStore::new(
        &format!("https://127.0.0.1:{}", addr.port()),
        &api_key.key,
        ClientOptions {
            ca_cert: Some(made.cert.pem().into_bytes()),
            ..ClientOptions::default()
        },
    )
    .unwrap();
    assert!(trusted.enqueue(&job).await.unwrap());
    assert_eq!(trusted.state(&job).await.unwrap().unwrap().fence, 0);

    let untrusted = HttpLeaseStore::new(
        &format!("https://127.0.0.1:{}", addr.port()),
        &api_key.key,
        ClientOptions::default(),
    )
    .unwrap();
    let err = untrusted.state(&job).await.unwrap_err();
    assert!(
        matches!(err, lease_ports::StoreError::Unavailable(_))
            && err.to_string().to_lowercase().contains("certificate"),
        "{err}"
    );
    let plain = HttpLeaseStore::new(
        &format!("http://127.0.0.1:{}", addr.port()),
        &api_key.key,
        ClientOptions::default(),
    )
    .unwrap();
    assert!(
        plain.state(&job).await.is_err(),
        "plain HTTP to a TLS port fails"
    );

    // A key file that holds no key, and a pair that does not match, are named.
    let other = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let other_key = dir.path().join("other.pem");
    std::fs::write(&other_key, other.key_pair.serialize_pem()).unwrap();
    let mismatch = server_config(&cert, &other_key).unwrap_err();
    assert!(mismatch.contains("do not make a usable pair"), "{mismatch}");
    let no_key = server_config(&cert, &cert).unwrap_err();
    assert!(no_key.starts_with("--tls-key"), "{no_key}");
    server.abort();
}
