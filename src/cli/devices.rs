//! `espalier devices`: what this build can run on.

use espalier::error::Result;
use espalier::Device;

pub fn run() -> Result<()> {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    println!("cpu      available   {cores} threads (rayon), reference backend");
    for d in [Device::Wgpu(0), Device::Cuda(0)] {
        match d.memory() {
            Ok(_) => println!("{d:<8} available"),
            Err(e) => println!("{:<8} unavailable  {e}", d.backend()),
        }
    }
    Ok(())
}
