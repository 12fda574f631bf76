//! Device selection: `cpu`, `cuda`, `cuda:N`, `wgpu`, and a clear error where a GPU backend
//! cannot run.
//!
//! burn-cuda panics deep inside when no NVIDIA driver is installed, and wgpu when no Vulkan
//! driver is, so the driver libraries are looked for first and their absence reported as an
//! error naming where we looked.

use std::path::PathBuf;
use std::str::FromStr;

/// Where a run's tensors live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceChoice {
    /// The CPU backend (burn-flex).
    Cpu,
    /// CUDA device with this index.
    Cuda(usize),
    /// Burn's wgpu backend on the default adapter (a Vulkan driver: a GPU's, or Mesa's software
    /// lavapipe).
    Wgpu,
}

impl FromStr for DeviceChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "cpu" => Ok(DeviceChoice::Cpu),
            "cuda" | "gpu" => Ok(DeviceChoice::Cuda(0)),
            "wgpu" => Ok(DeviceChoice::Wgpu),
            other => other
                .strip_prefix("cuda:")
                .and_then(|i| i.parse().ok())
                .map(DeviceChoice::Cuda)
                .ok_or_else(|| format!("unknown device '{other}': use cpu, cuda, cuda:N or wgpu")),
        }
    }
}

impl DeviceChoice {
    /// The name `from_str` reads back: `cpu`, `cuda:N` or `wgpu`.
    pub fn name(self) -> String {
        match self {
            DeviceChoice::Cpu => "cpu".into(),
            DeviceChoice::Cuda(i) => format!("cuda:{i}"),
            DeviceChoice::Wgpu => "wgpu".into(),
        }
    }
}

/// Runs `$body` with the type `$backend` set to the Burn backend `$device` (a [`DeviceChoice`])
/// names and `$dev` to its device: the one place a device choice becomes a backend (burn-flex on
/// the CPU, CUDA, wgpu). The CUDA and wgpu arms are compiled where the calling crate has a
/// `cuda` / `wgpu` feature (which switches on this crate's); [`check_device`] refuses a device
/// whose arm is not there before this runs.
///
/// ```text
/// on_backend!(device, |B, dev| train_on::<Autodiff<B>>(req, &dev))
/// ```
#[macro_export]
macro_rules! on_backend {
    ($device:expr, |$backend:ident, $dev:ident| $body:expr) => {
        match $device {
            $crate::device::DeviceChoice::Cpu => {
                type $backend = ::burn::backend::Flex;
                let $dev = ::core::default::Default::default();
                $body
            }
            #[cfg(feature = "cuda")]
            $crate::device::DeviceChoice::Cuda(index) => {
                type $backend = ::burn::backend::Cuda;
                let $dev = ::burn::backend::cuda::CudaDevice::new(index);
                $body
            }
            #[cfg(not(feature = "cuda"))]
            $crate::device::DeviceChoice::Cuda(_) => {
                unreachable!("check_device refuses CUDA without the cuda feature")
            }
            #[cfg(feature = "wgpu")]
            $crate::device::DeviceChoice::Wgpu => {
                type $backend = ::burn::backend::Wgpu;
                let $dev = ::core::default::Default::default();
                $body
            }
            #[cfg(not(feature = "wgpu"))]
            $crate::device::DeviceChoice::Wgpu => {
                unreachable!("check_device refuses wgpu without the wgpu feature")
            }
        }
    };
}

/// Folders where the NVIDIA driver's `libcuda.so.1` is usually found (plus `LD_LIBRARY_PATH`).
pub fn driver_search_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("LD_LIBRARY_PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for d in [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/usr/local/nvidia/lib64",
        "/usr/local/nvidia/lib",
        "/usr/lib/wsl/lib",
        "/usr/local/cuda/compat",
        "/opt/cray/pe/lib64",
    ] {
        dirs.push(PathBuf::from(d));
    }
    dirs
}

/// Checks the NVIDIA driver library is present in one of `dirs`.
pub fn find_cuda_driver(dirs: &[PathBuf]) -> Result<PathBuf, String> {
    dirs.iter()
        .map(|d| d.join("libcuda.so.1"))
        .find(|p| p.exists())
        .ok_or_else(|| {
            let looked: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
            format!(
                "CUDA was requested but no NVIDIA driver was found (libcuda.so.1 is not in {}); \
                 run on a GPU node (on Perlmutter: a GPU allocation with srun) or use --device cpu",
                looked.join(", ")
            )
        })
}

/// Folders where Vulkan drivers describe themselves (ICD manifests), besides those named by
/// `VK_DRIVER_FILES` / `VK_ICD_FILENAMES`.
const VULKAN_ICD_DIRS: [&str; 4] = [
    "/usr/share/vulkan/icd.d",
    "/etc/vulkan/icd.d",
    "/usr/local/share/vulkan/icd.d",
    "/usr/local/etc/vulkan/icd.d",
];

/// Checks a Vulkan loader (`libvulkan.so.1` in one of `dirs`) and a driver manifest are
/// present: wgpu panics without them. Returns the loader found.
pub fn find_vulkan_driver(dirs: &[PathBuf]) -> Result<PathBuf, String> {
    let loader = dirs
        .iter()
        .map(|d| d.join("libvulkan.so.1"))
        .find(|p| p.exists());
    let named = ["VK_DRIVER_FILES", "VK_ICD_FILENAMES"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|f| !f.is_empty()));
    let manifest = named
        || VULKAN_ICD_DIRS.iter().any(|d| {
            std::fs::read_dir(d).is_ok_and(|mut entries| {
                entries.any(|e| e.is_ok_and(|e| e.path().extension().is_some_and(|x| x == "json")))
            })
        });
    match (loader, manifest) {
        (Some(loader), true) => Ok(loader),
        (None, _) => Err(format!(
            "wgpu was requested but no Vulkan loader was found (libvulkan.so.1 is not in {}); \
             install a GPU driver with Vulkan, or Mesa's software driver (Debian: `apt-get \
             install libvulkan1 mesa-vulkan-drivers`), or use --device cpu",
            dirs.iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )),
        (Some(_), false) => Err(format!(
            "wgpu was requested but no Vulkan driver is installed (no driver manifest in {}); \
             install a GPU driver with Vulkan, or Mesa's software driver (Debian: `apt-get \
             install mesa-vulkan-drivers`), or use --device cpu",
            VULKAN_ICD_DIRS.join(", ")
        )),
    }
}

/// Validates `choice` for this binary and machine: CUDA needs the `cuda` build feature and a
/// driver, wgpu the `wgpu` feature and a Vulkan driver. Returns the driver library found, for
/// logs.
pub fn check_device(choice: DeviceChoice) -> Result<Option<PathBuf>, String> {
    match choice {
        DeviceChoice::Cpu => Ok(None),
        DeviceChoice::Cuda(_) if !cfg!(feature = "cuda") => Err(
            "this gnn4colliders was built without CUDA support: rebuild with \
             `cargo build --release --features cuda`"
                .to_owned(),
        ),
        DeviceChoice::Cuda(_) => find_cuda_driver(&driver_search_dirs()).map(Some),
        DeviceChoice::Wgpu if !cfg!(feature = "wgpu") => Err(
            "this gnn4colliders was built without the wgpu backend: rebuild with \
             `cargo build --release --features wgpu`"
                .to_owned(),
        ),
        DeviceChoice::Wgpu => find_vulkan_driver(&driver_search_dirs()).map(Some),
    }
}

/// This process's peak resident memory (Linux `VmHWM`) in MB; `None` elsewhere.
pub fn peak_rss_mb() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: f64 = s
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

/// Sizes the CPU backend's thread pool (rayon's global pool: 0 = one thread per core) with the
/// calling thread as one of its workers, and returns its size.
///
/// Why the calling thread: burn-flex runs each operation on the global pool. Called from a thread
/// outside the pool, every operation is handed to a worker and the caller sleeps until it is done
/// — thousands of cross-thread wake-ups per training step. As worker 0, the thread that runs the
/// model executes operations itself and shares them with the other workers only when they split
/// (`benchmark_training`: pretraining step 1.39× faster on 2 cores; docs/performance.md).
/// Call it before anything else uses rayon; a pool that already exists is kept (its size is
/// returned).
pub fn init_compute_pool(threads: usize) -> usize {
    let built = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .use_current_thread()
        .build_global();
    if let Err(e) = built {
        tracing::debug!("compute thread pool already set up: {e}");
    }
    rayon::current_num_threads()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_devices() {
        assert_eq!("cpu".parse(), Ok(DeviceChoice::Cpu));
        assert_eq!("cuda".parse(), Ok(DeviceChoice::Cuda(0)));
        assert_eq!("cuda:3".parse(), Ok(DeviceChoice::Cuda(3)));
        let err = "tpu".parse::<DeviceChoice>().expect_err("unknown");
        assert!(err.contains("tpu"), "{err}");
    }

    #[test]
    fn missing_driver_is_a_clear_error_and_a_present_one_is_found() {
        let empty = std::env::temp_dir().join(format!("gnn4c-nodriver-{}", std::process::id()));
        std::fs::create_dir_all(&empty).expect("dir");
        let err = find_cuda_driver(std::slice::from_ref(&empty)).expect_err("no driver");
        assert!(
            err.contains("libcuda.so.1") && err.contains(&empty.display().to_string()),
            "{err}"
        );
        std::fs::write(empty.join("libcuda.so.1"), b"").expect("fake driver");
        let found = find_cuda_driver(std::slice::from_ref(&empty)).expect("found");
        assert!(found.ends_with("libcuda.so.1"));
        std::fs::remove_dir_all(&empty).expect("cleanup");
        if !cfg!(feature = "cuda") {
            let err = check_device(DeviceChoice::Cuda(0)).expect_err("no cuda feature");
            assert!(err.contains("--features cuda"), "{err}");
        }
        assert_eq!(check_device(DeviceChoice::Cpu), Ok(None));
    }
}
