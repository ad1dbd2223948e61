//! NVML readings of the GPUs that sweepd runs trials on.
//!
//! The supervisor places trials by each device's free memory and charges GPU memory to trials
//! by the compute processes the driver lists; this module is where those numbers come from.
//! It goes through the `nvml-wrapper` crate, which loads NVIDIA's `libnvidia-ml.so.1` at run
//! time (dlopen), so sweepd builds and runs on machines without the driver (`devices = "none"`)
//! and the tests run the real crate against a fake library (`fake-nvml/`, built by `build.rs`).
//!
//! Every call here is blocking FFI into the driver: async callers use `spawn_blocking`.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

/// The library loaded when neither `[gpu] nvml_lib` nor `$SWEEPD_NVML_LIB` names one.
pub const SYSTEM_NVML_LIB: &str = "libnvidia-ml.so.1";
/// Environment variable naming the NVML library to load, below `[gpu] nvml_lib`.
pub const NVML_LIB_ENV: &str = "SWEEPD_NVML_LIB";

/// One loaded, initialized NVML, shared by all readings (`Send + Sync`: callers wrap it in an
/// `Arc`). Dropping it shuts NVML down.
pub struct Gpu {
    nvml: Nvml,
    lib: PathBuf,
}

const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Gpu>()
};

/// A compute process on a device and the device memory it holds, in bytes (0 where the driver
/// does not say). A pid listed several times (several contexts) appears once, summed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ProcessMemory {
    pub pid: u32,
    pub used: u64,
}

/// One device as NVML reported it at one moment. Memory in bytes, utilization in percent
/// (`None` where the device does not report it).
#[derive(Debug, Clone, serde::Serialize)]
pub struct DeviceReading {
    pub index: u32,
    pub name: String,
    pub total: u64,
    pub free: u64,
    pub used: u64,
    pub util_gpu: Option<u32>,
    pub util_mem: Option<u32>,
    /// Compute processes, by pid.
    pub processes: Vec<ProcessMemory>,
    /// NVML listed a process without the memory it holds (MIG, or a driver that hides it):
    /// its `used` is 0, which says nothing (`gpu::source`).
    pub no_memory_per_process: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// The library could not be opened, or its `nvmlInit` failed (no driver loaded).
    #[error(
        "NVML could not be loaded from {}: {reason} (no NVIDIA driver? set [gpu] nvml_lib or \
         {NVML_LIB_ENV}, or devices = \"none\" for CPU-only)",
        .lib.display()
    )]
    Load { lib: PathBuf, reason: String },
    /// NVML could not say how many devices there are.
    #[error("NVML could not count the GPUs: {reason}")]
    Count { reason: String },
    /// A reading of one device failed (no such index, GPU lost, ...).
    #[error("GPU {index}: {reason}")]
    Device { index: u32, reason: String },
}

impl Gpu {
    /// Loads NVML: `lib` if given (from [gpu] nvml_lib), else $SWEEPD_NVML_LIB, else the system's libnvidia-ml.so.1.
    pub fn open(lib: Option<&Path>) -> Result<Gpu, GpuError> {
        let lib = choose_lib(lib, std::env::var_os(NVML_LIB_ENV));
        match Nvml::builder().lib_path(lib.as_os_str()).init() {
            Ok(nvml) => Ok(Gpu { nvml, lib }),
            Err(e) => Err(GpuError::Load {
                reason: describe(&e),
                lib,
            }),
        }
    }

    /// The library this NVML was loaded from, as it was asked for.
    pub fn lib(&self) -> &Path {
        &self.lib
    }

    pub fn device_count(&self) -> Result<u32, GpuError> {
        self.nvml.device_count().map_err(|e| GpuError::Count {
            reason: describe(&e),
        })
    }

    /// One device's reading. Blocking FFI: callers run it in spawn_blocking.
    pub fn read(&self, index: u32) -> Result<DeviceReading, GpuError> {
        let fail = |what: &str, e: NvmlError| GpuError::Device {
            index,
            reason: format!("{what}: {}", describe(&e)),
        };
        let device = self
            .nvml
            .device_by_index(index)
            .map_err(|e| fail("no device at this index", e))?;
        let name = device.name().map_err(|e| fail("name", e))?;
        let memory = device.memory_info().map_err(|e| fail("memory info", e))?;
        // Utilization is advisory: devices that do not report it (NotSupported) read as None.
        let (util_gpu, util_mem) = match device.utilization_rates() {
            Ok(u) => (Some(u.gpu), Some(u.memory)),
            Err(_) => (None, None),
        };
        // The process list can grow between nvml-wrapper's count call and its fetch (it leaves
        // room for 5 more); that shows as InsufficientSize, and asking again settles it.
        let mut attempt = 0;
        let listed = loop {
            match device.running_compute_processes() {
                Err(NvmlError::InsufficientSize(_)) if attempt < 2 => attempt += 1,
                other => break other.map_err(|e| fail("compute processes", e))?,
            }
        };
        let mut by_pid = BTreeMap::<u32, u64>::new();
        let mut no_memory_per_process = false;
        for p in listed {
            let used = match p.used_gpu_memory {
                UsedGpuMemory::Used(bytes) => bytes,
                UsedGpuMemory::Unavailable => {
                    no_memory_per_process = true;
                    0
                }
            };
            let sum = by_pid.entry(p.pid).or_insert(0);
            *sum = sum.saturating_add(used);
        }
        Ok(DeviceReading {
            index,
            name,
            total: memory.total,
            free: memory.free,
            used: memory.used,
            util_gpu,
            util_mem,
            processes: by_pid
                .into_iter()
                .map(|(pid, used)| ProcessMemory { pid, used })
                .collect(),
            no_memory_per_process,
        })
    }

    /// Readings of several devices; an error on one device does not hide the others.
    pub fn read_all(&self, indices: &[u32]) -> Vec<Result<DeviceReading, GpuError>> {
        indices.iter().map(|&index| self.read(index)).collect()
    }
}

impl fmt::Debug for Gpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gpu")
            .field("lib", &self.lib)
            .finish_non_exhaustive()
    }
}

/// `[gpu] nvml_lib`, else `$SWEEPD_NVML_LIB` (when not empty), else the system library.
fn choose_lib(configured: Option<&Path>, env: Option<OsString>) -> PathBuf {
    match (configured, env) {
        (Some(lib), _) => lib.to_path_buf(),
        (None, Some(lib)) if !lib.is_empty() => PathBuf::from(lib),
        _ => PathBuf::from(SYSTEM_NVML_LIB),
    }
}

/// An NVML error in words. nvml-wrapper 0.13 knows return codes up to 23 only; name the newer
/// ones rather than print "unexpected enum variant value".
fn describe(e: &NvmlError) -> String {
    match e {
        NvmlError::LibloadingError(e) => e.to_string(),
        NvmlError::UnexpectedVariant(code) => {
            let name = match code {
                24 => "frequency not supported",
                25 => "argument version mismatch (the driver is older than this sweepd expects)",
                26 => "deprecated",
                27 => "not ready",
                28 => "GPU not found",
                29 => "invalid state",
                _ => "unknown to this sweepd",
            };
            format!("NVML error {code}: {name}")
        }
        e => e.to_string(),
    }
}

/// The fake NVML (`fake-nvml/`) for unit tests anywhere in the crate. Integration tests hand
/// the daemon they start a state file through `$FAKE_NVML_STATE`; here, inside the test binary,
/// the state goes straight into the loaded library through its `fake_nvml_set_state`, which
/// every later call reads instead of the file: no environment variable set from a running
/// multithreaded process (`set_var` is unsound there), and no file left behind. The state is
/// process-wide, so tests take turns through [`Fake`]: never call the setter elsewhere.
#[cfg(test)]
pub(crate) mod fake {
    use super::Gpu;
    use std::ffi::{c_char, c_int, CStr, CString};
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;
    use std::sync::{Mutex, MutexGuard, OnceLock};

    /// The fake library build.rs made (empty when it found no C compiler).
    pub(crate) fn lib() -> &'static Path {
        let lib = env!("SWEEPD_FAKE_NVML");
        assert!(
            !lib.is_empty(),
            "the fake NVML was not built: build.rs found no C compiler (see cargo's warnings)"
        );
        Path::new(lib)
    }

    type SetState = unsafe extern "C" fn(*const c_char) -> c_int;

    /// The fake's `fake_nvml_set_state`, from the same library nvml-wrapper loads: dlopen of a
    /// path already loaded returns that library, so both see one state. RTLD_NODELETE and a
    /// handle never closed keep it loaded, and its state with it, when a `Gpu` is dropped.
    fn setter() -> SetState {
        static SETTER: OnceLock<SetState> = OnceLock::new();
        *SETTER.get_or_init(|| {
            let path = CString::new(lib().as_os_str().as_bytes()).expect("a path has no NUL");
            // SAFETY: dlopen and dlsym get NUL-terminated strings; the symbol is the C function
            // `int fake_nvml_set_state(const char *)` of fake-nvml/fake_nvml.c, whose type
            // SetState spells.
            unsafe {
                let handle = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NODELETE);
                assert!(
                    !handle.is_null(),
                    "dlopen {}: {}",
                    path.to_string_lossy(),
                    dlerror()
                );
                let sym = libc::dlsym(handle, c"fake_nvml_set_state".as_ptr());
                assert!(!sym.is_null(), "fake_nvml_set_state: {}", dlerror());
                std::mem::transmute::<*mut libc::c_void, SetState>(sym)
            }
        })
    }

    fn dlerror() -> String {
        // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl call.
        let e = unsafe { libc::dlerror() };
        if e.is_null() {
            "unknown error".into()
        } else {
            // SAFETY: checked non-null above; copied before any other dl call.
            unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
        }
    }

    /// The fake's state: directives as in `fake-nvml/fake_nvml.c`; `None`: no driver.
    fn set_state(state: Option<&str>) {
        let text = state.map(|s| CString::new(s).expect("a fake NVML state has no NUL"));
        let ptr = text.as_ref().map_or(std::ptr::null(), |t| t.as_ptr());
        // SAFETY: a NUL-terminated string (or NULL) that the fake copies before returning.
        let rc = unsafe { setter()(ptr) };
        assert_eq!(rc, 0, "fake_nvml_set_state: out of memory");
    }

    /// A turn at the fake: holds the lock while the test sets the state and reads.
    pub(crate) struct Fake {
        _turn: MutexGuard<'static, ()>,
    }

    impl Fake {
        /// Waits for the turn, then sets the state (directives as in `fake-nvml/fake_nvml.c`).
        pub(crate) fn new(state: &str) -> Fake {
            static TURN: Mutex<()> = Mutex::new(());
            // A failed test poisons the lock; the next one sets the state anyway.
            let turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
            let fake = Fake { _turn: turn };
            fake.set(state);
            fake
        }

        /// Replaces the state; a reading in another thread sees the old one or the new one.
        pub(crate) fn set(&self, state: &str) {
            set_state(Some(state));
        }

        /// No state: the fake answers as a machine without a driver.
        pub(crate) fn remove(&self) {
            set_state(None);
        }

        pub(crate) fn open(&self) -> Gpu {
            Gpu::open(Some(lib())).expect("open the fake NVML")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::{lib as fake_lib, Fake};
    use super::*;
    use std::sync::Arc;

    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;

    fn procs(r: &DeviceReading) -> Vec<(u32, u64)> {
        r.processes.iter().map(|p| (p.pid, p.used)).collect()
    }

    fn device_error(r: Result<DeviceReading, GpuError>) -> (u32, String) {
        match r {
            Err(GpuError::Device { index, reason }) => (index, reason),
            other => panic!("expected a device error, got {other:?}"),
        }
    }

    #[test]
    fn two_gpus_read_with_names_and_totals() {
        let fake = Fake::new(
            "# two cards\n\
             gpu 0 80G NVIDIA H100 80GB HBM3\n\
             \n\
             gpu 1 24564M NVIDIA RTX A5000\n",
        );
        let gpu = fake.open();
        assert_eq!(gpu.device_count().unwrap(), 2);
        assert_eq!(gpu.lib(), fake_lib());

        let r = gpu.read(0).unwrap();
        assert_eq!((r.index, r.name.as_str()), (0, "NVIDIA H100 80GB HBM3"));
        assert_eq!((r.total, r.free, r.used), (80 * GIB, 80 * GIB, 0));
        assert!(r.processes.is_empty());

        let r = gpu.read(1).unwrap();
        assert_eq!((r.index, r.name.as_str()), (1, "NVIDIA RTX A5000"));
        assert_eq!((r.total, r.free, r.used), (24564 * MIB, 24564 * MIB, 0));
    }

    #[test]
    fn process_lines_sum_replace_and_remove() {
        let base = "gpu 0 16G A\ngpu 1 16G B\nproc 0 100 1G\nproc 0 101 512M\nproc 1 100 2G\n";
        let fake = Fake::new(base);
        let gpu = fake.open();

        let r = gpu.read(0).unwrap();
        assert_eq!(procs(&r), [(100, GIB), (101, 512 * MIB)]);
        assert_eq!(
            (r.used, r.free),
            (GIB + 512 * MIB, 16 * GIB - GIB - 512 * MIB)
        );
        assert_eq!(procs(&gpu.read(1).unwrap()), [(100, 2 * GIB)]);

        // Re-read on every call: the same Gpu sees each change.
        fake.set(&format!("{base}proc 0 100 256M\n"));
        let r = gpu.read(0).unwrap();
        assert_eq!(procs(&r), [(100, 256 * MIB), (101, 512 * MIB)]);
        assert_eq!(r.used, 768 * MIB);

        fake.set(&format!("{base}proc 0 100 256M\nproc 0 101 0\n"));
        let r = gpu.read(0).unwrap();
        assert_eq!(procs(&r), [(100, 256 * MIB)]);
        assert_eq!((r.used, r.free), (256 * MIB, 16 * GIB - 256 * MIB));
        assert_eq!(procs(&gpu.read(1).unwrap()), [(100, 2 * GIB)]);

        // More in use than the card has: free stops at 0.
        fake.set("gpu 0 1G A\nproc 0 7 3G\n");
        let r = gpu.read(0).unwrap();
        assert_eq!((r.total, r.used, r.free), (GIB, 3 * GIB, 0));
    }

    #[test]
    fn processes_under_other_pids_and_without_memory_per_process() {
        let me = std::process::id();
        let state = format!("gpu 0 16G A\nproc 0 {me} 1G\nprune_dead_pids\n");
        let fake = Fake::new(&format!("{state}pid_offset 100000\n"));
        let gpu = fake.open();
        // As a container's NVML lists our processes: under pids we do not see.
        let r = gpu.read(0).unwrap();
        assert_eq!(procs(&r), [(me + 100000, GIB)]);
        assert!(!r.no_memory_per_process);
        // As on MIG: the process, and no memory per process; the device's memory counts it.
        fake.set(&format!("{state}proc_memory_unavailable\n"));
        let r = gpu.read(0).unwrap();
        assert_eq!(procs(&r), [(me, 0)]);
        assert!(r.no_memory_per_process);
        assert_eq!((r.used, r.free), (GIB, 15 * GIB));
    }

    #[test]
    fn prune_dead_pids_drops_exited_processes_only() {
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let dead = child.id();
        child.wait().expect("wait for true");
        let alive = std::process::id();
        let state = format!("gpu 0 16G A\nproc 0 {dead} 1G\nproc 0 {alive} 2G\n");

        let fake = Fake::new(&state);
        let gpu = fake.open();
        let mut expected = vec![(dead, GIB), (alive, 2 * GIB)];
        expected.sort();
        assert_eq!(procs(&gpu.read(0).unwrap()), expected);

        fake.set(&format!("{state}prune_dead_pids\n"));
        let r = gpu.read(0).unwrap();
        assert_eq!(procs(&r), [(alive, 2 * GIB)]);
        assert_eq!(r.used, 2 * GIB);
    }

    #[test]
    fn a_failing_call_fails_that_reading_until_it_recovers() {
        let state = "gpu 0 16G A\ngpu 1 8G B\n";
        let fake = Fake::new(&format!("{state}fail nvmlDeviceGetMemoryInfo_v2 15\n"));
        let gpu = fake.open();

        let (index, reason) = device_error(gpu.read(1));
        assert_eq!(index, 1);
        assert!(
            reason.contains("memory info") && reason.contains("fell off the bus"),
            "{reason}"
        );
        // Only that call fails.
        assert_eq!(gpu.device_count().unwrap(), 2);

        fake.set(state);
        assert_eq!(gpu.read(1).unwrap().total, 8 * GIB);
    }

    #[test]
    fn read_all_keeps_going_past_a_bad_device() {
        let fake = Fake::new("gpu 0 16G A\ngpu 1 8G B\n");
        let gpu = fake.open();
        let all = gpu.read_all(&[0, 7, 1]);
        assert_eq!(all.len(), 3);
        assert_eq!(all[0].as_ref().unwrap().name, "A");
        assert!(
            matches!(all[1], Err(GpuError::Device { index: 7, .. })),
            "{:?}",
            all[1]
        );
        assert_eq!(all[2].as_ref().unwrap().name, "B");
        assert!(gpu.read_all(&[]).is_empty());
    }

    #[test]
    fn utilization_is_read_and_missing_reads_as_none() {
        let fake = Fake::new("gpu 0 16G A\ngpu 1 16G B\nutil 0 87 42\n");
        let gpu = fake.open();
        let r = gpu.read(0).unwrap();
        assert_eq!((r.util_gpu, r.util_mem), (Some(87), Some(42)));
        // No util line: the fake says NOT_SUPPORTED, as older cards do.
        let r = gpu.read(1).unwrap();
        assert_eq!((r.util_gpu, r.util_mem), (None, None));
    }

    #[test]
    fn no_driver_fails_open_with_a_clear_message() {
        let fake = Fake::new("gpu 0 16G A\n");
        fake.remove();
        let err = Gpu::open(Some(fake_lib())).unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(&err, GpuError::Load { lib, .. } if lib == fake_lib()),
            "{err:?}"
        );
        assert!(text.contains(&fake_lib().display().to_string()), "{text}");
        assert!(text.contains("NVIDIA driver is not loaded"), "{text}");
        assert!(
            text.contains("SWEEPD_NVML_LIB") && text.contains("devices = \"none\""),
            "{text}"
        );

        // The same through a fail line, and a Gpu opened before keeps its other readings.
        fake.set("gpu 0 16G A\n");
        let gpu = fake.open();
        fake.set("gpu 0 16G A\nfail nvmlInit_v2 9\n");
        assert!(matches!(
            Gpu::open(Some(fake_lib())),
            Err(GpuError::Load { .. })
        ));
        assert_eq!(gpu.read(0).unwrap().name, "A");
    }

    #[test]
    fn a_malformed_state_file_is_loud() {
        let _fake = Fake::new("gpu 0 16X A\n");
        let err = Gpu::open(Some(fake_lib())).unwrap_err();
        assert!(err.to_string().contains("internal driver error"), "{err}");
    }

    #[test]
    fn a_missing_library_is_a_load_error_naming_it() {
        let lib = Path::new("/nonexistent/sweepd-test/libnvidia-ml.so.1");
        let err = Gpu::open(Some(lib)).unwrap_err();
        match &err {
            GpuError::Load { lib: got, .. } => assert_eq!(got, lib),
            other => panic!("expected a load error, got {other:?}"),
        }
        assert!(
            err.to_string().contains(&lib.display().to_string()),
            "{err}"
        );
    }

    #[test]
    fn readings_from_several_threads() {
        let fake = Fake::new("gpu 0 16G A\ngpu 1 8G B\nproc 1 42 1G\n");
        let gpu = Arc::new(fake.open());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let gpu = Arc::clone(&gpu);
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        for r in gpu.read_all(&[0, 1]) {
                            r.unwrap();
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(gpu.read(1).unwrap().used, GIB);
    }

    #[test]
    fn the_library_is_chosen_config_then_env_then_system() {
        let cfg = Path::new("/opt/nvml/libnvidia-ml.so.1");
        let env = || Some(OsString::from("/env/libnvidia-ml.so.1"));
        assert_eq!(choose_lib(Some(cfg), env()), cfg);
        assert_eq!(choose_lib(None, env()), Path::new("/env/libnvidia-ml.so.1"));
        assert_eq!(
            choose_lib(None, Some(OsString::new())),
            Path::new(SYSTEM_NVML_LIB)
        );
        assert_eq!(choose_lib(None, None), Path::new(SYSTEM_NVML_LIB));
    }
}
