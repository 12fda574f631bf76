//! `multiversioned!`: an element-wise loop compiled for the vector width of the CPU it runs on.
//!
//! The workspace is built for baseline x86-64, so a plain loop over f32/f64 runs SSE2-wide (2
//! f64 / 4 f32 lanes) even on a CPU with AVX-512. `multiversioned!` defines `fn name(..)`
//! whose body is compiled three times — AVX-512 (x86-64-v4), AVX2 + FMA (v3) and the baseline —
//! and picks one per call (`is_x86_feature_detected!`, cached by std). Only the instruction
//! width changes: Rust never contracts `a * b + c` into an FMA nor reorders a floating-point
//! sum, so the values are bitwise the baseline's. Never write `mul_add` or reassociate a sum
//! inside one: the tests pin the scalar order.

macro_rules! multiversioned {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) {
            #[inline(always)]
            fn body($($arg: $ty),*) $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq")]
                fn v4($($arg: $ty),*) {
                    body($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                fn v3($($arg: $ty),*) {
                    body($($arg),*)
                }
                if std::is_x86_feature_detected!("avx512f")
                    && std::is_x86_feature_detected!("avx512vl")
                    && std::is_x86_feature_detected!("avx512bw")
                    && std::is_x86_feature_detected!("avx512dq")
                {
                    // SAFETY: the CPU has these features (checked just above).
                    return unsafe { v4($($arg),*) };
                }
                if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                    // SAFETY: as above.
                    return unsafe { v3($($arg),*) };
                }
            }
            body($($arg),*)
        }
    };
}
