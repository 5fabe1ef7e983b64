//! `espalier devices`: what this build can run on: the CPU, every wgpu adapter with the
//! limits that decide what its kernels can do, and CUDA.

use clap::Args;
use serde_json::json;

use espalier::device::wgpu::{adapters, resolve_adapter, AdapterSummary};
use espalier::error::{Error, Result};
use espalier::Device;

/// How `--device wgpu` picks an adapter (shown by `espalier devices --help`).
pub const HELP: &str = "\
Choosing an adapter:
  --device wgpu:N       the adapter listed with index N
  --device wgpu:NAME    the first adapter whose name contains NAME (any case), e.g. wgpu:nvidia
  --device wgpu         ESPALIER_WGPU_ADAPTER if set (an index or a part of a name), else 0

  --device cuda[:N]     CUDA device N (default 0)

Environment:
  ESPALIER_WGPU_ADAPTER  the adapter `--device wgpu` means, by index or name substring
  WGPU_BACKEND           wgpu's own filter on the APIs it tries (vulkan, metal, dx12, gl)
  ESPALIER_CUDA_GEMM     `kernel`: matmul on CUDA runs kernels/matmul.cu instead of cuBLAS";

/// Flags of `espalier devices`.
#[derive(Args, Debug, Clone)]
pub struct DevicesArgs {
    /// Print the list as JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// What `espalier devices --json` prints: the CPU, the wgpu adapters (or why there are
/// none) and the CUDA devices (or why there are none).
pub fn report() -> serde_json::Value {
    let list = adapters();
    let default = default_adapter();
    json!({
        "cpu": { "available": true, "threads": rayon::current_num_threads() },
        "wgpu": {
            "adapters": list,
            "default": default.as_ref().ok(),
            "default_error": default.as_ref().err().map(|e| e.to_string()),
            "unavailable": wgpu_unavailable(&list),
        },
        "cuda": match espalier::device::cuda::devices() {
            Ok(list) => json!({ "available": true, "devices": list }),
            Err(reason) => json!({ "available": false, "reason": reason }),
        },
    })
}

/// Why there is no adapter, in the words the backend uses when asked for one.
fn wgpu_unavailable(list: &[AdapterSummary]) -> Option<String> {
    match list.is_empty() {
        true => Device::Wgpu(0).memory().err().map(|e| e.to_string()),
        false => None,
    }
}

pub fn run(a: &DevicesArgs) -> Result<()> {
    if a.json {
        let text =
            serde_json::to_string_pretty(&report()).map_err(|e| Error::invalid(e.to_string()))?;
        println!("{text}");
        return Ok(());
    }
    let threads = rayon::current_num_threads();
    let list = adapters();
    let none_reason = wgpu_unavailable(&list);
    let default = default_adapter();
    let cuda = espalier::device::cuda::devices();
    println!("cpu      available  {threads} threads (rayon), the reference backend");
    match none_reason {
        Some(reason) => println!("wgpu     unavailable: {reason}"),
        None => {
            let default = match &default {
                Ok(i) => format!("`--device wgpu` is wgpu:{i}"),
                Err(e) => format!("`--device wgpu` fails: {e}"),
            };
            println!("wgpu     {} adapter(s); {default}", list.len());
            for s in &list {
                print!("{}", describe(s));
            }
        }
    }
    match &cuda {
        Ok(list) => {
            let (dm, dn) = list.first().map_or((0, 0), |d| d.driver_cuda);
            let (nm, nn) = list.first().map_or((0, 0), |d| d.nvrtc);
            println!(
                "cuda     {} device(s); driver supports CUDA {dm}.{dn}, NVRTC {nm}.{nn}",
                list.len()
            );
            for d in list {
                let (major, minor) = d.compute_capability;
                println!(
                    "  cuda:{}  {}  sm_{major}{minor}  {} multiprocessors  {:.1} GiB  {:.0} GB/s peak",
                    d.index,
                    d.name,
                    d.multiprocessors,
                    d.total_bytes as f64 / (1u64 << 30) as f64,
                    d.peak_bandwidth / 1e9
                );
                if d.emulated {
                    println!(
                        "          emulated: espalier's CUDA emulator runs the kernels on the CPU \
                         (for tests; its speed says nothing of a GPU's)"
                    );
                }
            }
        }
        Err(reason) => println!("cuda     unavailable: {reason}"),
    }
    Ok(())
}

/// The adapter `--device wgpu` opens.
fn default_adapter() -> Result<u32> {
    match std::env::var("ESPALIER_WGPU_ADAPTER") {
        Ok(spec) => resolve_adapter(&spec),
        Err(_) => Ok(0),
    }
}

/// Three lines per adapter: name; backend, type and driver; limits and features.
fn describe(s: &AdapterSummary) -> String {
    let yes = |b: bool| if b { "yes" } else { "no" };
    format!(
        "  wgpu:{}  {}\n          backend {}, type {}, driver {}\n          \
         max storage binding {}, max buffer {}, {} workgroups per dimension, \
         workgroup storage {}, timestamp queries {}, shader-f16 {}, subgroups {}\n",
        s.index,
        s.name,
        s.backend,
        s.device_type,
        if s.driver.is_empty() { "?" } else { &s.driver },
        bytes(s.max_storage_buffer_binding_size),
        bytes(s.max_buffer_size),
        s.max_compute_workgroups_per_dimension,
        bytes(s.max_compute_workgroup_storage_size as u64),
        yes(s.timestamp_queries),
        yes(s.shader_f16),
        yes(s.subgroups),
    )
}

/// Bytes in the largest binary unit that keeps the number at least 1.
fn bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::bytes;

    #[test]
    fn byte_units() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(32 << 10), "32.0 KiB");
        assert_eq!(bytes(128 << 20), "128.0 MiB");
        assert_eq!(bytes((1 << 32) - 4), "4.0 GiB");
    }
}
