//! `list` with a status, at any size: the ids a status can match are read from where they
//! are kept (the open jobs through the ready set's two indexes, an end's jobs through the
//! index of ends, queue by queue), each in id order from after the page before, and judged
//! by the domain; without a status, every job in id order.

use lease_domain::Status;
use lease_ports::{JobRecord, ListFilter, StoreError};

use crate::PgLeaseStore;
use crate::connection::Conn;
use crate::error::{self, Stage};
use crate::row;

/// Rows read per statement while a source looks for its matches.
const PAGE: i64 = 512;

/// One place `list` reads ids from.
pub(crate) enum Source {
    /// Every job (of the queue, when one is named).
    All(Option<String>),
    /// The open jobs (of the queue, when one is named).
    Open(Option<String>),
    /// The finished jobs of one queue that ended so.
    Ended(String, &'static str),
}

impl PgLeaseStore {
    /// Where the ids `filter` can match are read. A job without a recorded end (pending,
    /// running, or dead of its last expired attempt) is among the open ids; an end's ids are
    /// read queue by queue (each an index range in id order) and merged.
    pub(crate) async fn list_sources(
        &self,
        conn: &Conn,
        filter: &ListFilter,
    ) -> Result<Vec<Source>, StoreError> {
        let queue = filter.queue.as_ref().map(|q| q.as_str().to_owned());
        let ended = async |end: &'static str| -> Result<Vec<Source>, StoreError> {
            let queues = match &queue {
                Some(queue) => vec![queue.clone()],
                None => {
                    let stmt = conn.prepare(&self.sql.ended_queues).await?;
                    let rows = conn
                        .client()
                        .query(&stmt, &[&end])
                        .await
                        .map_err(|e| error::map(e, Stage::BeforeCommit))?;
                    rows.iter()
                        .map(|r| r.try_get::<_, String>(0).map_err(corrupt_queue))
                        .collect::<Result<_, _>>()?
                }
            };
            Ok(queues.into_iter().map(|q| Source::Ended(q, end)).collect())
        };
        Ok(match filter.status {
            None => vec![Source::All(queue.clone())],
            Some(Status::Pending | Status::Running) => vec![Source::Open(queue.clone())],
            Some(Status::Waiting) => ended("waiting").await?,
            Some(Status::Done) => ended("done").await?,
            Some(Status::Cancelled) => ended("cancelled").await?,
            Some(Status::Dead) => {
                let mut sources = ended("dead").await?;
                sources.push(Source::Open(queue.clone()));
                sources
            }
        })
    }

    /// The first `filter.limit` jobs of `source` after `filter.after` that `filter` matches.
    pub(crate) async fn list_from(
        &self,
        conn: &Conn,
        source: &Source,
        filter: &ListFilter,
    ) -> Result<Vec<JobRecord>, StoreError> {
        let c = conn.client();
        let mut after: String = filter
            .after
            .as_ref()
            .map(|id| id.as_str().to_owned())
            .unwrap_or_default();
        let mut found = Vec::new();
        let bytewise = !matches!(source, Source::All(_));
        while found.len() < filter.limit {
            let rows = match source {
                Source::All(queue) => {
                    let stmt = conn.prepare(&self.sql.page).await?;
                    c.query(&stmt, &[queue, &after, &PAGE]).await
                }
                Source::Open(Some(queue)) => {
                    let stmt = conn.prepare(&self.sql.open_page).await?;
                    c.query(&stmt, &[queue, &after, &PAGE]).await
                }
                Source::Open(None) => {
                    let stmt = conn.prepare(&self.sql.open_page_any).await?;
                    c.query(&stmt, &[&after, &PAGE]).await
                }
                Source::Ended(queue, end) => {
                    let stmt = conn.prepare(&self.sql.ended_page).await?;
                    c.query(&stmt, &[queue, &after, end, &PAGE]).await
                }
            }
            .map_err(|e| error::map(e, Stage::BeforeCommit))?;
            let mut past = false;
            for row in &rows {
                let (id, job) = row::decode_with_id(row, 0)?;
                // Ids in byte order (every source but the whole table's, which comes in the
                // database's order): past the prefix, none of this source's can match.
                if bytewise && filter.past_prefix(&id) {
                    past = true;
                    break;
                }
                after = id.as_str().to_owned();
                if found.len() < filter.limit && filter.admits(&id, &job) {
                    found.push(JobRecord { id, job });
                }
            }
            if past || i64::try_from(rows.len()).unwrap_or(i64::MAX) < PAGE {
                break;
            }
        }
        Ok(found)
    }
}

fn corrupt_queue(e: tokio_postgres::Error) -> StoreError {
    StoreError::Corrupt(lease_ports::Detail::caused_by(
        format!("a stored queue name cannot be read: {e}"),
        e,
    ))
}
