//! Data-parallel training over MPI (`--features mpi`), CPU backend: `mpirun -np N espalier
//! train` with K micro-batches against one process with the same K. The ranks deal the
//! micro-batches among them and sum their gradients with one all-reduce per batch, so the
//! per-epoch losses and the final parameters must agree with one process up to float
//! rounding (the reduction adds the same terms in another order). Rank 0 alone reports and
//! writes.
//!
//! Without the feature, or without `mpirun`, the MPI runs print why they skip; a launch as
//! several ranks of a build without the feature must then fail with a clear error.

// The helpers the library's tests share (tests/common/ at the repository root).
#[path = "../../tests/common/mod.rs"]
mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Output};

const DATA: &str = "synthetic:cora-like,scale=0.2";
/// The launchers' world-size variables (see `espalier::dist`), removed from the
/// single-process run so that it cannot take itself for a rank.
const SIZE_VARS: &[&str] = &["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"];

fn train_args(k: usize, dir: &Path, tag: &str) -> Vec<String> {
    let p = |name: &str| dir.join(format!("{tag}.{name}")).display().to_string();
    [
        "train",
        "--dataset",
        DATA,
        "--hidden",
        "16",
        "--epochs",
        "3",
        "--micro-batches",
        &k.to_string(),
        "--partitioner",
        "metis",
        "--json",
        &p("json"),
        "--checkpoint",
        &p("safetensors"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Why the MPI runs cannot happen here, if they cannot.
fn skip_reason() -> Option<String> {
    if !cfg!(feature = "mpi") {
        return Some(
            "built without the `mpi` feature (run `cargo test --features mpi --test mpi`)".into(),
        );
    }
    match Command::new("mpirun").arg("--version").output() {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!("`mpirun --version` failed: {}", stderr(&o))),
        Err(e) => Some(format!(
            "no `mpirun` on the PATH ({e}); install Open MPI or MPICH"
        )),
    }
}

/// `mpirun -np ranks espalier ARGS`; Open MPI needs leave to run as root (CI does) and to
/// start more ranks than cores.
fn mpirun(ranks: usize, args: &[String]) -> Output {
    let version = Command::new("mpirun").arg("--version").output().unwrap();
    let mut c = Command::new("mpirun");
    if String::from_utf8_lossy(&version.stdout).contains("Open MPI") {
        c.args(["--allow-run-as-root", "--oversubscribe"]);
    }
    c.args(["-np", &ranks.to_string(), env!("CARGO_BIN_EXE_espalier")])
        .args(args)
        .env_remove("ESPALIER_LOG")
        .output()
        .expect("run mpirun")
}

fn single(args: &[String]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_espalier"));
    for v in SIZE_VARS {
        c.env_remove(v);
    }
    c.args(args)
        .env_remove("ESPALIER_LOG")
        .output()
        .expect("run espalier")
}

fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The model's tensors of a checkpoint, by name.
fn parameters(path: &Path) -> HashMap<String, Vec<f32>> {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    st.tensors()
        .into_iter()
        .filter(|(n, _)| n.starts_with("model."))
        .map(|(n, v)| {
            let vals = v
                .data()
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            (n, vals)
        })
        .collect()
}

/// Trains with `ranks` ranks and in one process at the same K, and checks that they agree.
fn ranks_match_one_process(ranks: usize, k: usize) {
    ranks_with_samplers_match_one_process(ranks, 0, k);
}

/// [`ranks_match_one_process`] with the last `samplers` of the `world` ranks sampling for
/// the others (`--sampler-ranks`).
fn ranks_with_samplers_match_one_process(world: usize, samplers: usize, k: usize) {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let ranks = world - samplers;
    let dir = tempfile::tempdir().unwrap();
    let one = single(&train_args(k, dir.path(), "one"));
    assert!(one.status.success(), "one process failed: {}", stderr(&one));
    let mut args = train_args(k, dir.path(), "many");
    if samplers > 0 {
        args.extend(["--sampler-ranks".to_string(), samplers.to_string()]);
    }
    let many = mpirun(world, &args);
    assert!(
        many.status.success(),
        "mpirun -np {ranks} failed: {}",
        stderr(&many)
    );

    // Rank 0 alone reports: one final line, one ranks line.
    let out = String::from_utf8_lossy(&many.stdout);
    assert_eq!(out.matches("test accuracy").count(), 1, "stdout: {out}");
    let err = stderr(&many);
    let ranks_lines = usize::from(ranks > 1);
    assert_eq!(
        err.matches(&format!("ranks {ranks} (MPI")).count(),
        ranks_lines,
        "{err}"
    );
    let sampler_lines = usize::from(samplers > 0);
    assert_eq!(
        err.matches(&format!("sampler ranks {samplers}:")).count(),
        sampler_lines,
        "{err}"
    );

    let a = read_json(&dir.path().join("one.json"));
    let b = read_json(&dir.path().join("many.json"));
    assert_eq!(a["ranks"], 1);
    assert_eq!(b["ranks"], ranks);
    assert_eq!(b["sampler_ranks"], samplers);
    let (ea, eb) = (
        a["epochs"].as_array().unwrap(),
        b["epochs"].as_array().unwrap(),
    );
    assert_eq!(ea.len(), eb.len());
    for (x, y) in ea.iter().zip(eb) {
        // Every micro-batch ran somewhere: the epoch's count is the batch's K.
        assert_eq!(
            x["micro_batches"], y["micro_batches"],
            "epoch {}",
            x["epoch"]
        );
        let (lx, ly) = (x["loss"].as_f64().unwrap(), y["loss"].as_f64().unwrap());
        assert!(
            (lx - ly).abs() <= 1e-5 * lx.abs().max(1.0),
            "epoch {}: loss {lx} in one process, {ly} over {ranks} ranks",
            x["epoch"]
        );
        if ranks > 1 {
            assert!(y["phases"]["allreduce"].as_f64().unwrap() > 0.0);
        }
        // Trainers fed by sampler ranks wait for their messages, and only then.
        let fed = y["phases"]["feed"].as_f64().unwrap();
        assert_eq!(fed > 0.0, samplers > 0, "feed {fed}s");
        assert_eq!(x["phases"]["allreduce"].as_f64().unwrap(), 0.0);
    }

    let worst = largest_difference(
        &dir.path().join("one.safetensors"),
        &dir.path().join("many.safetensors"),
    );
    // Adam's steps are about lr = 0.01 whatever the gradient's size, so a rounding
    // difference moves a parameter by far less than a step.
    assert!(worst.0 <= 1e-4, "largest parameter difference {}", worst.1);
}

#[test]
fn two_ranks_give_the_parameters_and_losses_of_one_process_at_k_4() {
    ranks_match_one_process(2, 4);
}

#[test]
fn three_ranks_sharing_four_micro_batches_unevenly_match_one_process() {
    ranks_match_one_process(3, 4);
}

#[test]
fn ranks_without_a_micro_batch_add_zeros_and_change_nothing() {
    // Three ranks, two micro-batches: one rank computes nothing but joins the all-reduce.
    ranks_match_one_process(3, 2);
}

#[test]
fn one_sampler_rank_feeding_two_trainers_matches_one_process_at_k_4() {
    ranks_with_samplers_match_one_process(3, 1, 4);
}

#[test]
fn two_sampler_ranks_taking_turns_to_feed_one_trainer_match_one_process() {
    ranks_with_samplers_match_one_process(3, 2, 3);
}

/// The largest difference between two checkpoints' parameters, and where.
fn largest_difference(a: &Path, b: &Path) -> (f32, String) {
    let (pa, pb) = (parameters(a), parameters(b));
    assert!(!pa.is_empty());
    assert_eq!(
        pa.keys().collect::<std::collections::BTreeSet<_>>(),
        pb.keys().collect()
    );
    let mut worst = (0.0f32, String::new());
    for (name, va) in &pa {
        let vb = &pb[name];
        assert_eq!(va.len(), vb.len(), "{name}");
        for (i, (x, y)) in va.iter().zip(vb).enumerate() {
            if (x - y).abs() > worst.0 {
                worst = ((x - y).abs(), format!("{name}[{i}]: {x} vs {y}"));
            }
        }
    }
    worst
}

#[test]
fn sampler_ranks_resume_at_the_checkpoints_epoch_like_one_process() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut base = train_args(2, dir.path(), "base");
    let at = base.iter().position(|a| a == "--epochs").unwrap() + 1;
    base[at] = "2".into();
    let o = single(&base);
    assert!(o.status.success(), "{}", stderr(&o));
    let resume = |tag: &str| {
        let mut args = train_args(2, dir.path(), tag);
        let ck = dir.path().join("base.safetensors").display().to_string();
        args.extend(["--resume".to_string(), ck]);
        args
    };
    let one = single(&resume("one"));
    assert!(one.status.success(), "{}", stderr(&one));
    let mut args = resume("many");
    args.extend(["--sampler-ranks".to_string(), "1".to_string()]);
    let many = mpirun(3, &args);
    assert!(many.status.success(), "{}", stderr(&many));
    // The samplers start at epoch 3 too: one epoch of batches, the same parameters.
    let b = read_json(&dir.path().join("many.json"));
    assert_eq!(b["epochs"].as_array().unwrap().len(), 3);
    let worst = largest_difference(
        &dir.path().join("one.safetensors"),
        &dir.path().join("many.safetensors"),
    );
    assert!(worst.0 <= 1e-4, "largest parameter difference {}", worst.1);

    // A finished run: the trainers have no batch to ask for, and the samplers stop.
    let mut again = train_args(2, dir.path(), "again");
    let ck = dir.path().join("many.safetensors").display().to_string();
    again.extend(["--resume".into(), ck, "--sampler-ranks".into(), "1".into()]);
    let o = mpirun(3, &again);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("already finished"), "{out}");
}

#[test]
fn sampler_ranks_must_leave_a_trainer_and_need_mpi_and_micro_batches() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = train_args(2, dir.path(), "s");
    args.extend(["--sampler-ranks".to_string(), "1".to_string()]);
    let o = single(&args);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("needs several MPI ranks"), "{err}");
    let mut fg = train_args(1, dir.path(), "fg");
    fg.retain(|a| a != "--partitioner" && a != "metis");
    fg.extend(["--full-graph", "--sampler-ranks", "1"].map(String::from));
    let err = stderr(&single(&fg));
    assert!(
        err.contains("--full-graph has no micro-batches for sampler ranks"),
        "{err}"
    );
    if let Some(why) = skip_reason() {
        eprintln!("skipped the MPI half: {why}");
        return;
    }
    let mut args = train_args(2, dir.path(), "s");
    args.extend(["--sampler-ranks".to_string(), "2".to_string()]);
    let o = mpirun(2, &args);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("at least one rank must train"), "{err}");
    assert!(!dir.path().join("s.json").exists(), "nothing trained");
}

#[test]
fn full_graph_training_refuses_several_ranks() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut args = train_args(1, dir.path(), "fg");
    args.retain(|a| a != "--partitioner" && a != "metis");
    args.push("--full-graph".into());
    let o = mpirun(2, &args);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("--full-graph trains in one process"), "{err}");
}

#[cfg(not(feature = "mpi"))]
#[test]
fn launching_several_ranks_without_the_mpi_feature_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_espalier"))
        .args(train_args(2, dir.path(), "x"))
        .env("OMPI_COMM_WORLD_SIZE", "2")
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("--features mpi"), "{err}");
    assert!(
        !dir.path().join("x.json").exists(),
        "nothing trained, nothing written"
    );
}

/// NCCL with a world of one rank on a CUDA device: the all-reduce leaves the values as they
/// are (the single-GPU check of the NCCL path; several GPUs have not been tried).
#[cfg(feature = "mpi")]
#[test]
fn nccl_all_reduce_over_one_rank_keeps_the_values() {
    use espalier::dist::{nccl, Single};
    use espalier::{Device, Tensor};
    if let Err(why) = espalier::device::cuda::probe() {
        common::skip_backend("cuda", why);
        return;
    }
    if let Some(why) = nccl::unavailable(0) {
        // A fault under REQUIRE_GPU=cuda: a CUDA machine without NCCL would otherwise pass
        // with every gradient through the host.
        common::skip_backend("cuda", format!("NCCL: {why}"));
        return;
    }
    let n = nccl::Nccl::new(&Single, 0).unwrap();
    let values: Vec<f32> = (0..1000).map(|i| i as f32 * 0.5 - 7.0).collect();
    let a = Tensor::from_f32(values.clone(), &[10, 100], Device::Cuda(0)).unwrap();
    let b = Tensor::from_f32(vec![3.0; 7], &[7], Device::Cuda(0)).unwrap();
    n.all_reduce_sum(&[a.clone(), b.clone()]).unwrap();
    assert_eq!(a.to_vec_f32().unwrap(), values);
    assert_eq!(b.to_vec_f32().unwrap(), vec![3.0; 7]);
}

#[test]
fn commands_other_than_train_refuse_to_run_as_several_ranks() {
    let o = Command::new(env!("CARGO_BIN_EXE_espalier"))
        .args(["partition", "--dataset", DATA, "--no-run"])
        .env("OMPI_COMM_WORLD_SIZE", "2")
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("only `espalier train` runs over several MPI ranks"),
        "{err}"
    );
}

/// Two ranks on one GPU (more ranks than the machine has GPUs): NCCL refuses two ranks on
/// one device, so the gradients go through the host, the run says why, and it trains as
/// one process does. On the emulated CUDA device in CI (one device per process, the same
/// UUID), or a real single-GPU machine.
#[test]
fn two_ranks_on_one_gpu_sum_through_the_host_and_say_so() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    if common::cuda_device().is_none() {
        return;
    }
    if espalier::device::cuda::probe().unwrap_or(0) > 1 {
        println!("skipping: this machine has several CUDA devices, the ranks would not share one");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cuda = |mut a: Vec<String>| {
        a.extend(["--device".to_string(), "cuda".to_string()]);
        a
    };
    let one = single(&cuda(train_args(2, dir.path(), "one")));
    assert!(one.status.success(), "one process failed: {}", stderr(&one));
    let many = mpirun(2, &cuda(train_args(2, dir.path(), "many")));
    let err = stderr(&many);
    assert!(many.status.success(), "mpirun -np 2 failed: {err}");
    assert!(err.contains("ranks 0 and 1 share one GPU"), "{err}");
    let (a, b) = (
        read_json(&dir.path().join("one.json")),
        read_json(&dir.path().join("many.json")),
    );
    for (x, y) in a["epochs"]
        .as_array()
        .unwrap()
        .iter()
        .zip(b["epochs"].as_array().unwrap())
    {
        let (lx, ly) = (x["loss"].as_f64().unwrap(), y["loss"].as_f64().unwrap());
        assert!(
            (lx - ly).abs() <= 1e-5 * lx.abs().max(1.0),
            "loss {lx} vs {ly} over 2 ranks"
        );
    }
}
