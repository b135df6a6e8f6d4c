//! Forwarding: a store that changes a few of another store's calls and passes the rest on.
//!
//! A test double with a seeded fault, or a decorator that rewrites one argument, implements
//! [`Forward`]: it names the store it wraps ([`Forward::to`]) and overrides only the methods
//! it changes; every other method's default passes the call on unchanged. [`Forwarded`] makes
//! it a store: [`LeaseStore`], [`Control`] and [`Transfer`] (so also
//! [`crate::control::Controlled`]), their provided methods going through the required ones as
//! for any store. Both are made from the one list of the store's methods (`surface.rs`). A
//! decorator that only watches calls (spans, metrics, counting, faults on the way in) is
//! [`crate::decorate::Decorated`] with hooks instead.

use async_trait::async_trait;
use lease_domain::{Command, JobId};

use crate::control::Control;
use crate::surface::surface;
use crate::transfer::Transfer;
use crate::{Applied, ClaimNext, LeaseStore, ManyWrite, StoreError};

/// Makes [`Forward`] and [`Forwarded`]'s impls from the list of the store's methods.
macro_rules! forwarding {
    ({ $($trait:ident [$($required:tt)*] [$($provided:tt)*])* } $watched:tt) => {
        forwarding!(@forward $($trait [$($required)*])*);
        $(forwarding!(@impl $trait [$($required)*]);)*
    };
    (@forward $($trait:ident [$(
        fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty
            $(=> $variant:ident $(($($hook:expr),*))?)? $(, now $now:ident)?;
    )*])*) => {
        /// The required methods of [`LeaseStore`], [`Control`] and [`Transfer`], each passing
        /// its call to [`Forward::to`] unless overridden.
        #[async_trait]
        pub trait Forward: Send + Sync {
            /// The store every call that is not overridden goes to.
            fn to(&self) -> &dyn Transfer;

            /// [`LeaseStore::apply`].
            async fn apply(
                &self,
                job: &JobId,
                command: Command,
                then: Option<ClaimNext>,
            ) -> Result<Applied, StoreError> {
                self.to().apply(job, command, then).await
            }

            /// [`LeaseStore::apply_many`]: each write through [`Forward::apply`], at once (so
            /// a forwarder that changes `apply` changes every write).
            async fn apply_many(
                &self,
                writes: Vec<ManyWrite>,
            ) -> Vec<Result<Applied, StoreError>> {
                crate::apply_each(writes, |(job, command, then)| async move {
                    self.apply(&job, command, then).await
                })
                .await
            }

            $($(
                #[doc = concat!("[`", stringify!($trait), "::", stringify!($name), "`].")]
                async fn $name(&self, $($arg: $ty),*) -> Result<$ret, StoreError> {
                    self.to().$name($($arg),*).await
                }
            )*)*
        }
    };
    (@impl LeaseStore [$($required:tt)*]) => {
        forwarding!(@methods LeaseStore [$($required)*] [
            async fn apply(
                &self,
                job: &JobId,
                command: Command,
                then: Option<ClaimNext>,
            ) -> Result<Applied, StoreError> {
                self.0.apply(job, command, then).await
            }

            async fn apply_many(
                &self,
                writes: Vec<ManyWrite>,
            ) -> Vec<Result<Applied, StoreError>> {
                self.0.apply_many(writes).await
            }
        ]);
    };
    (@impl $trait:ident [$($required:tt)*]) => {
        forwarding!(@methods $trait [$($required)*] []);
    };
    (@methods $trait:ident [$(
        fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty
            $(=> $variant:ident $(($($hook:expr),*))?)? $(, now $now:ident)?;
    )*] [$($written:tt)*]) => {
        #[async_trait]
        impl<F: Forward> $trait for Forwarded<F> {
            $($written)*
            $(
                async fn $name(&self, $($arg: $ty),*) -> Result<$ret, StoreError> {
                    self.0.$name($($arg),*).await
                }
            )*
        }
    };
}

/// A [`Forward`] as a store.
#[derive(Debug, Clone)]
pub struct Forwarded<F>(pub F);

surface!(forwarding);
