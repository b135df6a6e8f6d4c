//! The values requests carry, each declared once: its type reads it, and its schema (a
//! component of the OpenAPI document) says exactly what the server takes, since every request
//! is checked against the document before a handler reads it (`validate.rs`).
//!
//! The document can state every rule of the domain but two that count bytes (a name's 1,024
//! bytes of UTF-8, a payload's 1 MiB): a name is bounded here in characters instead, at 256,
//! which no name of 256 characters can exceed in bytes; a payload's bound is in its
//! description, and a larger one is refused `422` naming it.

use serde::{Deserialize, Serialize};
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, SchemaType, Type};

/// The most characters of a job id, queue name or owner through the API (the domain's bound is
/// 1,024 bytes of UTF-8; 256 characters never exceed it).
pub(crate) const NAME_CHARS: usize = 256;

/// No NUL anywhere (which no store can hold in text).
const NO_NUL: &str = "^[^\\x00]*$";

/// The largest time the API takes, in Unix seconds (the year 33658), and the smallest; within
/// them a time plus any lease length the API takes is a finite number.
pub(crate) const TIME_BOUND: f64 = 1e12;

/// The shortest lease the API grants, in seconds: any shorter would round away at the times
/// the API takes.
pub(crate) const MIN_TTL: f64 = 0.001;

macro_rules! field {
    ($(#[$doc:meta])* $name:ident($inner:ty), $schema:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Deserialize, Serialize)]
        #[serde(transparent)]
        pub(crate) struct $name(pub(crate) $inner);

        impl utoipa::PartialSchema for $name {
            fn schema() -> RefOr<Schema> {
                let schema: ObjectBuilder = $schema;
                schema.into()
            }
        }

        impl utoipa::ToSchema for $name {}
    };
}

field!(
    /// A job id, queue name or owner.
    Name(String),
    ObjectBuilder::new()
        .schema_type(SchemaType::Type(Type::String))
        .description(Some(
            "A job id, queue name or owner: 1 to 256 characters, none of them NUL",
        ))
        .min_length(Some(1))
        .max_length(Some(NAME_CHARS))
        .pattern(Some(NO_NUL))
        .examples(["report-42"])
);

field!(
    /// A result or an error text.
    Text(String),
    ObjectBuilder::new()
        .schema_type(SchemaType::Type(Type::String))
        .description(Some("Any text without NUL"))
        .pattern(Some(NO_NUL))
);

field!(
    /// A time, in Unix seconds.
    Time(f64),
    ObjectBuilder::new()
        .schema_type(SchemaType::Type(Type::Number))
        .description(Some("Unix seconds"))
        .minimum(Some(-TIME_BOUND))
        .maximum(Some(TIME_BOUND))
);

field!(
    /// How long a lease lasts.
    Ttl(f64),
    ObjectBuilder::new()
        .schema_type(SchemaType::Type(Type::Number))
        .description(Some("How long a lease lasts, in seconds (at least 0.001)"))
        .minimum(Some(MIN_TTL))
        .maximum(Some(TIME_BOUND))
);

field!(
    /// A fencing token as a lease holder presents it.
    FenceNo(u64),
    ObjectBuilder::new()
        .schema_type(SchemaType::Type(Type::Integer))
        .description(Some("A fencing token, 0 to 2^63-1"))
        .minimum(Some(0))
        .maximum(Some(i64::MAX))
);

field!(
    /// A duration in seconds (an attempt's timeout).
    Seconds(f64),
    ObjectBuilder::new()
        .schema_type(SchemaType::Type(Type::Number))
        .description(Some("A duration in seconds (at least 0.001)"))
        .minimum(Some(MIN_TTL))
        .maximum(Some(TIME_BOUND))
);

field!(
    /// What a running job says of its progress.
    ProgressText(String),
    ObjectBuilder::new()
        .schema_type(SchemaType::Type(Type::String))
        .description(Some(
            "What a running job says of its progress: up to 256 characters, none of them NUL",
        ))
        .max_length(Some(256))
        .pattern(Some(NO_NUL))
        .examples(["12 of 40 files"])
);

field!(
    /// A checkpoint's name.
    CheckpointNameText(String),
    ObjectBuilder::new()
        .schema_type(SchemaType::Type(Type::String))
        .description(Some(
            "A checkpoint's name (a step of the job): 1 to 256 bytes, none of them NUL",
        ))
        .min_length(Some(1))
        .max_length(Some(256))
        .pattern(Some(NO_NUL))
        .examples(["fetch"])
);

field!(
    /// A schedule's name.
    ScheduleNameText(String),
    ObjectBuilder::new()
        .schema_type(SchemaType::Type(Type::String))
        .description(Some(
            "A schedule's name: 1 to 50 characters, none of them NUL or @ (a tick's job id is \
             the name, @ and the tick's time)",
        ))
        .min_length(Some(1))
        .max_length(Some(50))
        .pattern(Some("^[^\\x00@]*$"))
        .examples(["nightly-report"])
);

field!(
    /// A cron expression.
    CronText(String),
    ObjectBuilder::new()
        .schema_type(SchemaType::Type(Type::String))
        .description(Some(
            "Five cron fields (minute hour day-of-month month day-of-week: numbers, *, ranges, \
             lists, steps, month and day names) or a shorthand: @yearly, @monthly, @weekly, \
             @daily, @hourly. Whether it is a valid expression is checked by the calendar: an \
             impossible one (61 * * * *) is refused 422.",
        ))
        .min_length(Some(1))
        .max_length(Some(200))
        .pattern(Some(NO_NUL))
        .examples(["0 3 * * *"])
);

field!(
    /// An IANA time zone name.
    ZoneText(String),
    ObjectBuilder::new()
        .schema_type(SchemaType::Type(Type::String))
        .description(Some(
            "An IANA time zone name (UTC, Europe/Paris); one the server does not know is \
             refused 422",
        ))
        .min_length(Some(1))
        .max_length(Some(64))
        .pattern(Some(NO_NUL))
        .examples(["Europe/Paris"])
);

/// What an enqueue does with a job of the same id that is done, dead or cancelled.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Replace {
    /// Run it again: pending, attempts from 0, its fence going on, its last result kept until
    /// the new run completes. A pending or running job is never touched.
    Finished,
}

/// What a job does when one of its parents ends dead or cancelled.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ParentFailure {
    /// It is cancelled, with an error naming the parent (the default).
    Cancel,
    /// It runs once every parent has finished, however each ended.
    Run,
}

impl ParentFailure {
    /// The domain's policy.
    pub(crate) fn policy(self) -> lease_domain::OnParentFailure {
        match self {
            Self::Cancel => lease_domain::OnParentFailure::Cancel,
            Self::Run => lease_domain::OnParentFailure::Run,
        }
    }
}

/// A schedule's catch-up policy after downtime.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum CatchUpName {
    /// One job, for the most recent missed tick (the default).
    Latest,
    /// No job for a missed tick (only one at most a minute late).
    None,
    /// A job for each missed tick, at most `catch_up_max` (default 1000) of the newest.
    All,
}

impl Name {
    /// The name as a job id.
    pub(crate) fn job(self) -> Result<lease_domain::JobId, crate::problem::Problem> {
        lease_domain::JobId::new(self.0).map_err(|e| crate::input::bad_value("id", &e))
    }

    /// The name as a queue's.
    pub(crate) fn queue(
        self,
        field: &str,
    ) -> Result<lease_domain::QueueName, crate::problem::Problem> {
        lease_domain::QueueName::new(self.0).map_err(|e| crate::input::bad_value(field, &e))
    }

    /// The name as a job's group.
    pub(crate) fn group(self) -> Result<lease_domain::GroupKey, crate::problem::Problem> {
        lease_domain::GroupKey::new(self.0).map_err(|e| crate::input::bad_value("group", &e))
    }

    /// The name as an owner's.
    pub(crate) fn owner(self) -> Result<lease_domain::Owner, crate::problem::Problem> {
        lease_domain::Owner::new(self.0).map_err(|e| crate::input::bad_value("owner", &e))
    }
}

impl Time {
    /// The time as the domain's.
    pub(crate) fn at(
        &self,
        field: &str,
    ) -> Result<lease_domain::Timestamp, crate::problem::Problem> {
        lease_domain::Timestamp::new(self.0).map_err(|e| crate::input::bad_value(field, &e))
    }
}

impl Seconds {
    /// The duration as the domain's.
    pub(crate) fn ttl(&self, field: &str) -> Result<lease_domain::Ttl, crate::problem::Problem> {
        lease_domain::Ttl::new(self.0).map_err(|e| crate::input::bad_value(field, &e))
    }
}

impl FenceNo {
    /// The fence as the domain's.
    pub(crate) fn fence(&self) -> Result<lease_domain::Fence, crate::problem::Problem> {
        lease_domain::Fence::new(self.0).map_err(|e| crate::input::bad_value("fence", &e))
    }
}

/// A job's status, as a filter names it.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum StatusName {
    /// Waiting for its parents to finish.
    Waiting,
    /// Waiting to be claimed (or to come due).
    Pending,
    /// Leased now.
    Running,
    /// Completed.
    Done,
    /// Out of attempts, or failed without retry.
    Dead,
    /// Cancelled by an admin.
    Cancelled,
}

impl StatusName {
    /// The name of the domain's status.
    pub(crate) fn of(status: lease_domain::Status) -> Self {
        use lease_domain::Status;
        match status {
            Status::Waiting => Self::Waiting,
            Status::Pending => Self::Pending,
            Status::Running => Self::Running,
            Status::Done => Self::Done,
            Status::Dead => Self::Dead,
            Status::Cancelled => Self::Cancelled,
        }
    }

    /// The domain's status.
    pub(crate) fn status(self) -> lease_domain::Status {
        use lease_domain::Status;
        match self {
            Self::Waiting => Status::Waiting,
            Self::Pending => Status::Pending,
            Self::Running => Status::Running,
            Self::Done => Status::Done,
            Self::Dead => Status::Dead,
            Self::Cancelled => Status::Cancelled,
        }
    }
}

/// When to judge statuses.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct StatsQuery {
    /// The time to judge at, taken only by a server that trusts caller clocks.
    #[param(value_type = Option<Time>)]
    pub(crate) now: Option<String>,
}
