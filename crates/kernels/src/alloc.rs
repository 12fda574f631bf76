//! glibc's allocator told to keep freed memory: every operation's output is a fresh buffer.

/// Keeps freed memory in the process (glibc malloc): blocks up to 32 MB come from the heap instead
/// of fresh `mmap`s, and the heap is returned to the kernel only when more than 1 GB of it is free.
///
/// Why: the CPU backend and these kernels allocate a new output for every operation (a
/// 512-graph batch's edge activations are 4.6 MB each); with glibc's defaults many of those are page-faulted in and
/// unmapped again at every step (perf: ~15 % of `train`'s cycles in page faults and clearing).
/// Measured end to end (`docs/performance.md`): `train` 1.45× faster on 2 threads; peak RSS
/// unchanged. No effect on results. Skipped when the user sets glibc's own `MALLOC_*` variables
/// and on other C libraries; call it first thing in `main`, before any thread starts.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let user_set = [
            "MALLOC_MMAP_THRESHOLD_",
            "MALLOC_TRIM_THRESHOLD_",
            "MALLOC_TOP_PAD_",
        ]
        .iter()
        .any(|v| std::env::var_os(v).is_some());
        if !user_set {
            // SAFETY: mallopt only sets glibc malloc parameters (values within glibc's documented
            // ranges: the mmap threshold's maximum is 32 MiB on 64-bit); it is called before
            // any other thread exists.
            unsafe {
                libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
                libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
            }
        }
    }
}
