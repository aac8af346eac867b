//! Small pieces with no home of their own that several parts need, kept in
//! one leaf so that no part imports another only for them: time formats for
//! now. A leaf: it imports nothing of the crate.

pub mod time;
