//! Finding and opening an OpenCL device, and the few OpenCL calls the solver makes, each turned
//! into a [`GpuError`] that says what the host was doing.

use crate::GpuError;
use opencl3::command_queue::CommandQueue;
use opencl3::context::Context;
use opencl3::device::{
    Device, CL_DEVICE_TYPE_ACCELERATOR, CL_DEVICE_TYPE_ALL, CL_DEVICE_TYPE_CPU, CL_DEVICE_TYPE_GPU,
};
use opencl3::memory::{Buffer, ClMem, CL_MEM_READ_ONLY, CL_MEM_READ_WRITE};
use opencl3::platform::get_platforms;
use opencl3::program::Program;
use opencl3::types::{cl_device_id, CL_BLOCKING};
use std::fmt;
use std::ptr;
use std::sync::Mutex;

/// The OpenCL types other modules name.
pub(crate) mod cl {
    pub use opencl3::kernel::Kernel;
}

/// Which device to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceSelector {
    /// The first GPU of all platforms, else the first device of any kind.
    #[default]
    Auto,
    /// The first GPU (or accelerator card) of all platforms, never a CPU device such as pocl's
    /// (slower than the CPU solver on the same cores): what a worker's `--gpu auto` wants.
    GpuOnly,
    /// The device at this position in [`list_devices`].
    Index(usize),
}

impl std::str::FromStr for DeviceSelector {
    type Err = String;

    /// `auto`, `gpu` or a device index.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "auto" => Ok(DeviceSelector::Auto),
            "gpu" => Ok(DeviceSelector::GpuOnly),
            other => other
                .parse()
                .map(DeviceSelector::Index)
                .map_err(|_| format!("{other:?} is not `auto`, `gpu` or a device index")),
        }
    }
}

/// Kind of an OpenCL device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    /// A graphics card.
    Gpu,
    /// A CPU (such as pocl's).
    Cpu,
    /// An accelerator card.
    Accelerator,
    /// Anything else.
    Other,
}

impl fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DeviceKind::Gpu => "GPU",
            DeviceKind::Cpu => "CPU",
            DeviceKind::Accelerator => "accelerator",
            DeviceKind::Other => "other",
        })
    }
}

/// One OpenCL device as [`list_devices`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Position in [`list_devices`] (for [`DeviceSelector::Index`]).
    pub index: usize,
    /// Name of its platform (driver).
    pub platform: String,
    /// Device name.
    pub name: String,
    /// Kind of device.
    pub kind: DeviceKind,
    /// Compute units (streaming multiprocessors, cores).
    pub compute_units: u32,
    /// Global memory in bytes.
    pub global_mem_bytes: u64,
    /// Largest single buffer in bytes.
    pub max_alloc_bytes: u64,
    /// Local memory per work group in bytes.
    pub local_mem_bytes: u64,
    /// OpenCL version string of the device.
    pub version: String,
}

impl fmt::Display for DeviceInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "#{} {} ({}, {}, {} compute units, {} MiB)",
            self.index,
            self.name,
            self.kind,
            self.platform,
            self.compute_units,
            self.global_mem_bytes >> 20
        )
    }
}

/// Every OpenCL device of every platform, in a stable order (platforms, then devices).
pub fn list_devices() -> Result<Vec<DeviceInfo>, GpuError> {
    Ok(all_devices()?.into_iter().map(|(info, _)| info).collect())
}

/// Serializes platform discovery, context creation and kernel builds: the ICD loader's first
/// call and pocl's set-up are not safe to run from two threads at once (seen crashing).
static SETUP: Mutex<()> = Mutex::new(());

fn all_devices() -> Result<Vec<(DeviceInfo, cl_device_id)>, GpuError> {
    let _setup = SETUP.lock().unwrap_or_else(|e| e.into_inner());
    if !cl3::is_opencl_runtime_available() {
        return Err(GpuError::NoPlatform {
            reason: "the OpenCL loader libOpenCL.so.1 was not found (install ocl-icd-libopencl1 \
                     and a driver: the NVIDIA driver, ROCm, or pocl-opencl-icd for CPUs)"
                .into(),
        });
    }
    let platforms = get_platforms().map_err(|e| GpuError::NoPlatform {
        reason: format!("listing platforms failed ({e}); is an ICD file in /etc/OpenCL/vendors?"),
    })?;
    if platforms.is_empty() {
        return Err(GpuError::NoPlatform {
            reason: "the OpenCL loader lists no platform (no ICD file in /etc/OpenCL/vendors or \
                     OCL_ICD_VENDORS)"
                .into(),
        });
    }
    let mut out = Vec::new();
    for platform in platforms {
        let platform_name = platform.name().unwrap_or_else(|_| "unknown platform".into());
        // A platform without devices answers CL_DEVICE_NOT_FOUND: not an error here.
        let ids = platform.get_devices(CL_DEVICE_TYPE_ALL).unwrap_or_default();
        for id in ids {
            let d = Device::new(id);
            let kind = match d.dev_type().unwrap_or(0) {
                t if t & CL_DEVICE_TYPE_GPU != 0 => DeviceKind::Gpu,
                t if t & CL_DEVICE_TYPE_CPU != 0 => DeviceKind::Cpu,
                t if t & CL_DEVICE_TYPE_ACCELERATOR != 0 => DeviceKind::Accelerator,
                _ => DeviceKind::Other,
            };
            let info = DeviceInfo {
                index: out.len(),
                platform: platform_name.trim().to_owned(),
                name: d.name().unwrap_or_else(|_| "unknown device".into()).trim().to_owned(),
                kind,
                compute_units: d.max_compute_units().unwrap_or(1),
                global_mem_bytes: d.global_mem_size().unwrap_or(0),
                max_alloc_bytes: d.max_mem_alloc_size().unwrap_or(0),
                local_mem_bytes: d.local_mem_size().unwrap_or(0),
                version: d.version().unwrap_or_default().trim().to_owned(),
            };
            out.push((info, id));
        }
    }
    Ok(out)
}

/// An open device: its context and in-order queue.
pub(crate) struct Opened {
    pub info: DeviceInfo,
    pub id: cl_device_id,
    pub context: Context,
    pub queue: CommandQueue,
}

// SAFETY: `cl_device_id` is an opaque handle that OpenCL allows any thread to use; the context and
// queue are Send themselves.
unsafe impl Send for Opened {}

impl Opened {
    pub fn open(selector: DeviceSelector) -> Result<Opened, GpuError> {
        let devices = all_devices()?;
        let names = || {
            let list: Vec<String> = devices.iter().map(|(d, _)| d.to_string()).collect();
            if list.is_empty() {
                "none".to_owned()
            } else {
                list.join("; ")
            }
        };
        let chosen = match selector {
            DeviceSelector::Auto => devices
                .iter()
                .find(|(d, _)| d.kind == DeviceKind::Gpu)
                .or_else(|| devices.first())
                .ok_or_else(|| GpuError::NoDevice {
                    reason: "the OpenCL platforms list no device".into(),
                })?,
            DeviceSelector::GpuOnly => devices
                .iter()
                .find(|(d, _)| matches!(d.kind, DeviceKind::Gpu | DeviceKind::Accelerator))
                .ok_or_else(|| GpuError::NoDevice {
                    reason: format!("no GPU among the OpenCL devices: {}", names()),
                })?,
            DeviceSelector::Index(i) => devices.get(i).ok_or_else(|| GpuError::NoDevice {
                reason: format!("there is no device #{i}; devices: {}", names()),
            })?,
        };
        let (info, id) = (chosen.0.clone(), chosen.1);
        let _setup = SETUP.lock().unwrap_or_else(|e| e.into_inner());
        let device = Device::new(id);
        let context = Context::from_device(&device)
            .map_err(|e| GpuError::from_cl(e.0, "creating a context"))?;
        // SAFETY: the device belongs to the context just created from it.
        let queue = unsafe { CommandQueue::create(&context, id, 0) }
            .map_err(|e| GpuError::from_cl(e.0, "creating a command queue"))?;
        Ok(Opened { info, id, context, queue })
    }

    /// Compiles `source` with `options` and returns its kernel.
    pub fn build(&self, source: &str, options: &str) -> Result<cl::Kernel, GpuError> {
        let _setup = SETUP.lock().unwrap_or_else(|e| e.into_inner());
        let mut program = Program::create_from_source(&self.context, source)
            .map_err(|e| GpuError::from_cl(e.0, "loading the kernel source"))?;
        if let Err(e) = program.build(&[self.id], options) {
            let log = program
                .get_build_log(self.id)
                .unwrap_or_else(|_| format!("(no build log; OpenCL error {})", e.0));
            return Err(GpuError::BuildFailed {
                device: self.info.name.clone(),
                log: log.trim().to_owned(),
            });
        }
        cl::Kernel::create(&program, "nq_solve")
            .map_err(|e| GpuError::from_cl(e.0, "creating the kernel"))
    }
}

/// A buffer holding `data`, read-only for the kernel unless `writable`.
pub(crate) fn upload<T: Copy>(
    context: &Context,
    queue: &CommandQueue,
    data: &[T],
    writable: bool,
    what: &str,
) -> Result<Buffer<T>, GpuError> {
    let flags = if writable { CL_MEM_READ_WRITE } else { CL_MEM_READ_ONLY };
    // SAFETY: no host pointer is given; the buffer has room for `data.len()` elements.
    let mut buffer =
        unsafe { Buffer::<T>::create(context, flags, data.len().max(1), ptr::null_mut()) }
            .map_err(|e| GpuError::from_cl(e.0, &format!("allocating {what}")))?;
    if !data.is_empty() {
        write(queue, &mut buffer, data, what)?;
    }
    Ok(buffer)
}

/// A read-write buffer of `len` elements, each `value`.
pub(crate) fn filled<T: Copy>(
    context: &Context,
    queue: &CommandQueue,
    len: usize,
    value: T,
    what: &str,
) -> Result<Buffer<T>, GpuError> {
    let len = len.max(1);
    // SAFETY: no host pointer is given.
    let mut buffer =
        unsafe { Buffer::<T>::create(context, CL_MEM_READ_WRITE, len, ptr::null_mut()) }
            .map_err(|e| GpuError::from_cl(e.0, &format!("allocating {what}")))?;
    // SAFETY: the pattern is one element and the size a whole number of elements in the buffer.
    unsafe { queue.enqueue_fill_buffer(&mut buffer, &[value], 0, len * size_of::<T>(), &[]) }
        .map_err(|e| GpuError::from_cl(e.0, &format!("filling {what}")))?;
    Ok(buffer)
}

/// Blocking write of `data` to the start of `buffer`.
pub(crate) fn write<T>(
    queue: &CommandQueue,
    buffer: &mut Buffer<T>,
    data: &[T],
    what: &str,
) -> Result<(), GpuError> {
    // SAFETY: blocking, so `data` outlives the transfer; the caller sized the buffer for it.
    unsafe { queue.enqueue_write_buffer(buffer, CL_BLOCKING, 0, data, &[]) }
        .map_err(|e| GpuError::from_cl(e.0, &format!("writing {what}")))?;
    Ok(())
}

/// Blocking read of `out.len()` elements from element `offset` of `buffer`.
pub(crate) fn read<T>(
    queue: &CommandQueue,
    buffer: &Buffer<T>,
    offset: usize,
    out: &mut [T],
    what: &str,
) -> Result<(), GpuError> {
    // SAFETY: blocking, so `out` outlives the transfer; a range beyond the buffer is refused by
    // the driver with an error (that is what the mid-batch fault relies on).
    unsafe { queue.enqueue_read_buffer(buffer, CL_BLOCKING, offset * size_of::<T>(), out, &[]) }
        .map_err(|e| GpuError::from_cl(e.0, &format!("reading {what}")))?;
    Ok(())
}

/// The kernel's arguments, in order.
pub(crate) struct Args<'a> {
    pub table: &'a Buffer<u32>,
    pub items: &'a Buffer<u32>,
    pub n_items: u32,
    pub counters: &'a Buffer<u32>,
    pub counts: &'a Buffer<u64>,
    pub nodes: &'a Buffer<u64>,
    pub saved: &'a Buffer<u32>,
    pub chunks: u32,
}

/// One dispatch of `lanes` lanes in groups of `wg`, waited for.
pub(crate) fn dispatch(
    queue: &CommandQueue,
    kernel: &cl::Kernel,
    args: &Args<'_>,
    lanes: usize,
    wg: usize,
) -> Result<(), GpuError> {
    let set = |e: opencl3::error_codes::ClError| GpuError::from_cl(e.0, "setting kernel arguments");
    // SAFETY: the arguments match the kernel's parameters in number, order and type.
    unsafe {
        kernel.set_arg(0, &args.table.get()).map_err(set)?;
        kernel.set_arg(1, &args.items.get()).map_err(set)?;
        kernel.set_arg(2, &args.n_items).map_err(set)?;
        kernel.set_arg(3, &args.counters.get()).map_err(set)?;
        kernel.set_arg(4, &args.counts.get()).map_err(set)?;
        kernel.set_arg(5, &args.nodes.get()).map_err(set)?;
        kernel.set_arg(6, &args.saved.get()).map_err(set)?;
        kernel.set_arg(7, &args.chunks).map_err(set)?;
    }
    let global = [lanes];
    let local = [wg];
    // SAFETY: one dimension, the sizes point to live arrays of that length.
    unsafe {
        queue.enqueue_nd_range_kernel(
            kernel.get(),
            1,
            ptr::null(),
            global.as_ptr(),
            local.as_ptr(),
            &[],
        )
    }
    .map_err(|e| GpuError::from_cl(e.0, "starting a kernel dispatch"))?;
    queue.finish().map_err(|e| GpuError::from_cl(e.0, "waiting for a kernel dispatch"))?;
    Ok(())
}
