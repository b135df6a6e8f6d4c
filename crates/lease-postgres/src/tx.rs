//! The steps every transaction of this store is made of, below the paths that use them: the
//! server's clock read when a decision needs it, a job's row inserted or updated (with the
//! counts it moves), ROLLBACK, and the decided rows written with COMMIT in one round trip.

use futures::future::{try_join, try_join_all};
use lease_ports::StoreError;
use tokio_postgres::Statement;

use crate::connection::Statements;
use crate::error::{self, Stage};
use crate::row::Encoded;

/// Reads the server's clock when `needed` (sent when first polled, so it can be pipelined
/// after the requests before it), else answers `None` without a request.
pub(crate) async fn clock_if(
    c: &tokio_postgres::Client,
    s: &Statements,
    needed: bool,
) -> Result<Option<f64>, tokio_postgres::Error> {
    one_if(c, &s.clock, needed).await
}

/// The one value `statement` answers, read when `needed`, else `None` without a request.
pub(crate) async fn one_if<T: for<'a> tokio_postgres::types::FromSql<'a>>(
    c: &tokio_postgres::Client,
    statement: &tokio_postgres::Statement,
    needed: bool,
) -> Result<Option<T>, tokio_postgres::Error> {
    if needed {
        c.query_one(statement, &[]).await.map(|r| Some(r.get(0)))
    } else {
        Ok(None)
    }
}

/// Inserts one job's row; the parameters live as long as the request.
pub(crate) async fn insert(
    c: &tokio_postgres::Client,
    stmt: &Statement,
    job: &Encoded,
) -> Result<u64, tokio_postgres::Error> {
    let params = job.params();
    c.execute(stmt, &params).await
}

/// Sends one job's row (with the counts it moves, through `counted`, when it moves any);
/// answers how many rows it wrote. The parameters live as long as the request.
pub(crate) async fn update(
    c: &tokio_postgres::Client,
    plain: &Statement,
    counted: &Statement,
    job: &Encoded,
) -> Result<u64, tokio_postgres::Error> {
    if job.counts() {
        let params = job.counted_params();
        let row = c.query_one(counted, &params).await?;
        Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
    } else {
        let params = job.params();
        c.execute(plain, &params).await
    }
}

pub(crate) async fn rollback(c: &tokio_postgres::Client, s: &Statements) -> Result<(), StoreError> {
    c.execute(&s.rollback, &[])
        .await
        .map(|_| ())
        .map_err(|e| error::map(e, Stage::BeforeCommit))
}

/// Writes `writes` and commits, pipelined in one round trip; with nothing to write, rolls
/// back.
pub(crate) async fn commit(
    c: &tokio_postgres::Client,
    s: &Statements,
    writes: &[Encoded],
    wrote: bool,
) -> Result<(), StoreError> {
    if writes.is_empty() && !wrote {
        return rollback(c, s).await;
    }
    try_join(
        try_join_all(
            writes
                .iter()
                .map(|w| update(c, &s.update, &s.update_counted, w)),
        ),
        c.execute(&s.commit, &[]),
    )
    .await
    .map(|_| ())
    .map_err(|e| error::map(e, Stage::Commit))
}
