//! The guard contract suite (feature `contract`): one public `async fn` per behaviour every
//! [`ValueGuard`] must show, and [`guard_contract_tests!`](crate::guard_contract_tests), which
//! turns them into one named Tokio test per check for a backend. Each check gets a fresh guard
//! and a key prefix of its own, so checks against a shared service never meet. [`Moto`] is the
//! S3 API on loopback that the object store's tests start.

use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lease_domain::Fence;

use crate::value::{GuardKey, PutOptions, ValueGuard};
use crate::{GuardError, GuardRefused};

fn fence(n: u64) -> Fence {
    Fence::new(n).unwrap_or(Fence::ZERO)
}

fn key(prefix: &str, name: &str) -> GuardKey {
    GuardKey::new(format!("{prefix}{name}")).unwrap_or_else(|e| panic!("{prefix}{name}: {e}"))
}

async fn put(
    guard: &dyn ValueGuard,
    key: &GuardKey,
    value: &[u8],
    f: u64,
) -> Result<(), GuardRefused> {
    guard
        .put(key, value, fence(f), &PutOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{}: put {key} at fence {f}: {e}", guard.resource()))
}

async fn value_at(guard: &dyn ValueGuard, key: &GuardKey) -> Option<(u64, Vec<u8>)> {
    guard
        .get(key)
        .await
        .unwrap_or_else(|e| panic!("{}: get {key}: {e}", guard.resource()))
        .map(|g| (g.fence.get(), g.value))
}

/// The stale-worker story: A writes with fence 1, B takes over and writes with fence 2, A's
/// late write is refused naming both fences, and B's value stands.
pub async fn a_stale_holder_is_refused_and_the_new_value_stands(
    guard: &dyn ValueGuard,
    prefix: &str,
) {
    let k = key(prefix, "report");
    put(guard, &k, b"from A", 1).await.expect("A's first write");
    put(guard, &k, b"from B", 2).await.expect("B's write");
    let refused = put(guard, &k, b"late, from A", 1).await.unwrap_err();
    assert_eq!((refused.presented, refused.current), (fence(1), fence(2)));
    assert_eq!(value_at(guard, &k).await, Some((2, b"from B".to_vec())));
}

/// An equal fence is admitted (a holder retrying its own write), and the retry's value is
/// stored.
pub async fn an_equal_fence_is_admitted(guard: &dyn ValueGuard, prefix: &str) {
    let k = key(prefix, "retry");
    put(guard, &k, b"first try", 7).await.expect("first");
    put(guard, &k, b"second try", 7)
        .await
        .expect("the same holder again");
    assert_eq!(value_at(guard, &k).await, Some((7, b"second try".to_vec())));
}

/// A value written under a fence reads back byte for byte with that fence, bytes that are not
/// UTF-8 included; an absent key reads as `None`.
pub async fn a_value_reads_back_with_its_fence(guard: &dyn ValueGuard, prefix: &str) {
    let k = key(prefix, "bytes");
    assert_eq!(value_at(guard, &k).await, None);
    let bytes: Vec<u8> = (0..=255).collect();
    put(guard, &k, &bytes, 3).await.expect("write");
    assert_eq!(value_at(guard, &k).await, Some((3, bytes)));
    let empty = key(prefix, "empty");
    put(guard, &empty, b"", 4).await.expect("an empty value");
    assert_eq!(value_at(guard, &empty).await, Some((4, Vec::new())));
}

/// A fence never goes down, not even after a delete: a delete from the holder removes the
/// value, then an older fence is still refused, and the largest fence a fence can be is kept
/// exactly.
pub async fn a_fence_never_goes_down_not_even_after_a_delete(guard: &dyn ValueGuard, prefix: &str) {
    let k = key(prefix, "deleted");
    put(guard, &k, b"v", 5).await.expect("write");
    let stale = guard.delete(&k, fence(4)).await.expect("delete");
    assert_eq!(
        stale.map_err(|r| (r.presented, r.current)),
        Err((fence(4), fence(5)))
    );
    assert!(
        value_at(guard, &k).await.is_some(),
        "a refused delete deleted"
    );
    guard
        .delete(&k, fence(5))
        .await
        .expect("delete")
        .expect("the holder deletes");
    assert_eq!(value_at(guard, &k).await, None);
    let refused = put(guard, &k, b"older", 4).await.unwrap_err();
    assert_eq!(refused.current, fence(5));
    put(guard, &k, b"same holder", 5)
        .await
        .expect("the holder writes again");
    let max = key(prefix, "max");
    put(guard, &max, b"top", Fence::MAX.get())
        .await
        .expect("the largest fence");
    assert_eq!(
        value_at(guard, &max).await.map(|(f, _)| f),
        Some(Fence::MAX.get())
    );
    let refused = put(guard, &max, b"below", Fence::MAX.get() - 1)
        .await
        .unwrap_err();
    assert_eq!(refused.current, Fence::MAX);
}

/// Keys are independent: a high fence on one key does not refuse a low one on another.
pub async fn keys_are_independent(guard: &dyn ValueGuard, prefix: &str) {
    let (a, b) = (key(prefix, "a"), key(prefix, "b"));
    put(guard, &a, b"a", 9).await.expect("a");
    put(guard, &b, b"b", 1).await.expect("b at a lower fence");
    assert_eq!(value_at(guard, &b).await, Some((1, b"b".to_vec())));
}

/// Writers racing with random fences: the value left is one written under the highest fence
/// admitted, and no write was admitted after (in real time) a write of a higher fence had
/// been admitted.
pub async fn racing_writers_end_with_the_highest_fence_and_never_go_back(
    guard: Arc<dyn ValueGuard>,
    prefix: &str,
) {
    const WRITERS: u64 = 8;
    const WRITES: u64 = 12;
    let k = key(prefix, "raced");
    let clock = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for writer in 0..WRITERS {
        let (guard, k, clock) = (Arc::clone(&guard), k.clone(), Arc::clone(&clock));
        tasks.push(tokio::spawn(async move {
            let mut admitted = Vec::new();
            for n in 0..WRITES {
                // A spread of fences, repeats included (a stand-in for random ones that is
                // the same in every run).
                let f = 1 + (writer * 7919 + n * 104_729) % 23;
                let began = clock.fetch_add(1, Ordering::SeqCst);
                let value = format!("w{writer} n{n} f{f}");
                let outcome = guard
                    .put(&k, value.as_bytes(), fence(f), &PutOptions::default())
                    .await
                    .unwrap_or_else(|e| panic!("racing put: {e}"));
                let ended = clock.fetch_add(1, Ordering::SeqCst);
                if outcome.is_ok() {
                    admitted.push((began, ended, f, value));
                }
            }
            admitted
        }));
    }
    let mut admitted = Vec::new();
    for task in tasks {
        admitted.extend(task.await.unwrap_or_default());
    }
    assert!(!admitted.is_empty(), "nothing was admitted");
    for (began, _, f, _) in &admitted {
        for (_, ended, g, _) in &admitted {
            assert!(
                !(ended < began && g > f),
                "fence {f} was admitted after fence {g} had been"
            );
        }
    }
    let highest = admitted.iter().map(|(_, _, f, _)| *f).max().unwrap_or(0);
    let (stored_fence, stored) = value_at(&*guard, &k).await.expect("a value");
    assert_eq!(stored_fence, highest);
    let stored = String::from_utf8(stored).unwrap_or_default();
    assert!(
        admitted
            .iter()
            .any(|(_, _, f, v)| *f == highest && *v == stored),
        "{stored} was not written under fence {highest}"
    );
}

/// Keys the resource cannot take are refused as `InvalidKey` before anything is written:
/// `bad` names keys the backend must refuse (beyond the checks of [`GuardKey`]).
pub async fn bad_keys_are_refused_before_anything_is_written(
    guard: &dyn ValueGuard,
    prefix: &str,
    bad: &[&str],
) {
    for name in bad {
        let Ok(k) = GuardKey::new(format!("{prefix}{name}")) else {
            continue;
        };
        let put = guard.put(&k, b"v", fence(1), &PutOptions::default()).await;
        assert!(
            matches!(put, Err(GuardError::InvalidKey(_))),
            "{}: {name:?} was not refused: {put:?}",
            guard.resource()
        );
    }
    assert!(GuardKey::new("").is_err() && GuardKey::new("a\nb").is_err());
}

/// A resource that cannot be reached is an error, never an admission.
pub async fn an_unreachable_resource_is_an_error_never_an_admission(unreachable: &dyn ValueGuard) {
    let k = key("unreachable-", "k");
    let put = unreachable
        .put(&k, b"v", fence(1), &PutOptions::default())
        .await;
    assert!(
        matches!(
            put,
            Err(GuardError::Unavailable(..) | GuardError::Indeterminate(..))
        ),
        "{}: {put:?}",
        unreachable.resource()
    );
    assert!(unreachable.get(&k).await.is_err());
    assert!(unreachable.delete(&k, fence(1)).await.is_err());
}

/// One named Tokio test per contract check for a backend: `$factory` is called with the
/// check's own key prefix and gives a future of an `Arc<dyn ValueGuard>` (a fresh one per
/// check, which may clean up what the check made under that prefix when it is dropped).
#[macro_export]
macro_rules! guard_contract_tests {
    ($guard:expr) => {
        $crate::guard_contract_tests!(@each $guard;
            a_stale_holder_is_refused_and_the_new_value_stands,
            an_equal_fence_is_admitted,
            a_value_reads_back_with_its_fence,
            a_fence_never_goes_down_not_even_after_a_delete,
            keys_are_independent
        );

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn racing_writers_end_with_the_highest_fence_and_never_go_back() {
            let prefix = $crate::contract::unique_prefix();
            let guard: std::sync::Arc<dyn $crate::value::ValueGuard> = ($guard)(prefix.clone()).await;
            $crate::contract::racing_writers_end_with_the_highest_fence_and_never_go_back(guard, &prefix).await;
        }
    };
    (@each $guard:expr; $($check:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                let prefix = $crate::contract::unique_prefix();
                let guard: std::sync::Arc<dyn $crate::value::ValueGuard> = ($guard)(prefix.clone()).await;
                $crate::contract::$check(&*guard, &prefix).await;
            }
        )*
    };
}

/// A key prefix no other check or run uses: the process, a random number drawn once per
/// process (the standard library's hasher keys come from the OS), and a counter.
#[must_use]
pub fn unique_prefix() -> String {
    use std::hash::{BuildHasher, Hasher};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static RUN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let run = RUN.get_or_init(|| {
        std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish()
    });
    format!(
        "t{}-{run:x}-{}/",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    )
}

/// A free loopback port.
#[must_use]
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

/// An S3 API on loopback: `moto_server` (PyPI `moto[server]`, which `cargo xtask test`
/// installs) on a free port, stopped on drop.
pub struct Moto {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl Moto {
    /// # Panics
    /// When `moto_server` cannot be started or does not listen within 30 s.
    #[must_use]
    pub fn start() -> Moto {
        let port = free_port();
        let child = Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("moto_server is needed (cargo xtask test installs it): {e}")
            });
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "moto_server did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Moto {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
            addr,
        }
    }

    /// Makes a bucket (moto takes an unsigned request).
    ///
    /// # Panics
    /// When moto does not make it.
    pub fn bucket(&self, name: &str) {
        use std::io::{Read, Write};
        let mut stream = TcpStream::connect(self.addr).unwrap();
        write!(
            stream,
            "PUT /{name} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
