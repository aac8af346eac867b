//! Where state lives, below every part that keeps some: the connection side
//! of the shared PostgreSQL store that several replicas use, the SQLite
//! busy handlers that let the audit log, reviews and jobs share one
//! database file, and the OS lock that makes one process the owner of a
//! data dir. What goes into the tables belongs to the parts that write them
//! (`audit`, `review`, `jobs`, `witness`).

pub mod datalock;
pub mod postgres;
pub(crate) mod sqlite;
