//! The store's methods, listed once. [`crate::forward`] (a store that passes calls on),
//! [`crate::decorate`] (a store wrapped with hooks) and [`crate::blocking`] (the synchronous
//! face) are each made from this list by a macro of their own, so a new method of the port is
//! written in its trait, once here, and once per store; the compiler then holds every
//! forwarder, decorator and store to it (a method missing from the list leaves `Forwarded` and
//! `Decorated` short of their traits).
//!
//! Each line is one method: its name, its arguments after `&self`, what it answers (inside
//! `Result<_, StoreError>`), then `=> Variant(args)`, the [`crate::decorate::Call`] a
//! decorator's hooks see (a method without one passes through a decorator unwatched), then
//! `, now name` when the synchronous face has it ([`crate::blocking::BlockingCore`]'s method
//! of that name). The methods of each trait come in two lists: the required ones, and the
//! provided ones a decorator still passes on as such (a store may answer them more cheaply than
//! its required ones would). The traits come in two groups: those a forwarder passes on
//! ([`crate::LeaseStore`], [`crate::control::Control`], [`crate::transfer::Transfer`]), and
//! those only a decorator wraps (the audit trail, the overview, the keys). `apply` and `apply_many`, which move what they are given and take
//! writes together, are written out where they differ.

/// Calls `$then!` with the list (see the module's documentation).
macro_rules! surface {
    ($then:ident) => {
        $then! {
            {
            LeaseStore [
                fn claim_next_with(claim: &crate::ClaimNext) -> Vec<crate::Lease>
                    => ClaimNext(claim), now claim_next_now;
                fn enqueue_many(jobs: &[(lease_domain::JobId, lease_domain::EnqueueSpec)])
                    -> Vec<bool> => EnqueueMany(jobs), now enqueue_many_now;
                fn record(job: &lease_domain::JobId) -> Option<crate::JobRecord>
                    => Record(job), now record_now;
                fn purge(before: lease_domain::Timestamp, statuses: &[lease_domain::Status])
                    -> u64 => Purge(before, statuses), now purge_now;
                fn list(filter: &crate::ListFilter) -> Vec<crate::JobRecord>
                    => List(filter), now list_now;
                fn stats(now: lease_domain::Timestamp) -> Vec<crate::StatsRow>
                    => Stats(now), now stats_now;
                fn checkpoints(job: &lease_domain::JobId) -> Vec<lease_domain::KeptCheckpoint>
                    => Checkpoints(job);
                fn attempts(job: &lease_domain::JobId) -> lease_domain::Attempts
                    => Attempts(job);
                fn trace(job: &lease_domain::JobId) -> Option<lease_domain::TraceContext>
                    => Trace(job);
                fn children(
                    job: &lease_domain::JobId,
                    after: Option<&lease_domain::JobId>,
                    limit: usize
                ) -> Vec<lease_domain::JobId> => Children(job, limit);
            ] []
            Control [
                fn change_queue(
                    queue: &lease_domain::QueueName,
                    change: lease_domain::QueueChange
                ) -> lease_domain::QueueSettings => ChangeQueue(queue, &change);
                fn queues() -> Vec<(lease_domain::QueueName, lease_domain::QueueSettings)>
                    => Queues;
                fn throttle(queue: &lease_domain::QueueName, now: lease_domain::Timestamp)
                    -> lease_domain::Throttle => Throttle(queue, now);
                fn group_loads(
                    queue: &lease_domain::QueueName,
                    now: lease_domain::Timestamp,
                    limit: usize
                ) -> Vec<crate::control::GroupLoad> => GroupLoads(queue, now, limit);
                fn put_schedule(spec: &lease_domain::ScheduleSpec, now: lease_domain::Timestamp)
                    -> lease_domain::Schedule => PutSchedule(spec, now);
                fn remove_schedule(name: &lease_domain::ScheduleName) -> bool
                    => RemoveSchedule(name);
                fn schedules() -> Vec<lease_domain::Schedule> => Schedules;
                fn fire_schedule(fire: &crate::control::Fire) -> Option<Vec<bool>>
                    => FireSchedule(fire);
            ] [
                fn settings_of(queue: &lease_domain::QueueName) -> lease_domain::QueueSettings
                    => SettingsOf(queue);
                fn schedule(name: &lease_domain::ScheduleName) -> Option<lease_domain::Schedule>
                    => Schedule(name);
            ]
            Transfer [
                fn export() -> crate::transfer::Snapshot => Export;
                fn import(snapshot: &crate::transfer::Snapshot, merge: bool)
                    -> crate::transfer::Imported => Import(snapshot, merge);
                fn epoch() -> lease_domain::Epoch;
                fn raise_epoch(at_least: lease_domain::Epoch) -> lease_domain::Epoch;
                fn check_heads(rebuild: bool) -> crate::transfer::HeadCheck;
            ] []
            }
            {
            AuditTrail [
                fn refusals(filter: &crate::audit::AuditFilter) -> Vec<crate::audit::AuditRow>
                    => Refusals(filter);
            ] []
            Overview [
                fn due(now: lease_domain::Timestamp) -> Vec<crate::overview::DueRow> => Due(now);
                fn activity(since: lease_domain::Timestamp) -> Vec<crate::overview::MinuteRow>
                    => Activity(since);
            ] []
            KeyStore [
                fn add_key(key: &crate::keys::KeyRecord)
                    -> Result<(), lease_domain::KeyRefused> => AddKey(key);
                fn key(id: &lease_domain::KeyId) -> Option<crate::keys::KeyRecord> => Key(id);
                fn keys() -> Vec<crate::keys::KeyRecord> => Keys;
                fn revoke_key(id: &lease_domain::KeyId, now: lease_domain::Timestamp) -> bool
                    => RevokeKey(id, now);
            ] []
            }
        }
    };
}

pub(crate) use surface;
