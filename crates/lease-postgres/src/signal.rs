//! Enqueue signals on PostgreSQL: migration 6's triggers `NOTIFY lease_<schema>` with the
//! queue's name when a transaction that enqueued or retried jobs commits, whoever wrote it;
//! `watch` keeps one connection of its own listening (outside the pool) and calls the wake
//! function for each notification, reconnecting after a second when the connection is lost.

use std::time::Duration;

use lease_ports::signal::{EnqueueSignal, Wake};
use tokio_postgres::{AsyncMessage, NoTls};

use crate::PgLeaseStore;

impl EnqueueSignal for PgLeaseStore {
    fn watch(&self, wake: Wake) -> bool {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        let config = self.config.clone();
        let channel = format!("lease_{}", self.schema);
        runtime.spawn(async move {
            loop {
                listen(&config, &channel, &wake).await;
                // Notifications while no connection listens are lost; waiting claims still
                // look again at their next poll.
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        true
    }
}

/// Listens until the connection is lost.
async fn listen(config: &tokio_postgres::Config, channel: &str, wake: &Wake) {
    let Ok((client, mut connection)) = config.connect(NoTls).await else {
        return;
    };
    let wake = wake.clone();
    // Polling for messages also drives the connection (the LISTEN below goes through it).
    let driver = tokio::spawn(async move {
        loop {
            let message = std::future::poll_fn(|cx| connection.poll_message(cx)).await;
            match message {
                Some(Ok(AsyncMessage::Notification(n))) => wake(n.payload()),
                Some(Ok(_)) => {}
                Some(Err(_)) | None => break,
            }
        }
    });
    // The schema name was checked as a plain identifier, so the channel needs no escaping
    // beyond quoting.
    if client
        .batch_execute(&format!("LISTEN \"{channel}\""))
        .await
        .is_err()
    {
        driver.abort();
        return;
    }
    // Keep the client (and so the connection) until the driver ends.
    let _ = driver.await;
    drop(client);
}
