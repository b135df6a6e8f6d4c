//! What the guard tests share: a guard that cleans up after itself, and a TCP relay that can
//! cut a guard off from its resource mid-test.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use lease_guard::value::{GuardKey, Guarded, PutOptions, ValueGuard};
use lease_guard::{Admission, Fence, GuardError};

/// A guard, and what to do when the test is done with it (drop a database, a bucket, stop a
/// server); the clean-up runs on its own thread, with a runtime of its own when it is async.
pub struct Owned {
    pub guard: Arc<dyn ValueGuard>,
    cleanup: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl Owned {
    pub fn wrap(
        guard: Arc<dyn ValueGuard>,
        cleanup: impl FnOnce() + Send + 'static,
    ) -> Arc<dyn ValueGuard> {
        Arc::new(Self {
            guard,
            cleanup: Mutex::new(Some(Box::new(cleanup))),
        })
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        if let Some(cleanup) = self.cleanup.lock().unwrap().take() {
            let _ = std::thread::spawn(cleanup).join();
        }
    }
}

#[async_trait]
impl ValueGuard for Owned {
    async fn put(
        &self,
        key: &GuardKey,
        value: &[u8],
        fence: Fence,
        options: &PutOptions,
    ) -> Result<Admission, GuardError> {
        self.guard.put(key, value, fence, options).await
    }
    async fn get(&self, key: &GuardKey) -> Result<Option<Guarded>, GuardError> {
        self.guard.get(key).await
    }
    async fn delete(&self, key: &GuardKey, fence: Fence) -> Result<Admission, GuardError> {
        self.guard.delete(key, fence).await
    }
    fn resource(&self) -> &'static str {
        self.guard.resource()
    }
}

/// Runs an async clean-up to its end from a plain thread.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// A TCP relay to `target` on a port of its own: a guard connected through it loses its
/// resource, as if the network or the server went away, when the relay is cut.
pub struct Relay {
    pub addr: SocketAddr,
    cut: tokio_util_free::Cut,
}

mod tokio_util_free {
    //! A flag the relay's tasks watch, without another dependency.
    #[derive(Clone, Default)]
    pub struct Cut(
        pub std::sync::Arc<tokio::sync::Notify>,
        pub std::sync::Arc<std::sync::atomic::AtomicBool>,
    );
}

impl Relay {
    pub async fn start(target: SocketAddr) -> Relay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let cut = tokio_util_free::Cut::default();
        let watch = cut.clone();
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    accepted = listener.accept() => accepted,
                    () = watch.0.notified() => return,
                };
                let Ok((mut inbound, _)) = accepted else {
                    return;
                };
                if watch.1.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                let watch = watch.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        () = watch.0.notified() => {}
                    }
                });
            }
        });
        Relay { addr, cut }
    }

    /// Drops every relayed connection and refuses new ones.
    pub fn cut(&self) {
        self.cut.1.store(true, std::sync::atomic::Ordering::SeqCst);
        self.cut.0.notify_waiters();
    }
}

/// A name no other test or run uses: letters, digits and `_`.
pub fn unique(prefix: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    format!(
        "{prefix}_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    )
}
