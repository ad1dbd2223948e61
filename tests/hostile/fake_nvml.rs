//! The fake NVML shows what real machines show (issue 41): processes listed under PIDs the
//! daemon never sees (a container's PID namespace), per-process memory that NVML reports as
//! unavailable, and still a lost GPU. Read through the real nvml-wrapper crate, in this process:
//! the state goes in through the fake's `fake_nvml_set_state`, as `src/gpu/nvml.rs`'s unit tests
//! do, so no environment variable is set in a running, multithreaded test binary.

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;
use std::ffi::{c_char, c_int, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::sync::{Mutex, MutexGuard, OnceLock};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

type SetState = unsafe extern "C" fn(*const c_char) -> c_int;

/// The fake's `fake_nvml_set_state`, from the library nvml-wrapper loads (dlopen of a loaded
/// path returns that library; RTLD_NODELETE keeps its state when an `Nvml` is dropped).
fn setter() -> SetState {
    static SETTER: OnceLock<usize> = OnceLock::new();
    let sym = *SETTER.get_or_init(|| {
        let lib = env!("SWEEPD_FAKE_NVML");
        assert!(!lib.is_empty(), "the fake libnvidia-ml was not built");
        let path = CString::new(std::path::Path::new(lib).as_os_str().as_bytes()).unwrap();
        // SAFETY: NUL-terminated strings; the symbol is `int fake_nvml_set_state(const char *)`.
        unsafe {
            let handle = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NODELETE);
            assert!(!handle.is_null(), "dlopen {lib}");
            let sym = libc::dlsym(handle, c"fake_nvml_set_state".as_ptr());
            assert!(!sym.is_null(), "fake_nvml_set_state: {:?}", {
                let e = libc::dlerror();
                (!e.is_null()).then(|| CStr::from_ptr(e).to_string_lossy().into_owned())
            });
            sym as usize
        }
    });
    // SAFETY: the address of `int fake_nvml_set_state(const char *)`, found above.
    unsafe { std::mem::transmute::<usize, SetState>(sym) }
}

/// A turn at the fake (its state is process-wide): the lock, held while the test reads.
struct Fake {
    _turn: MutexGuard<'static, ()>,
}

impl Fake {
    fn new(state: &str) -> Fake {
        static TURN: Mutex<()> = Mutex::new(());
        let fake = Fake {
            _turn: TURN.lock().unwrap_or_else(|e| e.into_inner()),
        };
        fake.set(state);
        fake
    }

    fn set(&self, state: &str) {
        let text = CString::new(state).unwrap();
        // SAFETY: a NUL-terminated string the fake copies before returning.
        assert_eq!(unsafe { setter()(text.as_ptr()) }, 0);
    }

    fn open(&self) -> Nvml {
        Nvml::builder()
            .lib_path(std::ffi::OsStr::new(env!("SWEEPD_FAKE_NVML")))
            .init()
            .expect("the fake NVML opens")
    }
}

/// (pid as listed, usedGpuMemory) of device `index`, in the fake's order.
fn listed(nvml: &Nvml, index: u32) -> Vec<(u32, UsedGpuMemory)> {
    let device = nvml.device_by_index(index).unwrap();
    device
        .running_compute_processes()
        .unwrap()
        .into_iter()
        .map(|p| (p.pid, p.used_gpu_memory))
        .collect()
}

fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

#[test]
fn a_container_lists_our_processes_under_host_pids_the_daemon_never_sees() {
    let fake = Fake::new("gpu 0 24G A10\nproc 0 100 1G\nproc 0 101 512M\npid_offset 4000000\n");
    let nvml = fake.open();
    assert_eq!(
        listed(&nvml, 0),
        [
            (4_000_100, UsedGpuMemory::Used(GIB)),
            (4_000_101, UsedGpuMemory::Used(512 * MIB)),
        ]
    );
    // The device's own figures are the same wherever its processes are listed.
    let memory = nvml.device_by_index(0).unwrap().memory_info().unwrap();
    assert_eq!(
        (memory.used, memory.free),
        (GIB + 512 * MIB, 23 * GIB - 512 * MIB)
    );
    // `pid_offset 0` lists pids as they are again.
    fake.set("gpu 0 24G A10\nproc 0 100 1G\npid_offset 7\npid_offset 0\n");
    assert_eq!(listed(&nvml, 0), [(100, UsedGpuMemory::Used(GIB))]);
}

#[test]
fn a_pid_map_lists_one_process_under_the_pid_given_before_any_offset() {
    let base = "gpu 0 24G A10\nproc 0 100 1G\nproc 0 101 2G\npid_offset 1000\npid_map 100 77\n";
    let fake = Fake::new(base);
    let nvml = fake.open();
    assert_eq!(
        listed(&nvml, 0),
        [
            (77, UsedGpuMemory::Used(GIB)),
            (1101, UsedGpuMemory::Used(2 * GIB))
        ]
    );
    // A later line for the same pid replaces; a listed pid of 0 removes the map.
    fake.set(&format!("{base}pid_map 100 78\n"));
    assert_eq!(listed(&nvml, 0)[0].0, 78);
    fake.set(&format!("{base}pid_map 100 0\n"));
    assert_eq!(listed(&nvml, 0)[0].0, 1100);
}

#[test]
fn per_process_memory_reads_unavailable_while_the_device_still_counts_it() {
    let procs = "proc 0 100 1G\nproc 1 100 3G\n";
    let fake = Fake::new(&format!(
        "gpu 0 24G A10\ngpu 1 24G A10\n{procs}proc_memory_unavailable 1\n"
    ));
    let nvml = fake.open();
    assert_eq!(listed(&nvml, 0), [(100, UsedGpuMemory::Used(GIB))]);
    assert_eq!(listed(&nvml, 1), [(100, UsedGpuMemory::Unavailable)]);
    let memory = nvml.device_by_index(1).unwrap().memory_info().unwrap();
    assert_eq!((memory.used, memory.free), (3 * GIB, 21 * GIB));
    // Without an index, every device, declared before or after the line.
    fake.set(&format!(
        "gpu 0 24G A10\nproc_memory_unavailable\ngpu 1 24G A10\n{procs}"
    ));
    assert_eq!(listed(&nvml, 0), [(100, UsedGpuMemory::Unavailable)]);
    assert_eq!(listed(&nvml, 1), [(100, UsedGpuMemory::Unavailable)]);
}

#[test]
fn dead_processes_are_pruned_by_their_own_pid_not_the_one_they_are_listed_under() {
    let (me, dead) = (std::process::id(), dead_pid());
    // The dead process is listed under our pid, we are listed under a pid long gone.
    let fake = Fake::new(&format!(
        "gpu 0 24G A10\nprune_dead_pids\nproc 0 {me} 1G\nproc 0 {dead} 2G\n\
         pid_map {dead} {me}\npid_map {me} {dead}\n"
    ));
    let nvml = fake.open();
    assert_eq!(listed(&nvml, 0), [(dead, UsedGpuMemory::Used(GIB))]);
    assert_eq!(
        nvml.device_by_index(0).unwrap().memory_info().unwrap().used,
        GIB
    );
}

#[test]
fn a_lost_gpu_still_reads_as_lost_beside_the_new_directives() {
    let fake = Fake::new(
        "gpu 0 24G A10\ngpu 1 24G A10\nproc 0 100 1G\npid_offset 10\nproc_memory_unavailable\n",
    );
    let nvml = fake.open();
    let device = nvml.device_by_index(0).unwrap();
    fake.set("gpu 1 24G A10\nproc 0 100 1G\npid_offset 10\nproc_memory_unavailable\n");
    assert!(matches!(device.memory_info(), Err(NvmlError::GpuLost)));
    assert!(matches!(
        device.running_compute_processes(),
        Err(NvmlError::GpuLost)
    ));
}

#[test]
fn a_malformed_new_directive_makes_every_call_fail_loudly() {
    for line in [
        "pid_offset -1",
        "pid_offset 2147483648",
        "pid_offset",
        "pid_map 0 5",
        "pid_map 5",
        "pid_map 5 x",
        "proc_memory_unavailable 16",
        "proc_memory_unavailable 0 1",
    ] {
        let fake = Fake::new(&format!("gpu 0 24G A10\n{line}\n"));
        let result = Nvml::builder()
            .lib_path(std::ffi::OsStr::new(env!("SWEEPD_FAKE_NVML")))
            .init();
        assert!(
            matches!(result, Err(NvmlError::Unknown)),
            "{line}: {:?}",
            result.map(|_| ())
        );
        drop(fake);
    }
}
