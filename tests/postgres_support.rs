//! The PostgreSQL test support itself (tests/support/postgres.rs): each
//! fresh database is a separate, reachable database of the shared
//! throwaway cluster.

mod support;

use support::postgres::{fresh_database, psql, with_database};

#[test]
fn fresh_databases_are_separate_and_reachable() {
    let (Some(a), Some(b)) = (fresh_database(), fresh_database()) else {
        return; // VERDICT_SKIP_POSTGRES is set; support::postgres said so
    };
    assert_ne!(a, b);
    for url in [&a, &b] {
        assert_eq!(psql(url, "select 1").expect("select 1"), "1", "{url}");
    }
    psql(&a, "create table only_in_a (x int)").expect("create table");
    let tables = "select count(*) from pg_tables where tablename = 'only_in_a'";
    assert_eq!(psql(&a, tables).expect("count in a"), "1");
    assert_eq!(psql(&b, tables).expect("count in b"), "0");
}

#[test]
fn with_database_replaces_only_the_path() {
    assert_eq!(
        with_database("postgres://u:p@127.0.0.1:5/verdict", "t_1"),
        "postgres://u:p@127.0.0.1:5/t_1"
    );
    assert_eq!(
        with_database("postgresql://u@h/db?sslmode=disable", "t_1"),
        "postgresql://u@h/t_1?sslmode=disable"
    );
    assert_eq!(with_database("postgres://h:5", "t_1"), "postgres://h:5/t_1");
    assert_eq!(
        with_database("postgres://h?sslmode=disable", "t_1"),
        "postgres://h/t_1?sslmode=disable"
    );
}
