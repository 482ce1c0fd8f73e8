//! The CUDA backend, for cards whose OpenCL is missing or lags: the CUDA driver API
//! (`libcuda.so.1`) and NVRTC (`libnvrtc`), both opened at run time, so that nothing of CUDA is
//! needed to build or to start. The kernel is the OpenCL one, compiled as CUDA C++ under
//! [`crate::CUDA_PRELUDE`] for the device's own architecture.
//!
//! The entry points used (the fields of `Driver` and `Nvrtc`) are bound here by hand (with
//! `libloading`) rather than through a crate of generated bindings, so that the CUDA version is not
//! chosen at build time and a missing library or symbol is an error, never a panic.
//!
//! NVRTC is found as `NQ_NVRTC_LIB` (a path) if set, else `libnvrtc.so.13`, `.so.12` or
//! `.so.11.2` on the loader's path or in the usual toolkit directories.

use crate::backend::{Args, Backend, Buffer, Kernel};
use crate::{DeviceInfo, DeviceKind, GpuError};
use libloading::Library;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::ptr;
use std::sync::OnceLock;

type CuResult = c_int;
type CuDevice = c_int;
type CuContext = *mut c_void;
type CuModule = *mut c_void;
type CuFunction = *mut c_void;
type CuDevicePtr = u64;
type NvrtcProgram = *mut c_void;

const CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: c_int = 8;
const CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: c_int = 16;
const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: c_int = 75;
const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: c_int = 76;
const CUDA_ERROR_INVALID_VALUE: c_int = 1;

/// The CUDA driver's entry points (cuda.h, 64-bit Linux).
struct Driver {
    _lib: Library,
    init: unsafe extern "C" fn(c_uint) -> CuResult,
    driver_version: unsafe extern "C" fn(*mut c_int) -> CuResult,
    get_error_name: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
    device_count: unsafe extern "C" fn(*mut c_int) -> CuResult,
    device_get: unsafe extern "C" fn(*mut CuDevice, c_int) -> CuResult,
    device_name: unsafe extern "C" fn(*mut c_char, c_int, CuDevice) -> CuResult,
    device_attribute: unsafe extern "C" fn(*mut c_int, c_int, CuDevice) -> CuResult,
    device_total_mem: unsafe extern "C" fn(*mut usize, CuDevice) -> CuResult,
    primary_retain: unsafe extern "C" fn(*mut CuContext, CuDevice) -> CuResult,
    primary_release: unsafe extern "C" fn(CuDevice) -> CuResult,
    ctx_set_current: unsafe extern "C" fn(CuContext) -> CuResult,
    ctx_synchronize: unsafe extern "C" fn() -> CuResult,
    module_load_data: unsafe extern "C" fn(*mut CuModule, *const c_void) -> CuResult,
    module_get_function: unsafe extern "C" fn(*mut CuFunction, CuModule, *const c_char) -> CuResult,
    module_unload: unsafe extern "C" fn(CuModule) -> CuResult,
    mem_alloc: unsafe extern "C" fn(*mut CuDevicePtr, usize) -> CuResult,
    mem_free: unsafe extern "C" fn(CuDevicePtr) -> CuResult,
    memcpy_htod: unsafe extern "C" fn(CuDevicePtr, *const c_void, usize) -> CuResult,
    memcpy_dtoh: unsafe extern "C" fn(*mut c_void, CuDevicePtr, usize) -> CuResult,
    memset_d32: unsafe extern "C" fn(CuDevicePtr, c_uint, usize) -> CuResult,
    occupancy: unsafe extern "C" fn(*mut c_int, CuFunction, c_int, usize) -> CuResult,
    #[allow(clippy::type_complexity)]
    launch: unsafe extern "C" fn(
        CuFunction,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        *mut c_void,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> CuResult,
}

/// NVRTC's entry points (nvrtc.h).
struct Nvrtc {
    _lib: Library,
    version: unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int,
    #[allow(clippy::type_complexity)]
    create: unsafe extern "C" fn(
        *mut NvrtcProgram,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> c_int,
    compile: unsafe extern "C" fn(NvrtcProgram, c_int, *const *const c_char) -> c_int,
    log_size: unsafe extern "C" fn(NvrtcProgram, *mut usize) -> c_int,
    log: unsafe extern "C" fn(NvrtcProgram, *mut c_char) -> c_int,
    cubin_size: unsafe extern "C" fn(NvrtcProgram, *mut usize) -> c_int,
    cubin: unsafe extern "C" fn(NvrtcProgram, *mut c_char) -> c_int,
    ptx_size: unsafe extern "C" fn(NvrtcProgram, *mut usize) -> c_int,
    ptx: unsafe extern "C" fn(NvrtcProgram, *mut c_char) -> c_int,
    destroy: unsafe extern "C" fn(*mut NvrtcProgram) -> c_int,
}

/// Copies the entry point `name` out of `lib`.
///
/// # Safety
/// `T` must be the function pointer type of that symbol, and `lib` must outlive its use (the
/// tables below keep their library).
unsafe fn symbol<T: Copy>(lib: &Library, name: &str) -> Result<T, String> {
    // SAFETY: the caller names the symbol's true type.
    unsafe { lib.get::<T>(name.as_bytes()).map(|s| *s).map_err(|e| format!("{name}: {e}")) }
}

/// Opens the first library of `names` that loads.
fn open_first(names: &[String]) -> Result<Library, String> {
    let mut tried = Vec::new();
    for name in names {
        // SAFETY: the CUDA libraries' initialisers have no preconditions.
        match unsafe { Library::new(name) } {
            Ok(lib) => return Ok(lib),
            Err(e) => tried.push(format!("{name} ({e})")),
        }
    }
    Err(format!("none of {} could be opened", tried.join(", ")))
}

fn driver() -> Result<&'static Driver, GpuError> {
    static DRIVER: OnceLock<Result<Driver, String>> = OnceLock::new();
    let loaded = DRIVER.get_or_init(|| {
        let lib = open_first(&["libcuda.so.1".into(), "libcuda.so".into()])
            .map_err(|e| format!("the CUDA driver: {e}"))?;
        // SAFETY: each type is the one cuda.h declares for that symbol; `lib` is kept in the table.
        unsafe {
            Ok(Driver {
                init: symbol(&lib, "cuInit")?,
                driver_version: symbol(&lib, "cuDriverGetVersion")?,
                get_error_name: symbol(&lib, "cuGetErrorName")?,
                device_count: symbol(&lib, "cuDeviceGetCount")?,
                device_get: symbol(&lib, "cuDeviceGet")?,
                device_name: symbol(&lib, "cuDeviceGetName")?,
                device_attribute: symbol(&lib, "cuDeviceGetAttribute")?,
                device_total_mem: symbol(&lib, "cuDeviceTotalMem_v2")?,
                primary_retain: symbol(&lib, "cuDevicePrimaryCtxRetain")?,
                primary_release: symbol(&lib, "cuDevicePrimaryCtxRelease_v2")?,
                ctx_set_current: symbol(&lib, "cuCtxSetCurrent")?,
                ctx_synchronize: symbol(&lib, "cuCtxSynchronize")?,
                module_load_data: symbol(&lib, "cuModuleLoadData")?,
                module_get_function: symbol(&lib, "cuModuleGetFunction")?,
                module_unload: symbol(&lib, "cuModuleUnload")?,
                mem_alloc: symbol(&lib, "cuMemAlloc_v2")?,
                mem_free: symbol(&lib, "cuMemFree_v2")?,
                memcpy_htod: symbol(&lib, "cuMemcpyHtoD_v2")?,
                memcpy_dtoh: symbol(&lib, "cuMemcpyDtoH_v2")?,
                memset_d32: symbol(&lib, "cuMemsetD32_v2")?,
                occupancy: symbol(&lib, "cuOccupancyMaxActiveBlocksPerMultiprocessor")?,
                launch: symbol(&lib, "cuLaunchKernel")?,
                _lib: lib,
            })
        }
    });
    loaded.as_ref().map_err(|reason| GpuError::NoPlatform { reason: reason.clone() })
}

fn nvrtc() -> Result<&'static Nvrtc, GpuError> {
    static NVRTC: OnceLock<Result<Nvrtc, String>> = OnceLock::new();
    let loaded = NVRTC.get_or_init(|| {
        let names: Vec<String> = match std::env::var("NQ_NVRTC_LIB") {
            Ok(path) if !path.is_empty() => vec![path],
            _ => {
                let sonames = ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2"];
                let dirs = ["/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib"];
                let mut names: Vec<String> = sonames.iter().map(|s| s.to_string()).collect();
                for dir in dirs {
                    names.extend(sonames.iter().map(|s| format!("{dir}/{s}")));
                }
                names
            }
        };
        let lib = open_first(&names).map_err(|e| format!("NVRTC (or set NQ_NVRTC_LIB): {e}"))?;
        // SAFETY: each type is the one nvrtc.h declares for that symbol; `lib` is kept in the
        // table.
        unsafe {
            Ok(Nvrtc {
                version: symbol(&lib, "nvrtcVersion")?,
                create: symbol(&lib, "nvrtcCreateProgram")?,
                compile: symbol(&lib, "nvrtcCompileProgram")?,
                log_size: symbol(&lib, "nvrtcGetProgramLogSize")?,
                log: symbol(&lib, "nvrtcGetProgramLog")?,
                cubin_size: symbol(&lib, "nvrtcGetCUBINSize")?,
                cubin: symbol(&lib, "nvrtcGetCUBIN")?,
                ptx_size: symbol(&lib, "nvrtcGetPTXSize")?,
                ptx: symbol(&lib, "nvrtcGetPTX")?,
                destroy: symbol(&lib, "nvrtcDestroyProgram")?,
                _lib: lib,
            })
        }
    });
    loaded.as_ref().map_err(|reason| GpuError::NoPlatform { reason: reason.clone() })
}

/// The kernel `source` compiled by NVRTC for a device of compute capability `(major, minor)`
/// named `device`: its own machine code where NVRTC knows the architecture, else PTX for
/// `compute_90` that the driver compiles at load time.
fn nvrtc_image(
    source: &str,
    defines: &[String],
    (major, minor): (c_int, c_int),
    device: &str,
) -> Result<Vec<u8>, GpuError> {
    let nvrtc = nvrtc()?;
    let mut version = (0, 0);
    // SAFETY: two live out-integers.
    unsafe { (nvrtc.version)(&mut version.0, &mut version.1) };
    let source = CString::new(format!("{}{source}", crate::CUDA_PRELUDE))
        .map_err(|_| GpuError::Config { reason: "the kernel source holds a NUL".into() })?;
    let attempts = [
        (format!("--gpu-architecture=sm_{major}{minor}"), true),
        ("--gpu-architecture=compute_90".to_owned(), false),
    ];
    let mut last_log = String::new();
    for (arch, machine_code) in attempts {
        let options = nvrtc_options(&arch, defines)?;
        let compiled = nvrtc_compile(nvrtc, &source, &options, machine_code)?;
        last_log = format!("NVRTC {}.{} ({arch}): {}", version.0, version.1, compiled.log);
        match compiled.code {
            Some(code) if !code.is_empty() => return Ok(code),
            // An option NVRTC does not know (a newer architecture than it): try PTX.
            None if compiled.status == 5 && machine_code => continue,
            _ => break,
        }
    }
    Err(GpuError::BuildFailed { device: device.to_owned(), log: last_log })
}

/// NVRTC's options for one attempt: the architecture option `arch` and each macro definition.
fn nvrtc_options(arch: &str, defines: &[String]) -> Result<Vec<CString>, GpuError> {
    let mut options: Vec<CString> = vec![CString::new(arch).unwrap()];
    for d in defines {
        options.push(
            CString::new(format!("-D{d}"))
                .map_err(|_| GpuError::Config { reason: format!("bad macro definition {d:?}") })?,
        );
    }
    Ok(options)
}

/// What one NVRTC compile gave.
struct Compiled {
    /// `nvrtcCompileProgram`'s result (0: compiled).
    status: c_int,
    /// The program log, trimmed.
    log: String,
    /// Where it compiled: the machine code (`machine_code`) or PTX, empty where NVRTC gave none.
    code: Option<Vec<u8>>,
}

/// Compiles `source` once with `options`: the program is created, compiled, read and destroyed
/// here. An error only where the program cannot be created; a failed compile is a [`Compiled`].
fn nvrtc_compile(
    nvrtc: &Nvrtc,
    source: &CStr,
    options: &[CString],
    machine_code: bool,
) -> Result<Compiled, GpuError> {
    let option_ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
    let mut program: NvrtcProgram = ptr::null_mut();
    // SAFETY (this block): the source, name and options outlive the calls; the log and
    // code buffers have the sizes NVRTC reported; the program is destroyed once.
    unsafe {
        let created = (nvrtc.create)(
            &mut program,
            source.as_ptr(),
            c"nq_kernel.cu".as_ptr(),
            0,
            ptr::null(),
            ptr::null(),
        );
        if created != 0 {
            return Err(GpuError::Runtime {
                api: "NVRTC",
                code: created,
                name: "nvrtcCreateProgram".into(),
                what: "loading the kernel source".into(),
            });
        }
        let status = (nvrtc.compile)(program, option_ptrs.len() as c_int, option_ptrs.as_ptr());
        let mut size = 0usize;
        (nvrtc.log_size)(program, &mut size);
        let mut log = vec![0 as c_char; size.max(1)];
        (nvrtc.log)(program, log.as_mut_ptr());
        let log = CStr::from_ptr(log.as_ptr()).to_string_lossy().trim().to_owned();
        let code = if status == 0 {
            let (size_of, get) = if machine_code {
                (nvrtc.cubin_size, nvrtc.cubin)
            } else {
                (nvrtc.ptx_size, nvrtc.ptx)
            };
            let mut size = 0usize;
            let mut code = Vec::new();
            if size_of(program, &mut size) == 0 && size > 0 {
                code = vec![0u8; size];
                if get(program, code.as_mut_ptr().cast()) != 0 {
                    code.clear();
                }
            }
            Some(code)
        } else {
            None
        };
        (nvrtc.destroy)(&mut program);
        Ok(Compiled { status, log, code })
    }
}

impl Driver {
    /// `Ok` for CUDA_SUCCESS, else the error for `code` met while doing `what`.
    fn check(&self, code: CuResult, what: &str) -> Result<(), GpuError> {
        if code == 0 {
            return Ok(());
        }
        let mut name: *const c_char = ptr::null();
        // SAFETY: cuGetErrorName writes a pointer to a static string, or leaves it null.
        let named = unsafe { (self.get_error_name)(code, &mut name) } == 0 && !name.is_null();
        let name = if named {
            // SAFETY: a non-null name is a NUL-terminated static string.
            unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned()
        } else {
            format!("CUDA error {code}")
        };
        Err(GpuError::from_cuda(code, name, what))
    }
}

/// One buffer: its device address and length in words.
struct DeviceBuffer {
    ptr: CuDevicePtr,
    words: usize,
}

/// An open CUDA device: its primary context, the kernels built on it and the buffers of the
/// current batch.
pub(crate) struct CudaDevice {
    driver: &'static Driver,
    device: CuDevice,
    context: CuContext,
    info: DeviceInfo,
    /// Compute capability, for NVRTC's `--gpu-architecture`.
    capability: (c_int, c_int),
    modules: Vec<(CuModule, CuFunction)>,
    buffers: Vec<DeviceBuffer>,
}

// SAFETY: CUDA contexts, modules, functions and device pointers may be used from any thread once
// the context is made current there, which every call below does first.
unsafe impl Send for CudaDevice {}

impl CudaDevice {
    /// Opens CUDA device `ordinal` (NVRTC is opened at the first build).
    pub fn open(ordinal: usize) -> Result<CudaDevice, GpuError> {
        let driver = driver()?;
        // SAFETY (all calls in this function): the out-pointers point to live locals of the types
        // cuda.h names, and the name buffer's length is passed with it.
        driver.check(unsafe { (driver.init)(0) }, "starting the CUDA driver").map_err(|e| {
            GpuError::NoPlatform { reason: format!("the CUDA driver did not start: {e}") }
        })?;
        let mut count = 0;
        driver.check(unsafe { (driver.device_count)(&mut count) }, "counting CUDA devices")?;
        if ordinal >= count.max(0) as usize {
            return Err(GpuError::NoDevice {
                reason: format!("there is no CUDA device {ordinal}: the driver lists {count}"),
            });
        }
        let mut device = 0;
        driver.check(
            unsafe { (driver.device_get)(&mut device, ordinal as c_int) },
            "getting the CUDA device",
        )?;
        let attribute = |which: c_int, what: &str| -> Result<c_int, GpuError> {
            let mut value = 0;
            driver.check(unsafe { (driver.device_attribute)(&mut value, which, device) }, what)?;
            Ok(value)
        };
        let units = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "reading the SM count")?;
        let shared =
            attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, "reading shared memory")?;
        let major =
            attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "reading the capability")?;
        let minor =
            attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "reading the capability")?;
        let mut name = [0 as c_char; 256];
        driver.check(
            unsafe { (driver.device_name)(name.as_mut_ptr(), name.len() as c_int, device) },
            "reading the device name",
        )?;
        let name = unsafe { CStr::from_ptr(name.as_ptr()) }.to_string_lossy().trim().to_owned();
        let mut memory = 0usize;
        driver.check(
            unsafe { (driver.device_total_mem)(&mut memory, device) },
            "reading the memory size",
        )?;
        let mut version = 0;
        driver.check(unsafe { (driver.driver_version)(&mut version) }, "reading the version")?;
        let mut context = ptr::null_mut();
        driver.check(
            unsafe { (driver.primary_retain)(&mut context, device) },
            "creating a CUDA context",
        )?;
        let info = DeviceInfo {
            index: ordinal,
            platform: format!("CUDA driver {}.{}", version / 1000, version % 1000 / 10),
            name,
            kind: DeviceKind::Gpu,
            compute_units: units.max(1) as u32,
            global_mem_bytes: memory as u64,
            max_alloc_bytes: memory as u64,
            local_mem_bytes: shared.max(0) as u64,
            version: format!("compute capability {major}.{minor}"),
        };
        Ok(CudaDevice {
            driver,
            device,
            context,
            info,
            capability: (major, minor),
            modules: Vec::new(),
            buffers: Vec::new(),
        })
    }

    /// Makes the context current on the calling thread (the solver may move between threads).
    fn current(&self) -> Result<(), GpuError> {
        // SAFETY: the context was retained in `open` and is released only in `drop`.
        self.driver.check(
            unsafe { (self.driver.ctx_set_current)(self.context) },
            "making the CUDA context current",
        )
    }

    fn buffer(&self, buffer: Buffer) -> &DeviceBuffer {
        &self.buffers[buffer.0]
    }

    fn free_buffers(&mut self) {
        for b in self.buffers.drain(..) {
            // SAFETY: allocated by cuMemAlloc in `alloc`, freed once (drained).
            unsafe { (self.driver.mem_free)(b.ptr) };
        }
    }
}

impl Backend for CudaDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn build(&mut self, source: &str, defines: &[String]) -> Result<Kernel, GpuError> {
        let image = nvrtc_image(source, defines, self.capability, &self.info.name)?;
        self.current()?;
        let mut module = ptr::null_mut();
        let mut function = ptr::null_mut();
        // SAFETY: `image` is a complete cubin or NUL-terminated PTX from NVRTC; the out-pointers
        // are live locals.
        self.driver.check(
            unsafe { (self.driver.module_load_data)(&mut module, image.as_ptr().cast()) },
            "loading the kernel",
        )?;
        // SAFETY: the module was just loaded; the name is NUL-terminated.
        let found = unsafe {
            (self.driver.module_get_function)(&mut function, module, c"nq_solve".as_ptr())
        };
        if let Err(e) = self.driver.check(found, "finding the kernel") {
            // SAFETY: loaded above, unloaded once.
            unsafe { (self.driver.module_unload)(module) };
            return Err(e);
        }
        self.modules.push((module, function));
        Ok(Kernel(self.modules.len() - 1))
    }

    fn alloc(&mut self, words: usize, fill: u32, what: &str) -> Result<Buffer, GpuError> {
        self.current()?;
        let words = words.max(1);
        let mut ptr = 0;
        // SAFETY: a live out-pointer; the size in bytes.
        self.driver.check(
            unsafe { (self.driver.mem_alloc)(&mut ptr, words * 4) },
            &format!("allocating {what}"),
        )?;
        self.buffers.push(DeviceBuffer { ptr, words });
        // SAFETY: `words` 32-bit words lie in the allocation just made.
        self.driver.check(
            unsafe { (self.driver.memset_d32)(ptr, fill, words) },
            &format!("filling {what}"),
        )?;
        Ok(Buffer(self.buffers.len() - 1))
    }

    fn write(&mut self, buffer: Buffer, data: &[u32], what: &str) -> Result<(), GpuError> {
        self.current()?;
        let b = self.buffer(buffer);
        if data.len() > b.words {
            return Err(GpuError::from_cuda(
                CUDA_ERROR_INVALID_VALUE,
                "a write past the end of a buffer".into(),
                &format!("writing {what}"),
            ));
        }
        // SAFETY: synchronous copy of `data` into the first `data.len()` words of the buffer.
        self.driver.check(
            unsafe { (self.driver.memcpy_htod)(b.ptr, data.as_ptr().cast(), data.len() * 4) },
            &format!("writing {what}"),
        )
    }

    fn read(
        &mut self,
        buffer: Buffer,
        offset: usize,
        out: &mut [u32],
        what: &str,
    ) -> Result<(), GpuError> {
        self.current()?;
        let b = self.buffer(buffer);
        // Checked here: device memory past a buffer may belong to another, and a copy from there
        // would succeed (the mid-batch fault reads past the end to see this error).
        if offset + out.len() > b.words {
            return Err(GpuError::from_cuda(
                CUDA_ERROR_INVALID_VALUE,
                "a read past the end of a buffer".into(),
                &format!("reading {what}"),
            ));
        }
        // SAFETY: synchronous copy of words offset.. of the buffer into `out`.
        self.driver.check(
            unsafe {
                (self.driver.memcpy_dtoh)(
                    out.as_mut_ptr().cast(),
                    b.ptr + offset as u64 * 4,
                    out.len() * 4,
                )
            },
            &format!("reading {what}"),
        )
    }

    fn dispatch(
        &mut self,
        kernel: Kernel,
        args: &Args,
        lanes: usize,
        group: usize,
    ) -> Result<(), GpuError> {
        self.current()?;
        let (_, function) = self.modules[kernel.0];
        let mut table = self.buffer(args.table).ptr;
        let mut items = self.buffer(args.items).ptr;
        let mut n_items = args.n_items;
        let mut counters = self.buffer(args.counters).ptr;
        let mut counts = self.buffer(args.counts).ptr;
        let mut nodes = self.buffer(args.nodes).ptr;
        let mut saved = self.buffer(args.saved).ptr;
        let mut chunks = args.chunks;
        let mut params: [*mut c_void; 8] = [
            (&mut table as *mut CuDevicePtr).cast(),
            (&mut items as *mut CuDevicePtr).cast(),
            (&mut n_items as *mut u32).cast(),
            (&mut counters as *mut CuDevicePtr).cast(),
            (&mut counts as *mut CuDevicePtr).cast(),
            (&mut nodes as *mut CuDevicePtr).cast(),
            (&mut saved as *mut CuDevicePtr).cast(),
            (&mut chunks as *mut u32).cast(),
        ];
        let groups = lanes.div_ceil(group);
        // SAFETY: the eight parameters point to values of the kernel's parameter types, in order
        // (pointers are 64-bit device addresses); the kernel's shared memory is static.
        self.driver.check(
            unsafe {
                (self.driver.launch)(
                    function,
                    groups as c_uint,
                    1,
                    1,
                    group as c_uint,
                    1,
                    1,
                    0,
                    ptr::null_mut(),
                    params.as_mut_ptr(),
                    ptr::null_mut(),
                )
            },
            "starting a kernel dispatch",
        )?;
        // SAFETY: no arguments.
        self.driver
            .check(unsafe { (self.driver.ctx_synchronize)() }, "waiting for a kernel dispatch")
    }

    fn resident_groups(&self, kernel: Kernel, group: usize, _local_bytes: usize) -> Option<usize> {
        self.current().ok()?;
        let (_, function) = self.modules[kernel.0];
        let mut blocks = 0;
        // SAFETY: a live out-integer; the function belongs to a loaded module; no dynamic shared
        // memory (the kernel's is static).
        let code = unsafe { (self.driver.occupancy)(&mut blocks, function, group as c_int, 0) };
        (code == 0 && blocks > 0).then_some(blocks as usize)
    }

    fn release_buffers(&mut self) {
        if self.current().is_ok() {
            self.free_buffers();
        } else {
            self.buffers.clear();
        }
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        if self.current().is_ok() {
            self.free_buffers();
            for (module, _) in self.modules.drain(..) {
                // SAFETY: loaded in `build`, unloaded once (drained).
                unsafe { (self.driver.module_unload)(module) };
            }
        }
        // SAFETY: retained once in `open`.
        unsafe { (self.driver.primary_release)(self.device) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NVRTC is there (NQ_NVRTC_LIB or the usual names), else: a failure under CI=true, a skip
    /// with a message elsewhere.
    fn have_nvrtc() -> bool {
        match nvrtc() {
            Ok(_) => true,
            Err(e) => {
                assert!(std::env::var("CI").as_deref() != Ok("true"), "CI=true and {e}");
                eprintln!("\n!!!!! SKIPPED: {e} !!!!!\n");
                false
            }
        }
    }

    fn defines() -> Vec<String> {
        vec!["NQ_MAXL=16u".into(), "NQ_WG=64u".into()]
    }

    #[test]
    fn nvrtc_gives_hopper_machine_code() {
        if !have_nvrtc() {
            return;
        }
        let image = nvrtc_image(crate::KERNEL_SOURCE, &defines(), (9, 0), "H200").unwrap();
        assert_eq!(&image[..4], b"\x7fELF", "a cubin");
    }

    #[test]
    fn an_architecture_nvrtc_does_not_know_gets_ptx() {
        if !have_nvrtc() {
            return;
        }
        let image = nvrtc_image(crate::KERNEL_SOURCE, &defines(), (99, 0), "future").unwrap();
        let text = String::from_utf8_lossy(&image);
        assert!(text.contains(".target sm_90") && text.contains("nq_solve"), "{text:.200}");
    }

    #[test]
    fn a_kernel_that_fails_to_build_gives_nvrtcs_log() {
        if !have_nvrtc() {
            return;
        }
        let source = format!("#error \"fault injected\"\n{}", crate::KERNEL_SOURCE);
        match nvrtc_image(&source, &defines(), (9, 0), "H200") {
            Err(GpuError::BuildFailed { device, log }) => {
                assert_eq!(device, "H200");
                assert!(log.contains("fault injected") && log.contains("NVRTC"), "{log}");
            }
            other => panic!("expected a build failure, got {other:?}"),
        }
    }
}
