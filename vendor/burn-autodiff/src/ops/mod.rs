mod activation;
mod backward;
mod base;
mod bool_tensor;
#[cfg(feature = "distributed")]
mod distributed;
mod int_tensor;
mod module;
mod qtensor;
mod tensor;
mod transaction;

pub(crate) mod maxmin;
pub(crate) mod sort;

pub use backward::*;
pub use base::*;
