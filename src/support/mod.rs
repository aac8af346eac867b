//! Small pieces with no home of their own that several parts need, kept in
//! one leaf so that no part imports another only for them: time formats and
//! the fence of verdict's own outbound calls. A leaf: it imports nothing of
//! the crate.

pub mod fence;
pub mod time;
