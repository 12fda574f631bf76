//! Byte loops compiled for the widest vectors the CPU has.
//!
//! The workspace is built for baseline x86-64 (SSE2: no byte shuffle instruction), so the
//! loops that reorder bytes — un-splitting byte planes, reversing byte order — run narrow even
//! on a CPU with AVX2 or AVX-512. [`wide`] runs its op (a `pulp::WithSimd`) compiled for AVX2
//! (or AVX-512) where the CPU has it, chosen at run time (pulp, no `unsafe` here); the results
//! are the same bytes.

use std::sync::LazyLock;

/// The instruction set this CPU has, detected once.
static ARCH: LazyLock<pulp::Arch> = LazyLock::new(pulp::Arch::new);

/// Runs `op`, compiled for the widest vectors this CPU has: its `with_simd` and every function
/// that it calls are to be `#[inline(always)]`, so that they are compiled into each copy.
#[inline(always)]
pub(crate) fn wide<Op: pulp::WithSimd>(op: Op) -> Op::Output {
    ARCH.dispatch(op)
}
