//! `REQUIRE_GPU` turns a skipped GPU backend into a failure, so a run on a GPU machine
//! cannot pass by skipping everything.

mod common;

use common::{backend_required, skip_backend_with};

#[test]
fn require_gpu_values_name_the_backends_that_must_exist() {
    for unset in [None, Some(""), Some("0"), Some("false"), Some("no")] {
        assert!(!backend_required(unset, "wgpu"), "{unset:?}");
        assert!(!backend_required(unset, "cuda"), "{unset:?}");
    }
    for all in ["1", "true", "YES", "all"] {
        assert!(backend_required(Some(all), "wgpu"), "{all}");
        assert!(backend_required(Some(all), "cuda"), "{all}");
    }
    assert!(backend_required(Some("wgpu"), "wgpu"));
    assert!(!backend_required(Some("wgpu"), "cuda"));
    assert!(backend_required(Some("cuda, wgpu"), "cuda"));
}

#[test]
fn a_skip_is_a_failure_when_the_backend_is_required() {
    skip_backend_with(None, "cuda", "no driver"); // prints and returns
    skip_backend_with(Some("wgpu"), "cuda", "no driver");
    let failed = std::panic::catch_unwind(|| skip_backend_with(Some("1"), "cuda", "no driver"));
    let msg = failed.expect_err("REQUIRE_GPU=1 fails a cuda skip");
    let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        msg.contains("REQUIRE_GPU=1") && msg.contains("no driver"),
        "{msg}"
    );
}
