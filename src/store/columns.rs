//! How columns read into sweepd's types where sqlx has no decoding of its own, written for any
//! engine: the study's enums by the name each value is spelled with, and unsigned numbers,
//! which SQL stores as signed `BIGINT`s. (Writing needs no help: bind `as_str()`, or the
//! number `as i64`.)

use crate::study::{DaemonState, WorkerState};
use sqlx::error::BoxDynError;
use sqlx::{Database, Decode, Type};

/// A nullable `BIGINT` column read into an unsigned field, checked (neither SQLite nor
/// PostgreSQL has unsigned integer columns): `#[sqlx(try_from = "NullableInt")]` on an
/// `Option<u32>`, `Option<u64>` or `Option<usize>`. A non-null one needs no help:
/// `#[sqlx(try_from = "i64")]`.
pub(super) struct NullableInt(Option<i64>);

impl<DB: Database> Type<DB> for NullableInt
where
    i64: Type<DB>,
{
    fn type_info() -> DB::TypeInfo {
        <i64 as Type<DB>>::type_info()
    }

    fn compatible(ty: &DB::TypeInfo) -> bool {
        <i64 as Type<DB>>::compatible(ty)
    }
}

impl<'r, DB: Database> Decode<'r, DB> for NullableInt
where
    Option<i64>: Decode<'r, DB>,
{
    fn decode(value: <DB as Database>::ValueRef<'r>) -> Result<NullableInt, BoxDynError> {
        Ok(NullableInt(<Option<i64> as Decode<'r, DB>>::decode(value)?))
    }
}

/// A column holding one of the enum's spellings; any other text fails to decode (naming it).
macro_rules! spelled_column {
    ($($t:ty),+) => {$(
        impl<DB: Database> Type<DB> for $t
        where
            str: Type<DB>,
        {
            fn type_info() -> DB::TypeInfo {
                <str as Type<DB>>::type_info()
            }

            fn compatible(ty: &DB::TypeInfo) -> bool {
                <str as Type<DB>>::compatible(ty)
            }
        }

        impl<'r, DB: Database> Decode<'r, DB> for $t
        where
            &'r str: Decode<'r, DB>,
        {
            fn decode(value: <DB as Database>::ValueRef<'r>) -> Result<$t, BoxDynError> {
                Ok(<&'r str as Decode<'r, DB>>::decode(value)?.parse()?)
            }
        }
    )+};
}

spelled_column!(DaemonState, WorkerState);

macro_rules! unsigned_from_nullable {
    ($($t:ty),+) => {$(
        impl TryFrom<NullableInt> for Option<$t> {
            type Error = std::num::TryFromIntError;
            fn try_from(v: NullableInt) -> Result<Option<$t>, Self::Error> {
                v.0.map(<$t>::try_from).transpose()
            }
        }
    )+};
}

unsigned_from_nullable!(u32, u64, usize);

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::Connection;

    #[derive(Debug, PartialEq, sqlx::FromRow)]
    struct Unsigned {
        #[sqlx(try_from = "NullableInt")]
        big: Option<u64>,
        #[sqlx(try_from = "NullableInt")]
        small: Option<u32>,
        #[sqlx(try_from = "i64")]
        count: usize,
    }

    #[tokio::test]
    async fn unsigned_columns_read_checked_and_null_reads_as_none() {
        let mut conn = sqlx::SqliteConnection::connect("sqlite::memory:")
            .await
            .unwrap();
        let read = |sql: &'static str| sqlx::query_as::<_, Unsigned>(sql);
        let row = read("SELECT 1099511627776 AS big, NULL AS small, 3 AS count")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(
            row,
            Unsigned {
                big: Some(1 << 40),
                small: None,
                count: 3
            }
        );
        for bad in [
            "SELECT -1 AS big, NULL AS small, 0 AS count",
            "SELECT NULL AS big, 4294967296 AS small, 0 AS count",
            "SELECT NULL AS big, NULL AS small, -1 AS count",
        ] {
            let e = read(bad).fetch_one(&mut conn).await.unwrap_err();
            assert!(matches!(e, sqlx::Error::ColumnDecode { .. }), "{bad}: {e}");
        }
    }

    #[tokio::test]
    async fn states_read_by_their_spelling_and_an_unknown_one_is_an_error_naming_it() {
        let mut conn = sqlx::SqliteConnection::connect("sqlite::memory:")
            .await
            .unwrap();
        let (d, w): (DaemonState, WorkerState) = sqlx::query_as("SELECT 'PAUSED', 'READY'")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!((d, w), (DaemonState::Paused, WorkerState::Ready));
        let e = sqlx::query_as::<_, (DaemonState,)>("SELECT 'DRAINING'")
            .fetch_one(&mut conn)
            .await
            .unwrap_err();
        assert!(
            e.to_string().contains("unknown daemon state `DRAINING`"),
            "{e}"
        );
    }
}
