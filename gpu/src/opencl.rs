//! The OpenCL backend: finding and opening an OpenCL device, and the few OpenCL calls the solver
//! makes, each turned into a [`GpuError`] that says what the host was doing.

use crate::backend::{Args, Backend, Buffer as BufferId, Kernel as KernelId};
use crate::{DeviceInfo, DeviceKind, GpuError};
use opencl3::command_queue::CommandQueue;
use opencl3::context::Context;
use opencl3::device::{
    Device, CL_DEVICE_TYPE_ACCELERATOR, CL_DEVICE_TYPE_ALL, CL_DEVICE_TYPE_CPU, CL_DEVICE_TYPE_GPU,
};
use opencl3::kernel::Kernel;
use opencl3::memory::{Buffer, ClMem, CL_MEM_READ_WRITE};
use opencl3::platform::get_platforms;
use opencl3::program::Program;
use opencl3::types::{cl_device_id, CL_BLOCKING};
use std::ptr;
use std::sync::Mutex;

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

/// An open OpenCL device: its context and in-order queue, the kernels built on it and the
/// buffers of the current batch.
pub(crate) struct Opened {
    info: DeviceInfo,
    id: cl_device_id,
    context: Context,
    queue: CommandQueue,
    kernels: Vec<Kernel>,
    buffers: Vec<Buffer<u32>>,
    /// What one compute unit holds, where known (NVIDIA cards, by compute capability).
    unit: Option<UnitLimits>,
}

/// What one multiprocessor of an NVIDIA card holds, by compute capability (NVIDIA's CUDA C++
/// programming guide, "Technical specifications per compute capability"). OpenCL does not tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct UnitLimits {
    shared_bytes: usize,
    /// Shared memory the driver keeps back for each group (1 KiB since Ampere).
    reserved_per_group: usize,
    lanes: usize,
    groups: usize,
}

impl UnitLimits {
    fn nvidia(major: u32, minor: u32) -> Option<UnitLimits> {
        let kib = 1024;
        let (shared_kib, reserved, lanes, groups) = match (major, minor) {
            (7, 0) => (96, 0, 2048, 32),
            (7, 5) => (64, 0, 1024, 16),
            (8, 0) | (8, 7) => (164, kib, 2048, 32),
            (8, 6) | (8, 9) => (100, kib, 1536, 16),
            (9, 0) | (10, _) => (228, kib, 2048, 32),
            (12, _) => (100, kib, 1536, 32),
            _ => return None,
        };
        Some(UnitLimits {
            shared_bytes: shared_kib * kib,
            reserved_per_group: reserved,
            lanes,
            groups,
        })
    }

    fn groups_of(&self, group: usize, local_bytes: usize) -> usize {
        let by_memory = self.shared_bytes / (local_bytes + self.reserved_per_group).max(1);
        by_memory.min(self.lanes / group.max(1)).min(self.groups)
    }
}

// SAFETY: `cl_device_id` is an opaque handle that OpenCL allows any thread to use; the context,
// queue, kernels and buffers are Send themselves.
unsafe impl Send for Opened {}

fn device_names(devices: &[(DeviceInfo, cl_device_id)]) -> String {
    let list: Vec<String> = devices.iter().map(|(d, _)| d.to_string()).collect();
    if list.is_empty() {
        "none".to_owned()
    } else {
        list.join("; ")
    }
}

impl Opened {
    /// The first GPU (or accelerator card) of all platforms.
    pub fn open_gpu() -> Result<Opened, GpuError> {
        let devices = all_devices()?;
        let chosen = devices
            .iter()
            .find(|(d, _)| matches!(d.kind, DeviceKind::Gpu | DeviceKind::Accelerator))
            .ok_or_else(|| GpuError::NoDevice {
                reason: format!("no GPU among the OpenCL devices: {}", device_names(&devices)),
            })?;
        Opened::open(chosen)
    }

    /// The first device of any kind.
    pub fn open_first() -> Result<Opened, GpuError> {
        let devices = all_devices()?;
        let chosen = devices.first().ok_or_else(|| GpuError::NoDevice {
            reason: "the OpenCL platforms list no device".into(),
        })?;
        Opened::open(chosen)
    }

    /// The device at position `i` in [`list_devices`].
    pub fn open_index(i: usize) -> Result<Opened, GpuError> {
        let devices = all_devices()?;
        let chosen = devices.get(i).ok_or_else(|| GpuError::NoDevice {
            reason: format!("there is no device #{i}; devices: {}", device_names(&devices)),
        })?;
        Opened::open(chosen)
    }

    fn open((info, id): &(DeviceInfo, cl_device_id)) -> Result<Opened, GpuError> {
        let (info, id) = (info.clone(), *id);
        let _setup = SETUP.lock().unwrap_or_else(|e| e.into_inner());
        let device = Device::new(id);
        let context = Context::from_device(&device)
            .map_err(|e| GpuError::from_cl(e.0, "creating a context"))?;
        // SAFETY: the device belongs to the context just created from it.
        let queue = unsafe { CommandQueue::create(&context, id, 0) }
            .map_err(|e| GpuError::from_cl(e.0, "creating a command queue"))?;
        // Only NVIDIA's OpenCL answers these (cl_nv_device_attribute_query).
        let unit =
            match (device.compute_capability_major_nv(), device.compute_capability_minor_nv()) {
                (Ok(major), Ok(minor)) => UnitLimits::nvidia(major, minor),
                _ => None,
            };
        Ok(Opened { info, id, context, queue, kernels: Vec::new(), buffers: Vec::new(), unit })
    }

    fn buffer(&self, id: BufferId) -> &Buffer<u32> {
        &self.buffers[id.0]
    }
}

impl Backend for Opened {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn build(&mut self, source: &str, defines: &[String]) -> Result<KernelId, GpuError> {
        let options: Vec<String> = defines.iter().map(|d| format!("-D {d}")).collect();
        let _setup = SETUP.lock().unwrap_or_else(|e| e.into_inner());
        let mut program = Program::create_from_source(&self.context, source)
            .map_err(|e| GpuError::from_cl(e.0, "loading the kernel source"))?;
        if let Err(e) = program.build(&[self.id], &options.join(" ")) {
            let log = program
                .get_build_log(self.id)
                .unwrap_or_else(|_| format!("(no build log; OpenCL error {})", e.0));
            return Err(GpuError::BuildFailed {
                device: self.info.name.clone(),
                log: log.trim().to_owned(),
            });
        }
        let kernel = Kernel::create(&program, "nq_solve")
            .map_err(|e| GpuError::from_cl(e.0, "creating the kernel"))?;
        self.kernels.push(kernel);
        Ok(KernelId(self.kernels.len() - 1))
    }

    fn alloc(&mut self, words: usize, fill: u32, what: &str) -> Result<BufferId, GpuError> {
        let words = words.max(1);
        // SAFETY: no host pointer is given.
        let mut buffer = unsafe {
            Buffer::<u32>::create(&self.context, CL_MEM_READ_WRITE, words, ptr::null_mut())
        }
        .map_err(|e| GpuError::from_cl(e.0, &format!("allocating {what}")))?;
        // SAFETY: the pattern is one element and the size a whole number of elements in the buffer.
        unsafe { self.queue.enqueue_fill_buffer(&mut buffer, &[fill], 0, words * 4, &[]) }
            .map_err(|e| GpuError::from_cl(e.0, &format!("filling {what}")))?;
        self.buffers.push(buffer);
        Ok(BufferId(self.buffers.len() - 1))
    }

    fn write(&mut self, buffer: BufferId, data: &[u32], what: &str) -> Result<(), GpuError> {
        let buffer = &mut self.buffers[buffer.0];
        // SAFETY: blocking, so `data` outlives the transfer; the caller sized the buffer for it.
        unsafe { self.queue.enqueue_write_buffer(buffer, CL_BLOCKING, 0, data, &[]) }
            .map_err(|e| GpuError::from_cl(e.0, &format!("writing {what}")))?;
        Ok(())
    }

    fn read(
        &mut self,
        buffer: BufferId,
        offset: usize,
        out: &mut [u32],
        what: &str,
    ) -> Result<(), GpuError> {
        let buffer = self.buffer(buffer);
        // SAFETY: blocking, so `out` outlives the transfer; a range beyond the buffer is refused
        // by the driver with an error (that is what the mid-batch fault relies on).
        unsafe { self.queue.enqueue_read_buffer(buffer, CL_BLOCKING, offset * 4, out, &[]) }
            .map_err(|e| GpuError::from_cl(e.0, &format!("reading {what}")))?;
        Ok(())
    }

    fn dispatch(
        &mut self,
        kernel: KernelId,
        args: &Args,
        lanes: usize,
        group: usize,
    ) -> Result<(), GpuError> {
        let set =
            |e: opencl3::error_codes::ClError| GpuError::from_cl(e.0, "setting kernel arguments");
        let kernel = &self.kernels[kernel.0];
        // SAFETY: the arguments match the kernel's parameters in number, order and type.
        unsafe {
            kernel.set_arg(0, &self.buffer(args.table).get()).map_err(set)?;
            kernel.set_arg(1, &self.buffer(args.items).get()).map_err(set)?;
            kernel.set_arg(2, &args.n_items).map_err(set)?;
            kernel.set_arg(3, &self.buffer(args.counters).get()).map_err(set)?;
            kernel.set_arg(4, &self.buffer(args.counts).get()).map_err(set)?;
            kernel.set_arg(5, &self.buffer(args.nodes).get()).map_err(set)?;
            kernel.set_arg(6, &self.buffer(args.saved).get()).map_err(set)?;
            kernel.set_arg(7, &args.chunks).map_err(set)?;
        }
        let global = [lanes];
        let local = [group];
        // SAFETY: one dimension, the sizes point to live arrays of that length.
        unsafe {
            self.queue.enqueue_nd_range_kernel(
                kernel.get(),
                1,
                ptr::null(),
                global.as_ptr(),
                local.as_ptr(),
                &[],
            )
        }
        .map_err(|e| GpuError::from_cl(e.0, "starting a kernel dispatch"))?;
        self.queue.finish().map_err(|e| GpuError::from_cl(e.0, "waiting for a kernel dispatch"))?;
        Ok(())
    }

    fn release_buffers(&mut self) {
        self.buffers.clear();
    }

    fn resident_groups(
        &self,
        _kernel: KernelId,
        group: usize,
        local_bytes: usize,
    ) -> Option<usize> {
        self.unit.map(|u| u.groups_of(group, local_bytes)).filter(|&g| g > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::UnitLimits;

    #[test]
    fn an_h200_holds_nine_groups_of_64_lanes_at_16_levels() {
        let hopper = UnitLimits::nvidia(9, 0).unwrap();
        // 24 bytes a level and lane: 16 levels x 64 lanes = 24 KiB, plus 1 KiB kept back.
        assert_eq!(hopper.groups_of(64, 24 * 16 * 64), 9);
        assert_eq!(hopper.groups_of(64, 24 * 14 * 64), 10);
        // Small groups: the 32-group limit; large ones: the 2,048-lane limit.
        assert_eq!(hopper.groups_of(32, 24 * 4 * 32), 32);
        assert_eq!(hopper.groups_of(1024, 1024), 2);
        assert_eq!(UnitLimits::nvidia(8, 6).unwrap().groups_of(64, 24 * 16 * 64), 4);
        assert_eq!(UnitLimits::nvidia(3, 0), None);
    }
}
