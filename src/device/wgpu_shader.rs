//! WGSL validation with naga, usable without any GPU: every shader is checked by a unit
//! test, and the wgpu backend validates a module before handing it to the driver.

use crate::error::{Error, Result};

/// Parses and validates WGSL source; the error names the shader and carries naga's report.
pub fn validate(stem: &str, source: &str) -> Result<()> {
    let module = naga::front::wgsl::parse_str(source).map_err(|e| Error::Backend {
        backend: "wgpu",
        msg: format!("shaders/{stem}.wgsl: {}", e.emit_to_string(source)),
    })?;
    let mut v = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    );
    v.validate(&module).map_err(|e| Error::Backend {
        backend: "wgpu",
        msg: format!("shaders/{stem}.wgsl: {}", e.emit_to_string(source)),
    })?;
    Ok(())
}
