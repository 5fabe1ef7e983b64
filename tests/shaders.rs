//! Every `shaders/*.wgsl` parses and validates with naga: no GPU needed.

#[test]
fn every_shader_validates() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/shaders");
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("wgsl") {
            continue;
        }
        let stem = path.file_stem().unwrap().to_string_lossy().to_string();
        let source = std::fs::read_to_string(&path).unwrap();
        if let Err(e) = espalier::device::wgpu_shader::validate(&stem, &source) {
            panic!("{e}");
        }
        n += 1;
    }
    assert!(n > 0, "no shaders found in {dir}");
}

#[test]
fn an_invalid_shader_is_reported_with_its_name() {
    let err = espalier::device::wgpu_shader::validate("broken", "fn main( {").unwrap_err();
    assert!(err.to_string().contains("shaders/broken.wgsl"), "{err}");
}
